"""Reductions against NumPy float64 references: every axis combination, keepdims, strided
inputs, the special values, and the standard's result dtypes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from array_helpers import FLOAT_TOL, random_values

import gpumsg.array_api as xpm

SHAPE = (5, 6, 7)
AXES = [None, 0, 1, 2, -1, (0, 2), (1, 2), (0, 1, 2)]


def _close(got, ref, dtype) -> None:
    got = np.asarray(got)
    tol = FLOAT_TOL.get(np.dtype(dtype).name, 0)
    if tol:
        np.testing.assert_allclose(got.astype(np.complex128 if got.dtype.kind == "c"
                                              else np.float64), ref, rtol=tol * 20,
                                   atol=tol * 20, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "int32", "uint8",
                                   "int8", "float16", "bool"])
@pytest.mark.parametrize("axis", AXES)
def test_sum_prod(xp, rng, dtype, axis) -> None:
    h = random_values(rng, SHAPE, getattr(xpm, dtype), specials=False)
    if np.dtype(h.dtype).kind == "f":
        h = (h / 4).astype(h.dtype)
    x = xp.asarray(h)
    wide = h.astype(np.complex128 if h.dtype.kind == "c" else np.float64) \
        if h.dtype.kind in "fcV" or h.dtype == xpm.float16 else h
    for keep in (False, True):
        s = xp.sum(x, axis=axis, keepdims=keep)
        ref = np.sum(wide, axis=axis, keepdims=keep,
                     dtype=None if h.dtype.kind in "fc" else
                     (np.uint64 if h.dtype.kind == "u" else np.int64))
        assert s.shape == ref.shape
        assert s.dtype == (xp.int64 if dtype in ("int32", "int8", "bool") else
                           xp.uint64 if dtype == "uint8" else x.dtype)
        _close(s, ref, dtype)
    if dtype != "bool":
        # products of values near 1 (floats) or small integers: no overflow to compare
        if h.dtype.kind in "iu":
            hs = rng.integers(1, 4, (5, 3, 2)).astype(h.dtype)
        else:
            hs = (1 + 0.1 * random_values(rng, (5, 3, 2), np.complex128 if h.dtype.kind == "c"
                                          else np.float64, specials=False)).astype(h.dtype)
        p = xp.prod(xp.asarray(hs), axis=axis)
        wide = hs.astype(np.complex128 if hs.dtype.kind == "c" else np.float64) \
            if hs.dtype.kind in "fc" or hs.dtype == xpm.float16 else hs
        ref = np.prod(wide, axis=axis, dtype=None if hs.dtype.kind in "fc" else
                      (np.uint64 if hs.dtype.kind == "u" else np.int64))
        _close(p, ref, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "uint32", "int64"])
@pytest.mark.parametrize("axis", AXES)
def test_max_min_argmax(xp, rng, dtype, axis) -> None:
    h = random_values(rng, SHAPE, getattr(xpm, dtype), specials=True)
    x = xp.asarray(h)
    for keep in (False, True):
        np.testing.assert_array_equal(np.asarray(xp.max(x, axis=axis, keepdims=keep)),
                                      np.max(h, axis=axis, keepdims=keep))
        np.testing.assert_array_equal(np.asarray(xp.min(x, axis=axis, keepdims=keep)),
                                      np.min(h, axis=axis, keepdims=keep))
    if axis is None or isinstance(axis, int):
        for keep in (False, True):
            a = xp.argmax(x, axis=axis, keepdims=keep)
            assert a.dtype == xp.int64
            np.testing.assert_array_equal(np.asarray(a), np.argmax(h, axis=axis,
                                                                   keepdims=keep))
            np.testing.assert_array_equal(np.asarray(xp.argmin(x, axis=axis, keepdims=keep)),
                                          np.argmin(h, axis=axis, keepdims=keep))


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("axis", AXES)
def test_mean_var_std(xp, rng, dtype, axis) -> None:
    h = random_values(rng, SHAPE, getattr(xpm, dtype), specials=False)
    x = xp.asarray(h)
    w = h.astype(np.complex128 if h.dtype.kind == "c" else np.float64)
    _close(xp.mean(x, axis=axis), np.mean(w, axis=axis), dtype)
    for corr in (0, 1):
        v = xp.var(x, axis=axis, correction=corr, keepdims=True)
        assert v.dtype == (xp.float64 if dtype == "complex128" else x.dtype)
        _close(v, np.var(w, axis=axis, ddof=corr, keepdims=True), dtype)
        _close(xp.std(x, axis=axis, correction=corr), np.std(w, axis=axis, ddof=corr), dtype)


def test_nan_propagates(xp) -> None:
    h = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]])
    x = xp.asarray(h)
    np.testing.assert_array_equal(np.asarray(xp.max(x, axis=1)), [np.nan, 5.0])
    np.testing.assert_array_equal(np.asarray(xp.min(x, axis=1)), [np.nan, -np.inf])
    np.testing.assert_array_equal(np.asarray(xp.argmax(x, axis=1)), [1, 1])
    np.testing.assert_array_equal(np.asarray(xp.sum(x, axis=1)), [np.nan, -np.inf])
    assert np.isnan(float(xp.mean(xp.asarray(np.zeros((0,))))))


def test_all_any_count(xp, rng) -> None:
    h = rng.integers(0, 3, SHAPE).astype(np.int32)
    x = xp.asarray(h)
    for axis in AXES:
        np.testing.assert_array_equal(np.asarray(xp.all(x, axis=axis)), np.all(h, axis=axis))
        np.testing.assert_array_equal(np.asarray(xp.any(x > 1, axis=axis)),
                                      np.any(h > 1, axis=axis))
        np.testing.assert_array_equal(np.asarray(xp.count_nonzero(x, axis=axis)),
                                      np.count_nonzero(h, axis=axis))


def test_strided_and_empty(xp, rng) -> None:
    h = random_values(rng, (8, 10), np.float64, False)
    x = xp.asarray(h)
    _close(xp.sum(x[::-2, 1::3], axis=0), h[::-2, 1::3].sum(0), "float64")
    _close(xp.sum(x.T, axis=1), h.T.sum(1), "float64")
    e = xp.asarray(np.zeros((0, 3)))
    np.testing.assert_array_equal(np.asarray(xp.sum(e, axis=0)), np.zeros(3))
    np.testing.assert_array_equal(np.asarray(xp.prod(e, axis=0)), np.ones(3))
    with pytest.raises(ValueError):
        xp.max(e, axis=0)


def test_cumulative(xp, rng) -> None:
    h = rng.integers(-5, 5, (4, 6)).astype(np.int32)
    x = xp.asarray(h)
    for axis, initial in itertools.product((0, 1), (False, True)):
        got = np.asarray(xp.cumulative_sum(x, axis=axis, include_initial=initial))
        ref = np.cumsum(h, axis=axis, dtype=np.int64)
        if initial:
            ref = np.concatenate([np.zeros_like(ref.take([0], axis=axis)), ref], axis=axis)
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(np.asarray(xp.cumulative_prod(x[0])),
                                  np.cumprod(h[0], dtype=np.int64))


def test_integer_sum_wraps_like_numpy(xp) -> None:
    h = np.full(10, np.iinfo(np.int64).max, np.int64)
    np.testing.assert_array_equal(np.asarray(xp.sum(xp.asarray(h))), np.sum(h))


@pytest.mark.parametrize("shape,axis", [((3000,), None), ((2000, 40), 0), ((40, 3000), 1),
                                        ((64, 50, 3), (0, 2)), ((50, 64), 0)])
def test_long_reductions_split_over_blocks_and_columns(xp, rng, shape, axis) -> None:
    """Reductions long enough to be split over blocks (the last block of a group to finish
    combines the group's chunks), and over the columns of a C-ordered array (a warp across
    neighbouring outputs)."""
    h = rng.standard_normal(shape)
    x = xp.asarray(h)
    c = xp.asarray(h + 1j * rng.standard_normal(shape))
    hc = np.asarray(c)
    checks = [(xp.sum(x, axis=axis), h.sum(axis=axis)), (xp.mean(x, axis=axis), h.mean(axis)),
              (xp.max(x, axis=axis), h.max(axis)), (xp.std(x, axis=axis), h.std(axis=axis)),
              (xp.sum(c, axis=axis), hc.sum(axis=axis)),
              (xp.count_nonzero(x > 0.5, axis=axis), np.count_nonzero(h > 0.5, axis=axis)),
              (xp.any(x > 3.0, axis=axis), np.any(h > 3.0, axis=axis)),
              (xp.all(x > -3.0, axis=axis), np.all(h > -3.0, axis=axis))]
    for got, ref in checks:
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12, atol=1e-12)
    if not isinstance(axis, tuple):
        np.testing.assert_array_equal(np.asarray(xp.argmax(x, axis=axis)),
                                      np.argmax(h, axis=axis))
    h32 = h.astype(np.float32)
    np.testing.assert_allclose(np.asarray(xp.sum(xp.asarray(h32), axis=axis)),
                               h32.astype(np.float64).sum(axis=axis), rtol=1e-4, atol=1e-4)


def test_split_reductions_in_flight_share_the_workspace(xp, rng) -> None:
    """Split reductions issued back to back, none read before the last: each one's arrival
    counters are back at zero for the next, including across a growth of the device's
    workspace (the complex128 column sums need more room than the first ones) and for
    accumulators of every width (bool ``any``, int64 ``count_nonzero``, complex128)."""
    small = [rng.standard_normal(n) for n in (3000, 5000, 1025, 70_000)]
    wide = rng.standard_normal((4096, 96)) + 1j * rng.standard_normal((4096, 96))
    got, refs = [], []
    for _ in range(3):
        for h in small:
            x = xp.asarray(h)
            got += [xp.sum(x), xp.any(x > 3.5), xp.count_nonzero(x > 0)]
            refs += [h.sum(), np.any(h > 3.5), np.count_nonzero(h > 0)]
        got.append(xp.sum(xp.asarray(wide), axis=0))
        refs.append(wide.sum(axis=0))
    for g, r in zip(got, refs):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-12, atol=1e-10)


def test_repeated_reductions_of_one_layout_follow_each_call(xp, rng) -> None:
    """A loop's reductions reuse their derived layout: each call still reads its own buffer,
    offset and dtype, and keepdims, axis and the strides of views still pick their own."""
    h = rng.standard_normal((6, 40))
    x = xp.asarray(h)
    for _ in range(2):
        for axis, keep in [(None, False), (0, False), (1, True), (0, True), (-1, False)]:
            for view, ref in [(x, h), (x[1:], h[1:]), (x[:, 3:], h[:, 3:]), (x.T, h.T)]:
                got = xp.sum(view, axis=axis, keepdims=keep)
                want = ref.sum(axis=axis, keepdims=keep)
                assert got.shape == want.shape
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(np.asarray(xp.max(view, axis=axis, keepdims=keep)),
                                           ref.max(axis=axis, keepdims=keep))
    # one shape, other strides or another offset: a layout keyed by shape alone would mix them
    q = rng.standard_normal((8, 8))
    s = xp.asarray(q)
    for view, ref in [(s, q), (s.T, q.T), (s[1:], q[1:]), (s[:-1], q[:-1])] * 2:
        np.testing.assert_allclose(np.asarray(xp.sum(view, axis=0)), ref.sum(axis=0),
                                   rtol=1e-12, atol=1e-12)
    h32 = h.astype(np.float32)
    got32 = np.asarray(xp.sum(xp.asarray(h32), axis=0)).astype(np.float64)
    # float32 rounding of the inputs and of 6 additions: bounded by the column's sum of
    # magnitudes (a column that cancels to near 0 is no less right)
    bound = 8 * h.shape[0] * np.finfo(np.float32).eps * np.abs(h).sum(axis=0)
    assert (np.abs(got32 - h.sum(axis=0)) <= bound).all()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "complex64", "int8",
                                   "uint16", "bool"])
def test_contiguous_rows_with_tails_and_unaligned_starts(xp, rng, dtype) -> None:
    """Rows of one contiguous reduced dimension (read 16 bytes a load on the GPU where a block's
    inputs start aligned): lengths that leave a tail of single elements, views starting 1-3
    elements in (an unaligned start takes the element loop), rows of a matrix whose starts
    alternate between aligned and not, lengths long enough to be split over blocks, and a
    fused chain whose inputs differ in alignment."""
    dt = np.dtype(getattr(xpm, dtype))
    for n in (17, 1029, 4111, 70_001):
        h = random_values(rng, (n,), dt, specials=False)
        x = xp.asarray(h)
        for k in (0, 1, 3):
            view, ref = x[k:], h[k:]
            if dt.kind == "b":
                assert int(xp.count_nonzero(view)) == np.count_nonzero(ref)
                assert bool(xp.any(view)) == bool(np.any(ref))
                continue
            wide = ref.astype(np.complex128 if dt.kind == "c" else np.float64)
            got = np.asarray(xp.sum(view))
            if dt.kind in "iu":  # wraps like NumPy's int64 / uint64 sum
                assert got == np.sum(ref, dtype=np.int64 if dt.kind == "i" else np.uint64)
                assert np.asarray(xp.max(view)) == ref.max()
                continue
            # the accumulator's rounding over n terms, bounded by their magnitudes
            acc_eps = np.finfo(np.float64 if dt == np.float64 else np.float32).eps
            bound = n * acc_eps * np.abs(wide).sum() + np.finfo(dt).eps * abs(wide.sum())
            assert abs(got.astype(wide.dtype) - wide.sum()) <= 4 * bound
            if dt.kind == "f":
                assert np.asarray(xp.max(view)) == ref.max()
    rows = random_values(rng, (7, 1031), dt, specials=False)  # row starts 1031 elements apart
    m = xp.asarray(rows)
    for view, ref in [(m, rows), (m[:, 2:], rows[:, 2:])]:
        if dt.kind == "b":
            np.testing.assert_array_equal(np.asarray(xp.any(view, axis=1)), ref.any(axis=1))
            continue
        got = np.asarray(xp.sum(view, axis=1))
        if dt.kind in "iu":
            np.testing.assert_array_equal(got, ref.sum(axis=1, dtype=got.dtype))
        else:
            wide = ref.astype(np.complex128 if dt.kind == "c" else np.float64)
            tol = 8 * ref.shape[1] * np.finfo(dt).eps * np.abs(wide).sum(axis=1)
            assert (np.abs(got.astype(wide.dtype) - wide.sum(axis=1)) <= tol).all()
    if dt == np.float32:
        hs = [rng.standard_normal(70_003).astype(np.float32) / 4 for _ in range(4)]
        a, b, c, d = (xp.asarray(v) for v in hs)
        got = float(xp.sum(xp.exp(a[1:] * b[:-1] + c[:-1]) * d[:-1]))
        w = [v.astype(np.float64) for v in hs]
        terms = np.exp(w[0][1:] * w[1][:-1] + w[2][:-1]) * w[3][:-1]
        assert abs(got - terms.sum()) <= 70_003 * 1e-7 * np.abs(terms).sum()


def test_var_std_corrections_at_and_past_the_count(xp, rng) -> None:
    """``correction`` may be any float: the standard's NaN where N - correction <= 0 (NaN and
    inf included: N - NaN > 0 is false), NumPy's values elsewhere (-inf: 0); the device keeps
    serving after each."""
    h = rng.standard_normal((3, 7))
    x = xp.asarray(h)
    for c in (np.nan, np.inf, -np.inf, 7.0, 6.5, -1.0, 0.5):
        for axis, n in ((1, 7), (None, 21)):
            for fn, ref in ((xp.var, np.var), (xp.std, np.std)):
                got = np.asarray(fn(x, axis=axis, correction=c))
                if not n - c > 0:
                    assert np.isnan(got).all(), (fn.__name__, c, axis)
                    continue
                with np.errstate(all="ignore"):
                    want = ref(h, axis=axis, ddof=c)
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
