"""spsolve (cuSOLVER's sparse QR) against NumPy's dense solve in float64, and matrices with
64-bit indices through every operation that takes them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sparse_helpers import DTYPES, check, entries, reference, scipy_matrix, values, wide

from gpumsg.array_api import sparse
from gpumsg.array_api.sparse.linalg import MatrixRankWarning, spsolve
from gpumsg.errors import InvalidMessage
from tests.tolerance import assert_rel


def _system(rng, n: int, dtype: str):
    h = scipy_matrix(rng, n, n, 0.15, dtype)
    h = (h + 4 * sp.eye(n, dtype=dtype)).tocsr()  # well conditioned
    dense = h.toarray().astype(wide(dtype))
    return h, dense, np.linalg.cond(dense)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_spsolve_vector_and_matrix(xp, rng, dtype, fmt) -> None:
    n = 31
    h, dense, cond = _system(rng, n, dtype)
    a = sparse.csr_matrix(h).asformat(fmt)
    b = values(rng, n, dtype)
    x = spsolve(a, xp.asarray(b))
    assert x.shape == (n,) and x.dtype == np.dtype(dtype)
    assert_rel(np.asarray(x), np.linalg.solve(dense, b.astype(wide(dtype))), dtype, n=n,
               cond=cond, c=16.0)
    bm = values(rng, n * 3, dtype).reshape(n, 3)
    xm = sparse.linalg.spsolve(a, xp.asarray(bm))
    assert xm.shape == (n, 3)
    assert_rel(np.asarray(xm), np.linalg.solve(dense, bm.astype(wide(dtype))), dtype, n=n,
               cond=cond, c=16.0)


def test_spsolve_from_unordered_entries_promotes(xp, rng) -> None:
    vals, r, c = entries(rng, 20, 20, 60, "float32")
    diag = np.arange(20)
    vals = np.concatenate([vals, np.full(20, 6.0, np.float32)])
    r, c = np.concatenate([r, diag]), np.concatenate([c, diag])
    a = sparse.coo_matrix((vals, (r, c)), shape=(20, 20))
    ref = reference(vals, r, c, (20, 20), "float32").toarray()
    b = values(rng, 20, "complex128")
    x = spsolve(a, xp.asarray(b))
    assert x.dtype == np.complex128
    assert_rel(np.asarray(x), np.linalg.solve(ref, b), "float32", n=20,
               cond=np.linalg.cond(ref), c=16.0)


def test_spsolve_of_a_singular_matrix_warns_and_answers_nan(xp, rng) -> None:
    h, _, _ = _system(rng, 10, "float64")
    h = h.tolil()
    h[:, 3] = 0
    h = sp.csr_matrix(h)
    h.eliminate_zeros()
    with pytest.warns(MatrixRankWarning):
        x = spsolve(sparse.csr_matrix(h), xp.ones(10))
    assert np.isnan(np.asarray(x)).all()
    with pytest.warns(MatrixRankWarning):
        spsolve(sparse.csr_matrix((4, 4)), xp.ones(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = spsolve(sparse.eye(4) * 2, xp.ones(4), tol=1e-3)
    np.testing.assert_allclose(np.asarray(x), np.full(4, 0.5))


def test_spsolve_checks(xp, rng) -> None:
    a = sparse.eye(4)
    with pytest.raises(ValueError):
        spsolve(sparse.csr_matrix((3, 4)), xp.ones(3))
    with pytest.raises(ValueError):
        spsolve(a, xp.ones(5))
    with pytest.raises(TypeError):
        spsolve(a, np.ones(4))
    with pytest.raises(TypeError):
        spsolve(np.eye(4), xp.ones(4))
    with pytest.raises(InvalidMessage):
        spsolve(a, xp.ones(4), tol=-1.0)
    assert spsolve(sparse.csr_matrix((0, 0)), xp.ones(0)).shape == (0,)


def test_index_types(xp, rng) -> None:
    """Indices given as int64 are checked, then held as int32 (as CuPy holds them) where the
    matrix fits; a matrix holding int64 indices (what one beyond 2**31 - 1 needs) computes its
    products and conversions the same."""
    vals, r, c = entries(rng, 16, 12, 50, "float64")
    ref = reference(vals, r, c, (16, 12), "float64")
    coo = sparse.coo_matrix((xp.asarray(vals), (xp.asarray(r), xp.asarray(c))), shape=(16, 12))
    h = ref.tocsr()
    csr = sparse.csr_matrix((xp.asarray(h.data), xp.asarray(h.indices.astype(np.int64)),
                             xp.asarray(h.indptr.astype(np.int64))), shape=(16, 12))
    assert csr.indices.dtype == np.int32 and coo.row.dtype == np.int32
    wide64 = csr._as_index(np.dtype(np.int64))
    assert wide64.indices.dtype == wide64.indptr.dtype == np.int64
    for m in (coo, csr, wide64):
        for fmt in ("csr", "csc", "coo"):
            check(m.asformat(fmt).todense(), ref, "float64", 4)
        x = values(rng, 12, "float64")
        check(m @ xp.asarray(x), ref @ x, "float64", 12)
        b = values(rng, 24, "float64").reshape(12, 2)
        check(m @ xp.asarray(b), ref @ b, "float64", 12)
        check(m.sum(axis=0), np.asarray(ref.sum(axis=0)), "float64", 16)
        check((m @ m.T).todense(), ref @ ref.T, "float64", 12)
        check((m + csr).todense(), ref + ref, "float64", 4)
    g, dense, cond = _system(rng, 12, "float64")
    sq = sparse.csr_matrix(g)._as_index(np.dtype(np.int64))
    assert_rel(np.asarray(spsolve(sq, xp.ones(12))), np.linalg.solve(dense, np.ones(12)),
               "float64", n=12, cond=cond, c=16.0)
