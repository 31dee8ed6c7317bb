"""Calls of a kind seen before answer as the first one did. Element-wise calls, reductions and
matmul keep a plan per kind of call (the operands' dtypes, shapes, strides and offsets): a
layout the plan's key missed would give a repeated call the first call's layout, a wrong
number. Random views (offsets, steps, transposes, broadcasts), each kind called three times
with new data, and kinds that differ only in their layout interleaved."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values


def _views(rng: np.random.Generator, n: int) -> list:
    """(base shape, slicing) pairs: views of one shape (rows x cols) in layouts that differ only
    in offset, step or order, so that their kinds of call collide if a key is short."""
    out = []
    rows, cols = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    for kind in rng.permutation(np.arange(n) % 6):
        if kind == 0:
            out.append(((rows, cols), (slice(None), slice(None))))
        elif kind == 1:  # an offset view
            out.append(((rows + 1, cols), (slice(1, None), slice(None))))
        elif kind == 2:  # a step
            out.append(((rows, 2 * cols), (slice(None), slice(None, None, 2))))
        elif kind == 3:  # an offset and a step
            out.append(((rows + 1, 2 * cols + 1), (slice(1, None), slice(1, None, 2))))
        elif kind == 4:  # reversed rows
            out.append(((rows, cols), (slice(None, None, -1), slice(None))))
        else:  # a transposed base (swapped below)
            out.append(((cols, rows), "T"))
    return out


def _make(xp, rng, base_shape, how, dtype=np.float32):
    h = random_values(rng, base_shape, dtype, False)
    x = xp.asarray(h)
    if how == "T":
        return x.T, h.T
    return x[how], h[how]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_repeated_kinds_of_call_match_numpy(xp, seed) -> None:
    rng = np.random.default_rng(seed)
    views = _views(rng, 12)
    for fusion in (False, True):
        with xp.fusion(fusion):
            for base_shape, how in views * 3:  # each kind three times, the kinds interleaved
                x, hx = _make(xp, rng, base_shape, how)
                y, hy = _make(xp, rng, base_shape, how)
                row = xp.asarray(random_values(rng, hx.shape[-1:], np.float32, False))
                hrow = np.asarray(row)
                np.testing.assert_allclose(np.asarray(x + y), hx + hy, rtol=2e-6)
                np.testing.assert_allclose(np.asarray(xp.exp(x) * 0.5), np.exp(hx) * 0.5,
                                           rtol=2e-5)
                np.testing.assert_allclose(np.asarray(x * row), hx * hrow, rtol=2e-6)
                np.testing.assert_allclose(np.asarray(2.5 - x), 2.5 - hx, rtol=2e-6)
                for axis in (None, 0, 1):
                    np.testing.assert_allclose(np.asarray(xp.sum(x, axis=axis)),
                                               hx.astype(np.float64).sum(axis=axis),
                                               rtol=2e-5, atol=1e-4)
                np.testing.assert_allclose(np.asarray(xp.max(x, axis=1, keepdims=True)),
                                           hx.max(axis=1, keepdims=True))
                prod = x @ y.T
                np.testing.assert_allclose(np.asarray(prod),
                                           hx.astype(np.float64) @ hy.T.astype(np.float64),
                                           rtol=2e-5, atol=1e-4)


def test_a_repeated_call_checks_its_operands_again(xp, rng) -> None:
    """A kind of call kept from before still refuses what the first call would have: a freed
    operand, an array of another device, a scalar out of the dtype's range."""
    import gpumsg

    a = xp.asarray(random_values(rng, (8,), np.int8, False))
    b = xp.asarray(random_values(rng, (8,), np.int8, False))
    with xp.fusion(False):
        np.asarray(a + b)
        np.asarray(a + 1)
        np.asarray(xp.sum(a))
        w = xp.asarray(random_values(rng, (8,), np.int8, False))
        w.buffer.result().free()
        with pytest.raises(gpumsg.GpuRefStale):
            a + w
        with pytest.raises(gpumsg.GpuRefStale):
            xp.sum(w)
        with pytest.raises((OverflowError, TypeError, ValueError)):
            a + 1000
        other = gpumsg.open_device(0, backend="sim")
        try:
            c = xp.asarray(random_values(rng, (8,), np.int8, False), device=other)
            with pytest.raises(ValueError):
                a + c
        finally:
            other.close()
