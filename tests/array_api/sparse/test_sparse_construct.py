"""Constructing sparse matrices: every form of SciPy's constructors, the checks on given index
arrays, and eye/identity/random/rand/diags, against scipy.sparse."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sparse_helpers import DTYPES, check, dense_of, entries, reference, scipy_matrix, values

from gpumsg.array_api import sparse
from gpumsg.errors import InvalidMessage, OutOfMemory


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_from_scipy_keeps_shape_dtype_and_values(xp, rng, dtype, fmt) -> None:
    h = scipy_matrix(rng, 23, 17, 0.2, dtype)
    cls = getattr(sparse, f"{fmt}_matrix")
    a = cls(h.asformat(fmt))
    assert (a.shape, a.dtype, a.format, a.ndim) == ((23, 17), np.dtype(dtype), fmt, 2)
    assert a.nnz == h.nnz and sparse.issparse(a) and not sparse.issparse(h)
    check(a.todense(), h, dtype)
    check(dense_of(a), h, dtype)
    assert type(a.get()) is type(h.asformat(fmt))


def test_from_scipy_sums_repeats_and_takes_a_dtype(xp, rng) -> None:
    vals, r, c = entries(rng, 12, 9, 40, "float64")
    h = sp.csr_matrix((vals, (r, c)), shape=(12, 9))
    h.has_canonical_format = False
    a = sparse.csr_matrix(h, dtype=np.float32)
    assert a.dtype == np.float32 and a.has_canonical_format
    check(a.todense(), reference(vals, r, c, (12, 9), "float64"), "float32")
    with pytest.raises(InvalidMessage) as e:
        sparse.csr_matrix(sp.csr_matrix(np.eye(3, dtype=np.int64)))
    assert e.value.field == "dtype"
    with pytest.raises(TypeError):
        sparse.csr_matrix(scipy_matrix(rng, 4, 4, 0.5, "complex64"), dtype=np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_from_a_dense_device_array(xp, rng, dtype, fmt) -> None:
    dense = values(rng, 11 * 7, dtype).reshape(11, 7)
    dense[rng.random(dense.shape) < 0.6] = 0
    dense[3] = 0  # an empty row
    a = getattr(sparse, f"{fmt}_matrix")(xp.asarray(dense))
    assert a.nnz == np.count_nonzero(dense) and a.shape == (11, 7)
    check(a.todense(), dense, dtype)
    check(dense_of(a), dense, dtype)
    b = sparse.csr_matrix(xp.asarray(dense)[::2, 1:])  # a strided view
    check(b.todense(), dense[::2, 1:], dtype)


def test_from_host_arrays_and_shapes(xp, rng) -> None:
    dense = values(rng, 20, "float64").reshape(4, 5)
    dense[1] = 0
    for fmt in ("csr", "csc", "coo"):
        cls = getattr(sparse, f"{fmt}_matrix")
        check(cls(dense).todense(), dense, "float64")
        check(cls(dense.tolist()).todense(), dense, "float64")
        empty = cls((3, 6), dtype=np.complex64)
        assert empty.shape == (3, 6) and empty.nnz == 0 and empty.dtype == np.complex64
        np.testing.assert_array_equal(np.asarray(empty.todense()), np.zeros((3, 6)))
    assert sparse.csr_matrix((2, 2)).dtype == np.float64


@pytest.mark.parametrize("on_device", [False, True])
def test_from_compressed_arrays_taken_as_given(xp, rng, on_device) -> None:
    vals, r, c = entries(rng, 9, 13, 30, "float64")
    ref = reference(vals, r, c, (9, 13), "float64")
    # CSR arrays with unsorted columns and repeats, as a caller may hand them over
    order = np.argsort(r, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=9))])
    parts = (vals[order], c[order].astype(np.int32), indptr.astype(np.int32))
    if on_device:
        parts = tuple(xp.asarray(p) for p in parts)
    a = sparse.csr_matrix(parts, shape=(9, 13))
    assert a.nnz == 30 and not a.has_canonical_format
    check(a.todense(), ref, "float64")
    check(a @ xp.asarray(np.arange(13.0)), ref @ np.arange(13.0), "float64", 13)
    inferred = sparse.csr_matrix(parts)  # rows from indptr, columns from the largest index
    assert inferred.shape == (9, int(c.max()) + 1)
    # the same arrays read as CSC are the transpose
    t = sparse.csc_matrix(parts, shape=(13, 9))
    check(t.todense(), ref.T, "float64")
    a.sum_duplicates()
    assert a.has_canonical_format and a.nnz == ref.nnz
    check(dense_of(a), ref, "float64")


def test_given_arrays_are_checked(xp) -> None:
    data = np.array([1.0, 2.0, 3.0])
    with pytest.raises(InvalidMessage) as e:
        sparse.csr_matrix((data, np.array([0, 1, 5]), np.array([0, 2, 3])), shape=(2, 4))
    assert e.value.field == "indices"
    with pytest.raises(InvalidMessage) as e:
        sparse.csr_matrix((data, np.array([0, 1, 2]), np.array([0, 2, 4])), shape=(2, 4))
    assert e.value.field == "indptr"
    with pytest.raises(InvalidMessage) as e:
        sparse.csr_matrix((data, np.array([0, 1, 2]), np.array([0, 2, 1, 3])), shape=(3, 4))
    assert e.value.field == "indptr"
    with pytest.raises(InvalidMessage) as e:
        sparse.csr_matrix((data, np.array([0, 1]), np.array([0, 2, 3])), shape=(2, 4))
    assert e.value.field == "indices"
    with pytest.raises(InvalidMessage) as e:
        sparse.coo_matrix((data, (np.array([0, 1, 3]), np.array([0, 0, 0]))), shape=(3, 4))
    assert e.value.field == "row"
    with pytest.raises(InvalidMessage) as e:
        sparse.coo_matrix((data, (np.array([0, 1, 2]), np.array([0, -1, 0]))), shape=(3, 4))
    assert e.value.field == "col"
    with pytest.raises(InvalidMessage) as e:
        sparse.coo_matrix((data, (np.array([0.5, 1, 2]), np.array([0, 1, 0]))))
    assert e.value.field == "row"
    with pytest.raises(InvalidMessage):
        sparse.csr_matrix((data, np.array([0, 1, 2])))
    with pytest.raises(InvalidMessage):
        sparse.csr_matrix(np.ones((2, 2, 2)))
    with pytest.raises(InvalidMessage) as e:
        sparse.csr_matrix(np.eye(3), shape=(3, 4))
    assert e.value.field == "shape"


@pytest.mark.parametrize("dtype", DTYPES)
def test_coo_from_entries_keeps_them_and_infers_the_shape(xp, rng, dtype) -> None:
    vals, r, c = entries(rng, 15, 8, 50, dtype)
    a = sparse.coo_matrix((vals, (r, c)))
    assert a.shape == (int(r.max()) + 1, int(c.max()) + 1) and a.nnz == 50
    ref = reference(vals, r, c, a.shape, dtype)
    np.testing.assert_array_equal(np.asarray(a.row), r)
    np.testing.assert_array_equal(np.asarray(a.col), c)
    check(a.todense(), ref, dtype)
    d = sparse.coo_matrix((xp.asarray(vals), (xp.asarray(r), xp.asarray(c))), shape=(20, 9))
    assert d.shape == (20, 9)
    check(d.todense(), reference(vals, r, c, (20, 9), dtype), dtype)
    csr = sparse.csr_matrix((vals, (r, c)), shape=(15, 8))  # SciPy's COO form of csr_matrix
    check(csr.todense(), reference(vals, r, c, (15, 8), dtype), dtype)


def test_copy_and_astype(xp, rng) -> None:
    h = scipy_matrix(rng, 6, 6, 0.5, "float64")
    data = xp.asarray(h.data)
    a = sparse.csr_matrix((data, h.indices, h.indptr), shape=(6, 6))
    b = sparse.csr_matrix((data, h.indices, h.indptr), shape=(6, 6), copy=True)
    data[...] = 0.0  # the shared array changes the first matrix only
    assert float(xp.sum(xp.abs(a.todense()))) == 0.0
    check(b.todense(), h, "float64")
    c = b.astype(np.complex64)
    assert c.dtype == np.complex64
    check(c.todense(), h, "complex64")
    with pytest.raises(TypeError):
        c.astype(np.float32)
    with pytest.raises(InvalidMessage):
        b.astype(np.int32)
    d = sparse.csc_matrix(b, dtype=np.float32)
    assert d.format == "csc" and d.dtype == np.float32
    check(d.todense(), h, "float32")


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_eye_and_identity(xp, fmt) -> None:
    for m, n, k in ((5, 5, 0), (4, 7, 2), (6, 3, -1), (3, 3, 5), (0, 2, 0)):
        a = sparse.eye(m, n, k=k, dtype=np.float32, format=fmt)
        assert a.format == fmt and a.dtype == np.float32 and a.shape == (m, n)
        np.testing.assert_array_equal(np.asarray(a.todense()), np.eye(m, n, k))
    i = sparse.identity(4, dtype=np.complex128)
    assert i.format == "csr"
    np.testing.assert_array_equal(np.asarray(i.todense()), np.eye(4))
    with pytest.raises(ValueError):
        sparse.eye(3, format="dia")


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_random_is_scipys_matrix(xp, fmt) -> None:
    a = sparse.random(30, 20, density=0.1, format=fmt, dtype=np.float32, random_state=7)
    h = sp.random(30, 20, density=0.1, format="csr", dtype=np.float32, random_state=7)
    assert a.format == fmt and a.nnz == h.nnz == 60 and a.dtype == np.float32
    check(a.todense(), h, "float32")
    b = sparse.rand(10, 10, density=0.3, random_state=np.random.default_rng(3))
    assert b.format == "coo" and b.nnz == 30 and b.dtype == np.float64


def test_diags(xp, rng) -> None:
    d0, d1 = values(rng, 6, "float64"), values(rng, 5, "float64")
    a = sparse.diags([d0, xp.asarray(d1)], [0, 1])
    ref = sp.diags([d0, d1], [0, 1])
    assert a.format == "csr" and a.shape == (6, 6)
    check(a.todense(), ref, "float64")
    b = sparse.diags(xp.asarray(d1), -2, shape=(7, 7), format="coo", dtype=np.complex64)
    check(b.todense(), sp.diags(d1, -2, shape=(7, 7)), "complex64")
    c = sparse.diags([1, 2, 3])
    assert c.dtype == np.float64


def test_matrices_too_large_for_the_device_are_refused_before_the_host_builds_them(xp) -> None:
    """SciPy lays random and diags matrices out in host memory before they are uploaded: one
    that no device could hold is refused first (terabytes of host memory otherwise), and the
    device keeps serving."""
    too_many = [lambda: sparse.random(2 ** 20, 2 ** 20, density=0.5),
                lambda: sparse.rand(2 ** 31, 2 ** 31, density=1e-6),
                lambda: sparse.diags([1.0], [0], shape=(2 ** 40, 2 ** 40)),
                lambda: sparse.diags([1.0, 2.0], [0, -3], shape=(2 ** 38, 2 ** 39))]
    for make in too_many:
        with pytest.raises(OutOfMemory):
            make()
    a = sparse.diags([1.0, 2.0], [0, -3], shape=(8, 9))  # the same laid out small still works
    check(a.todense(), sp.diags([1.0, 2.0], [0, -3], shape=(8, 9)), "float64")
    with pytest.raises(ValueError):
        sparse.random(5, 5, density=2.0)  # SciPy's own refusal, as before


def test_repr_and_scalar_protocols(xp) -> None:
    a = sparse.csr_matrix(np.eye(3))
    assert "3x3" in repr(a) and "Compressed Sparse Row" in repr(a)
    with pytest.raises(TypeError):
        len(a)
    with pytest.raises(ValueError):
        bool(a)
    assert bool(sparse.csr_matrix(np.ones((1, 1))))
    assert not bool(sparse.csr_matrix((1, 1)))


def test_given_arrays_are_recognised_as_canonical_or_not(xp, rng) -> None:
    h = scipy_matrix(rng, 12, 9, 0.3, "float64")
    a = sparse.csr_matrix((xp.asarray(h.data), xp.asarray(h.indices), xp.asarray(h.indptr)),
                          shape=h.shape)
    assert a.has_canonical_format  # sorted, no repeats: products take the arrays as they are
    swapped = h.indices.copy()
    row = int(np.argmax(np.diff(h.indptr) >= 2))
    s = h.indptr[row]
    swapped[s], swapped[s + 1] = swapped[s + 1], swapped[s]
    b = sparse.csr_matrix((h.data, swapped, h.indptr), shape=h.shape)
    assert not b.has_canonical_format
    twice = h.indices.copy()
    twice[s + 1] = twice[s]
    assert not sparse.csr_matrix((h.data, twice, h.indptr), shape=h.shape).has_canonical_format
    c = h.tocoo()
    assert sparse.coo_matrix((c.data, (c.row, c.col)), shape=h.shape).has_canonical_format
    order = rng.permutation(c.nnz)
    d = sparse.coo_matrix((c.data[order], (c.row[order], c.col[order])), shape=h.shape)
    assert not d.has_canonical_format or (order == np.arange(c.nnz)).all()
    check(d.todense(), h, "float64")
