"""cuBLAS: ctypes bindings, the per-device handle, and the message handlers.

The handle lives on the device thread (created on first use, destroyed when the device closes)
and is bound to whichever device stream the current operation runs on. Host pointer mode for
alpha/beta; reductions switch to device pointer mode so their result lands in device memory and
is read back without blocking the device thread (see :mod:`gpumsg.service.scratch`).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..dtypes import CUDA_DATA_TYPE
from ..errors import LibraryError
from ..messages.blas import (
    Asum,
    Axpy,
    Copy,
    Dot,
    Geam,
    Gemm,
    GemmBatched,
    GemmStridedBatched,
    Gemv,
    Ger,
    Iamax,
    Iamin,
    Nrm2,
    Rot,
    Scal,
    Sgemm,
    Swap,
    Symm,
    Symv,
    Syrk,
    Trmm,
    Trsm,
    Trsv,
)
from ..service.dispatch import COMPUTE, handles
from .loader import (
    Fn,
    LibrarySpec,
    LoadedLibrary,
    P,
    c_char_p,
    c_int,
    c_int64,
    c_size_t,
    c_void_p,
    load,
    register,
)

__all__ = ["CublasHandle", "ScalarCache", "SPEC", "OP", "FILL", "SIDE", "DIAG", "COMPUTE_TYPE",
           "SCALE_CTYPE", "scale_type", "status_error"]

OP = {"N": 0, "T": 1, "C": 2}  # cublasOperation_t
WORKSPACE_BYTES = 32 << 20
FILL = {"L": 0, "U": 1}  # cublasFillMode_t
SIDE = {"L": 0, "R": 1}  # cublasSideMode_t
DIAG = {"N": 0, "U": 1}  # cublasDiagType_t
_GEMM_DEFAULT_ALGO = -1  # CUBLAS_GEMM_DEFAULT
_POINTER_HOST, _POINTER_DEVICE = 0, 1

#: (dtype, compute mode) -> cublasComputeType_t
COMPUTE_TYPE = {
    ("f32", "default"): 68, ("f32", "tf32"): 77, ("f16", "default"): 68,
    ("bf16", "default"): 68, ("f64", "default"): 70, ("c64", "default"): 68,
    ("c64", "tf32"): 77, ("c128", "default"): 70, ("e4m3", "default"): 68,
    ("e5m2", "default"): 68,
}


def scale_type(dtype: str) -> str:
    """The type of alpha and beta for operands of ``dtype`` (fp32 for the half types)."""
    return {"f64": "f64", "c64": "c64", "c128": "c128"}.get(dtype, "f32")


class _C32(ctypes.Structure):
    _fields_ = [("re", ctypes.c_float), ("im", ctypes.c_float)]


class _C64(ctypes.Structure):
    _fields_ = [("re", ctypes.c_double), ("im", ctypes.c_double)]


#: scale type -> ctypes type of a host scalar
SCALE_CTYPE = {"f32": ctypes.c_float, "f64": ctypes.c_double, "c64": _C32, "c128": _C64}

_H = c_void_p
_p = c_void_p
_i = c_int
_LETTER = {"f32": "S", "f64": "D", "c64": "C", "c128": "Z"}


def _typed() -> list[Fn]:
    """The typed BLAS entry points, by letter (S, D, C, Z)."""
    fns: list[Fn] = []

    def each(template: str, args: tuple, letters: str = "SDCZ") -> None:
        for x in letters:
            fns.append(Fn(template.format(x=x), c_int, args))

    each("cublas{x}axpy_v2", (_H, _i, _p, _p, _i, _p, _i))
    each("cublas{x}scal_v2", (_H, _i, _p, _p, _i))
    each("cublas{x}dot_v2", (_H, _i, _p, _i, _p, _i, _p), "SD")
    each("cublas{x}dotu_v2", (_H, _i, _p, _i, _p, _i, _p), "CZ")
    each("cublas{x}dotc_v2", (_H, _i, _p, _i, _p, _i, _p), "CZ")
    for name in ("Snrm2", "Dnrm2", "Scnrm2", "Dznrm2", "Sasum", "Dasum", "Scasum", "Dzasum",
                 "Isamax", "Idamax", "Icamax", "Izamax", "Isamin", "Idamin", "Icamin", "Izamin"):
        fns.append(Fn(f"cublas{name}_v2", c_int, (_H, _i, _p, _i, _p)))
    each("cublas{x}copy_v2", (_H, _i, _p, _i, _p, _i))
    each("cublas{x}swap_v2", (_H, _i, _p, _i, _p, _i))
    each("cublas{x}rot_v2", (_H, _i, _p, _i, _p, _i, _p, _p))
    each("cublas{x}gemv_v2", (_H, _i, _i, _i, _p, _p, _i, _p, _i, _p, _p, _i))
    each("cublas{x}ger_v2", (_H, _i, _i, _p, _p, _i, _p, _i, _p, _i), "SD")
    each("cublas{x}geru_v2", (_H, _i, _i, _p, _p, _i, _p, _i, _p, _i), "CZ")
    each("cublas{x}gerc_v2", (_H, _i, _i, _p, _p, _i, _p, _i, _p, _i), "CZ")
    each("cublas{x}symv_v2", (_H, _i, _i, _p, _p, _i, _p, _i, _p, _p, _i))
    each("cublas{x}trsv_v2", (_H, _i, _i, _i, _i, _p, _i, _p, _i))
    each("cublas{x}geam", (_H, _i, _i, _i, _i, _p, _p, _i, _p, _p, _i, _p, _i))
    each("cublas{x}syrk_v2", (_H, _i, _i, _i, _i, _p, _p, _i, _p, _p, _i))
    each("cublas{x}symm_v2", (_H, _i, _i, _i, _i, _p, _p, _i, _p, _i, _p, _p, _i))
    each("cublas{x}trmm_v2", (_H, _i, _i, _i, _i, _i, _i, _p, _p, _i, _p, _i, _p, _i))
    each("cublas{x}trsm_v2", (_H, _i, _i, _i, _i, _i, _i, _p, _p, _i, _p, _i))
    return fns


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
        Fn("cublasSetWorkspace_v2", c_int, (_H, c_void_p, c_size_t)),
        Fn("cublasSgemm_v2", c_int, (_H, _i, _i, _i, _i, _i, _p, _p, _i, _p, _i, _p, _p, _i)),
        Fn("cublasGemmEx", c_int, (_H, _i, _i, _i, _i, _i, _p, _p, _i, _i, _p, _i, _i, _p, _p,
                                   _i, _i, _i, _i)),
        Fn("cublasGemmStridedBatchedEx", c_int, (_H, _i, _i, _i, _i, _i, _p, _p, _i, _i, c_int64,
                                                 _p, _i, _i, c_int64, _p, _p, _i, _i, c_int64, _i,
                                                 _i, _i)),
        Fn("cublasGemmBatchedEx", c_int, (_H, _i, _i, _i, _i, _i, _p, _p, _i, _i, _p, _i, _i, _p,
                                          _p, _i, _i, _i, _i, _i)),
        *_typed(),
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
            if ctype in (_C32, _C64):
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
        self._bound_stream: Any = None
        self.scalar = ScalarCache().get
        self._ctx = ctx
        self._ws = 0
        if ctx is not None:
            # an explicit workspace from the device's pool, as torch gives cuBLAS: some kernel
            # choices (split-K) depend on having one
            self._ws = ctx.memory.allocate(WORKSPACE_BYTES, ctx.compute.obj)
            self._check(self.lib.cublasSetWorkspace_v2(self.raw_handle, self._ws,
                                                        WORKSPACE_BYTES),
                        "cublasSetWorkspace_v2")

    # -- plumbing ----------------------------------------------------------------------------------
    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(self.lib, "cublas", status, function)

    def bind(self, stream: Any) -> None:
        """Make the handle issue on ``stream`` (a backend stream object)."""
        if stream is not self._bound_stream:
            self._check(self.lib.cublasSetStream_v2(self.raw_handle, int(stream)),
                        "cublasSetStream_v2")
            self._bound_stream = stream

    def _call(self, stream: Any, name: str, *args: Any) -> None:
        if stream is not self._bound_stream:
            self.bind(stream)
        status = getattr(self.lib, name)(self.raw_handle, *args)
        if status:
            raise status_error(self.lib, "cublas", status, name)

    def _reduce(self, stream: Any, name: str, *args: Any) -> None:
        """A reduction in device pointer mode (its last argument is a device pointer)."""
        lib, h = self.lib, self.raw_handle
        self._check(lib.cublasSetPointerMode_v2(h, _POINTER_DEVICE), "cublasSetPointerMode_v2")
        try:
            self._call(stream, name, *args)
        finally:
            lib.cublasSetPointerMode_v2(h, _POINTER_HOST)

    # -- GEMM family (the Ex forms cover every dtype) ------------------------------------------
    def gemm(self, stream: Any, dtype: str, compute: str, transa: str, transb: str, m: int,
             n: int, k: int, alpha: Any, a: int, lda: int, b: int, ldb: int, beta: Any, c: int,
             ldc: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cublasGemmEx", OP[transa], OP[transb], m, n, k,
                   self.scalar(dtype, alpha), a, t, lda, b, t, ldb, self.scalar(dtype, beta), c,
                   t, ldc, COMPUTE_TYPE[dtype, compute], _GEMM_DEFAULT_ALGO)

    def gemm_strided(self, stream: Any, dtype: str, compute: str, transa: str, transb: str,
                     m: int, n: int, k: int, alpha: Any, a: int, lda: int, sa: int, b: int,
                     ldb: int, sb: int, beta: Any, c: int, ldc: int, sc: int, batch: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cublasGemmStridedBatchedEx", OP[transa], OP[transb], m, n, k,
                   self.scalar(dtype, alpha), a, t, lda, sa, b, t, ldb, sb,
                   self.scalar(dtype, beta), c, t, ldc, sc, batch, COMPUTE_TYPE[dtype, compute],
                   _GEMM_DEFAULT_ALGO)

    def gemm_batched(self, stream: Any, dtype: str, compute: str, transa: str, transb: str,
                     m: int, n: int, k: int, alpha: Any, a_ptrs: int, lda: int, b_ptrs: int,
                     ldb: int, beta: Any, c_ptrs: int, ldc: int, batch: int) -> None:
        t = CUDA_DATA_TYPE[dtype]
        self._call(stream, "cublasGemmBatchedEx", OP[transa], OP[transb], m, n, k,
                   self.scalar(dtype, alpha), a_ptrs, t, lda, b_ptrs, t, ldb,
                   self.scalar(dtype, beta), c_ptrs, t, ldc, batch,
                   COMPUTE_TYPE[dtype, compute], _GEMM_DEFAULT_ALGO)

    # -- level 1 -----------------------------------------------------------------------------------
    def axpy(self, stream: Any, dtype: str, n: int, alpha: Any, x: int, incx: int, y: int,
             incy: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}axpy_v2", n, self.scalar(dtype, alpha), x,
                   incx, y, incy)

    def scal(self, stream: Any, dtype: str, n: int, alpha: Any, x: int, incx: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}scal_v2", n, self.scalar(dtype, alpha), x,
                   incx)

    def dot(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int, incy: int,
            conjugate: bool, result: int) -> None:
        x_ = _LETTER[dtype]
        name = f"cublas{x_}dot_v2" if x_ in "SD" else f"cublas{x_}dot{'c' if conjugate else 'u'}_v2"
        self._reduce(stream, name, n, x, incx, y, incy, result)

    def nrm2(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        name = {"f32": "Snrm2", "f64": "Dnrm2", "c64": "Scnrm2", "c128": "Dznrm2"}[dtype]
        self._reduce(stream, f"cublas{name}_v2", n, x, incx, result)

    def asum(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        name = {"f32": "Sasum", "f64": "Dasum", "c64": "Scasum", "c128": "Dzasum"}[dtype]
        self._reduce(stream, f"cublas{name}_v2", n, x, incx, result)

    def iamax(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        self._reduce(stream, f"cublasI{_LETTER[dtype].lower()}amax_v2", n, x, incx, result)

    def iamin(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        self._reduce(stream, f"cublasI{_LETTER[dtype].lower()}amin_v2", n, x, incx, result)

    def copy(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int,
             incy: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}copy_v2", n, x, incx, y, incy)

    def swap(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int,
             incy: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}swap_v2", n, x, incx, y, incy)

    def rot(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int, incy: int,
            c: float, s: Any) -> None:
        real = {"f32": "f32", "c64": "f32", "f64": "f64", "c128": "f64"}[dtype]
        self._call(stream, f"cublas{_LETTER[dtype]}rot_v2", n, x, incx, y, incy,
                   self.scalar(real, c), self.scalar(dtype, s))

    # -- level 2 -----------------------------------------------------------------------------------
    def gemv(self, stream: Any, dtype: str, trans: str, m: int, n: int, alpha: Any, a: int,
             lda: int, x: int, incx: int, beta: Any, y: int, incy: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}gemv_v2", OP[trans], m, n,
                   self.scalar(dtype, alpha), a, lda, x, incx, self.scalar(dtype, beta), y, incy)

    def ger(self, stream: Any, dtype: str, m: int, n: int, alpha: Any, x: int, incx: int,
            y: int, incy: int, a: int, lda: int, conjugate: bool) -> None:
        x_ = _LETTER[dtype]
        name = f"cublas{x_}ger_v2" if x_ in "SD" else f"cublas{x_}ger{'c' if conjugate else 'u'}_v2"
        self._call(stream, name, m, n, self.scalar(dtype, alpha), x, incx, y, incy, a, lda)

    def symv(self, stream: Any, dtype: str, uplo: str, n: int, alpha: Any, a: int, lda: int,
             x: int, incx: int, beta: Any, y: int, incy: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}symv_v2", FILL[uplo], n,
                   self.scalar(dtype, alpha), a, lda, x, incx, self.scalar(dtype, beta), y, incy)

    def trsv(self, stream: Any, dtype: str, uplo: str, trans: str, diag: str, n: int, a: int,
             lda: int, x: int, incx: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}trsv_v2", FILL[uplo], OP[trans], DIAG[diag],
                   n, a, lda, x, incx)

    # -- level 3 -----------------------------------------------------------------------------------
    def geam(self, stream: Any, dtype: str, transa: str, transb: str, m: int, n: int,
             alpha: Any, a: int, lda: int, beta: Any, b: int, ldb: int, c: int,
             ldc: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}geam", OP[transa], OP[transb], m, n,
                   self.scalar(dtype, alpha), a, lda, self.scalar(dtype, beta), b, ldb, c, ldc)

    def syrk(self, stream: Any, dtype: str, uplo: str, trans: str, n: int, k: int, alpha: Any,
             a: int, lda: int, beta: Any, c: int, ldc: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}syrk_v2", FILL[uplo], OP[trans], n, k,
                   self.scalar(dtype, alpha), a, lda, self.scalar(dtype, beta), c, ldc)

    def symm(self, stream: Any, dtype: str, side: str, uplo: str, m: int, n: int, alpha: Any,
             a: int, lda: int, b: int, ldb: int, beta: Any, c: int, ldc: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}symm_v2", SIDE[side], FILL[uplo], m, n,
                   self.scalar(dtype, alpha), a, lda, b, ldb, self.scalar(dtype, beta), c, ldc)

    def trmm(self, stream: Any, dtype: str, side: str, uplo: str, trans: str, diag: str, m: int,
             n: int, alpha: Any, a: int, lda: int, b: int, ldb: int, c: int, ldc: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}trmm_v2", SIDE[side], FILL[uplo], OP[trans],
                   DIAG[diag], m, n, self.scalar(dtype, alpha), a, lda, b, ldb, c, ldc)

    def trsm(self, stream: Any, dtype: str, side: str, uplo: str, trans: str, diag: str, m: int,
             n: int, alpha: Any, a: int, lda: int, b: int, ldb: int) -> None:
        self._call(stream, f"cublas{_LETTER[dtype]}trsm_v2", SIDE[side], FILL[uplo], OP[trans],
                   DIAG[diag], m, n, self.scalar(dtype, alpha), a, lda, b, ldb)

    def close(self) -> None:
        if self.raw_handle:
            self.lib.cublasDestroy_v2(self.raw_handle)
            self.raw_handle = 0
        if self._ws:
            self._ctx.memory.deallocate(self._ws, WORKSPACE_BYTES, self._ctx.compute.obj)
            self._ws = 0


# ---------------------------------------------------------------------------------------------
# handlers


#: which library runs Gemm/Sgemm: "lt" (cuBLASLt, cached plan), "gemmex" (cublasGemmEx) or
#: "auto" (Lt below AUTO_LT_FLOPS multiply-adds, GemmEx above)
GEMM_ENGINE = "auto"
AUTO_LT_FLOPS = 1 << 24


def _gemm(ctx: Any, msg: Any, reply: Any, dtype: str, compute: str) -> None:
    """Sgemm and Gemm."""
    a = ctx.resolve(msg.a, "a")
    b = ctx.resolve(msg.b, "b")
    c = ctx.resolve(msg.c, "c") if msg.beta != 0 else ctx.resolve_out(msg.c, "c")
    reads = (a, b) if msg.beta == 0 else (a, b, c)
    engine = GEMM_ENGINE
    if engine == "auto":
        engine = "lt" if msg.m * msg.n * msg.k < AUTO_LT_FLOPS else "gemmex"
    lib = ctx.library("cublaslt" if engine == "lt" else "cublas")
    ctx.run(reply, COMPUTE, reads, (c,), lib.gemm, dtype, compute, msg.transa, msg.transb,
            msg.m, msg.n, msg.k, msg.alpha, a.ptr, msg.lda, b.ptr, msg.ldb, msg.beta, c.ptr,
            msg.ldc)


@handles(Sgemm)
def _sgemm(ctx: Any, msg: Sgemm, reply: Any) -> None:
    _gemm(ctx, msg, reply, "f32", "default")


@handles(Gemm)
def _gemm_handler(ctx: Any, msg: Gemm, reply: Any) -> None:
    _gemm(ctx, msg, reply, msg.a.dtype, msg.compute)


@handles(GemmStridedBatched)
def _gemm_strided(ctx: Any, msg: GemmStridedBatched, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    b = ctx.resolve(msg.b, "b")
    c = ctx.resolve(msg.c, "c") if msg.beta != 0 else ctx.resolve_out(msg.c, "c")
    blas = ctx.library("cublas")
    ctx.run(reply, COMPUTE, (a, b) if msg.beta == 0 else (a, b, c), (c,), blas.gemm_strided,
            msg.a.dtype, msg.compute, msg.transa, msg.transb, msg.m, msg.n, msg.k, msg.alpha,
            a.ptr, msg.lda, msg.stride_a, b.ptr, msg.ldb, msg.stride_b, msg.beta, c.ptr, msg.ldc,
            msg.stride_c, msg.batch)


@handles(GemmBatched)
def _gemm_batched(ctx: Any, msg: GemmBatched, reply: Any) -> None:
    a = [ctx.resolve(r, "a") for r in msg.a]
    b = [ctx.resolve(r, "b") for r in msg.b]
    c = [ctx.resolve(r, "c") if msg.beta != 0 else ctx.resolve_out(r, "c") for r in msg.c]
    batch = len(a)
    # the pointer arrays: packed here, copied to device memory on the compute stream just before
    # the GEMM, freed (stream-ordered) right after it
    ptrs = np.array([x.ptr for x in a + b + c], dtype=np.uint64)
    nbytes = ptrs.nbytes
    block = ctx.pinned.allocate(nbytes, staging=True)
    block.bytes[:nbytes] = ptrs.view(np.uint8)
    dev = ctx.memory.allocate(nbytes, ctx.compute.obj)
    blas = ctx.library("cublas")
    backend = ctx.backend

    def launch(stream: Any) -> None:
        backend.copy_htod(stream, dev, block.ptr, nbytes)
        blas.gemm_batched(stream, msg.a[0].dtype, msg.compute, msg.transa, msg.transb, msg.m,
                          msg.n, msg.k, msg.alpha, dev, msg.lda, dev + 8 * batch, msg.ldb,
                          msg.beta, dev + 16 * batch, msg.ldc, batch)

    def release(value: Any, error: BaseException | None) -> Any:
        ctx.pinned.release(block)
        return value

    try:
        ctx.run(reply, COMPUTE, tuple(a + b + (c if msg.beta != 0 else [])), tuple(c), launch,
                finish=release)
    finally:
        ctx.memory.deallocate(dev, nbytes, ctx.compute.obj)


# -- level 1, 2 and 3


def _operands(ctx: Any, msg: Any, reads: tuple[str, ...], writes: tuple[str, ...]
              ) -> tuple[dict[str, Any], tuple, tuple]:
    """Resolve the message's buffers: ``reads`` must hold valid contents, pure outputs need
    only be allocated. Returns (allocations by field, reads, writes) for :meth:`ctx.run`."""
    allocs = {name: ctx.resolve(getattr(msg, name), name) for name in reads}
    for name in writes:
        if name not in allocs:
            allocs[name] = ctx.resolve_out(getattr(msg, name), name)
    return allocs, tuple(allocs[n] for n in reads), tuple(allocs[n] for n in writes)


def _reads_with(msg: Any, out: str, inputs: tuple[str, ...]) -> tuple[str, ...]:
    """With beta 0 the output is not read."""
    return inputs if msg.beta == 0 else inputs + (out,)


@handles(Axpy)
def _axpy(ctx: Any, msg: Axpy, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("x", "y"), ("y",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").axpy, msg.x.dtype, msg.n, msg.alpha,
            p["x"].ptr, msg.incx, p["y"].ptr, msg.incy)


@handles(Scal)
def _scal(ctx: Any, msg: Scal, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("x",), ("x",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").scal, msg.x.dtype, msg.n, msg.alpha,
            p["x"].ptr, msg.incx)


@handles(Copy)
def _copy(ctx: Any, msg: Copy, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("x",), ("y",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").copy, msg.x.dtype, msg.n, p["x"].ptr,
            msg.incx, p["y"].ptr, msg.incy)


@handles(Swap)
def _swap(ctx: Any, msg: Swap, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("x", "y"), ("x", "y"))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").swap, msg.x.dtype, msg.n, p["x"].ptr,
            msg.incx, p["y"].ptr, msg.incy)


@handles(Rot)
def _rot(ctx: Any, msg: Rot, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("x", "y"), ("x", "y"))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").rot, msg.x.dtype, msg.n, p["x"].ptr,
            msg.incx, p["y"].ptr, msg.incy, msg.c, msg.s)


#: result dtype of the reductions, by operand dtype
_DOT_RESULT = {"f32": "f4", "f64": "f8", "c64": "c8", "c128": "c16"}
_NORM_RESULT = {"f32": "f4", "f64": "f8", "c64": "f4", "c128": "f8"}


def _reduction(ctx: Any, msg: Any, reply: Any, method: str, result_dtype: str,
               convert: Any = float, extra: tuple = ()) -> None:
    """Run a reduction into a device slot, copy the slot back on the same stream, and answer
    with the value when the stream gets there: the device thread never waits for it."""
    fields = ("x", "y") if hasattr(msg, "y") else ("x",)
    p, r, _ = _operands(ctx, msg, fields, ())
    args: list[Any] = [msg.n, p["x"].ptr, msg.incx]
    if "y" in p:
        args += [p["y"].ptr, msg.incy]
    args += extra
    scratch = ctx.scratch
    slot = scratch.acquire()
    fn = getattr(ctx.library("cublas"), method)
    copy_back = ctx.backend.copy_dtoh
    dtype = msg.x.dtype

    def launch(stream: Any) -> None:
        fn(stream, dtype, *args, slot.dev)
        copy_back(stream, slot.host, slot.dev, 16)

    try:
        ctx.run(reply, COMPUTE, r, (), launch, finish=scratch.reader(slot, result_dtype, convert))
    except BaseException:
        scratch.release(slot)
        raise


def _scalar_of(value: Any) -> Any:
    return value  # a Python float or complex already (numpy .item())


def _zero_based(value: int) -> int:
    return int(value) - 1


@handles(Dot)
def _dot(ctx: Any, msg: Dot, reply: Any) -> None:
    _reduction(ctx, msg, reply, "dot", _DOT_RESULT[msg.x.dtype], _scalar_of, (msg.conjugate,))


@handles(Nrm2)
def _nrm2(ctx: Any, msg: Nrm2, reply: Any) -> None:
    _reduction(ctx, msg, reply, "nrm2", _NORM_RESULT[msg.x.dtype])


@handles(Asum)
def _asum(ctx: Any, msg: Asum, reply: Any) -> None:
    _reduction(ctx, msg, reply, "asum", _NORM_RESULT[msg.x.dtype])


@handles(Iamax)
def _iamax(ctx: Any, msg: Iamax, reply: Any) -> None:
    _reduction(ctx, msg, reply, "iamax", "i4", _zero_based)


@handles(Iamin)
def _iamin(ctx: Any, msg: Iamin, reply: Any) -> None:
    _reduction(ctx, msg, reply, "iamin", "i4", _zero_based)


@handles(Gemv)
def _gemv(ctx: Any, msg: Gemv, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, _reads_with(msg, "y", ("a", "x")), ("y",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").gemv, msg.a.dtype, msg.trans, msg.m,
            msg.n, msg.alpha, p["a"].ptr, msg.lda, p["x"].ptr, msg.incx, msg.beta, p["y"].ptr,
            msg.incy)


@handles(Ger)
def _ger(ctx: Any, msg: Ger, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("x", "y", "a"), ("a",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").ger, msg.a.dtype, msg.m, msg.n,
            msg.alpha, p["x"].ptr, msg.incx, p["y"].ptr, msg.incy, p["a"].ptr, msg.lda,
            msg.conjugate)


@handles(Symv)
def _symv(ctx: Any, msg: Symv, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, _reads_with(msg, "y", ("a", "x")), ("y",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").symv, msg.a.dtype, msg.uplo, msg.n,
            msg.alpha, p["a"].ptr, msg.lda, p["x"].ptr, msg.incx, msg.beta, p["y"].ptr,
            msg.incy)


@handles(Trsv)
def _trsv(ctx: Any, msg: Trsv, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("a", "x"), ("x",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").trsv, msg.a.dtype, msg.uplo, msg.trans,
            msg.diag, msg.n, p["a"].ptr, msg.lda, p["x"].ptr, msg.incx)


@handles(Geam)
def _geam(ctx: Any, msg: Geam, reply: Any) -> None:
    # B is read only when beta is not 0 (cuBLAS still takes its pointer)
    p, r, w = _operands(ctx, msg, ("a", "b") if msg.beta != 0 else ("a",), ("c",))
    b = p["b"] if "b" in p else ctx.resolve_out(msg.b, "b")
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").geam, msg.a.dtype, msg.transa,
            msg.transb, msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, msg.beta, b.ptr, msg.ldb,
            p["c"].ptr, msg.ldc)


@handles(Syrk)
def _syrk(ctx: Any, msg: Syrk, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, _reads_with(msg, "c", ("a",)), ("c",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").syrk, msg.a.dtype, msg.uplo, msg.trans,
            msg.n, msg.k, msg.alpha, p["a"].ptr, msg.lda, msg.beta, p["c"].ptr, msg.ldc)


@handles(Symm)
def _symm(ctx: Any, msg: Symm, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, _reads_with(msg, "c", ("a", "b")), ("c",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").symm, msg.a.dtype, msg.side, msg.uplo,
            msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, p["b"].ptr, msg.ldb, msg.beta,
            p["c"].ptr, msg.ldc)


@handles(Trmm)
def _trmm(ctx: Any, msg: Trmm, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("a", "b"), ("c",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").trmm, msg.a.dtype, msg.side, msg.uplo,
            msg.trans, msg.diag, msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, p["b"].ptr,
            msg.ldb, p["c"].ptr, msg.ldc)


@handles(Trsm)
def _trsm(ctx: Any, msg: Trsm, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("a", "b"), ("b",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").trsm, msg.a.dtype, msg.side, msg.uplo,
            msg.trans, msg.diag, msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, p["b"].ptr,
            msg.ldb)
