"""cuSOLVER dense bindings as data: the 64-bit generic API (``cusolverDnX*``) functions gpumsg
calls, with their argument and result types, and the enums they take."""

from __future__ import annotations

import ctypes

from ..loader import Fn, LibrarySpec, LoadedLibrary, P, c_int, c_int64, c_size_t, c_void_p

__all__ = ["SPEC", "FILL", "OP", "STATUS_NAMES", "LETTER"]

FILL = {"L": 0, "U": 1}  # cublasFillMode_t
OP = {"N": 0, "T": 1, "C": 2}  # cublasOperation_t
LETTER = {"f32": "S", "f64": "D", "c64": "C", "c128": "Z"}

#: cusolverStatus_t -> name (the library has no name function in every CUDA 12 release)
STATUS_NAMES = {
    0: "CUSOLVER_STATUS_SUCCESS", 1: "CUSOLVER_STATUS_NOT_INITIALIZED",
    2: "CUSOLVER_STATUS_ALLOC_FAILED", 3: "CUSOLVER_STATUS_INVALID_VALUE",
    4: "CUSOLVER_STATUS_ARCH_MISMATCH", 5: "CUSOLVER_STATUS_MAPPING_ERROR",
    6: "CUSOLVER_STATUS_EXECUTION_FAILED", 7: "CUSOLVER_STATUS_INTERNAL_ERROR",
    8: "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED", 9: "CUSOLVER_STATUS_NOT_SUPPORTED",
}

_H = c_void_p  # cusolverDnHandle_t
_Pa = c_void_p  # cusolverDnParams_t
_p = c_void_p
_i = c_int
_l = c_int64

SPEC = LibrarySpec(
    name="cusolver",
    functions=(
        Fn("cusolverGetProperty", c_int, (c_int, P(c_int))),
        Fn("cusolverDnCreate", c_int, (P(_H),)),
        Fn("cusolverDnDestroy", c_int, (_H,)),
        Fn("cusolverDnSetStream", c_int, (_H, c_void_p)),
        Fn("cusolverDnCreateParams", c_int, (P(_Pa),)),
        Fn("cusolverDnDestroyParams", c_int, (_Pa,)),
        # (handle, params, uplo, n, dataTypeA, A, lda, computeType, &dev_bytes, &host_bytes)
        Fn("cusolverDnXpotrf_bufferSize", c_int,
           (_H, _Pa, _i, _l, _i, _p, _l, _i, P(c_size_t), P(c_size_t))),
        # (handle, params, uplo, n, dataTypeA, A, lda, computeType, dev_ws, dev_bytes, host_ws,
        #  host_bytes, info)
        Fn("cusolverDnXpotrf", c_int,
           (_H, _Pa, _i, _l, _i, _p, _l, _i, _p, c_size_t, _p, c_size_t, _p)),
        # (handle, params, uplo, n, nrhs, dataTypeA, A, lda, dataTypeB, B, ldb, info)
        Fn("cusolverDnXpotrs", c_int, (_H, _Pa, _i, _l, _l, _i, _p, _l, _i, _p, _l, _p)),
        # (handle, params, m, n, dataTypeA, A, lda, computeType, &dev_bytes, &host_bytes)
        Fn("cusolverDnXgetrf_bufferSize", c_int,
           (_H, _Pa, _l, _l, _i, _p, _l, _i, P(c_size_t), P(c_size_t))),
        # (handle, params, m, n, dataTypeA, A, lda, ipiv, computeType, dev_ws, dev_bytes,
        #  host_ws, host_bytes, info)
        Fn("cusolverDnXgetrf", c_int,
           (_H, _Pa, _l, _l, _i, _p, _l, _p, _i, _p, c_size_t, _p, c_size_t, _p)),
        # (handle, params, trans, n, nrhs, dataTypeA, A, lda, ipiv, dataTypeB, B, ldb, info)
        Fn("cusolverDnXgetrs", c_int, (_H, _Pa, _i, _l, _l, _i, _p, _l, _p, _i, _p, _l, _p)),
        # (handle, uplo, n, Aarray (device array of pointers), lda, infoArray, batchSize)
        *(Fn(f"cusolverDn{x}potrfBatched", c_int, (_H, _i, _i, _p, _i, _p, _i))
          for x in "SDCZ"),
    ),
    version=lambda lib: _version(lib),
)


def _version(lib: LoadedLibrary) -> str:
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = c_int()
        lib.cusolverGetProperty(prop, ctypes.byref(v))
        parts.append(str(v.value))
    return ".".join(parts)
