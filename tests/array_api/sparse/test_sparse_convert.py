"""Conversions between CSR, CSC and COO (each direction, on the device), todense, transposes and
the canonical form, against scipy.sparse on random entries in random order with repeated
positions, empty rows and columns, and matrices without entries."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sparse_helpers import DTYPES, check, dense_of, entries, reference, scipy_matrix, values

from gpumsg.array_api import sparse

FORMATS = ["csr", "csc", "coo"]


def _matrix(rng, fmt: str, dtype: str, m: int = 17, n: int = 13, nnz: int = 60):
    """A matrix of ``fmt`` from repeated, unordered entries, and its float64 reference."""
    vals, r, c = entries(rng, m, n, nnz, dtype)
    ref = reference(vals, r, c, (m, n), dtype)
    coo = sparse.coo_matrix((vals, (r, c)), shape=(m, n))
    return coo.asformat(fmt), ref


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("src,dst", list(itertools.product(FORMATS, FORMATS)))
def test_every_conversion(xp, rng, dtype, src, dst) -> None:
    a, ref = _matrix(rng, src, dtype)
    b = a.asformat(dst)
    assert b.format == dst and b.shape == a.shape and b.dtype == a.dtype
    check(dense_of(b), ref, dtype, 4)  # the arrays themselves, read back
    check(b.todense(), ref, dtype, 4)
    back = b.asformat(src)
    check(back.todense(), ref, dtype, 4)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_compressed_results_are_canonical(xp, rng, fmt) -> None:
    a, ref = _matrix(rng, "coo", "float64")
    b = a.asformat(fmt)
    assert b.has_canonical_format and b.nnz == ref.nnz
    host = b.get()
    assert host.has_sorted_indices
    host.sum_duplicates()
    assert host.nnz == b.nnz  # no repeated positions left
    ind = np.asarray(b.indptr)
    assert ind[0] == 0 and ind[-1] == b.nnz and (np.diff(ind) >= 0).all()


def test_csr_csc_round_trip_through_cusparse(xp, rng, dev, posted) -> None:
    from gpumsg.messages.cusparse import SparseConvert

    h = scipy_matrix(rng, 40, 25, 0.15, "complex64")
    a = sparse.csr_matrix(h)
    sent = posted(dev, SparseConvert)
    c = a.tocsc()
    back = c.tocsr()
    assert len(sent) == 2  # cusparseCsr2cscEx2 both ways
    np.testing.assert_array_equal(np.asarray(c.indptr), h.tocsc().indptr)
    np.testing.assert_array_equal(np.asarray(c.indices), h.tocsc().indices)
    check(c.data, h.tocsc().data, "complex64")
    check(dense_of(back), h, "complex64")


@pytest.mark.parametrize("fmt", FORMATS)
def test_coo_canonical_form_sums_repeats(xp, rng, fmt) -> None:
    vals, r, c = entries(rng, 8, 8, 45, "float64")
    a = sparse.coo_matrix((vals, (r, c)), shape=(8, 8))
    assert not a.has_canonical_format and a.nnz == 45
    ref = reference(vals, r, c, (8, 8), "float64")
    a.sum_duplicates()
    assert a.has_canonical_format and a.nnz == ref.nnz
    keys = np.asarray(a.row).astype(np.int64) * 8 + np.asarray(a.col)
    assert (np.diff(keys) > 0).all()  # sorted by row, then column, each position once
    check(dense_of(a), ref, "float64")
    check(a.asformat(fmt).todense(), ref, "float64")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(5, 4), (0, 3), (3, 0)])
def test_without_entries(xp, fmt, shape) -> None:
    a = getattr(sparse, f"{fmt}_matrix")(shape, dtype=np.float32)
    for dst in FORMATS:
        b = a.asformat(dst)
        assert b.nnz == 0 and b.shape == shape
        np.testing.assert_array_equal(np.asarray(b.todense()), np.zeros(shape))
    np.testing.assert_array_equal(np.asarray(a.T.todense()), np.zeros(shape[::-1]))
    x = xp.ones(shape[1], dtype=xp.float32)
    np.testing.assert_array_equal(np.asarray(a @ x), np.zeros(shape[0]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_transpose_conj_and_hermitian(xp, rng, dtype, fmt) -> None:
    a, ref = _matrix(rng, fmt, dtype)
    t = a.T
    assert t.shape == ref.shape[::-1]
    assert t.format == {"csr": "csc", "csc": "csr", "coo": "coo"}[fmt]
    check(t.todense(), ref.T, dtype, 4)
    check(a.transpose().tocsr().todense(), ref.T, dtype, 4)
    check(a.conj().todense(), ref.conj(), dtype, 4)
    check(a.conjugate().todense(), ref.conj(), dtype, 4)
    check(a.H.todense(), ref.conj().T, dtype, 4)
    check(a.getH().todense(), ref.conj().T, dtype, 4)
    check(a.T.T.todense(), ref, dtype, 4)
    with pytest.raises(ValueError):
        a.transpose(axes=(1, 0))


def test_asformat_copy_and_errors(xp, rng) -> None:
    a, ref = _matrix(rng, "csr", "float64")
    assert a.asformat("csr") is a and a.tocsr() is a
    b = a.asformat("csr", copy=True)
    assert b is not a
    check(b.todense(), ref, "float64", 4)
    with pytest.raises(ValueError):
        a.asformat("bsr")
    with pytest.raises(ValueError):
        a.todense(order="F")


def test_todense_answers_an_array_of_the_namespace(xp, rng) -> None:
    a, ref = _matrix(rng, "coo", "float32")
    d = a.todense()
    assert isinstance(d, xp.Array) and d.shape == ref.shape and d.dtype == xp.float32
    check(a.toarray() + 1, ref.toarray() + 1, "float32", 4)


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_many_entries(xp, rng, dtype) -> None:
    """Tens of thousands of unordered, repeated entries: the device sort is not limited to
    one block's worth."""
    m, n = 700, 500
    vals, r, c = entries(rng, m, n, 30000, dtype)
    ref = reference(vals, r, c, (m, n), dtype)
    a = sparse.coo_matrix((vals, (r, c)), shape=(m, n))
    for fmt in ("csr", "csc"):
        b = a.asformat(fmt)
        assert b.nnz == ref.nnz and b.has_canonical_format
        check(dense_of(b), ref, dtype, 8)
    x = values(rng, n, dtype)
    check(a @ xp.asarray(x), ref @ x.astype(ref.dtype), dtype, 200)
    check((a + a.T.T).todense(), 2 * ref, dtype, 8)
