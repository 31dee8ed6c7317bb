"""cuSPARSE bindings as data: the generic-API functions gpumsg calls (descriptors, SpMV, SpMM,
SpGEMM, SpSV, SDDMM, sparse <-> dense, CSR <-> CSC), with their argument types, and the enum
values they take (cusparse.h of CUDA 12; unchanged in CUDA 13)."""

from __future__ import annotations

import ctypes
import threading

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

__all__ = ["SPEC", "OP", "INDEX", "FORMAT_CODE", "ORDER_ROW", "ALG_DEFAULT", "SPMM_BSR_ALG1",
           "FILL", "DIAG", "ATTR_FILL", "ATTR_DIAG", "ACTION_NUMERIC", "BASE_ZERO",
           "CSR2CSC_ALG1", "SPGEMM_DEFAULT", "SOLVER_SPEC", "SOLVER_LETTER", "load_solver"]

OP = {"N": 0, "T": 1, "C": 2}  # cusparseOperation_t
INDEX = {"i32": 2, "i64": 3}  # cusparseIndexType_t
FORMAT_CODE = {"csr": 1, "csc": 2, "coo": 3, "bsr": 6}  # cusparseFormat_t
ORDER_ROW = 2  # cusparseOrder_t (COL = 1)
BASE_ZERO = 0  # cusparseIndexBase_t
ALG_DEFAULT = 0  # SpMV/SpMM/SpSV/SDDMM/SparseToDense/DenseToSparse default algorithms
SPMM_BSR_ALG1 = 14
SPGEMM_DEFAULT = 0
FILL = {"L": 0, "U": 1}  # cusparseFillMode_t
DIAG = {"N": 0, "U": 1}  # cusparseDiagType_t
ATTR_FILL, ATTR_DIAG = 0, 1  # cusparseSpMatAttribute_t
ACTION_NUMERIC = 1  # cusparseAction_t
CSR2CSC_ALG1 = 1

_H = c_void_p  # cusparseHandle_t
_M = c_void_p  # cusparseSpMatDescr_t
_D = c_void_p  # cusparseDnVecDescr_t / cusparseDnMatDescr_t
_G = c_void_p  # cusparseSpGEMMDescr_t / cusparseSpSVDescr_t
_p = c_void_p
_i = c_int
_l = c_int64
_z = c_size_t

SPEC = LibrarySpec(
    name="cusparse",
    functions=(
        Fn("cusparseGetProperty", c_int, (c_int, P(c_int))),
        Fn("cusparseGetErrorName", c_char_p, (c_int,)),
        Fn("cusparseCreate", c_int, (P(_H),)),
        Fn("cusparseDestroy", c_int, (_H,)),
        Fn("cusparseSetStream", c_int, (_H, c_void_p)),
        Fn("cusparseSetPointerMode", c_int, (_H, _i)),  # 0: host scalars, 1: device scalars
        # (&descr, rows, cols, nnz, offsets, indices, values, offsetsType, indType, base, valType)
        Fn("cusparseCreateCsr", c_int, (P(_M), _l, _l, _l, _p, _p, _p, _i, _i, _i, _i)),
        Fn("cusparseCreateCsc", c_int, (P(_M), _l, _l, _l, _p, _p, _p, _i, _i, _i, _i)),
        # (&descr, rows, cols, nnz, rowInd, colInd, values, idxType, base, valType)
        Fn("cusparseCreateCoo", c_int, (P(_M), _l, _l, _l, _p, _p, _p, _i, _i, _i)),
        # (&descr, brows, bcols, bnnz, rowBlock, colBlock, offsets, colInd, values, offType,
        #  indType, base, valType, order)
        Fn("cusparseCreateBsr", c_int,
           (P(_M), _l, _l, _l, _l, _l, _p, _p, _p, _i, _i, _i, _i, _i)),
        Fn("cusparseDestroySpMat", c_int, (_M,)),
        Fn("cusparseSpMatGetSize", c_int, (_M, P(_l), P(_l), P(_l))),
        Fn("cusparseCsrSetPointers", c_int, (_M, _p, _p, _p)),
        Fn("cusparseSpMatSetAttribute", c_int, (_M, _i, _p, _z)),
        Fn("cusparseCreateDnVec", c_int, (P(_D), _l, _p, _i)),
        Fn("cusparseDestroyDnVec", c_int, (_D,)),
        # (&descr, rows, cols, ld, values, valType, order)
        Fn("cusparseCreateDnMat", c_int, (P(_D), _l, _l, _l, _p, _i, _i)),
        Fn("cusparseDestroyDnMat", c_int, (_D,)),
        # (handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, &size | buffer)
        Fn("cusparseSpMV_bufferSize", c_int, (_H, _i, _p, _M, _D, _p, _D, _i, _i, P(_z))),
        Fn("cusparseSpMV", c_int, (_H, _i, _p, _M, _D, _p, _D, _i, _i, _p)),
        # the same arguments; CUDA 12.4+ (optional: an optimization only)
        Fn("cusparseSpMV_preprocess", c_int, (_H, _i, _p, _M, _D, _p, _D, _i, _i, _p),
           optional=True),
        # (handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, &size | buffer)
        Fn("cusparseSpMM_bufferSize", c_int, (_H, _i, _i, _p, _M, _D, _p, _D, _i, _i, P(_z))),
        Fn("cusparseSpMM", c_int, (_H, _i, _i, _p, _M, _D, _p, _D, _i, _i, _p)),
        # the same arguments; must run before an SpMM is captured in a CUDA graph (cuSPARSE
        # documentation, cusparseSpMM "optimizations"): optional, without it no SpMM replays
        Fn("cusparseSpMM_preprocess", c_int, (_H, _i, _i, _p, _M, _D, _p, _D, _i, _i, _p),
           optional=True),
        Fn("cusparseSpGEMM_createDescr", c_int, (P(_G),)),
        Fn("cusparseSpGEMM_destroyDescr", c_int, (_G,)),
        # (handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, spgemmDescr,
        #  &bufferSize, buffer)
        Fn("cusparseSpGEMM_workEstimation", c_int,
           (_H, _i, _i, _p, _M, _M, _p, _M, _i, _i, _G, P(_z), _p)),
        Fn("cusparseSpGEMM_compute", c_int,
           (_H, _i, _i, _p, _M, _M, _p, _M, _i, _i, _G, P(_z), _p)),
        Fn("cusparseSpGEMM_copy", c_int, (_H, _i, _i, _p, _M, _M, _p, _M, _i, _i, _G)),
        Fn("cusparseSpSV_createDescr", c_int, (P(_G),)),
        Fn("cusparseSpSV_destroyDescr", c_int, (_G,)),
        # (handle, opA, alpha, matA, vecX, vecY, computeType, alg, spsvDescr, &size | buffer)
        Fn("cusparseSpSV_bufferSize", c_int, (_H, _i, _p, _M, _D, _D, _i, _i, _G, P(_z))),
        Fn("cusparseSpSV_analysis", c_int, (_H, _i, _p, _M, _D, _D, _i, _i, _G, _p)),
        Fn("cusparseSpSV_solve", c_int, (_H, _i, _p, _M, _D, _D, _i, _i, _G)),
        Fn("cusparseSpSM_createDescr", c_int, (P(_G),)),
        Fn("cusparseSpSM_destroyDescr", c_int, (_G,)),
        # (handle, opA, opB, alpha, matA, matB (dense), matC (dense), computeType, alg,
        #  spsmDescr, &size | buffer)
        Fn("cusparseSpSM_bufferSize", c_int, (_H, _i, _i, _p, _M, _D, _D, _i, _i, _G, P(_z))),
        Fn("cusparseSpSM_analysis", c_int, (_H, _i, _i, _p, _M, _D, _D, _i, _i, _G, _p)),
        Fn("cusparseSpSM_solve", c_int, (_H, _i, _i, _p, _M, _D, _D, _i, _i, _G)),
        # (handle, opA, opB, alpha, matA (dense), matB (dense), beta, matC (sparse),
        #  computeType, alg, &size | buffer)
        Fn("cusparseSDDMM_bufferSize", c_int, (_H, _i, _i, _p, _D, _D, _p, _M, _i, _i, P(_z))),
        Fn("cusparseSDDMM", c_int, (_H, _i, _i, _p, _D, _D, _p, _M, _i, _i, _p)),
        # (handle, matA (sparse), matB (dense), alg, &size | buffer)
        Fn("cusparseSparseToDense_bufferSize", c_int, (_H, _M, _D, _i, P(_z))),
        Fn("cusparseSparseToDense", c_int, (_H, _M, _D, _i, _p)),
        # (handle, matA (dense), matB (sparse), alg, &size | buffer)
        Fn("cusparseDenseToSparse_bufferSize", c_int, (_H, _D, _M, _i, P(_z))),
        Fn("cusparseDenseToSparse_analysis", c_int, (_H, _D, _M, _i, _p)),
        Fn("cusparseDenseToSparse_convert", c_int, (_H, _D, _M, _i, _p)),
        # (handle, m, n, nnz, csrVal, csrRowPtr, csrColInd, cscVal, cscColPtr, cscRowInd,
        #  valType, copyValues, base, alg, &size | buffer)
        Fn("cusparseCsr2cscEx2_bufferSize", c_int,
           (_H, _i, _i, _i, _p, _p, _p, _p, _p, _p, _i, _i, _i, _i, P(_z))),
        Fn("cusparseCsr2cscEx2", c_int,
           (_H, _i, _i, _i, _p, _p, _p, _p, _p, _p, _i, _i, _i, _i, _p)),
        # legacy API, present in CUDA 12 and 13 (optional: only the calls that use them need
        # them). (handle, cooRowInd, nnz, m, csrRowPtr, base) / (handle, csrRowPtr, nnz, m,
        # cooRowInd, base)
        Fn("cusparseXcoo2csr", c_int, (_H, _p, _i, _i, _p, _i), optional=True),
        Fn("cusparseXcsr2coo", c_int, (_H, _p, _i, _i, _p, _i), optional=True),
        # the legacy matrix descriptor cusolverSp takes (general, 0-based by default)
        Fn("cusparseCreateMatDescr", c_int, (P(_p),), optional=True),
        Fn("cusparseDestroyMatDescr", c_int, (_p,), optional=True),
    ),
    version=lambda lib: _version(lib),
)


#: cuSOLVER's sparse solvers (cusolverSp, in libcusolver), for SpSolveQR. Not a registered
#: table: the cuSOLVER library folder declares libcusolver's dense API under the same library
#: name, so this one is bound on its own (:func:`load_solver`); every function is optional (a
#: library without cusolverSp fails the solve, not the load).
SOLVER_SPEC = LibrarySpec(
    name="cusolver",
    functions=(
        Fn("cusolverSpCreate", c_int, (P(_H),), optional=True),
        Fn("cusolverSpDestroy", c_int, (_H,), optional=True),
        Fn("cusolverSpSetStream", c_int, (_H, c_void_p), optional=True),
        # (handle, m, nnz, descrA, csrVal, csrRowPtr, csrColInd, b, tol, reorder, x,
        #  &singularity): tol is float for S and C, double for D and Z
        *(Fn(f"cusolverSp{t}csrlsvqr", c_int,
             (_H, _i, _i, _p, _p, _p, _p, _p, tol, _i, _p, P(c_int)), optional=True)
          for t, tol in (("S", ctypes.c_float), ("D", ctypes.c_double), ("C", ctypes.c_float),
                         ("Z", ctypes.c_double))),
    ),
    version=lambda lib: "",
)
SOLVER_LETTER = {"f32": "S", "f64": "D", "c64": "C", "c128": "Z"}
_solver: list[LoadedLibrary] = []
_solver_lock = threading.Lock()


def load_solver() -> LoadedLibrary:
    """libcusolver bound with :data:`SOLVER_SPEC` (once per process)."""
    with _solver_lock:
        if not _solver:
            from .._loader import find_path

            path = find_path("cusolver")
            _solver.append(LoadedLibrary(SOLVER_SPEC, path, ctypes.CDLL(path)))
        return _solver[0]


def _version(lib: LoadedLibrary) -> str:
    parts = []
    for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = c_int()
        lib.cusparseGetProperty(prop, ctypes.byref(v))
        parts.append(str(v.value))
    return ".".join(parts)
