"""matmul, tensordot, vecdot, matrix_transpose against NumPy (float64 references)."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import FLOAT_TOL, random_values

import gpumsg.array_api as xpm


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "int32", "uint8",
                                   "float16"])
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((7,), (7, 4)), ((3, 7), (7,)),
                                    ((7,), (7,)), ((2, 1, 4, 5), (3, 5, 2)),
                                    ((4, 5), (2, 5, 6))])
def test_matmul(xp, rng, dtype, shapes) -> None:
    dt = getattr(xpm, dtype)
    a = random_values(rng, shapes[0], dt, specials=False)
    b = random_values(rng, shapes[1], dt, specials=False)
    if np.dtype(dt).kind in "iu":
        a, b = a % 7, b % 5  # small: no overflow, so NumPy's wrap does not matter
    got = xp.asarray(a) @ xp.asarray(b)
    wide = np.complex128 if np.dtype(dt).kind == "c" else np.float64
    ref = np.matmul(a.astype(wide), b.astype(wide))
    assert got.shape == ref.shape and got.dtype == dt
    tol = FLOAT_TOL.get(dtype, 0) * 10
    np.testing.assert_allclose(np.asarray(got).astype(wide), ref, rtol=tol, atol=tol)


def test_matmul_of_views_and_errors(xp, rng) -> None:
    h = random_values(rng, (6, 6), np.float64, False)
    x = xp.asarray(h)
    np.testing.assert_allclose(np.asarray(x.T @ x[::2].T), h.T @ h[::2].T)
    np.testing.assert_allclose(np.asarray(xp.matrix_transpose(x)), h.T)
    with pytest.raises(ValueError):
        x @ xp.asarray(np.ones((5, 2)))
    with pytest.raises(TypeError):
        xp.asarray([True]) @ xp.asarray([True])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64",
                                   "complex128"])
def test_floating_matmul_is_one_cublas_gemm(xp, dev, posted, rng, dtype) -> None:
    """Every product of floating or complex operands is one cuBLAS message (a GEMM, or one
    strided batch of them) that also allocates the output: C-ordered operands, ``.T`` views
    (no copy), a matrix broadcast against a stack; an offset view and batches that broadcast
    against each other are copied first, still one GEMM. The float64 references are NumPy's."""
    from gpumsg.messages import AllocThen
    from gpumsg.messages.cublas import Gemm, GemmStridedBatched, Sgemm

    dt = np.dtype(getattr(xpm, dtype))
    wide = np.complex128 if dt.kind == "c" else np.float64
    tol = FLOAT_TOL[dtype] * 40
    h = random_values(rng, (33, 17), dt, False)
    g = random_values(rng, (17, 9), dt, False)
    s3 = random_values(rng, (4, 9, 17), dt, False)
    s2 = random_values(rng, (2, 1, 17, 5), dt, False)
    x, y, z, w = xp.asarray(h), xp.asarray(g), xp.asarray(s3), xp.asarray(s2)
    hw, gw, zw, ww = (v.astype(wide) for v in (h, g, s3, s2))
    gemms = posted(dev, Sgemm, Gemm, GemmStridedBatched)
    fused = posted(dev, AllocThen)
    cases = [(x @ y, hw @ gw), (x.T @ x, hw.T @ hw), (x @ x.T, hw @ hw.T),
             (y.T @ x.T, gw.T @ hw.T), (x @ z.mT, hw @ np.swapaxes(zw, -1, -2)),
             (z @ x.T, zw @ hw.T), (x[0] @ y, hw[0] @ gw), (x @ y[:, 0], hw @ gw[:, 0])]
    assert len(gemms) == len(cases) and len(fused) == len(cases)
    assert all(type(m) is GemmStridedBatched for m in gemms[4:6])
    cases += [(x[1:] @ y, hw[1:] @ gw), (z @ w, zw @ ww)]
    assert len(gemms) == len(cases)
    for got, ref in cases:
        assert got.shape == ref.shape and got.dtype == dt
        np.testing.assert_allclose(np.asarray(got).astype(wide), ref, rtol=tol,
                                   atol=tol * np.abs(ref).max())
    td = xp.tensordot(z, xp.asarray(s3[0]), axes=([1, 2], [0, 1]))
    np.testing.assert_allclose(np.asarray(td).astype(wide),
                               np.tensordot(zw, zw[0], axes=([1, 2], [0, 1])), rtol=tol,
                               atol=tol * 10 * np.abs(zw).max() ** 2)
    assert len(gemms) == len(cases) + 1


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64"])
def test_a_repeated_kind_of_product_builds_its_gemm_unchecked(xp, dev, posted, rng,
                                                              monkeypatch, dtype) -> None:
    """The second product of operands with the layouts and dtype of a validated one builds
    its message without validating it again; that message equals the one the checked
    constructor builds from the same fields, and its numbers are NumPy's."""
    from gpumsg.array_api import _linalg
    from gpumsg.messages._memo import field_values
    from gpumsg.messages.cublas import Gemm, GemmStridedBatched, Sgemm

    dt = np.dtype(getattr(xpm, dtype))
    wide = np.complex128 if dt.kind == "c" else np.float64
    tol = FLOAT_TOL[dtype] * 40
    monkeypatch.setattr(_linalg, "_GEMM_PLANS", {})  # no kind known from other tests
    built = []
    for cls in (Sgemm, Gemm, GemmStridedBatched):
        def counted(*values, _real=cls.unchecked):
            built.append(values)
            return _real(*values)
        monkeypatch.setattr(cls, "unchecked", staticmethod(counted))
    shapes = [((19, 7), (7, 11)), ((3, 19, 7), (3, 7, 11)), ((19, 7), (4, 7, 11))]
    for round_ in range(2):
        built.clear()
        gemms = posted(dev, Sgemm, Gemm, GemmStridedBatched)
        pairs = [(random_values(rng, sa, dt, False), random_values(rng, sb, dt, False))
                 for sa, sb in shapes]
        got = [xp.asarray(a) @ xp.asarray(b) for a, b in pairs]
        pairs.append((pairs[0][0], pairs[0][1]))  # a transposed view
        got.append(xp.asarray(np.ascontiguousarray(pairs[0][0].T)).T @ xp.asarray(pairs[0][1]))
        assert len(gemms) == len(pairs)
        assert len(built) == (len(pairs) if round_ else 0)
        for m in gemms:
            assert m == type(m)(*field_values(m))
        for g, (a, b) in zip(got, pairs):
            ref = a.astype(wide) @ b.astype(wide)
            np.testing.assert_allclose(np.asarray(g).astype(wide), ref, rtol=tol,
                                       atol=tol * np.abs(ref).max())


def test_matmul_of_mixed_dtypes_promotes_then_multiplies(xp, rng) -> None:
    """float32 @ float64 is float64; float16 @ float32 is float32; float32 @ complex128 is
    complex128: the narrower operand is converted, then one GEMM."""
    for da, db in ((np.float32, np.float64), (np.float16, np.float32),
                   (np.float32, np.complex128)):
        a = random_values(rng, (6, 5), da, False)
        b = random_values(rng, (5, 4), db, False)
        got = xp.asarray(a) @ xp.asarray(b)
        ref = a.astype(np.complex128) @ b.astype(np.complex128)
        assert got.dtype == np.result_type(da, db)
        np.testing.assert_allclose(np.asarray(got), ref if got.dtype.kind == "c" else ref.real,
                                   rtol=2e-3, atol=2e-3)


def test_tensordot_vecdot(xp, rng) -> None:
    a = random_values(rng, (3, 4, 5), np.float64, False)
    b = random_values(rng, (4, 5, 2), np.float64, False)
    xa, xb = xp.asarray(a), xp.asarray(b)
    np.testing.assert_allclose(np.asarray(xp.tensordot(xa, xb)), np.tensordot(a, b))
    np.testing.assert_allclose(np.asarray(xp.tensordot(xa, xb, axes=([1], [0]))),
                               np.tensordot(a, b, axes=([1], [0])))
    c = random_values(rng, (3, 5), np.complex128, False)
    d = random_values(rng, (5,), np.complex128, False)
    np.testing.assert_allclose(np.asarray(xp.vecdot(xp.asarray(c), xp.asarray(d))),
                               np.sum(np.conj(c) * d, axis=-1))
    np.testing.assert_allclose(np.asarray(xp.vecdot(xa, xa, axis=0)), np.sum(a * a, axis=0))


def test_the_issue_example(xp, rng) -> None:
    """``y = (x - x.mean(0)) / x.std(0); y.T @ y`` runs and matches NumPy."""
    h = random_values(rng, (200, 16), np.float32, False)
    x = xp.asarray(h)
    y = (x - xp.mean(x, axis=0)) / xp.std(x, axis=0)
    c = y.T @ y
    hw = h.astype(np.float64)
    hy = (hw - hw.mean(0)) / hw.std(0)
    np.testing.assert_allclose(np.asarray(c), hy.T @ hy, rtol=1e-4, atol=1e-3)


def test_linalg_extension(xp, rng) -> None:
    la = xp.linalg
    h = random_values(rng, (2, 4, 5), np.float64, False)
    x = xp.asarray(h)
    for k in (-2, 0, 1, 7):
        d = la.diagonal(x, offset=k)
        assert d.buffer is x.buffer
        np.testing.assert_array_equal(np.asarray(d), np.diagonal(h, k, -2, -1))
        np.testing.assert_allclose(np.asarray(la.trace(x, offset=k)),
                                   np.trace(h, k, axis1=-2, axis2=-1))
    # NaN and negative orders go through the general p-norm, as NumPy's do (NaN: all NaN)
    for ord_ in (2, 1, 0, np.inf, -np.inf, 3.5, -2.5, np.nan, float(np.float32(0.3))):
        np.testing.assert_allclose(np.asarray(la.vector_norm(x, axis=-1, ord=ord_)),
                                   np.linalg.norm(h, ord=ord_, axis=-1))
    np.testing.assert_allclose(float(la.vector_norm(x)), np.linalg.norm(h.ravel()))
    for ord_ in ("fro", 1, -1, np.inf, -np.inf):
        np.testing.assert_allclose(np.asarray(la.matrix_norm(x, ord=ord_)),
                                   np.linalg.norm(h, ord=ord_, axis=(-2, -1)))
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3,))
    np.testing.assert_allclose(np.asarray(la.cross(xp.asarray(a), xp.asarray(b))),
                               np.cross(a, b))
    np.testing.assert_allclose(np.asarray(la.outer(xp.asarray(b), xp.asarray(a[0]))),
                               np.outer(b, a[0]))
    m = rng.standard_normal((3, 3)) / 2
    for n in (0, 1, 5):
        np.testing.assert_allclose(np.asarray(la.matrix_power(xp.asarray(m), n)),
                                   np.linalg.matrix_power(m, n), atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_decompositions_and_solvers(xp, rng, dtype) -> None:
    """The cuSOLVER part of the linalg extension on stacks of matrices."""
    la = xp.linalg
    dt = np.dtype(getattr(xpm, dtype))
    tol = 2e-4 if dt in (np.float32, np.complex64) else 1e-10
    a = random_values(rng, (2, 4, 4), dt, False)
    spd = (a @ np.conj(np.swapaxes(a, -1, -2)) + 4 * np.eye(4)).astype(dt)
    x = xp.asarray(spd)

    def close(got, ref):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=tol, atol=tol)

    close(la.cholesky(x), np.linalg.cholesky(spd))
    close(la.cholesky(x, upper=True), np.conj(np.swapaxes(np.linalg.cholesky(spd), -1, -2)))
    close(la.inv(x), np.linalg.inv(spd))
    b = random_values(rng, (2, 4, 3), dt, False)
    close(la.solve(x, xp.asarray(b)), np.linalg.solve(spd, b))
    close(la.det(x), np.linalg.det(spd))
    sign, logabs = la.slogdet(x)
    ref_sign, ref_log = np.linalg.slogdet(spd)
    close(sign, ref_sign)
    close(logabs, ref_log)
    close(la.eigvalsh(x), np.linalg.eigvalsh(spd))
    w, v = la.eigh(x)
    vv = np.asarray(v)
    close(vv @ (np.asarray(w)[..., None] * np.conj(np.swapaxes(vv, -1, -2))), spd)
    m = random_values(rng, (3, 5, 3), dt, False)
    q, r = la.qr(xp.asarray(m))
    close(np.asarray(q) @ np.asarray(r), m)
    u, s, vh = la.svd(xp.asarray(m), full_matrices=False)
    close(s, np.linalg.svd(m, compute_uv=False))
    close((np.asarray(u) * np.asarray(s)[..., None, :]) @ np.asarray(vh), m)
    close(la.svdvals(xp.asarray(m)), np.linalg.svd(m, compute_uv=False))
    np.testing.assert_array_equal(np.asarray(la.matrix_rank(xp.asarray(m))),
                                  np.linalg.matrix_rank(m))
    close(la.pinv(xp.asarray(m)), np.linalg.pinv(m))
    close(la.matrix_norm(xp.asarray(m), ord="nuc"), np.linalg.norm(m, ord="nuc", axis=(-2, -1)))
    close(la.matrix_power(x[0], -2), np.linalg.matrix_power(spd[0], -2))


def test_empty_stacks(xp) -> None:
    la = xp.linalg
    x = xp.asarray(np.zeros((0, 3, 2)))
    assert la.pinv(x).shape == (0, 2, 3)
    u, s, vh = la.svd(x)
    assert (u.shape, s.shape, vh.shape) == ((0, 3, 3), (0, 2), (0, 2, 2))
    assert la.inv(xp.asarray(np.zeros((2, 0, 3, 3)))).shape == (2, 0, 3, 3)
    assert la.det(xp.asarray(np.zeros((0, 3, 3)))).shape == (0,)


def test_tensordot_refuses_axes_beyond_the_operands(xp) -> None:
    """More contracted axes than dimensions, or an axis out of range or named twice, is a
    ValueError at the call (it once built a tuple of 2**31 axes, or wrapped the axis)."""
    a = xp.ones((2, 3, 4))
    b = xp.ones((4,))
    for axes in (2**31 + 1, 2, ((5,), (0,)), ((0, 0), (0, 0)), ((-4,), (0,))):
        with pytest.raises(ValueError):
            xp.tensordot(a, b, axes=axes)


def test_one_system_is_solved_in_few_messages(xp, dev, posted, rng) -> None:
    """solve and inv of one matrix allocate each buffer in the message that first writes it
    and let the executor free the work buffers: a vector right-hand side is 4 messages (the
    factors' copy, getrf, the solution's copy, getrs), a matrix one 5 (two transposes), inv 6
    (the identity first), once the kernels are loaded. The answers match NumPy."""
    from gpumsg.messages import Message

    n = 24
    a = random_values(rng, (n, n), np.float64, False) + n * np.eye(n)
    v = random_values(rng, (n,), np.float64, False)
    m = random_values(rng, (n, 3), np.float64, False)
    xa, xv, xm = xp.asarray(a), xp.asarray(v), xp.asarray(m)
    for call, ref, most in ((lambda: xp.linalg.solve(xa, xv), np.linalg.solve(a, v), 4),
                            (lambda: xp.linalg.solve(xa, xm), np.linalg.solve(a, m), 5),
                            (lambda: xp.linalg.inv(xa), np.linalg.inv(a), 6)):
        call()  # the first inv loads the identity's kernel
        sent = posted(dev, Message)
        got = call()
        count = len(sent)
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-10, atol=1e-12)
        assert count <= most, [type(s).__name__ for s in sent[:count]]


def _random_view(xp, rng, shape: tuple[int, ...], dtype):
    """A random view of ``shape`` into a larger random array (steps of 1 or 2, offsets,
    reversed axes, the last two axes swapped) and its NumPy twin."""
    swap = rng.random() < 0.4 and len(shape) >= 2
    want = shape[:-2] + shape[-2:][::-1] if swap else shape
    steps = [int(rng.integers(1, 3)) for _ in want]
    starts = [int(rng.integers(0, 2)) for _ in want]
    host = random_values(rng, tuple(st + d * s for st, d, s in zip(starts, want, steps)),
                         dtype, False)
    key = tuple(slice(st, st + d * s, s) for st, d, s in zip(starts, want, steps))
    flip = tuple(slice(None, None, -1) if rng.random() < 0.2 else slice(None) for _ in want)
    h, x = host[key][flip], xp.asarray(host)[key][flip]
    if swap:
        h, x = np.swapaxes(h, -1, -2), xp.matrix_transpose(x)
    assert h.shape == shape and x.shape == shape
    return x, h


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "float16"])
def test_matmul_of_random_views_matches_numpy(xp, rng, dtype) -> None:
    """Products of views cuBLAS reads in place and views it cannot (steps, flips, offsets,
    transposes, batches of one and broadcast), each against NumPy's product in float64."""
    dt = np.dtype(getattr(xpm, dtype))
    wide = np.complex128 if dt.kind == "c" else np.float64
    tol = FLOAT_TOL[dtype] * 40
    for _ in range(12):
        n, k, m = (int(v) for v in rng.integers(1, 7, 3))
        batch_a = tuple(int(v) for v in rng.choice([1, 2, 3], int(rng.integers(0, 3))))
        batch_b = tuple(1 if rng.random() < 0.3 else d for d in batch_a)
        x, hx = _random_view(xp, rng, batch_a + (n, k), dt)
        y, hy = _random_view(xp, rng, batch_b + (k, m), dt)
        got = x @ y
        ref = np.matmul(hx.astype(wide), hy.astype(wide))
        assert got.shape == ref.shape and got.dtype == dt
        np.testing.assert_allclose(np.asarray(got).astype(wide), ref, rtol=tol,
                                   atol=tol * max(1.0, np.abs(ref).max()))


def test_matmul_of_broadcast_operands(xp, rng) -> None:
    """Operands with a stride-0 row or column axis (``broadcast_to``) are no layout cuBLAS
    reads in place: they are copied, and the product matches NumPy's."""
    row = random_values(rng, (1, 5), np.float64, False)
    col = random_values(rng, (4, 1), np.float64, False)
    other = random_values(rng, (5, 4), np.float64, False)
    for h in (np.broadcast_to(row, (4, 5)), np.broadcast_to(col, (4, 5))):
        x = xp.broadcast_to(xp.asarray(h[:1] if h.strides[0] == 0 else h[:, :1]), (4, 5))
        np.testing.assert_allclose(np.asarray(x @ xp.asarray(other)), h @ other, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(xp.asarray(other) @ x), other @ h, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_solve_inv_det_of_views_match_numpy(xp, rng, dtype) -> None:
    """solve, inv and det of views (transposed, stepped, reversed, offset; one matrix and
    stacks) against NumPy: the whole-buffer shortcut must not take a view for its buffer."""
    dt = np.dtype(getattr(xpm, dtype))
    for batch in ((), (2,), (3,)):
        n = int(rng.integers(2, 6))
        x, hx = _random_view(xp, rng, batch + (n, n), dt)
        assert np.linalg.cond(hx).max() < 1e6  # random entries: far from singular
        v, hv = _random_view(xp, rng, batch + (n, 2), dt)
        np.testing.assert_allclose(np.asarray(xp.linalg.inv(x)), np.linalg.inv(hx),
                                   rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(np.asarray(xp.linalg.solve(x, v)), np.linalg.solve(hx, hv),
                                   rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(np.asarray(xp.linalg.det(x)), np.linalg.det(hx),
                                   rtol=1e-8)
