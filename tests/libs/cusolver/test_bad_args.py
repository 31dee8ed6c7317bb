"""cuSOLVER's bad-argument table: every refused argument of the raw calls and of
``dev.linalg`` gets InvalidMessage naming its field at the call site, and the device keeps
serving."""

from __future__ import annotations

import numpy as np
import pytest

from tests.libs.harness import BadArg, check_bad_args


def _f64(dev, shape=(8, 8), order="C"):
    return dev.alloc(shape, np.float64, order=order)


def _col(dev, shape=(8, 8)):
    """A column-major f64 matrix, as the raw calls take them."""
    return dev.alloc(shape, np.float64, order="F")


BAD = [
    BadArg("potrf C-ordered", lambda d: d.cusolver.potrf(_f64(d), 8), field="a"),
    BadArg("getrs C-ordered b", lambda d: d.cusolver.getrs(_col(d), _f64(d, (8, 3)), 8, 3),
           field="b"),
    BadArg("potrf n too big", lambda d: d.cusolver.potrf(_col(d), 9), field="a"),
    BadArg("potrf uplo", lambda d: d.cusolver.potrf(_col(d), 8, uplo="X"), field="uplo"),
    BadArg("potrf lda < n", lambda d: d.cusolver.potrf(_col(d), 8, lda=4), field="lda"),
    BadArg("potrf int dtype", lambda d: d.cusolver.potrf(d.alloc((8, 8), np.int32), 8),
           field="a"),
    BadArg("potrf clean not bool", lambda d: d.cusolver.potrf(_col(d), 8, clean=1),
           field="clean"),
    BadArg("potrs dtype mix", lambda d: d.cusolver.potrs(_col(d), d.alloc((8,), np.float32), 8,
                                                       1), field="b"),
    BadArg("potrs b too small", lambda d: d.cusolver.potrs(_col(d), _col(d, (8,)), 8, 2),
           field="b"),
    BadArg("getrf ipiv dtype", lambda d: d.cusolver.getrf(_col(d), 8, 8,
                                                        d.alloc((8,), np.int32)), field="ipiv"),
    BadArg("getrf ipiv short", lambda d: d.cusolver.getrf(_col(d), 8, 8,
                                                        d.alloc((4,), np.int64)), field="ipiv"),
    BadArg("getrf negative m", lambda d: d.cusolver.getrf(_col(d), -1, 8), field="m"),
    BadArg("getrs trans", lambda d: d.cusolver.getrs(_col(d), _col(d), 8, 8, trans="X"),
           field="trans"),
    BadArg("getrs b aliases a", lambda d: (lambda x: d.cusolver.getrs(x, x, 8, 8))(_col(d)),
           field="b"),
    BadArg("cholesky not square", lambda d: d.linalg.cholesky(_f64(d, (8, 4))), field="a"),
    BadArg("cholesky F-ordered, not square", lambda d: d.linalg.cholesky(
        _f64(d, (8, 4), order="F")), field="a"),
    BadArg("solve shape mismatch", lambda d: d.linalg.solve(_f64(d), _f64(d, (7,))), field="b"),
    BadArg("solve dtype mismatch", lambda d: d.linalg.solve(_f64(d), d.alloc((8,), np.float32)),
           field="b"),
    BadArg("batched stride overlaps", lambda d: d.cusolver.potrf_batched(_col(d, (4, 8, 8)), 8,
                                                                       4, stride=32),
           field="stride"),
    BadArg("batched too many", lambda d: d.cusolver.potrf_batched(_col(d, (4, 8, 8)), 8, 5),
           field="a"),
    BadArg("solve not a buffer", lambda d: d.linalg.solve(np.eye(3), np.ones(3)), field="a"),
    # QR, eigensolvers, SVD and the NumPy-level calls
    BadArg("geqrf tau short", lambda d: d.cusolver.geqrf(_col(d), _col(d, (4,)), 8, 8),
           field="tau"),
    BadArg("geqrf tau dtype", lambda d: d.cusolver.geqrf(_col(d), d.alloc((8,), np.float32), 8,
                                                       8), field="tau"),
    BadArg("orgqr n > m", lambda d: d.cusolver.orgqr(_col(d), _col(d, (8,)), 4, 8, 4), field="n"),
    BadArg("orgqr k > n", lambda d: d.cusolver.orgqr(_col(d), _col(d, (8,)), 8, 4, 5), field="k"),
    BadArg("ormqr real trans C", lambda d: d.cusolver.ormqr(_col(d), _col(d, (8,)), _col(d), 8,
                                                          8, 8, trans="C"), field="trans"),
    BadArg("ormqr side", lambda d: d.cusolver.ormqr(_col(d), _col(d, (8,)), _col(d), 8, 8, 8,
                                                  side="X"), field="side"),
    BadArg("syevd w complex", lambda d: d.cusolver.syevd(d.alloc((8, 8), np.complex128, order="F"),
                                                       d.alloc((8,), np.complex128), 8),
           field="w"),
    BadArg("syevd w aliases a", lambda d: (lambda x: d.cusolver.syevd(x, x, 8))(_col(d)),
           field="w"),
    BadArg("syevj max_sweeps 0", lambda d: d.cusolver.syevj(_col(d), _col(d, (8,)), 8,
                                                          max_sweeps=0), field="max_sweeps"),
    BadArg("syevj tol negative", lambda d: d.cusolver.syevj(_col(d), _col(d, (8,)), 8, tol=-1.0),
           field="tol"),
    BadArg("syevj_batched n > 32", lambda d: d.cusolver.syevj_batched(
        _col(d, (33, 33)), _col(d, (33,)), 33, 1), field="n"),
    BadArg("sygvd itype", lambda d: d.cusolver.sygvd(_col(d), _col(d), _col(d, (8,)), 8, itype=4),
           field="itype"),
    BadArg("gesvd m < n", lambda d: d.cusolver.gesvd(_col(d, (4, 8)), _col(d, (8,)), 4, 8,
                                                   _col(d), _col(d)), field="m"),
    BadArg("gesvd jobu O", lambda d: d.cusolver.gesvd(_col(d), _col(d, (8,)), 8, 8, _col(d),
                                                    _col(d), jobu="O"), field="jobu"),
    BadArg("gesvd U missing", lambda d: d.cusolver.gesvd(_col(d), _col(d, (8,)), 8, 8),
           field="u"),
    BadArg("gesvdj V missing", lambda d: d.cusolver.gesvdj(_col(d), _col(d, (8,)), 8, 8,
                                                         _col(d)), field="v"),
    BadArg("gesvdj U too small", lambda d: d.cusolver.gesvdj(_col(d), _col(d, (8,)), 8, 8,
                                                           _col(d, (4, 8)), _col(d)), field="u"),
    BadArg("gesvdj_batched m > 32", lambda d: d.cusolver.gesvdj_batched(
        _col(d, (40, 4)), _col(d, (4,)), 40, 4, 1, vectors=False), field="m"),
    BadArg("potrs_batched nrhs 2", lambda d: d.cusolver.potrs_batched(_col(d), _col(d), 4, 1,
                                                                    nrhs=2), field="nrhs"),
    BadArg("getrf_batched ipiv i64", lambda d: d.cusolver.getrf_batched(
        _col(d, (2, 8, 8)), 8, 2, d.alloc((16,), np.int64)), field="ipiv"),
    # one matrix uses no stride, yet 2**63 elements overflowed the handler's 64-bit offsets
    BadArg("getrf_batched stride past 64 bits", lambda d: d.cusolver.getrf_batched(
        _col(d, (8, 8)), 8, 1, stride=2 ** 63), field="stride"),
    BadArg("getrs_batched stride overlaps", lambda d: d.cusolver.getrs_batched(
        _col(d, (2, 8, 8)), _col(d, (2, 8)), 8, 1, 2, stride_a=10), field="stride_a"),
    BadArg("qr mode", lambda d: d.linalg.qr(_f64(d), mode="economic"), field="mode"),
    BadArg("qr 1-D", lambda d: d.linalg.qr(_f64(d, (8,))), field="a"),
    BadArg("eigh method", lambda d: d.linalg.eigh(_f64(d), method="qr"), field="method"),
    BadArg("eigh b shape", lambda d: d.linalg.eigh(_f64(d), b=_f64(d, (4, 4))), field="b"),
    BadArg("svd method", lambda d: d.linalg.svd(_f64(d), method="gesdd"), field="method"),
    BadArg("svd full_matrices", lambda d: d.linalg.svd(_f64(d), full_matrices=1),
           field="full_matrices"),
    BadArg("inv assume_a", lambda d: d.linalg.inv(_f64(d), assume_a="sym"), field="assume_a"),
    BadArg("lstsq wide", lambda d: d.linalg.lstsq(_f64(d, (4, 8)), _f64(d, (4,))), field="a"),
    BadArg("lstsq b rows", lambda d: d.linalg.lstsq(_f64(d, (8, 4)), _f64(d, (7,))), field="b"),
    BadArg("solve pivot", lambda d: d.linalg.solve(_f64(d), _f64(d, (8,)), pivot=0),
           field="pivot"),
    BadArg("solve_batched b shape", lambda d: d.linalg.solve(_f64(d, (2, 8, 8)),
                                                                     _f64(d, (3, 8))), field="b"),
    BadArg("zero_triangle part", lambda d: d.cusolver.zero_triangle(_col(d), 8, 8, "X"),
           field="part"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case: BadArg) -> None:
    check_bad_args(dev, case)
