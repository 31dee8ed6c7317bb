"""cuBLAS: ctypes bindings, the per-device handle, and the message handlers.

The handle lives on the device thread (created on first use, destroyed when the device closes);
it is bound to whichever device stream the current operation runs on. Host pointer mode: alpha
and beta are read from host memory at call time.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ..errors import LibraryError
from ..messages.blas import Sgemm
from ..service.dispatch import COMPUTE, handles
from .loader import Fn, LibrarySpec, LoadedLibrary, P, c_char_p, c_int, c_void_p, load, register

__all__ = ["CublasHandle", "SPEC", "OP"]

#: cublasOperation_t
OP = {"N": 0, "T": 1, "C": 2}

_H = c_void_p  # cublasHandle_t
_PTR = c_void_p  # device or host pointer

SPEC = register(LibrarySpec(
    name="cublas",
    module=__name__,
    functions=(
        Fn("cublasCreate_v2", c_int, (P(_H),)),
        Fn("cublasDestroy_v2", c_int, (_H,)),
        Fn("cublasSetStream_v2", c_int, (_H, c_void_p)),
        Fn("cublasGetProperty", c_int, (c_int, P(c_int))),
        Fn("cublasGetStatusName", c_char_p, (c_int,)),
        Fn("cublasSetMathMode", c_int, (_H, c_int)),
        Fn("cublasSetPointerMode_v2", c_int, (_H, c_int)),
        Fn("cublasSgemm_v2", c_int, (_H, c_int, c_int, c_int, c_int, c_int, _PTR, _PTR, c_int,
                                     _PTR, c_int, _PTR, _PTR, c_int)),
    ),
    version=lambda lib: _version(lib),
))


def _version(lib: LoadedLibrary) -> str:
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = c_int()
        lib.cublasGetProperty(prop, ctypes.byref(v))
        parts.append(str(v.value))
    return ".".join(parts)


class CublasHandle:
    """One cuBLAS handle of one device, used only from that device's thread."""

    def __init__(self, lib: LoadedLibrary | None = None) -> None:
        self.lib = lib or load("cublas")
        h = c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate_v2")
        self.raw_handle: int = h.value or 0
        self._bound_stream: Any = None
        self._sgemm = self.lib.cublasSgemm_v2

    def _check(self, status: int, function: str) -> None:
        if status:
            raise self.error(status, function)

    def error(self, status: int, function: str) -> LibraryError:
        name = self.lib.cublasGetStatusName(status)
        return LibraryError("cublas", status, name.decode() if name else str(status), function)

    def bind(self, stream: Any) -> None:
        """Make the handle issue on ``stream`` (a backend stream object)."""
        if stream is not self._bound_stream:
            self._check(self.lib.cublasSetStream_v2(self.raw_handle, int(stream)),
                        "cublasSetStream_v2")
            self._bound_stream = stream

    def sgemm(self, stream: Any, transa: str, transb: str, m: int, n: int, k: int,
              alpha: float, a: int, lda: int, b: int, ldb: int, beta: float, c: int,
              ldc: int) -> None:
        if stream is not self._bound_stream:
            self.bind(stream)
        status = self._sgemm(self.raw_handle, OP[transa], OP[transb], m, n, k,
                             ctypes.byref(ctypes.c_float(alpha)), a, lda, b, ldb,
                             ctypes.byref(ctypes.c_float(beta)), c, ldc)
        if status:
            raise self.error(status, "cublasSgemm_v2")

    def close(self) -> None:
        if self.raw_handle:
            self.lib.cublasDestroy_v2(self.raw_handle)
            self.raw_handle = 0


@handles(Sgemm)
def _sgemm(ctx: Any, msg: Sgemm, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    b = ctx.resolve(msg.b, "b")
    c = ctx.resolve(msg.c, "c")
    blas = ctx.library("cublas")
    reads = (a, b) if msg.beta == 0.0 else (a, b, c)
    ctx.run(reply, COMPUTE, reads, (c,), blas.sgemm, msg.transa, msg.transb, msg.m, msg.n, msg.k,
            msg.alpha, a.ptr, msg.lda, b.ptr, msg.ldb, msg.beta, c.ptr, msg.ldc)
