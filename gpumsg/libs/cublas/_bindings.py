"""cuBLAS bindings as data: every C function gpumsg calls with its argument and result types
(:class:`~gpumsg.libs._loader.LibrarySpec`), and the enums and scalar types of the API."""

from __future__ import annotations

import ctypes

from .._loader import (
    Fn,
    LibrarySpec,
    LoadedLibrary,
    P,
    c_char_p,
    c_int,
    c_int64,
    c_size_t,
    c_void_p,
)

__all__ = ["SPEC", "OP", "FILL", "SIDE", "DIAG", "COMPUTE_TYPE", "SCALE_CTYPE", "scale_type",
           "WORKSPACE_BYTES", "GEMM_DEFAULT_ALGO", "POINTER_HOST", "POINTER_DEVICE", "LETTER",
           "C32", "C64"]

OP = {"N": 0, "T": 1, "C": 2}  # cublasOperation_t
WORKSPACE_BYTES = 32 << 20
FILL = {"L": 0, "U": 1}  # cublasFillMode_t
SIDE = {"L": 0, "R": 1}  # cublasSideMode_t
DIAG = {"N": 0, "U": 1}  # cublasDiagType_t
GEMM_DEFAULT_ALGO = -1  # CUBLAS_GEMM_DEFAULT
POINTER_HOST, POINTER_DEVICE = 0, 1

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


class C32(ctypes.Structure):
    _fields_ = [("re", ctypes.c_float), ("im", ctypes.c_float)]


class C64(ctypes.Structure):
    _fields_ = [("re", ctypes.c_double), ("im", ctypes.c_double)]


#: scale type -> ctypes type of a host scalar
SCALE_CTYPE = {"f32": ctypes.c_float, "f64": ctypes.c_double, "c64": C32, "c128": C64}

_H = c_void_p
_p = c_void_p
_i = c_int
LETTER = {"f32": "S", "f64": "D", "c64": "C", "c128": "Z"}


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


SPEC = LibrarySpec(
    name="cublas",
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
        # solver: (handle, n, Aarray, lda, PivotArray (NULL: no pivoting), infoArray, batch)
        *(Fn(f"cublas{x}getrfBatched", c_int, (_H, _i, _p, _i, _p, _p, _i)) for x in "SDCZ"),
        # (handle, trans, n, nrhs, Aarray, lda, devIpiv, Barray, ldb, &info (host), batch)
        *(Fn(f"cublas{x}getrsBatched", c_int, (_H, _i, _i, _i, _p, _i, _p, _p, _i, P(_i), _i))
          for x in "SDCZ"),
    ),
    version=lambda lib: _version(lib),
)


def _version(lib: LoadedLibrary) -> str:
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = c_int()
        lib.cublasGetProperty(prop, ctypes.byref(v))
        parts.append(str(v.value))
    return ".".join(parts)
