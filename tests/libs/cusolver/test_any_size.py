"""The any-size batched calls (``syev_batched``, ``gesvdj_strided``) and the general eigenproblem
(``geev``) on column-major stacks, item by item against NumPy; the fill mode of the NumPy-level
``cholesky``."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.libs.cusolver._helpers import hermitian, host, rand, spd
from tests.libs.harness import FLOAT_DTYPES, assert_close, rel_err, tolerance, wide

REAL_OF = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}


def _cols(dev, stack: np.ndarray):
    """A flat buffer holding each matrix of ``stack`` column-major, one after the other."""
    return dev.to_device(np.ascontiguousarray(np.swapaxes(stack, -1, -2)).reshape(-1))


def _items(flat: np.ndarray, batch: int, rows: int, cols: int) -> np.ndarray:
    """Column-major items of a flat buffer as a (batch, rows, cols) stack."""
    return np.swapaxes(flat.reshape(batch, cols, rows), -1, -2)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [5, 40])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_syev_batched(dev, rng, dtype: str, n: int, uplo: str) -> None:
    batch = 6
    stack = np.stack([hermitian(rng, n, dtype) for _ in range(batch)])
    junk = rand(rng, stack.shape, dtype)  # the other triangle is not read
    keep = np.tril if uplo == "L" else np.triu
    stored = keep(stack) + (np.triu(junk, 1) if uplo == "L" else np.tril(junk, -1))
    a = _cols(dev, stored)
    w = dev.alloc((batch * n,), REAL_OF[dtype])
    dev.cusolver.syev_batched(a, w, n, batch, uplo).result(timeout=60)
    ws = host(dev, w).reshape(batch, n)
    vs = _items(host(dev, a), batch, n, n)
    for i in range(batch):
        h = wide(stack[i])
        assert_close(ws[i], np.linalg.eigvalsh(h), dtype, 20)
        v = wide(vs[i])
        assert rel_err(h @ v, v * wide(ws[i])) < tolerance(dtype, 50)
        assert rel_err(v.conj().T @ v, np.eye(n)) < tolerance(dtype, 50)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(40, 35), (33, 47)], ids=["tall", "wide"])
@pytest.mark.parametrize("econ", [False, True], ids=["full", "econ"])
def test_gesvdj_strided(dev, rng, dtype: str, shape: tuple, econ: bool) -> None:
    batch, (m, n) = 4, shape
    p = min(m, n)
    stack = rand(rng, (batch, m, n), dtype)
    ucols, vcols = (p, p) if econ else (m, n)
    a = _cols(dev, stack)
    s = dev.alloc((batch * p,), REAL_OF[dtype])
    u = dev.alloc((batch * m * ucols,), dtype)
    v = dev.alloc((batch * n * vcols,), dtype)
    dev.cusolver.gesvdj_strided(a, s, m, n, batch, u, v, econ=econ).result(timeout=60)
    ss = host(dev, s).reshape(batch, p)
    us, vs = _items(host(dev, u), batch, m, ucols), _items(host(dev, v), batch, n, vcols)
    for i in range(batch):
        ref = np.linalg.svd(wide(stack[i]), compute_uv=False)
        assert_close(ss[i], ref, dtype, 20)
        rebuilt = wide(us[i])[:, :p] * wide(ss[i]) @ wide(vs[i])[:, :p].conj().T
        assert rel_err(rebuilt, wide(stack[i])) < tolerance(dtype, 50)
    # values only: U and V may be left out
    s2 = dev.alloc((batch * p,), REAL_OF[dtype])
    dev.cusolver.gesvdj_strided(_cols(dev, stack), s2, m, n, batch, vectors=False
                                ).result(timeout=60)
    assert_close(host(dev, s2).reshape(batch, p), ss, dtype, 20)


@pytest.mark.parametrize("lanes", [1, 3])
@pytest.mark.parametrize("dtype", ["f32", "c128"])
def test_gesvdj_strided_over_lanes(dev, rng, monkeypatch, lanes: int, dtype: str) -> None:
    """The matrices spread over ``lanes`` streams (matrix i on lane i % lanes, each lane its
    own workspace and scratch U, V): every item right, with vectors and without."""
    from gpumsg.libs.cusolver import _handle

    monkeypatch.setattr(_handle, "GESVDJ_LANES", lanes)
    batch, m, n = 7, 36, 34
    stack = rand(rng, (batch, m, n), dtype)
    s = dev.alloc((batch * n,), REAL_OF[dtype])
    u, v = dev.alloc((batch * m * m,), dtype), dev.alloc((batch * n * n,), dtype)
    dev.cusolver.gesvdj_strided(_cols(dev, stack), s, m, n, batch, u, v).result(timeout=60)
    ss = host(dev, s).reshape(batch, n)
    us, vs = _items(host(dev, u), batch, m, m), _items(host(dev, v), batch, n, n)
    s2 = dev.alloc((batch * n,), REAL_OF[dtype])
    dev.cusolver.gesvdj_strided(_cols(dev, stack), s2, m, n, batch, vectors=False
                                ).result(timeout=60)
    for i in range(batch):
        assert_close(ss[i], np.linalg.svd(wide(stack[i]), compute_uv=False), dtype, 20)
        rebuilt = wide(us[i])[:, :n] * wide(ss[i]) @ wide(vs[i]).conj().T
        assert rel_err(rebuilt, wide(stack[i])) < tolerance(dtype, 50)
    assert_close(host(dev, s2).reshape(batch, n), ss, dtype, 20)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("n", [1, 8, 37])
def test_geev(dev, rng, dtype: str, n: int) -> None:
    batch = 3
    stack = rand(rng, (batch, n, n), dtype)
    a = _cols(dev, stack)
    real = dtype in ("f32", "f64")
    per = 2 * n if real else n  # a real matrix's: the real parts, then the imaginary parts
    w = dev.alloc((batch * per,), dtype)
    vr = dev.alloc((batch * n * n,), dtype)
    dev.cusolver.geev(a, w, n, vr, batch=batch).result(timeout=60)
    ws = host(dev, w).reshape(batch, per).astype(np.complex128)
    if real:
        ws = ws[:, :n] + 1j * ws[:, n:].real
    packed = _items(host(dev, vr), batch, n, n)
    for i in range(batch):
        m = wide(stack[i])
        ref = np.linalg.eigvals(m)
        scale = max(np.abs(ref).max(), 1)
        gap = np.abs(ws[i][:, None] - ref[None, :]) / scale  # the same sets, matched
        assert max(gap.min(0).max(), gap.min(1).max()) < tolerance(dtype, 50)
        v = wide(packed[i]).astype(np.complex128)
        if dtype in ("f32", "f64"):  # LAPACK's packing: a pair's real and imaginary parts
            for j in np.flatnonzero(ws[i].imag > 0):
                assert ws[i][j + 1] == np.conj(ws[i][j])
                re, im = v[:, j].copy(), v[:, j + 1].copy()
                v[:, j], v[:, j + 1] = re + 1j * im, re - 1j * im
        assert rel_err(m @ v, v * ws[i]) < tolerance(dtype, 100)
    w2 = dev.alloc((batch * per,), dtype)
    dev.cusolver.geev(_cols(dev, stack), w2, n, batch=batch).result(timeout=60)
    w2h = host(dev, w2).reshape(batch, per).astype(np.complex128)
    assert_close(w2h[:, :n] + 1j * w2h[:, n:].real if real else w2h, ws, dtype, 20)


def test_bad_arguments(dev) -> None:
    a = dev.alloc((2 * 4 * 4,), "f64")
    w = dev.alloc((8,), "f64")
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cusolver.geev(a, w, 4, batch=2)  # a real matrix needs 2n values per matrix
    assert info.value.field == "w"
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cusolver.geev(a, dev.alloc((16,), "c128"), 4, batch=2)  # of A's dtype
    assert info.value.field == "w"
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cusolver.syev_batched(a, w, 4, 3)  # three matrices do not fit
    assert info.value.field == "a"
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cusolver.gesvdj_strided(a, w, 4, 4, 2)  # vectors without U and V
    assert info.value.field == "u"
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cusolver.syev_batched(a, w, 4, 2, uplo="X")
    assert info.value.field == "uplo"
    with pytest.raises(gpumsg.InvalidMessage, match="C-ordered") as info:  # read as A^T
        dev.cusolver.geev(dev.alloc((4, 4), "f64", order="C"), dev.alloc((8,), "f64"), 4)
    assert info.value.field == "a"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cholesky_runs_the_lower_fill_mode(dev, rng, posted, dtype: str) -> None:
    """NumPy's cholesky factors A itself with uplo 'L' (the fast fill mode), reading only its
    lower triangle, and answers L in C order."""
    from gpumsg.messages.cusolver import Potrf

    n = 45
    a = spd(rng, n, dtype)
    stored = np.tril(a) + np.triu(rand(rng, (n, n), dtype), 1)
    sent = posted(dev, Potrf)
    low = host(dev, dev.linalg.cholesky(dev.to_device(stored)))
    assert [m.uplo for m in sent] == ["L"]
    assert_close(low, np.linalg.cholesky(wide(a)), dtype, 10)
    assert np.all(np.triu(low, 1) == 0)
    bad = a.copy()
    bad[7, 7] = -1.0
    with pytest.raises(gpumsg.NotPositiveDefinite) as info:
        dev.linalg.cholesky(dev.to_device(bad)).result(timeout=60)
    assert info.value.index == 8


@pytest.mark.parametrize("singular_ok", [False, True])
def test_getrf_batched_singular_ok(dev, rng, singular_ok: bool) -> None:
    """A zero pivot fails getrf_batched with SingularMatrix, unless ``singular_ok``: then the
    factors are there to read (U's diagonal holds the zero)."""
    n, batch = 6, 3
    stack = rand(rng, (batch, n, n), "f64") + 3 * np.eye(n)
    stack[1, :, 2] = 0  # column-major: a zero column of the second matrix
    a = _cols(dev, stack)
    ipiv = dev.alloc((batch * n,), np.int32)
    fut = dev.cusolver.getrf_batched(a, n, batch, ipiv, singular_ok=singular_ok)
    if not singular_ok:
        with pytest.raises(gpumsg.SingularMatrix) as info:
            fut.result(timeout=60)
        assert info.value.batch_item == 1
        return
    fut.result(timeout=60)
    lu = _items(host(dev, a), batch, n, n)
    dets = np.prod(np.diagonal(lu, axis1=-2, axis2=-1), axis=-1)
    swaps = np.count_nonzero(host(dev, ipiv).reshape(batch, n) != np.arange(1, n + 1), axis=-1)
    assert dets[1] == 0
    np.testing.assert_allclose(dets * (-1.0) ** swaps, np.linalg.det(stack), rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_numpy_level_stacks_beyond_32(dev, rng, dtype: str) -> None:
    """dev.linalg's eigh and svd of (batch, n, n) stacks past the batched Jacobi limit."""
    batch, n = 3, 37
    stack = np.stack([hermitian(rng, n, dtype) for _ in range(batch)])
    w_buf, v_buf = dev.linalg.eigh(dev.to_device(stack)).result(timeout=60)
    w, v = host(dev, w_buf), host(dev, v_buf)
    for i in range(batch):
        h = wide(stack[i])
        assert_close(w[i], np.linalg.eigvalsh(h), dtype, 20)
        assert rel_err(h @ wide(v[i]), wide(v[i]) * wide(w[i])) < tolerance(dtype, 50)
    r = rand(rng, (batch, 40, 34), dtype)
    for full in (True, False):
        u_buf, s_buf, vh_buf = dev.linalg.svd(dev.to_device(r), full_matrices=full
                                              ).result(timeout=60)
        u, s, vh = host(dev, u_buf), host(dev, s_buf), host(dev, vh_buf)
        assert u.shape == (batch, 40, 40 if full else 34) and vh.shape == (batch, 34, 34)
        for i in range(batch):
            assert_close(s[i], np.linalg.svd(wide(r[i]), compute_uv=False), dtype, 20)
            rebuilt = wide(u[i])[:, :34] * wide(s[i]) @ wide(vh[i])
            assert rel_err(rebuilt, wide(r[i])) < tolerance(dtype, 50)
    s_only = host(dev, dev.linalg.svd(dev.to_device(r), compute_uv=False))
    assert_close(s_only, s, dtype, 20)


def test_getrf_singular_ok(dev, rng) -> None:
    n = 7
    a = rand(rng, (n, n), "f64") + 3 * np.eye(n)
    a[:, 4] = 0
    for ok in (False, True):
        buf = _cols(dev, a[None])
        ipiv = dev.alloc((n,), np.int64)
        fut = dev.cusolver.getrf(buf, n, n, ipiv, singular_ok=ok)
        if not ok:
            with pytest.raises(gpumsg.SingularMatrix):
                fut.result(timeout=60)
            continue
        fut.result(timeout=60)
        lu = _items(host(dev, buf), 1, n, n)[0]
        assert np.prod(np.diag(lu)) == 0
