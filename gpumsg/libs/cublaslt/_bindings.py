"""cuBLASLt bindings as data: every C function gpumsg calls with its argument and result types,
the descriptor attributes it sets, and the heuristic result structure."""

from __future__ import annotations

import ctypes

from .._loader import Fn, LibrarySpec, LoadedLibrary, P, c_int, c_size_t, c_void_p

__all__ = ["SPEC", "HeuristicResult", "TRANSA", "TRANSB", "EPILOGUE", "BIAS_POINTER",
           "AUX_POINTER", "AUX_LD", "SCALE_POINTERS", "BIAS_DATA_TYPE", "PREF_MAX_WORKSPACE"]

_H = c_void_p
_u64 = ctypes.c_uint64
_i64 = ctypes.c_int64

# cublasLtMatmulDescAttributes_t
TRANSA, TRANSB, EPILOGUE, BIAS_POINTER = 3, 4, 7, 8
AUX_POINTER, AUX_LD = 11, 12
SCALE_POINTERS = (17, 18, 19, 20)  # A, B, C, D
BIAS_DATA_TYPE = 26
PREF_MAX_WORKSPACE = 1


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t),
                ("state", ctypes.c_int), ("wavesCount", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]


SPEC = LibrarySpec(
    name="cublasLt",
    functions=(
        Fn("cublasLtCreate", c_int, (P(_H),)),
        Fn("cublasLtDestroy", c_int, (_H,)),
        Fn("cublasLtGetVersion", c_size_t, ()),
        Fn("cublasLtMatmulDescCreate", c_int, (P(c_void_p), c_int, c_int)),
        Fn("cublasLtMatmulDescDestroy", c_int, (c_void_p,)),
        Fn("cublasLtMatmulDescSetAttribute", c_int, (c_void_p, c_int, c_void_p, c_size_t)),
        Fn("cublasLtMatrixLayoutCreate", c_int, (P(c_void_p), c_int, _u64, _u64, _i64)),
        Fn("cublasLtMatrixLayoutDestroy", c_int, (c_void_p,)),
        Fn("cublasLtMatmulPreferenceCreate", c_int, (P(c_void_p),)),
        Fn("cublasLtMatmulPreferenceDestroy", c_int, (c_void_p,)),
        Fn("cublasLtMatmulPreferenceSetAttribute", c_int, (c_void_p, c_int, c_void_p,
                                                           c_size_t)),
        Fn("cublasLtMatmulAlgoGetHeuristic", c_int, (_H, c_void_p, c_void_p, c_void_p, c_void_p,
                                                     c_void_p, c_void_p, c_int,
                                                     P(HeuristicResult), P(c_int))),
        Fn("cublasLtMatmul", c_int, (_H, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                     c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                     P(HeuristicResult), c_void_p, c_size_t, c_void_p)),
    ),
    version=lambda lib: _version(lib),
)


def _version(lib: LoadedLibrary) -> str:
    v = lib.cublasLtGetVersion()
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
