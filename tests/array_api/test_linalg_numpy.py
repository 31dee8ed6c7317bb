"""numpy.linalg's functions on arrays, against NumPy float64: stacks and single matrices,
float32/64 and complex64/128, matrices on both sides of the batched Jacobi limit (32)."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values

import gpumsg.array_api as xpm
from gpumsg.array_api import _solvers as solvers

DTYPES = ["float32", "float64", "complex64", "complex128"]
NUMPY_LINALG = ["cholesky", "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals",
                "eigvalsh", "inv", "lstsq", "matmul", "matrix_norm", "matrix_power",
                "matrix_rank", "matrix_transpose", "multi_dot", "norm", "outer", "pinv", "qr",
                "slogdet", "solve", "svd", "svdvals", "tensordot", "tensorinv", "tensorsolve",
                "trace", "vecdot", "vector_norm"]


def _tol(dt) -> float:
    return 2e-3 if np.dtype(dt) in (np.float32, np.complex64) else 1e-9


def _wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _conditioned(rng, shape, dt) -> np.ndarray:
    """Random, well-conditioned square matrices (a dominant diagonal), never zeros."""
    a = random_values(rng, shape, dt, False) / 3
    return (a + 4 * np.eye(shape[-1])).astype(dt)


def _hermitian(rng, shape, dt) -> np.ndarray:
    a = random_values(rng, shape, dt, False)
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dt)


def _close(got, ref, tol) -> None:
    got = np.asarray(got)
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    np.testing.assert_allclose(_wide(got), ref, rtol=tol, atol=tol)


def test_all_of_numpy_linalg(xp) -> None:
    assert sorted(NUMPY_LINALG) == NUMPY_LINALG and len(NUMPY_LINALG) == 31
    for name in NUMPY_LINALG:
        assert callable(getattr(xp.linalg, name)), name
    assert issubclass(xp.linalg.LinAlgError, Exception)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 5), (3, 2, 6, 6), (4, 40, 40)])
def test_inverse_and_solve(xp, rng, dtype, shape) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    a = _conditioned(rng, shape, dt)
    x = xp.asarray(a)
    tol = _tol(dt)
    _close(xp.linalg.inv(x), np.linalg.inv(_wide(a)), tol)
    b = random_values(rng, shape[:-1] + (3,), dt, False)
    _close(xp.linalg.solve(x, xp.asarray(b)), np.linalg.solve(_wide(a), _wide(b)), tol)
    v = random_values(rng, shape[-1:], dt, False)
    _close(xp.linalg.solve(x, xp.asarray(v)), np.linalg.solve(_wide(a), _wide(v)), tol)
    _close(xp.linalg.det(x), np.linalg.det(_wide(a)), tol * np.abs(np.linalg.det(_wide(a))).max())
    _close(xp.linalg.cholesky(xp.asarray(_spd(rng, shape, dt))),
           np.linalg.cholesky(_wide(_spd(rng, shape, dt, again=True))), tol)


def _spd(rng, shape, dt, again: bool = False) -> np.ndarray:
    """A Hermitian positive definite stack, the same one on the second call of a test."""
    if again:
        return _spd.last
    a = random_values(rng, shape, dt, False) / np.sqrt(shape[-1])
    _spd.last = (a @ np.conj(np.swapaxes(a, -1, -2)) + np.eye(shape[-1])).astype(dt)
    return _spd.last


def test_broadcast_solve_and_views(xp, rng) -> None:
    a = _conditioned(rng, (3, 1, 7, 7), np.float64)
    b = random_values(rng, (4, 7, 2), np.float64, False)
    got = xp.linalg.solve(xp.asarray(a), xp.asarray(b))
    _close(got, np.linalg.solve(a, b), 1e-9)
    big = _conditioned(rng, (2, 5, 5), np.float64)
    _close(xp.linalg.inv(xp.asarray(big)[:, ::-1].mT),
           np.linalg.inv(np.swapaxes(big[:, ::-1], -1, -2)), 1e-9)


def test_singular_item_raises(xp, rng) -> None:
    a = _conditioned(rng, (3, 4, 4), np.float64)
    a[1, :, 2] = 0  # a zero column: the factors of A^T keep a zero row, an exact zero pivot
    with pytest.raises(xp.linalg.LinAlgError):
        np.asarray(xp.linalg.inv(xp.asarray(a)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 6), (3, 8, 8), (2, 2, 36, 36)])
def test_eigh(xp, rng, dtype, shape) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    h = _hermitian(rng, shape, dt)
    tol = _tol(dt) * 10
    for uplo in ("L", "U"):
        w, v = xp.linalg.eigh(xp.asarray(h), UPLO=uplo)
        ref = np.linalg.eigvalsh(_wide(h), UPLO=uplo)
        _close(w, ref, tol)
        vv = _wide(np.asarray(v))
        full = np.linalg.eigh(_wide(h), UPLO=uplo)[1]
        rebuilt = full @ (ref[..., None] * np.conj(np.swapaxes(full, -1, -2)))
        _close(vv @ (ref[..., None] * np.conj(np.swapaxes(vv, -1, -2))), rebuilt, tol)
        _close(xp.linalg.eigvalsh(xp.asarray(h), UPLO=uplo), ref, tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 4), (3, 5, 8), (2, 40, 34), (2, 33, 45)])
def test_svd(xp, rng, dtype, shape) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    a = random_values(rng, shape, dt, False)
    tol = _tol(dt) * 10
    ref = np.linalg.svd(_wide(a), compute_uv=False)
    for full in (True, False):
        u, s, vh = xp.linalg.svd(xp.asarray(a), full_matrices=full)
        ru, _, rvh = np.linalg.svd(_wide(a), full_matrices=full)
        assert np.shape(u) == ru.shape and np.shape(vh) == rvh.shape
        _close(s, ref, tol)
        uu, vv = _wide(np.asarray(u)), _wide(np.asarray(vh))
        k = ref.shape[-1]
        _close((uu[..., :, :k] * ref[..., None, :]) @ vv[..., :k, :], _wide(a), tol)
        eye_u = np.broadcast_to(np.eye(uu.shape[-1]), uu.shape[:-2] + (uu.shape[-1],) * 2)
        _close(np.conj(np.swapaxes(uu, -1, -2)) @ uu, eye_u, tol)
    _close(xp.linalg.svdvals(xp.asarray(a)), ref, tol)
    _close(xp.linalg.matrix_rank(xp.asarray(a)), np.linalg.matrix_rank(_wide(a)), 0)
    _close(xp.linalg.pinv(xp.asarray(a)), np.linalg.pinv(_wide(a)), tol * 10)
    _close(xp.linalg.cond(xp.asarray(a)), np.linalg.cond(_wide(a)), tol * 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 6), (3, 7, 7), (2, 1, 35, 35)])
def test_eig(xp, rng, dtype, shape) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    a = random_values(rng, shape, dt, False)
    tol = _tol(dt) * 10
    w, v = xp.linalg.eig(xp.asarray(a))
    assert w.dtype == (np.complex64 if dt in (np.float32, np.complex64) else np.complex128)
    ww, vv = np.asarray(w).astype(np.complex128), np.asarray(v).astype(np.complex128)
    ref = np.linalg.eigvals(_wide(a))
    scale = np.abs(ref).max()
    # the same sets (matched by distance: a sort may order near ties differently)
    gap = np.abs(ww[..., :, None] - ref[..., None, :])
    assert gap.min(-1).max() < tol * scale and gap.min(-2).max() < tol * scale
    # A v = v w, unit columns
    _close(_wide(a) @ vv, vv * ww[..., None, :], tol * scale)
    _close(np.linalg.norm(vv, axis=-2), np.ones(ww.shape), tol)
    got = np.asarray(xp.linalg.eigvals(xp.asarray(a))).astype(np.complex128)
    _close(got, ww, tol * scale)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_norm_cond_and_products(xp, rng, dtype) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    tol = _tol(dt)
    h = random_values(rng, (3, 4, 5), dt, False)
    x, hw = xp.asarray(h), _wide(h)
    la = xp.linalg
    _close(la.norm(x), np.linalg.norm(hw), tol)
    for ord_, axis in ((None, 1), (1, 0), (np.inf, -1), (3, 2), (None, (1, 2)), ("fro", (0, 2)),
                       ("nuc", (1, 2)), (2, (2, 1)), (-1, (0, 1)), (np.inf, (1, 2))):
        _close(la.norm(x, ord_, axis), np.linalg.norm(hw, ord_, axis), tol * 10)
        _close(la.norm(x, ord_, axis, keepdims=True),
               np.linalg.norm(hw, ord_, axis, keepdims=True), tol * 10)
    _close(la.norm(x[0], "nuc"), np.linalg.norm(hw[0], "nuc"), tol * 10)
    _close(la.norm(x[0, 0], 1), np.linalg.norm(hw[0, 0], 1), tol)
    sq = _conditioned(rng, (2, 4, 4), dt)
    for p in (None, 2, -2, "fro", 1, -np.inf):
        _close(la.cond(xp.asarray(sq), p), np.linalg.cond(_wide(sq), p), tol * 100)
    mats = [random_values(rng, s, dt, False) for s in ((6,), (6, 3), (3, 9), (9, 2), (2,))]
    _close(la.multi_dot([xp.asarray(m) for m in mats]), np.linalg.multi_dot(
        [_wide(m) for m in mats]), tol * 100)
    _close(la.multi_dot([xp.asarray(m) for m in mats[1:4]]), np.linalg.multi_dot(
        [_wide(m) for m in mats[1:4]]), tol * 100)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_tensor_and_lstsq(xp, rng, dtype) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    tol = _tol(dt) * 10
    a = (random_values(rng, (6, 4, 2, 3, 4), dt, False) / 5).reshape(24, 24)
    a = (a + 3 * np.eye(24)).astype(dt).reshape(6, 4, 2, 3, 4)
    b = random_values(rng, (6, 4), dt, False)
    la = xp.linalg
    _close(la.tensorsolve(xp.asarray(a), xp.asarray(b)),
           np.linalg.tensorsolve(_wide(a), _wide(b)), tol)
    moved = np.moveaxis(a, 2, 0)
    _close(la.tensorsolve(xp.asarray(moved), xp.asarray(b), axes=(0,)),
           np.linalg.tensorsolve(_wide(moved), _wide(b), axes=(0,)), tol)
    t = a.reshape(6, 4, 24)
    _close(la.tensorinv(xp.asarray(t)), np.linalg.tensorinv(_wide(t)), tol)
    m = random_values(rng, (9, 4), dt, False)
    for rhs in (random_values(rng, (9,), dt, False), random_values(rng, (9, 2), dt, False)):
        got = la.lstsq(xp.asarray(m), xp.asarray(rhs))
        ref = np.linalg.lstsq(_wide(m), _wide(rhs), rcond=None)
        for g, r in zip(got, ref):
            _close(g, r, tol)
    wide = random_values(rng, (3, 5), dt, False)  # rank 3 < N: least-norm x, no residuals
    got = la.lstsq(xp.asarray(wide), xp.asarray(rhs[:3]))
    ref = np.linalg.lstsq(_wide(wide), _wide(rhs[:3]), rcond=None)
    for g, r in zip(got, ref):
        _close(g, r, tol)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_numpy_keywords(xp, rng, dtype) -> None:
    """NumPy's extra arguments: svd(compute_uv, hermitian), qr(mode='r'),
    matrix_rank(tol, hermitian), pinv(rcond, hermitian)."""
    dt = np.dtype(getattr(xpm, dtype))
    tol = _tol(dt) * 10
    la = xp.linalg
    a = random_values(rng, (2, 6, 4), dt, False)
    x, aw = xp.asarray(a), _wide(a)
    _close(la.svd(x, False, False), np.linalg.svd(aw, compute_uv=False), tol)
    _close(np.abs(np.asarray(la.qr(x, "r"))), np.abs(np.linalg.qr(aw, "r")), tol)
    h = _hermitian(rng, (2, 5, 5), dt)
    hx, hw = xp.asarray(h), _wide(h)
    u, s, vh = la.svd(hx, hermitian=True)
    _close(s, np.linalg.svd(hw, compute_uv=False), tol)
    uu, vv = _wide(np.asarray(u)), _wide(np.asarray(vh))
    _close((uu * _wide(np.asarray(s))[..., None, :]) @ vv, hw, tol)
    _close(la.svd(hx, compute_uv=False, hermitian=True), np.linalg.svd(hw, compute_uv=False),
           tol)
    low = a.copy()
    low[0, :, 3] = low[0, :, 0]  # rank 3
    _close(la.matrix_rank(xp.asarray(low)), np.linalg.matrix_rank(_wide(low)), 0)
    _close(la.matrix_rank(xp.asarray(low), 1.0), np.linalg.matrix_rank(_wide(low), 1.0), 0)
    _close(la.matrix_rank(hx, hermitian=True), np.linalg.matrix_rank(hw, hermitian=True), 0)
    _close(la.pinv(x, 1e-3), np.linalg.pinv(aw, 1e-3), tol * 10)
    _close(la.pinv(hx, hermitian=True), np.linalg.pinv(hw, hermitian=True), tol * 10)
    with pytest.raises(ValueError):
        la.pinv(x, 1e-3, rtol=1e-3)
    with pytest.raises(ValueError):
        la.qr(x, "raw")


@pytest.mark.parametrize("dtype", DTYPES)
def test_stacked_determinants(xp, rng, dtype) -> None:
    """det and slogdet of stacks on the device, a singular item giving 0 and -inf as NumPy."""
    dt = np.dtype(getattr(xpm, dtype))
    tol = _tol(dt)
    a = random_values(rng, (3, 2, 9, 9), dt, False) / 2
    a[1, 0, 4] = 0  # an exactly zero row: a zero pivot
    x, aw = xp.asarray(a), _wide(a)
    sign, logabs = xp.linalg.slogdet(x)
    ref_sign, ref_log = np.linalg.slogdet(aw)
    _close(sign, ref_sign, tol)
    got = _wide(np.asarray(logabs))
    assert got[1, 0] == -np.inf and np.isfinite(np.delete(got.ravel(), 2)).all()
    np.testing.assert_allclose(np.delete(got.ravel(), 2), np.delete(ref_log.ravel(), 2),
                               rtol=tol, atol=tol)
    d = _wide(np.asarray(xp.linalg.det(x)))
    ref = np.linalg.det(aw)
    assert d[1, 0] == 0
    np.testing.assert_allclose(d, ref, rtol=tol * 10, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_stacks_of_large_matrices_go_one_by_one(xp, rng, monkeypatch, dtype) -> None:
    """Beyond BATCHED_MAX a stack is decomposed matrix by matrix (here with the limit lowered to
    4, so that 6 x 6 matrices take that route); the answers are NumPy's."""
    monkeypatch.setattr(solvers, "BATCHED_MAX", 4)
    dt = np.dtype(getattr(xpm, dtype))
    tol = _tol(dt) * 10
    la = xp.linalg
    a = _conditioned(rng, (2, 3, 6, 6), dt)
    x, aw = xp.asarray(a), _wide(a)
    _close(la.inv(x), np.linalg.inv(aw), tol)
    _close(la.det(x), np.linalg.det(aw), tol * np.abs(np.linalg.det(aw)).max())
    spd = _spd(rng, (2, 3, 6, 6), dt)
    _close(la.cholesky(xp.asarray(spd)), np.linalg.cholesky(_wide(spd)), tol)
    h = _hermitian(rng, (2, 3, 6, 6), dt)
    _close(la.eigvalsh(xp.asarray(h)), np.linalg.eigvalsh(_wide(h)), tol)
    w, v = la.eigh(xp.asarray(h))
    vv = _wide(np.asarray(v))
    _close(vv @ (_wide(np.asarray(w))[..., None] * np.conj(np.swapaxes(vv, -1, -2))), _wide(h),
           tol)
    r = random_values(rng, (3, 7, 5), dt, False)
    u, s, vh = la.svd(xp.asarray(r), full_matrices=False)
    _close(s, np.linalg.svd(_wide(r), compute_uv=False), tol)
    _close((_wide(np.asarray(u)) * _wide(np.asarray(s))[..., None, :]) @ _wide(np.asarray(vh)),
           _wide(r), tol)
    _close(la.svdvals(xp.asarray(r)), np.linalg.svd(_wide(r), compute_uv=False), tol)


def test_single_matrices_read_one_triangle_and_run_the_lower_fill_mode(xp, dev, posted,
                                                                       rng) -> None:
    """cholesky and eigh of one matrix read only the triangle asked for, and factor A itself
    column-major (cholesky with potrf's uplo 'L', the fast fill mode)."""
    from gpumsg.messages.cusolver import Potrf, Syevd

    n = 30
    spd = _spd(rng, (n, n), np.float64)
    junk = random_values(rng, (n, n), np.float64, False)
    sent = posted(dev, Potrf, Syevd)
    low = xp.linalg.cholesky(xp.asarray(np.tril(spd) + np.triu(junk, 1)))
    _close(low, np.linalg.cholesky(spd), 1e-10)
    assert [m.uplo for m in sent] == ["L"]
    # upper=True reads the upper triangle, as NumPy's
    stored = np.triu(spd) + np.tril(junk, -1)
    up = xp.linalg.cholesky(xp.asarray(stored), upper=True)
    _close(up, np.linalg.cholesky(stored, upper=True), 1e-10)
    zs = _spd(rng, (2, n, n), np.complex128)
    zj = np.triu(zs) + np.tril(random_values(rng, (2, n, n), np.complex128, False), -1)
    _close(xp.linalg.cholesky(xp.asarray(zj), upper=True), np.linalg.cholesky(zj, upper=True),
           1e-10)
    h = _hermitian(rng, (n, n), np.float64)
    for uplo, stored in (("L", np.tril(h) + np.triu(junk, 1)),
                         ("U", np.triu(h) + np.tril(junk, -1))):
        _close(xp.linalg.eigvalsh(xp.asarray(stored), UPLO=uplo), np.linalg.eigvalsh(h), 1e-10)
    assert [m.uplo for m in sent[-2:]] == ["L", "U"]
    # views (an offset, a transpose) are copied column-major by a kernel instead of a geam
    big = xp.asarray(np.pad(spd, ((1, 0), (1, 0)), constant_values=7.0))
    _close(xp.linalg.cholesky(big[1:, 1:]), np.linalg.cholesky(spd), 1e-10)
    r = random_values(rng, (9, 6), np.float64, False)
    _close(xp.linalg.svdvals(xp.asarray(r).T), np.linalg.svd(r.T, compute_uv=False), 1e-10)
    _close(xp.linalg.eigvalsh(xp.asarray(h).T), np.linalg.eigvalsh(h.T), 1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 4), (4, 7), (2, 5, 5), (2, 1, 6, 3)])
def test_qr(xp, rng, dtype, shape) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    tol = _tol(dt) * 10
    a = random_values(rng, shape, dt, False)
    x, aw = xp.asarray(a), _wide(a)
    for mode in ("reduced", "complete"):
        q, r = xp.linalg.qr(x, mode=mode)
        rq, rr = np.linalg.qr(aw, mode=mode)
        assert np.shape(q) == rq.shape and np.shape(r) == rr.shape
        qq, rv = _wide(np.asarray(q)), _wide(np.asarray(r))
        _close(qq @ rv, aw, tol)
        _close(np.abs(rv), np.abs(rr), tol)  # R up to the signs of its rows, as LAPACK's
        assert np.all(np.tril(rv, -1) == 0)
        eye = np.broadcast_to(np.eye(qq.shape[-1]), qq.shape[:-2] + (qq.shape[-1],) * 2)
        _close(np.conj(np.swapaxes(qq, -1, -2)) @ qq, eye, tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_determinants(xp, rng, dtype) -> None:
    dt = np.dtype(getattr(xpm, dtype))
    tol = _tol(dt)
    a = random_values(rng, (8, 8), dt, False) / 2
    for m in (a, np.where(np.arange(8)[:, None] == 3, 0, a).astype(dt)):  # regular, singular
        sign, logabs = xp.linalg.slogdet(xp.asarray(m))
        ref_sign, ref_log = np.linalg.slogdet(_wide(m))
        _close(sign, ref_sign, tol)
        if np.isfinite(ref_log):
            _close(logabs, ref_log, tol)
        else:
            assert float(logabs) == -np.inf
        ref = np.linalg.det(_wide(m))
        _close(xp.linalg.det(xp.asarray(m)), ref, tol * max(abs(ref), 1))
    assert complex(xp.linalg.det(xp.asarray(np.zeros((0, 0), dt)))) == 1.0


def test_integer_matrices_compute_in_float64(xp, rng) -> None:
    a = (rng.integers(1, 9, (2, 4, 4)) + 10 * np.eye(4, dtype=np.int64)).astype(np.int32)
    b = rng.integers(1, 9, (2, 4)).astype(np.int32)
    x = xp.asarray(a)
    got = xp.linalg.inv(x)
    assert got.dtype == xp.float64
    _close(got, np.linalg.inv(a), 1e-12)
    _close(xp.linalg.det(x), np.linalg.det(a), 1e-9)
    _close(xp.linalg.solve(x, xp.asarray(b[..., None]))[..., 0], np.linalg.solve(a, b[..., None])
           [..., 0], 1e-12)
