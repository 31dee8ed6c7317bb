"""cuSOLVER dense bindings as data: the 64-bit generic API (``cusolverDnX*``) functions gpumsg
calls, with their argument and result types, and the enums they take."""

from __future__ import annotations

import ctypes

from .._loader import Fn, LibrarySpec, LoadedLibrary, P, c_int, c_int64, c_size_t, c_void_p

__all__ = ["SPEC", "FILL", "OP", "SIDE", "EIG_MODE", "EIG_TYPE", "STATUS_NAMES", "LETTER",
           "ORTHO", "EIG_J", "typed"]

FILL = {"L": 0, "U": 1}  # cublasFillMode_t
OP = {"N": 0, "T": 1, "C": 2}  # cublasOperation_t
SIDE = {"L": 0, "R": 1}  # cublasSideMode_t
EIG_MODE = {False: 0, True: 1}  # cusolverEigMode_t: NOVECTOR, VECTOR
EIG_TYPE = {1: 1, 2: 2, 3: 3}  # cusolverEigType_t: A x = l B x, A B x = l x, B A x = l x
LETTER = {"f32": "S", "f64": "D", "c64": "C", "c128": "Z"}
#: the legacy typed names that differ between real and complex (orgqr/ungqr, syevj/heevj, ...)
ORTHO = {"f32": "Sorgqr", "f64": "Dorgqr", "c64": "Cungqr", "c128": "Zungqr"}
EIG_J = {"f32": "Ssyevj", "f64": "Dsyevj", "c64": "Cheevj", "c128": "Zheevj"}


def typed(dtype: str, real: str, complex_: str | None = None) -> str:
    """``cusolverDn`` + letter + name: ``typed("c64", "sygvd", "hegvd")`` -> cusolverDnChegvd."""
    name = real if dtype in ("f32", "f64") or complex_ is None else complex_
    return f"cusolverDn{LETTER[dtype]}{name}"

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

def _more() -> list[Fn]:
    """QR, eigen, SVD, potri and the batched solvers (64-bit generic API where it exists,
    legacy typed API otherwise)."""
    fns = [
        # (handle, params, m, n, dataTypeA, A, lda, dataTypeTau, tau, computeType, &dev, &host)
        Fn("cusolverDnXgeqrf_bufferSize", c_int,
           (_H, _Pa, _l, _l, _i, _p, _l, _i, _p, _i, P(c_size_t), P(c_size_t))),
        # (..., computeType, dev_ws, dev_bytes, host_ws, host_bytes, info)
        Fn("cusolverDnXgeqrf", c_int,
           (_H, _Pa, _l, _l, _i, _p, _l, _i, _p, _i, _p, c_size_t, _p, c_size_t, _p)),
        # (handle, params, jobz, uplo, n, dataTypeA, A, lda, dataTypeW, W, computeType, ...)
        Fn("cusolverDnXsyevd_bufferSize", c_int,
           (_H, _Pa, _i, _i, _l, _i, _p, _l, _i, _p, _i, P(c_size_t), P(c_size_t))),
        Fn("cusolverDnXsyevd", c_int,
           (_H, _Pa, _i, _i, _l, _i, _p, _l, _i, _p, _i, _p, c_size_t, _p, c_size_t, _p)),
        # (handle, params, jobu, jobvt, m, n, tA, A, lda, tS, S, tU, U, ldu, tVT, VT, ldvt,
        #  computeType, ...)
        Fn("cusolverDnXgesvd_bufferSize", c_int,
           (_H, _Pa, ctypes.c_byte, ctypes.c_byte, _l, _l, _i, _p, _l, _i, _p, _i, _p, _l, _i,
            _p, _l, _i, P(c_size_t), P(c_size_t))),
        Fn("cusolverDnXgesvd", c_int,
           (_H, _Pa, ctypes.c_byte, ctypes.c_byte, _l, _l, _i, _p, _l, _i, _p, _i, _p, _l, _i,
            _p, _l, _i, _p, c_size_t, _p, c_size_t, _p)),
        Fn("cusolverDnCreateSyevjInfo", c_int, (P(_p),)),
        Fn("cusolverDnDestroySyevjInfo", c_int, (_p,)),
        Fn("cusolverDnXsyevjSetTolerance", c_int, (_p, ctypes.c_double)),
        Fn("cusolverDnXsyevjSetMaxSweeps", c_int, (_p, _i)),
        Fn("cusolverDnXsyevjSetSortEig", c_int, (_p, _i)),
        Fn("cusolverDnCreateGesvdjInfo", c_int, (P(_p),)),
        Fn("cusolverDnDestroyGesvdjInfo", c_int, (_p,)),
        Fn("cusolverDnXgesvdjSetTolerance", c_int, (_p, ctypes.c_double)),
        Fn("cusolverDnXgesvdjSetMaxSweeps", c_int, (_p, _i)),
        Fn("cusolverDnXgesvdjSetSortEig", c_int, (_p, _i)),
        # (handle, params, jobz, uplo, n, dataTypeA, A, lda, dataTypeW, W, computeType,
        #  &dev_bytes, &host_bytes, batchSize): cuSOLVER 11.7 (CUDA 12.6 update 2) and later
        Fn("cusolverDnXsyevBatched_bufferSize", c_int,
           (_H, _Pa, _i, _i, _l, _i, _p, _l, _i, _p, _i, P(c_size_t), P(c_size_t), _l),
           optional=True),
        # (..., computeType, dev_ws, dev_bytes, host_ws, host_bytes, info[batch], batchSize)
        Fn("cusolverDnXsyevBatched", c_int,
           (_H, _Pa, _i, _i, _l, _i, _p, _l, _i, _p, _i, _p, c_size_t, _p, c_size_t, _p, _l),
           optional=True),
        # (handle, params, jobvl, jobvr, n, dataTypeA, A, lda, dataTypeW, W, dataTypeVL, VL,
        #  ldvl, dataTypeVR, VR, ldvr, computeType, &dev_bytes, &host_bytes): cuSOLVER 11.7.2+
        Fn("cusolverDnXgeev_bufferSize", c_int,
           (_H, _Pa, _i, _i, _l, _i, _p, _l, _i, _p, _i, _p, _l, _i, _p, _l, _i, P(c_size_t),
            P(c_size_t)), optional=True),
        # (..., computeType, dev_ws, dev_bytes, host_ws, host_bytes, info)
        Fn("cusolverDnXgeev", c_int,
           (_H, _Pa, _i, _i, _l, _i, _p, _l, _i, _p, _i, _p, _l, _i, _p, _l, _i, _p, c_size_t,
            _p, c_size_t, _p), optional=True),
    ]
    for dt in ("f32", "f64", "c64", "c128"):
        x = LETTER[dt]
        q = ORTHO[dt]
        mq = q[0] + ("ormqr" if dt[0] == "f" else "unmqr")
        ej = EIG_J[dt]
        gv = x + ("sygvd" if dt[0] == "f" else "hegvd")
        fns += [
            # (handle, m, n, k, A, lda, tau, &lwork) / (..., tau, work, lwork, info)
            Fn(f"cusolverDn{q}_bufferSize", c_int, (_H, _i, _i, _i, _p, _i, _p, P(_i))),
            Fn(f"cusolverDn{q}", c_int, (_H, _i, _i, _i, _p, _i, _p, _p, _i, _p)),
            # (handle, side, trans, m, n, k, A, lda, tau, C, ldc, &lwork / work, lwork, info)
            Fn(f"cusolverDn{mq}_bufferSize", c_int,
               (_H, _i, _i, _i, _i, _i, _p, _i, _p, _p, _i, P(_i))),
            Fn(f"cusolverDn{mq}", c_int,
               (_H, _i, _i, _i, _i, _i, _p, _i, _p, _p, _i, _p, _i, _p)),
            # (handle, jobz, uplo, n, A, lda, W, &lwork, params)
            Fn(f"cusolverDn{ej}_bufferSize", c_int, (_H, _i, _i, _i, _p, _i, _p, P(_i), _p)),
            # (handle, jobz, uplo, n, A, lda, W, work, lwork, info, params)
            Fn(f"cusolverDn{ej}", c_int, (_H, _i, _i, _i, _p, _i, _p, _p, _i, _p, _p)),
            # batched: the same plus batchSize
            Fn(f"cusolverDn{ej}Batched_bufferSize", c_int,
               (_H, _i, _i, _i, _p, _i, _p, P(_i), _p, _i)),
            Fn(f"cusolverDn{ej}Batched", c_int, (_H, _i, _i, _i, _p, _i, _p, _p, _i, _p, _p, _i)),
            # (handle, itype, jobz, uplo, n, A, lda, B, ldb, W, &lwork / work, lwork, info)
            Fn(f"cusolverDn{gv}_bufferSize", c_int, (_H, _i, _i, _i, _i, _p, _i, _p, _i, _p,
                                                     P(_i))),
            Fn(f"cusolverDn{gv}", c_int, (_H, _i, _i, _i, _i, _p, _i, _p, _i, _p, _p, _i, _p)),
            # (handle, jobz, econ, m, n, A, lda, S, U, ldu, V, ldv, &lwork, params)
            Fn(f"cusolverDn{x}gesvdj_bufferSize", c_int,
               (_H, _i, _i, _i, _i, _p, _i, _p, _p, _i, _p, _i, P(_i), _p)),
            # (..., V, ldv, work, lwork, info, params)
            Fn(f"cusolverDn{x}gesvdj", c_int,
               (_H, _i, _i, _i, _i, _p, _i, _p, _p, _i, _p, _i, _p, _i, _p, _p)),
            # (handle, jobz, m, n, A, lda, S, U, ldu, V, ldv, &lwork, params, batch)
            Fn(f"cusolverDn{x}gesvdjBatched_bufferSize", c_int,
               (_H, _i, _i, _i, _p, _i, _p, _p, _i, _p, _i, P(_i), _p, _i)),
            Fn(f"cusolverDn{x}gesvdjBatched", c_int,
               (_H, _i, _i, _i, _p, _i, _p, _p, _i, _p, _i, _p, _i, _p, _p, _i)),
            # (handle, uplo, n, A, lda, &lwork / work, lwork, info)
            Fn(f"cusolverDn{x}potri_bufferSize", c_int, (_H, _i, _i, _p, _i, P(_i))),
            Fn(f"cusolverDn{x}potri", c_int, (_H, _i, _i, _p, _i, _p, _i, _p)),
            # (handle, uplo, n, nrhs, Aarray, lda, Barray, ldb, info, batch)
            Fn(f"cusolverDn{x}potrsBatched", c_int, (_H, _i, _i, _i, _p, _i, _p, _i, _p, _i)),
        ]
    return fns


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
        *_more(),
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
