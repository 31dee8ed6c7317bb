"""Row indices <-> row offsets (cusparseXcoo2csr / cusparseXcsr2coo) and the sparse QR solve
(cusolverSp<t>csrlsvqr), against NumPy in float64, with their bad-argument table."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tests.libs.cusparse._helpers import host, rand_sparse, values
from tests.libs.harness import FLOAT_DTYPES, BadArg, check_bad_args
from tests.tolerance import assert_rel


def _sorted_rows(rng, m: int, nnz: int) -> np.ndarray:
    rows = rng.integers(0, m, nnz)
    rows[rows == m // 2] = 0  # an empty row in the middle
    return np.sort(rows).astype(np.int32)


@pytest.mark.parametrize("m,nnz", [(1, 5), (9, 40), (50, 7), (6, 0)])
def test_compress_and_expand_rows(dev, rng, m: int, nnz: int) -> None:
    rows = _sorted_rows(rng, m, nnz)
    ref = np.searchsorted(rows, np.arange(m + 1)).astype(np.int32)
    ptr = dev.cusparse.compress_rows(dev.to_device(rows), m)
    np.testing.assert_array_equal(host(dev, ptr), ref)
    back = dev.cusparse.expand_rows(ptr, nnz)
    np.testing.assert_array_equal(host(dev, back), rows)
    # into given buffers, on a prefix of a longer index array
    longer = dev.to_device(np.concatenate([rows, np.full(3, m + 7, np.int32)]))
    out = dev.alloc((m + 1,), np.int32)
    dev.cusparse.compress_rows(longer, m, nnz=nnz, ptr=out).result(timeout=60)
    np.testing.assert_array_equal(host(dev, out), ref)
    target = dev.alloc((nnz + 4,), np.int32)
    dev.cusparse.expand_rows(out, nnz, rows=target).result(timeout=60)
    np.testing.assert_array_equal(host(dev, target)[:nnz], rows)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [1, 23, 64])
def test_solve_qr(dev, rng, dtype: str, n: int) -> None:
    a = rand_sparse(rng, n, n, 0.2, dtype)
    a = (a + 4 * sp.eye(n, dtype=a.dtype)).tocsr()  # well conditioned
    a.sort_indices()
    b = values(rng, n, dtype)
    m = dev.cusparse.csr(a)
    x, singular = dev.cusparse.solve_qr(m, dev.to_device(b))
    assert singular.result(timeout=60) == -1
    dense = a.toarray().astype(np.complex128 if dtype[0] == "c" else np.float64)
    ref = np.linalg.solve(dense, b.astype(dense.dtype))
    assert_rel(host(dev, x), ref, dtype, n=n, cond=np.linalg.cond(dense), c=16.0)


def test_solve_qr_reports_the_singular_column(dev, rng) -> None:
    a = rand_sparse(rng, 12, 12, 0.4, "f64") + sp.eye(12) * 3
    a = a.tolil()
    a[:, 5] = 0  # column 5 empty: R(5, 5) is exactly zero
    a = sp.csr_matrix(a)
    a.eliminate_zeros()
    a.sort_indices()
    m = dev.cusparse.csr(a)
    _, singular = dev.cusparse.solve_qr(m, dev.to_device(np.ones(12)))
    assert singular.result(timeout=60) == 5
    # a tolerance above the smallest pivot reports that pivot's column
    good = dev.cusparse.csr(sp.diags([5.0, 4.0, 1e-3, 6.0]).tocsr())
    _, first = dev.cusparse.solve_qr(good, dev.to_device(np.ones(4)), tol=1e-2)
    assert first.result(timeout=60) == 2


def _i32(d, n: int):
    return d.to_device(np.zeros(n, np.int32))


def _sq(d, n: int = 4, dtype=np.float64, index="i32"):
    return d.cusparse.csr(sp.eye(n, dtype=dtype), index_dtype=index)


BAD = [
    BadArg("compress rows past the buffer", lambda d: d.cusparse.compress_rows(
        _i32(d, 5), 4, nnz=6), field="rows"),
    BadArg("compress ptr too short", lambda d: d.cusparse.compress_rows(
        _i32(d, 5), 4, ptr=_i32(d, 4)), field="ptr"),
    BadArg("compress 64-bit rows", lambda d: d.cusparse.compress_rows(
        d.to_device(np.zeros(5, np.int64)), 4), field="rows"),
    BadArg("compress negative m", lambda d: d.cusparse.compress_rows(
        _i32(d, 5), -2, ptr=_i32(d, 4)), field="m"),
    BadArg("compress aliasing", lambda d: (lambda b: d.cusparse.compress_rows(
        b, 4, nnz=3, ptr=b))(_i32(d, 5)), field="ptr"),
    BadArg("expand rows too short", lambda d: d.cusparse.expand_rows(
        _i32(d, 5), 9, rows=_i32(d, 8)), field="rows"),
    BadArg("expand float offsets", lambda d: d.cusparse.expand_rows(
        d.to_device(np.zeros(5, np.float32)), 3), field="ptr"),
    BadArg("solve not square", lambda d: d.cusparse.solve_qr(
        d.cusparse.csr(sp.random(3, 4, density=0.5, format="csr")), d.to_device(np.ones(3))),
        field="a"),
    BadArg("solve csc", lambda d: d.cusparse.solve_qr(
        d.cusparse.csc(sp.eye(3)), d.to_device(np.ones(3))), field="a"),
    BadArg("solve 64-bit indices", lambda d: d.cusparse.solve_qr(
        _sq(d, index="i64"), d.to_device(np.ones(4))), field="a"),
    BadArg("solve b length", lambda d: d.cusparse.solve_qr(_sq(d), d.to_device(np.ones(5))),
           field="b"),
    BadArg("solve b dtype", lambda d: d.cusparse.solve_qr(
        _sq(d), d.to_device(np.ones(4, np.float32))), field="b"),
    BadArg("solve negative tol", lambda d: d.cusparse.solve_qr(
        _sq(d), d.to_device(np.ones(4)), tol=-1.0), field="tol"),
    BadArg("solve x aliases b", lambda d: (lambda v: d.cusparse.solve_qr(_sq(d), v, v))(
        d.to_device(np.ones(4))), field="x"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case: BadArg) -> None:
    check_bad_args(dev, case)
