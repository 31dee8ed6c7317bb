"""Operators of sparse matrices against scipy.sparse / NumPy in float64: products with dense
vectors and matrices (SpMV, SpMM, on either side) and sparse matrices (SpGEMM), sums along each
axis, scalar arithmetic, sums of matrices, the element-wise product; every value type and
format, on random entries with repeats, empty rows and columns."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from sparse_helpers import DTYPES, check, entries, reference, values, wide

from gpumsg.array_api import sparse
from gpumsg.errors import InvalidMessage
from tests.conftest import CUDA_OK
from tests.tolerance import sum_cond

FORMATS = ["csr", "csc", "coo"]


def _matrix(rng, fmt: str, dtype: str, m: int = 19, n: int = 14, nnz: int = 70):
    vals, r, c = entries(rng, m, n, nnz, dtype)
    return (sparse.coo_matrix((vals, (r, c)), shape=(m, n)).asformat(fmt),
            reference(vals, r, c, (m, n), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_matrix_vector_and_matrix_matrix(xp, rng, dtype, fmt) -> None:
    a, ref = _matrix(rng, fmt, dtype)
    m, n = ref.shape
    x = values(rng, n, dtype)
    b = values(rng, n * 5, dtype).reshape(n, 5)
    y = a @ xp.asarray(x)
    assert isinstance(y, xp.Array) and y.shape == (m,) and y.dtype == np.dtype(dtype)
    check(y, ref @ x.astype(wide(dtype)), dtype, n)
    check(a.dot(xp.asarray(x)), ref @ x.astype(wide(dtype)), dtype, n)
    check(a * xp.asarray(x), ref @ x.astype(wide(dtype)), dtype, n)  # spmatrix: '*' is @
    c = a @ xp.asarray(b)
    assert c.shape == (m, 5)
    check(c, ref @ b.astype(wide(dtype)), dtype, n)
    check(a @ xp.asarray(b)[:, ::2], ref @ b[:, ::2].astype(wide(dtype)), dtype, n)
    # on the left: x^T A and B^T A
    xl = values(rng, m, dtype)
    bl = values(rng, 3 * m, dtype).reshape(3, m)
    check(xp.asarray(xl) @ a, xl.astype(wide(dtype)) @ ref, dtype, m)
    check(xp.asarray(bl) @ a, bl.astype(wide(dtype)) @ ref, dtype, m)


def test_products_promote_and_check(xp, rng) -> None:
    a, ref = _matrix(rng, "csr", "float32")
    x = values(rng, ref.shape[1], "float64")
    y = a @ xp.asarray(x)
    assert y.dtype == np.float64
    check(y, ref @ x, "float32", 14)
    z = a @ xp.asarray(values(rng, ref.shape[1], "complex64"))
    assert z.dtype == np.complex64
    xi = xp.asarray(np.arange(ref.shape[1], dtype=np.int32))
    check(a @ xi, ref @ np.arange(ref.shape[1]), "float32", 14)
    with pytest.raises(ValueError):
        a @ xp.ones(3)
    with pytest.raises(ValueError):
        a @ xp.ones((2, 2, 2))
    with pytest.raises(ValueError):
        a @ 2.0
    with pytest.raises(TypeError):
        a @ np.ones(ref.shape[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fa,fb", [("csr", "csr"), ("csc", "coo"), ("coo", "csr")])
def test_sparse_times_sparse(xp, rng, dtype, fa, fb) -> None:
    a, ra = _matrix(rng, fa, dtype, 12, 15, 50)
    b, rb = _matrix(rng, fb, dtype, 15, 9, 40)
    c = a @ b
    assert c.format == "csr" and c.shape == (12, 9) and c.dtype == np.dtype(dtype)
    check(c.todense(), ra @ rb, dtype, 15)
    check((a * b).todense(), ra @ rb, dtype, 15)
    check((a @ a.T).todense(), ra @ ra.T, dtype, 15)
    empty = sparse.csr_matrix((15, 4), dtype=dtype)
    z = a @ empty
    assert z.shape == (12, 4) and z.nnz == 0
    with pytest.raises(ValueError):
        a @ a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_sums(xp, rng, dtype, fmt) -> None:
    a, ref = _matrix(rng, fmt, dtype)
    s = a.sum()
    assert s.shape == () and s.dtype == np.dtype(dtype)
    whole, cols, rows = sum_cond(ref), sum_cond(ref, 0), sum_cond(ref, 1)
    check(s, ref.sum(), dtype, a.nnz, cond=whole)
    s0, s1 = a.sum(axis=0), a.sum(axis=1)
    assert s0.shape == (1, ref.shape[1]) and s1.shape == (ref.shape[0], 1)
    check(s0, np.asarray(ref.sum(axis=0)), dtype, ref.shape[0], cond=cols)
    check(s1, np.asarray(ref.sum(axis=1)), dtype, ref.shape[1], cond=rows)
    check(a.sum(axis=-1), np.asarray(ref.sum(axis=1)), dtype, ref.shape[1], cond=rows)
    check(a.mean(axis=0), np.asarray(ref.mean(axis=0)), dtype, ref.shape[0], cond=cols)
    check(a.mean(), ref.mean(), dtype, a.nnz, cond=whole)
    with pytest.raises(ValueError):
        a.sum(axis=2)
    e = sparse.csr_matrix((3, 4), dtype=dtype)
    np.testing.assert_array_equal(np.asarray(e.sum(axis=0)), np.zeros((1, 4)))
    assert float(abs(e.sum())) == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_scalar_arithmetic(xp, rng, dtype, fmt) -> None:
    a, ref = _matrix(rng, fmt, dtype)
    for got, want in ((a * 2.5, ref * 2.5), (-1.5 * a, ref * -1.5), (a / 4.0, ref / 4.0),
                      (-a, -ref), (+a, ref), (a * np.float32(3), ref * 3),
                      (a.multiply(0.5), ref * 0.5), (a * 2, ref * 2)):
        assert got.format == fmt and got.dtype == np.dtype(dtype)
        check(got.todense(), want, dtype, 4)
    c = a * (1 - 2j)
    assert c.dtype.kind == "c"
    check(c.todense(), ref * (1 - 2j), dtype, 4)
    check((a / 2j).todense(), ref / 2j, dtype, 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fa,fb", [("csr", "csr"), ("csc", "csc"), ("coo", "csr"),
                                   ("csr", "coo"), ("coo", "coo")])
def test_sum_and_difference_of_matrices(xp, rng, dtype, fa, fb) -> None:
    a, ra = _matrix(rng, fa, dtype)
    b, rb = _matrix(rng, fb, dtype)
    s = a + b
    assert s.format == ("csc" if fa == fb == "csc" else "csr") and s.has_canonical_format
    check(s.todense(), ra + rb, dtype, 4)
    check((a - b).todense(), ra - rb, dtype, 4)
    check((a + a).todense(), 2 * ra, dtype, 4)
    check((a - a).todense(), 0 * ra.toarray(), dtype, 4)
    # the result is a proper matrix: each position once, sorted
    host = s.get()
    n_before = host.nnz
    host.sum_duplicates()
    assert host.nnz == n_before


def test_sums_with_dense_arrays_and_scalars(xp, rng) -> None:
    a, ref = _matrix(rng, "csr", "float64")
    d = values(rng, ref.shape[0] * ref.shape[1], "float64").reshape(ref.shape)
    got = a + xp.asarray(d)
    assert isinstance(got, xp.Array)
    check(got, ref.toarray() + d, "float64", 2)
    check(xp.asarray(d) + a, ref.toarray() + d, "float64", 2)
    check(a - xp.asarray(d), ref.toarray() - d, "float64", 2)
    check(xp.asarray(d) - a, d - ref.toarray(), "float64", 2)
    check((a + 0).todense(), ref, "float64")
    with pytest.raises(NotImplementedError):
        a + 1.0
    with pytest.raises(ValueError):
        a + sparse.csr_matrix((3, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_multiply(xp, rng, dtype) -> None:
    a, ra = _matrix(rng, "coo", dtype)
    b, rb = _matrix(rng, "csc", dtype)
    d = values(rng, ra.shape[0] * ra.shape[1], dtype).reshape(ra.shape)
    got = a.multiply(xp.asarray(d))
    assert got.format == "csr"
    check(got.todense(), ra.multiply(d.astype(wide(dtype))), dtype, 2)
    check(a.multiply(b).todense(), ra.multiply(rb), dtype, 2)
    with pytest.raises(ValueError):
        a.multiply(xp.ones((2, 2), dtype=dtype))
    with pytest.raises(TypeError):
        a.multiply("x")


@pytest.mark.parametrize("k", [0, 2, -3, 20])
def test_diagonal(xp, rng, k) -> None:
    a, ref = _matrix(rng, "coo", "complex128")
    got = a.diagonal(k)
    check(got, ref.diagonal(k), "complex128", 4)


def test_arrays_of_another_device_are_refused(xp, rng, dev) -> None:
    import gpumsg

    a, _ = _matrix(rng, "csr", "float64")
    other = gpumsg.open_device(0, backend="sim")
    try:
        x = xp.ones(a.shape[1], device=other)
        with pytest.raises(InvalidMessage) as e:
            a @ x
        assert e.value.field == "device"
        with pytest.raises(InvalidMessage):
            sparse.csr_matrix((xp.ones(2), xp.asarray([0, 1]), xp.asarray([0, 1, 2])),
                              device=other)
    finally:
        other.close()


def test_writes_into_the_arrays_are_seen(xp, rng) -> None:
    """A matrix's arrays written in place after a product: the next product sees the new
    values (its kept descriptor points at the same buffers; a canonical form is made anew)."""
    vals, r, c = entries(rng, 9, 7, 30, "float64")
    x = values(rng, 7, "float64")
    for fmt in ("coo", "csr"):
        a = sparse.coo_matrix((vals, (r, c)), shape=(9, 7))
        if fmt == "csr":
            a = a.tocsr()
        check(a @ xp.asarray(x), reference(vals, r, c, (9, 7), "float64") @ x, "float64", 7)
        a.data[...] = 2.0
        host = a.get()
        check(a @ xp.asarray(x), host @ x, "float64", 7)
        check(a.todense(), host, "float64")


def test_copy_is_deep(xp, rng) -> None:
    a, ref = _matrix(rng, "csr", "float64")
    b = a.copy()
    b.data[...] = 0.0
    b.indices[...] = 0
    check(a.todense(), ref, "float64", 4)
    c = a.tocoo().copy()
    c.row[...] = 0
    check(a.todense(), ref, "float64", 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_first_product_of_a_matrix_over_computed_arrays(xp, rng, dtype) -> None:
    """A matrix made over index and value arrays that kernels computed just before, each row
    holding one entry (a permutation matrix scaled), answers its first SpMV right: the shape of
    the product that once gave a wrong last row on a GPU."""
    k = 32
    perm = rng.permutation(k)
    vals = values(rng, k, dtype)
    ptr = xp.astype(xp.arange(k + 1, dtype=xp.int64), xp.int32)
    idx = xp.astype(xp.asarray(perm.astype(np.int64)) + 0, xp.int32)
    val = xp.asarray(vals) * 1
    a = sparse.csr_matrix((val, idx, ptr), shape=(k, k))
    x = values(rng, k, dtype)
    check(a @ xp.asarray(x), vals.astype(wide(dtype)) * x[perm].astype(wide(dtype)), dtype, 1)


@pytest.mark.gpu
def test_the_first_product_of_a_later_devices_handle() -> None:
    """In a fresh process, the two tests above in this order and with this seed: cuSPARSE's
    first SpMV on the second device's handle once wrote 0 into the last row of the product
    (CusparseHandle._scratch_spmv takes that first product now)."""
    if not CUDA_OK:
        pytest.skip("no CUDA GPU here")
    here = f"{__file__}::test_"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu",
         here + "arrays_of_another_device_are_refused[cuda]",
         here + "first_product_of_a_matrix_over_computed_arrays[cuda-complex128]"],
        env={**os.environ, "GPUMSG_TEST_SEED": "6923262388527844377"}, capture_output=True,
        text=True, timeout=600)
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-3000:]
