"""``x[key]`` and ``x[key] = value`` against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values

KEYS = [0, -1, slice(None), slice(1, None, 2), slice(None, None, -1), (1, 2), (Ellipsis, 0),
        (None, slice(0, 2)), (slice(2, 0, -1), None, Ellipsis, 1), (), (slice(5, 9),),
        (0, slice(None), None)]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_basic(xp, rng, key) -> None:
    h = random_values(rng, (4, 5, 3), np.int64, False)
    x = xp.asarray(h)
    y = x[key]
    assert y.buffer is x.buffer
    np.testing.assert_array_equal(np.asarray(y), h[key])


def test_basic_errors(xp) -> None:
    x = xp.asarray(np.zeros((2, 3)))
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(IndexError):
        x[..., ...]


def test_advanced(xp, rng) -> None:
    h = random_values(rng, (6, 4), np.float32, False)
    x = xp.asarray(h)
    idx = np.array([5, 0, 2, 2])
    np.testing.assert_array_equal(np.asarray(x[xp.asarray(idx)]), h[idx])
    mask = h > 0
    np.testing.assert_array_equal(np.asarray(x[xp.asarray(mask)]), h[mask])
    np.testing.assert_array_equal(np.asarray(xp.take(x, xp.asarray(idx), axis=0)),
                                  np.take(h, idx, axis=0))


def test_setitem(xp, rng) -> None:
    h = random_values(rng, (5, 6), np.float64, False)
    x = xp.asarray(h)
    x[1:3, ::2] = 4.5
    h[1:3, ::2] = 4.5
    x[0] = xp.asarray(np.arange(6.0))
    h[0] = np.arange(6.0)
    x[:, -1] = x[:, 0]
    h[:, -1] = h[:, 0]
    x[x < 0] = 0.0
    h[h < 0] = 0.0
    np.testing.assert_array_equal(np.asarray(x), h)
    z = xp.asarray(np.float32(1.0))
    z[()] = 2.5
    assert float(z) == 2.5


def test_scalar_conversions(xp) -> None:
    assert bool(xp.asarray(True)) is True
    assert int(xp.asarray(np.int8(-5))) == -5
    assert float(xp.asarray(np.float32(0.5))) == 0.5
    assert complex(xp.asarray(np.complex64(1 + 2j))) == 1 + 2j
    assert [10, 20, 30][xp.asarray(1)] == 20
    with pytest.raises(TypeError):
        [1, 2][xp.asarray(1.0)]
    with pytest.raises(TypeError):
        float(xp.asarray(np.complex64(1)))
    with pytest.raises(TypeError):
        bool(xp.asarray(np.zeros(3)))


def test_overlapping_source_and_destination(xp, rng) -> None:
    """A write whose source is another view of the same buffer reads the old values."""
    h = random_values(rng, (200,), np.int32, False)
    x = xp.asarray(h)
    x[1:] = x[:-1]
    h[1:] = h[:-1].copy()
    np.testing.assert_array_equal(np.asarray(x), h)
    m = random_values(rng, (40, 40), np.float64, False)
    y = xp.asarray(m)
    y += y.T
    np.testing.assert_array_equal(np.asarray(y), m + m.T)
