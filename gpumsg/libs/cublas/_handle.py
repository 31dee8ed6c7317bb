"""The cuBLAS handle of one device (device thread).

Created on first use, destroyed when the device closes, bound to whichever device stream the
current operation runs on. Host pointer mode for alpha/beta; reductions switch to device pointer
mode so their result lands in device memory and is read back without blocking the device thread
(see :mod:`gpumsg.service._scratch`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from ...backends.cuda._replays import GraphReplays, device_replays, direct, direct_bound, enabled
from ...dtypes import CUDA_DATA_TYPE
from ...errors import LibraryError
from ...service._scratch import CHUNK_SLOTS
from .._loader import LoadedLibrary, c_void_p, load
from .._workspace import optional_workspace, release_workspace
from ._bindings import (
    C32,
    C64,
    COMPUTE_TYPE,
    DIAG,
    FILL,
    GEMM_DEFAULT_ALGO,
    LETTER,
    OP,
    POINTER_DEVICE,
    SCALE_CTYPE,
    SIDE,
    WORKSPACE_BYTES,
    scale_type,
)

__all__ = ["CublasHandle", "ScalarCache", "status_error", "REPLAY_CAPACITY",
           "REDUCTION_REPLAY_CAPACITY", "LEVEL_REPLAY_CAPACITY"]

#: CUDA graphs of repeated GEMMs kept per handle (a few KiB of device memory each)
REPLAY_CAPACITY = 64
#: CUDA graphs of repeated reductions: a reduction's graph copies its result into the pinned
#: slot it was given (service/scratch.py), so one reduction repeated with n results in flight
#: has n graphs. Slots are reused last-given-back first, so a burst reuses the previous burst's
#: slots and graphs, as long as they were kept: at 64, bursts of more than 64 in flight evicted
#: and captured again at every burst (pipelined ``dot``: 37-45 against 23-27 µs per call).
#: One chunk of slots' worth.
REDUCTION_REPLAY_CAPACITY = CHUNK_SLOTS
#: CUDA graphs of repeated level-1/2 calls (axpy, gemv, ...): one per message, pointers and
#: scalars, as for the GEMMs
LEVEL_REPLAY_CAPACITY = 64


#: the size arguments of each level-1/2 call (by position in the method's arguments after
#: the dtype): a call where one is 0 issues no kernel
_SIZES = {"axpy": (0,), "scal": (0,), "copy": (0,), "swap": (0,), "rot": (0,),
          "gemv": (1, 2), "ger": (0, 1), "symv": (1,), "trsv": (3,)}


def _no_work(method: str, args: tuple) -> bool:
    """Whether the level-1/2 call ``method(dtype, *rest)`` = ``args`` has a zero size."""
    return any(args[1 + i] == 0 for i in _SIZES[method])


def _c_args(fn: Any, values: list) -> tuple[tuple, tuple]:
    """``values`` (a cuBLAS function's arguments after the handle) as instances of its declared
    ctypes types, made once for a launcher: ctypes passes an instance of the declared type as
    it is, where it converts a Python int at every call (0.3-0.5 us each on a slow host). A
    host scalar (a ctypes pointer from :class:`ScalarCache`) becomes its address; the
    pointers are returned too, for the launcher to keep the values alive. ``values`` as they
    are where the function declares no types."""
    types = getattr(fn, "argtypes", None)
    keep = tuple(v for v in values if isinstance(v, ctypes._Pointer))
    if not types:
        return tuple(values), keep
    out = []
    for t, v in zip(types[1:], values, strict=True):
        if isinstance(v, ctypes._Pointer):
            v = ctypes.addressof(v.contents)
        out.append(t(v))
    return tuple(out), keep


class ScalarCache:
    """Host scalars for alpha/beta, one ctypes object per distinct (type, value): in host pointer
    mode the library reads them during the call, so they can be reused by every call."""

    def __init__(self, limit: int = 256) -> None:
        self._ptrs: dict[Any, Any] = {}
        self._limit = limit

    def get(self, dtype: str, value: Any) -> Any:
        """A pointer to ``value`` in the scale type of ``dtype`` operands."""
        key = (dtype, value)
        ptr = self._ptrs.get(key)
        if ptr is None:
            if len(self._ptrs) > self._limit:
                self._ptrs.clear()
            ctype = SCALE_CTYPE[scale_type(dtype)]
            if ctype in (C32, C64):
                v = complex(value)
                obj = ctype(v.real, v.imag)
            else:
                obj = ctype(value)
            ptr = self._ptrs[key] = ctypes.pointer(obj)
        return ptr


def status_error(lib: LoadedLibrary, library: str, status: int, function: str) -> LibraryError:
    name = lib.cublasGetStatusName(status)
    return LibraryError(library, status, name.decode() if name else str(status), function)


class CublasHandle:
    """One cuBLAS handle of one device, used only from that device's thread."""

    def __init__(self, ctx: Any = None, lib: LoadedLibrary | None = None) -> None:
        self.lib = lib or load("cublas")
        h = c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate_v2")
        self.raw_handle: int = h.value or 0
        self._sgemm = self.lib.cublasSgemm_v2
        self._f32_scalars: dict[float, Any] = {}
        self._reduction_handle = 0  # made on the first reduction (see _reduce)
        self._reduction_stream: Any = None
        self._bound_stream: Any = None
        self.scalar = ScalarCache().get
        self._ctx = ctx
        self._ws = 0
        self._ws_bytes = 0
        #: GEMMs repeated with the same arguments are replayed as CUDA graphs (see
        #: backends/cuda/replays.py; GPUMSG_BLAS_REPLAY=0 turns it off): ``_issue(tag, fn,
        #: stream, *args)`` runs ``fn(stream, *args)`` either way
        self.replays: GraphReplays | None = None
        #: reductions (dot, nrm2, ...) and the copy of their result slot, replayed apart from
        #: the GEMMs: a capture refused here stops only these (handlers._reduction)
        self.reduction_replays: GraphReplays | None = None
        #: level-1/2 calls (axpy, gemv, ...) repeated by one message, replayed apart from the
        #: GEMMs too (:meth:`level_bound`); GPUMSG_BLAS_LEVEL_REPLAY=0 issues them as usual
        self.level_replays: GraphReplays | None = None
        self._issue: Any = direct
        self._bound: Any = direct_bound
        self._level_bound: Any = direct_bound
        if ctx is not None:
            # an explicit workspace from the device's pool, as torch gives cuBLAS: some kernel
            # choices (split-K) depend on having one, and without one a captured call
            # allocates its workspace inside the graph (see _set_stream). Both handles use it:
            # they issue on one stream, so never at the same time. A smaller one, or none,
            # when the budget or the device cannot give it: cuBLAS runs with any
            self._ws, self._ws_bytes = optional_workspace(ctx, "cublas", WORKSPACE_BYTES)
            if enabled("GPUMSG_BLAS_REPLAY"):
                self.replays, self.reduction_replays, self.level_replays = (
                    device_replays(ctx, capacity) for capacity in (
                        REPLAY_CAPACITY, REDUCTION_REPLAY_CAPACITY, LEVEL_REPLAY_CAPACITY))
                self._issue = self.replays.call
                self._bound = self.replays.bound
                if enabled("GPUMSG_BLAS_LEVEL_REPLAY"):
                    self._level_bound = self.level_replays.bound

    # -- plumbing ----------------------------------------------------------------------------------
    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(self.lib, "cublas", status, function)

    def _set_stream(self, handle: int, stream: Any) -> None:
        """``cublasSetStream`` on ``handle``, then our workspace again: setting the stream
        resets cuBLAS's workspace to the library's own pool (cuBLAS documentation, "Handle
        management"). Without this a call captured for a replay allocates and frees that
        workspace inside its graph (memory alloc and free nodes around the kernels), which
        cost every replay of a 512 x 128^3 bf16 strided-batched GEMM 0.6-0.8 µs of GPU time on
        the H100 (docs/performance.md)."""
        self._check(self.lib.cublasSetStream_v2(handle, int(stream)), "cublasSetStream_v2")
        if self._ctx is not None:  # size 0: no workspace (not the library's own pool)
            self._check(self.lib.cublasSetWorkspace_v2(handle, self._ws, self._ws_bytes),
                        "cublasSetWorkspace_v2")

    def bind(self, stream: Any) -> None:
        """Make the handle issue on ``stream`` (a backend stream object), with our
        workspace."""
        if stream is not self._bound_stream:
            self._set_stream(self.raw_handle, stream)
            self._bound_stream = stream

    def _call(self, stream: Any, name: str, *args: Any) -> None:
        if stream is not self._bound_stream:
            self.bind(stream)
        status = getattr(self.lib, name)(self.raw_handle, *args)
        if status:
            raise status_error(self.lib, "cublas", status, name)

    def _reduce(self, stream: Any, name: str, *args: Any) -> None:
        """A reduction in device pointer mode (its last argument is a device pointer), on a
        second handle kept in that mode: no pointer-mode switch per call (two library calls),
        and the main handle, which FFI users may share, stays in host pointer mode."""
        h = self._reduction_handle
        if h == 0:
            out = c_void_p()
            self._check(self.lib.cublasCreate_v2(ctypes.byref(out)), "cublasCreate_v2")
            h = self._reduction_handle = out.value or 0
            self._check(self.lib.cublasSetPointerMode_v2(h, POINTER_DEVICE),
                        "cublasSetPointerMode_v2")
        if stream is not self._reduction_stream:
            self._set_stream(h, stream)
            self._reduction_stream = stream
        status = getattr(self.lib, name)(h, *args)
        if status:
            raise status_error(self.lib, "cublas", status, name)

    # -- GEMM family (the Ex forms cover every dtype) ------------------------------------------
    def sgemm_bound(self, stream: Any, transa: str, transb: str, m: int, n: int, k: int,
                    alpha: float, a: int, lda: int, b: int, ldb: int, beta: float, c: int,
                    ldc: int) -> Callable[[Any], None]:
        """``launch(stream)``: ``cublasSgemm_v2`` with these arguments on ``stream``, a repeated
        launch replayed. fp32 storage and math (the handle keeps the default math mode, so no
        TF32). The path of every ``Sgemm`` message, written to cost the least Python per call:
        the call and its replay key are bound once (a repeated message's handler keeps the
        launcher: service/derived.py), the scalars are cached."""
        return self._bound("sgemm", self._sgemm_now, stream, transa, transb, m, n, k, alpha, a,
                           lda, b, ldb, beta, c, ldc)

    def _sgemm_now(self, stream: Any, transa: str, transb: str, m: int, n: int, k: int,
                   alpha: float, a: int, lda: int, b: int, ldb: int, beta: float, c: int,
                   ldc: int) -> None:
        if stream is not self._bound_stream:
            self.bind(stream)
        f32 = self._f32_scalars  # pointers by value, without building a key per call
        pa = f32.get(alpha)
        if pa is None:
            pa = f32[alpha] = self.scalar("f32", alpha)
        pb = f32.get(beta)
        if pb is None:
            pb = f32[beta] = self.scalar("f32", beta)
        if len(f32) > 64:
            f32.clear()
        status = self._sgemm(self.raw_handle, OP[transa], OP[transb], m, n, k, pa, a, lda, b,
                             ldb, pb, c, ldc)
        if status:
            raise status_error(self.lib, "cublas", status, "cublasSgemm_v2")

    def gemm(self, stream: Any, dtype: str, compute: str, transa: str, transb: str, m: int,
             n: int, k: int, alpha: Any, a: int, lda: int, b: int, ldb: int, beta: Any, c: int,
             ldc: int) -> None:
        """``cublasGemmEx``; a repeated call is replayed."""
        self._issue("gemm", self._gemm_now, stream, dtype, compute, transa, transb, m, n, k,
                    alpha, a, lda, b, ldb, beta, c, ldc)

    def _gemm_now(self, stream: Any, dtype: str, compute: str, transa: str, transb: str, m: int,
                  n: int, k: int, alpha: Any, a: int, lda: int, b: int, ldb: int, beta: Any,
                  c: int, ldc: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cublasGemmEx", OP[transa], OP[transb], m, n, k,
                   self.scalar(dtype, alpha), a, t, lda, b, t, ldb, self.scalar(dtype, beta), c,
                   t, ldc, COMPUTE_TYPE[dtype, compute], GEMM_DEFAULT_ALGO)

    def gemm_strided_bound(self, stream: Any, dtype: str, compute: str, transa: str,
                           transb: str, m: int, n: int, k: int, alpha: Any, a: int, lda: int,
                           sa: int, b: int, ldb: int, sb: int, beta: Any, c: int, ldc: int,
                           sc: int, batch: int) -> Callable[[Any], None]:
        """``launch(stream)``: ``cublasGemmStridedBatchedEx`` with these arguments on
        ``stream``, a repeated launch replayed; the call and its replay key are bound once (a
        repeated message's handler keeps the launcher: service/derived.py)."""
        return self._bound("gemm_strided", self._gemm_strided_now, stream, dtype, compute,
                           transa, transb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
                           sc, batch)

    def _gemm_strided_now(self, stream: Any, dtype: str, compute: str, transa: str,
                          transb: str, m: int, n: int, k: int, alpha: Any, a: int, lda: int,
                          sa: int, b: int, ldb: int, sb: int, beta: Any, c: int, ldc: int,
                          sc: int, batch: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cublasGemmStridedBatchedEx", OP[transa], OP[transb], m, n, k,
                   self.scalar(dtype, alpha), a, t, lda, sa, b, t, ldb, sb,
                   self.scalar(dtype, beta), c, t, ldc, sc, batch, COMPUTE_TYPE[dtype, compute],
                   GEMM_DEFAULT_ALGO)

    def gemm_batched(self, stream: Any, dtype: str, compute: str, transa: str, transb: str,
                     m: int, n: int, k: int, alpha: Any, a_ptrs: int, lda: int, b_ptrs: int,
                     ldb: int, beta: Any, c_ptrs: int, ldc: int, batch: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cublasGemmBatchedEx", OP[transa], OP[transb], m, n, k,
                   self.scalar(dtype, alpha), a_ptrs, t, lda, b_ptrs, t, ldb,
                   self.scalar(dtype, beta), c_ptrs, t, ldc, batch,
                   COMPUTE_TYPE[dtype, compute], GEMM_DEFAULT_ALGO)

    # -- level 1 and 2 ---------------------------------------------------------------------------
    # Each call is described once by ``_<method>_args(dtype, ...)``: the cuBLAS function's name
    # and its arguments after the handle (scalars as pointers to host values). The methods
    # issue that at once; :meth:`level_bound` binds it for a repeated message.

    def level_bound(self, method: str, stream: Any, *args: Any) -> Callable[[Any], None]:
        """``launch(stream)``: the level-1/2 call ``method`` (axpy, scal, copy, swap, rot, gemv,
        ger, symv, trsv) with ``args``, the method's arguments after the stream, on ``stream``;
        a repeated launch is replayed as a CUDA graph (:attr:`level_replays`). The function,
        its arguments as ctypes values and the replay key are made here once: a handler keeps
        the launcher of a repeated message (service/derived.py).

        The key is ``(method, stream, *args)``: with the handle (one per replays object, in
        host pointer mode, with its one workspace) that is everything the call reads besides
        device memory; the scalars are in it by value, as cuBLAS reads them from the host when
        the call is made (so a graph holds the values it was captured with). A call with a
        zero size issues no kernel and is not replayed (its graph would be empty)."""
        name, *values = getattr(self, f"_{method}_args")(*args)
        fn = getattr(self.lib, name)
        cargs, keep = _c_args(fn, values)
        handle = c_void_p(self.raw_handle)
        lib = self.lib

        def now(on: Any, *_key: Any) -> None:
            if on is not self._bound_stream:
                self.bind(on)
            status = fn(handle, *cargs)
            if status:
                raise status_error(lib, "cublas", status, name)

        now.keep = keep  # type: ignore[attr-defined]  # the host scalars cargs point at
        if _no_work(method, args):
            return direct_bound(method, now, stream, *args)
        return self._level_bound(method, now, stream, *args)

    def _axpy_args(self, dtype: str, n: int, alpha: Any, x: int, incx: int, y: int,
                   incy: int) -> tuple:
        return (f"cublas{LETTER[dtype]}axpy_v2", n, self.scalar(dtype, alpha), x, incx, y,
                incy)

    def axpy(self, stream: Any, dtype: str, n: int, alpha: Any, x: int, incx: int, y: int,
             incy: int) -> None:
        self._call(stream, *self._axpy_args(dtype, n, alpha, x, incx, y, incy))

    def _scal_args(self, dtype: str, n: int, alpha: Any, x: int, incx: int) -> tuple:
        return f"cublas{LETTER[dtype]}scal_v2", n, self.scalar(dtype, alpha), x, incx

    def scal(self, stream: Any, dtype: str, n: int, alpha: Any, x: int, incx: int) -> None:
        self._call(stream, *self._scal_args(dtype, n, alpha, x, incx))

    def dot(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int, incy: int,
            conjugate: bool, result: int) -> None:
        x_ = LETTER[dtype]
        name = f"cublas{x_}dot_v2" if x_ in "SD" else f"cublas{x_}dot{'c' if conjugate else 'u'}_v2"
        self._reduce(stream, name, n, x, incx, y, incy, result)

    def nrm2(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        name = {"f32": "Snrm2", "f64": "Dnrm2", "c64": "Scnrm2", "c128": "Dznrm2"}[dtype]
        self._reduce(stream, f"cublas{name}_v2", n, x, incx, result)

    def asum(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        name = {"f32": "Sasum", "f64": "Dasum", "c64": "Scasum", "c128": "Dzasum"}[dtype]
        self._reduce(stream, f"cublas{name}_v2", n, x, incx, result)

    def iamax(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        self._reduce(stream, f"cublasI{LETTER[dtype].lower()}amax_v2", n, x, incx, result)

    def iamin(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        self._reduce(stream, f"cublasI{LETTER[dtype].lower()}amin_v2", n, x, incx, result)

    def _copy_args(self, dtype: str, n: int, x: int, incx: int, y: int, incy: int) -> tuple:
        return f"cublas{LETTER[dtype]}copy_v2", n, x, incx, y, incy

    def copy(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int,
             incy: int) -> None:
        self._call(stream, *self._copy_args(dtype, n, x, incx, y, incy))

    def _swap_args(self, dtype: str, n: int, x: int, incx: int, y: int, incy: int) -> tuple:
        return f"cublas{LETTER[dtype]}swap_v2", n, x, incx, y, incy

    def swap(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int,
             incy: int) -> None:
        self._call(stream, *self._swap_args(dtype, n, x, incx, y, incy))

    def _rot_args(self, dtype: str, n: int, x: int, incx: int, y: int, incy: int, c: float,
                  s: Any) -> tuple:
        real = {"f32": "f32", "c64": "f32", "f64": "f64", "c128": "f64"}[dtype]
        return (f"cublas{LETTER[dtype]}rot_v2", n, x, incx, y, incy, self.scalar(real, c),
                self.scalar(dtype, s))

    def rot(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int, incy: int,
            c: float, s: Any) -> None:
        self._call(stream, *self._rot_args(dtype, n, x, incx, y, incy, c, s))

    # -- level 2 -----------------------------------------------------------------------------------
    def _gemv_args(self, dtype: str, trans: str, m: int, n: int, alpha: Any, a: int, lda: int,
                   x: int, incx: int, beta: Any, y: int, incy: int) -> tuple:
        return (f"cublas{LETTER[dtype]}gemv_v2", OP[trans], m, n, self.scalar(dtype, alpha), a,
                lda, x, incx, self.scalar(dtype, beta), y, incy)

    def gemv(self, stream: Any, dtype: str, trans: str, m: int, n: int, alpha: Any, a: int,
             lda: int, x: int, incx: int, beta: Any, y: int, incy: int) -> None:
        self._call(stream, *self._gemv_args(dtype, trans, m, n, alpha, a, lda, x, incx, beta,
                                            y, incy))

    def _ger_args(self, dtype: str, m: int, n: int, alpha: Any, x: int, incx: int, y: int,
                  incy: int, a: int, lda: int, conjugate: bool) -> tuple:
        x_ = LETTER[dtype]
        name = f"cublas{x_}ger_v2" if x_ in "SD" else f"cublas{x_}ger{'c' if conjugate else 'u'}_v2"
        return name, m, n, self.scalar(dtype, alpha), x, incx, y, incy, a, lda

    def ger(self, stream: Any, dtype: str, m: int, n: int, alpha: Any, x: int, incx: int,
            y: int, incy: int, a: int, lda: int, conjugate: bool) -> None:
        self._call(stream, *self._ger_args(dtype, m, n, alpha, x, incx, y, incy, a, lda,
                                           conjugate))

    def _symv_args(self, dtype: str, uplo: str, n: int, alpha: Any, a: int, lda: int, x: int,
                   incx: int, beta: Any, y: int, incy: int) -> tuple:
        return (f"cublas{LETTER[dtype]}symv_v2", FILL[uplo], n, self.scalar(dtype, alpha), a,
                lda, x, incx, self.scalar(dtype, beta), y, incy)

    def symv(self, stream: Any, dtype: str, uplo: str, n: int, alpha: Any, a: int, lda: int,
             x: int, incx: int, beta: Any, y: int, incy: int) -> None:
        self._call(stream, *self._symv_args(dtype, uplo, n, alpha, a, lda, x, incx, beta, y,
                                            incy))

    def _trsv_args(self, dtype: str, uplo: str, trans: str, diag: str, n: int, a: int, lda: int,
                   x: int, incx: int) -> tuple:
        return (f"cublas{LETTER[dtype]}trsv_v2", FILL[uplo], OP[trans], DIAG[diag], n, a, lda,
                x, incx)

    def trsv(self, stream: Any, dtype: str, uplo: str, trans: str, diag: str, n: int, a: int,
             lda: int, x: int, incx: int) -> None:
        self._call(stream, *self._trsv_args(dtype, uplo, trans, diag, n, a, lda, x, incx))

    # -- level 3 -----------------------------------------------------------------------------------
    def geam(self, stream: Any, dtype: str, transa: str, transb: str, m: int, n: int,
             alpha: Any, a: int, lda: int, beta: Any, b: int, ldb: int, c: int,
             ldc: int) -> None:
        self._call(stream, f"cublas{LETTER[dtype]}geam", OP[transa], OP[transb], m, n,
                   self.scalar(dtype, alpha), a, lda, self.scalar(dtype, beta), b, ldb, c, ldc)

    def syrk(self, stream: Any, dtype: str, uplo: str, trans: str, n: int, k: int, alpha: Any,
             a: int, lda: int, beta: Any, c: int, ldc: int) -> None:
        self._call(stream, f"cublas{LETTER[dtype]}syrk_v2", FILL[uplo], OP[trans], n, k,
                   self.scalar(dtype, alpha), a, lda, self.scalar(dtype, beta), c, ldc)

    def symm(self, stream: Any, dtype: str, side: str, uplo: str, m: int, n: int, alpha: Any,
             a: int, lda: int, b: int, ldb: int, beta: Any, c: int, ldc: int) -> None:
        self._call(stream, f"cublas{LETTER[dtype]}symm_v2", SIDE[side], FILL[uplo], m, n,
                   self.scalar(dtype, alpha), a, lda, b, ldb, self.scalar(dtype, beta), c, ldc)

    def trmm(self, stream: Any, dtype: str, side: str, uplo: str, trans: str, diag: str, m: int,
             n: int, alpha: Any, a: int, lda: int, b: int, ldb: int, c: int, ldc: int) -> None:
        self._call(stream, f"cublas{LETTER[dtype]}trmm_v2", SIDE[side], FILL[uplo], OP[trans],
                   DIAG[diag], m, n, self.scalar(dtype, alpha), a, lda, b, ldb, c, ldc)

    def trsm(self, stream: Any, dtype: str, side: str, uplo: str, trans: str, diag: str, m: int,
             n: int, alpha: Any, a: int, lda: int, b: int, ldb: int) -> None:
        self._call(stream, f"cublas{LETTER[dtype]}trsm_v2", SIDE[side], FILL[uplo], OP[trans],
                   DIAG[diag], m, n, self.scalar(dtype, alpha), a, lda, b, ldb)

    def replay_info(self) -> dict[str, Any]:
        """The GEMM replays: on or off, graphs held, captures, launches, why refused; the same
        for the reductions' under ``reductions`` and the level-1/2 calls' under ``levels``
        (with ``enabled``: whether they are replayed)."""
        r, red, lvl = self.replays, self.reduction_replays, self.level_replays
        if r is None or red is None or lvl is None:
            return {"enabled": False}
        return {"enabled": True, **r.info(), "reductions": red.info(),
                "levels": {"enabled": self._level_bound == lvl.bound, **lvl.info()}}

    def close(self) -> None:
        for replays in (self.replays, self.reduction_replays, self.level_replays):
            if replays is not None:  # before the workspace and handle their kernels use go
                replays.close()
        if self._reduction_handle:
            self.lib.cublasDestroy_v2(self._reduction_handle)
            self._reduction_handle = 0
        if self.raw_handle:
            self.lib.cublasDestroy_v2(self.raw_handle)
            self.raw_handle = 0
        if self._ctx is not None:
            release_workspace(self._ctx, "cublas", self._ws, self._ws_bytes)
            self._ws = self._ws_bytes = 0
