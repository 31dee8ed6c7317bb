"""Manipulation functions against NumPy: views where possible, copies otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values

from gpumsg.errors import OutOfMemory


def test_views_share_the_buffer(xp, rng) -> None:
    h = random_values(rng, (3, 4, 5), np.float32, False)
    x = xp.asarray(h)
    for y in (xp.reshape(x, (12, 5)), xp.permute_dims(x, (2, 0, 1)), xp.expand_dims(x, 1),
              xp.squeeze(xp.expand_dims(x, 0), 0), xp.flip(x, axis=1), x.mT,
              xp.broadcast_to(x[:, :1], (3, 4, 5)), xp.moveaxis(x, 0, -1)):
        assert y.buffer is x.buffer
    np.testing.assert_array_equal(np.asarray(xp.permute_dims(x, (2, 0, 1))),
                                  h.transpose(2, 0, 1))
    np.testing.assert_array_equal(np.asarray(xp.flip(x, axis=(0, 2))), h[::-1, :, ::-1])
    np.testing.assert_array_equal(np.asarray(xp.flip(x)), h[::-1, ::-1, ::-1])
    np.testing.assert_array_equal(np.asarray(xp.moveaxis(x, (0, 1), (2, 0))),
                                  np.moveaxis(h, (0, 1), (2, 0)))
    np.testing.assert_array_equal(np.asarray(xp.expand_dims(x, axis=-1)), h[..., None])


def test_reshape_of_a_strided_view_copies(xp, rng) -> None:
    h = random_values(rng, (6, 8), np.int16, False)
    x = xp.asarray(h)
    y = xp.reshape(x.T, (4, 12))
    assert y.buffer is not x.buffer
    np.testing.assert_array_equal(np.asarray(y), h.T.reshape(4, 12))
    np.testing.assert_array_equal(np.asarray(xp.reshape(x, (-1,))), h.ravel())
    with pytest.raises(ValueError):
        xp.reshape(x.T, (48,), copy=False)
    with pytest.raises(ValueError):
        xp.reshape(x, (5, 10))


def test_concat_stack_unstack(xp, rng) -> None:
    a = random_values(rng, (2, 3), np.float64, False)
    b = random_values(rng, (4, 3), np.float64, False)
    c = random_values(rng, (2, 3), np.float32, False)
    xa, xb, xc = xp.asarray(a), xp.asarray(b), xp.asarray(c)
    np.testing.assert_array_equal(np.asarray(xp.concat([xa, xb])), np.concatenate([a, b]))
    got = xp.concat([xa, xc], axis=1)
    assert got.dtype == xp.float64
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([a, c], axis=1))
    np.testing.assert_array_equal(np.asarray(xp.concat([xa, xb], axis=None)),
                                  np.concatenate([a.ravel(), b.ravel()]))
    np.testing.assert_array_equal(np.asarray(xp.stack([xa, xa.T.T], axis=1)),
                                  np.stack([a, a], axis=1))
    parts = xp.unstack(xb, axis=1)
    assert len(parts) == 3
    np.testing.assert_array_equal(np.asarray(parts[2]), b[:, 2])
    with pytest.raises(ValueError):
        xp.concat([xa, xp.asarray(np.zeros((2, 4)))])


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.float16, np.float32, np.int64,
                                   np.complex128])
def test_concat_in_one_launch_per_eight_inputs(xp, dev, rng, posted, dtype) -> None:
    """A concatenation of arrays of the result's dtype is one message per eight inputs (the
    first allocating the output), bit for bit NumPy's: strided and offset views, empty inputs,
    pending (fused) inputs, every axis, more inputs than one launch reads."""
    from gpumsg.messages import Alloc, AllocThen, Launch

    h = random_values(rng, (6, 5, 4), dtype)
    x = xp.asarray(h)
    parts = [x[1:3], x[::2, ::-1], x[:0], xp.permute_dims(x, (0, 2, 1))[:, :, 1:]]
    want = [h[1:3], h[::2, ::-1], h[:0], h.transpose(0, 2, 1)[:, :, 1:]]
    np.testing.assert_array_equal(np.asarray(xp.concat(parts[:3], axis=0)),
                                  np.concatenate(want[:3], axis=0))
    for axis in (0, 1, 2):
        cut = [p[:2, :4, :3] for p in parts if p.shape[0]]
        np.testing.assert_array_equal(np.asarray(xp.concat(cut, axis=axis)),
                                      np.concatenate([w[:2, :4, :3] for w in want if len(w)],
                                                     axis=axis))
    sent = posted(dev, Alloc, AllocThen, Launch)
    many = [x[k % 6: k % 6 + 1] for k in range(19)]
    got = xp.concat(many, axis=0)
    assert [type(m).__name__ for m in sent] == ["AllocThen", "Launch", "Launch"]
    np.testing.assert_array_equal(np.asarray(got),
                                  np.concatenate([h[k % 6: k % 6 + 1] for k in range(19)]))
    if dtype == np.float32:  # pending inputs are computed first
        np.testing.assert_array_equal(np.asarray(xp.stack([x * 2, x + 1], axis=-1)),
                                      np.stack([h * 2, h + 1], axis=-1))


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.complex128])
def test_concat_of_contiguous_inputs_copies_runs(xp, dev, rng, posted, dtype) -> None:
    """C-contiguous inputs go through the runs kernel (one grid row an input): along every
    axis (one run an input, or one a leading index), from offsets and run lengths that are
    and are not multiples of 16 bytes, over more blocks than one, bit for bit NumPy's."""
    from gpumsg.messages import Launch

    flat_h = random_values(rng, (4000,), dtype)
    flat = xp.asarray(flat_h)

    def part(start: int, shape: tuple[int, ...]) -> tuple:
        n = int(np.prod(shape))
        return (xp.reshape(flat[start:start + n], shape),
                flat_h[start:start + n].reshape(shape))

    for axis, shapes in [(0, [(2, 3, 5), (1, 3, 5), (4, 3, 5)]),
                         (1, [(2, 3, 5), (2, 1, 5), (2, 4, 5)]),
                         (2, [(2, 3, 5), (2, 3, 2), (2, 3, 8)]),
                         (1, [(3, 16), (3, 32)])]:
        for starts in ([0, 64, 512], [1, 7, 333]):
            sent = posted(dev, Launch)
            ins = [part(s, sh) for s, sh in zip(starts, shapes)]
            got = xp.concat([g for g, _ in ins], axis=axis)
            assert [m.kernel.name.startswith("gm_concat_runs") for m in sent] == [True]
            np.testing.assert_array_equal(np.asarray(got),
                                          np.concatenate([h for _, h in ins], axis=axis))
    # a stack of four over many blocks, aligned and not
    n = 300_000 + 3
    big_h = random_values(rng, (4 * n + 1,), dtype)
    big = xp.asarray(big_h)
    for lead in (0, 1):
        sent = posted(dev, Launch)
        got = xp.stack([big[lead + j * n: lead + (j + 1) * n] for j in range(4)], axis=0)
        assert [m.kernel.name for m in sent] == [f"gm_concat_runs_{big.dtype.itemsize}_4"]
        np.testing.assert_array_equal(
            np.asarray(got), np.stack([big_h[lead + j * n: lead + (j + 1) * n]
                                       for j in range(4)]))


def test_roll_tile_repeat(xp, rng) -> None:
    h = random_values(rng, (3, 5), np.int32, False)
    x = xp.asarray(h)
    np.testing.assert_array_equal(np.asarray(xp.roll(x, 2)), np.roll(h, 2))
    np.testing.assert_array_equal(np.asarray(xp.roll(x, -1, axis=1)), np.roll(h, -1, axis=1))
    np.testing.assert_array_equal(np.asarray(xp.roll(x, (1, 7), axis=(0, 1))),
                                  np.roll(h, (1, 7), axis=(0, 1)))
    np.testing.assert_array_equal(np.asarray(xp.tile(x, (2, 3))), np.tile(h, (2, 3)))
    np.testing.assert_array_equal(np.asarray(xp.tile(x, (2, 1, 2))), np.tile(h, (2, 1, 2)))
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, 3, axis=1)), np.repeat(h, 3, axis=1))
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, 2)), np.repeat(h, 2))
    reps = xp.asarray(np.array([1, 0, 2]))
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, reps, axis=0)),
                                  np.repeat(h, [1, 0, 2], axis=0))


@pytest.mark.parametrize("shape,axis", [((7, 5), 0), ((7, 5), 1), ((4, 3, 6), -1), ((9,), None),
                                        ((3, 4), None)])
def test_repeat_by_an_array_of_counts(xp, rng, shape, axis) -> None:
    h = random_values(rng, shape, np.float32, False)
    n = h.size if axis is None else shape[axis]
    counts = rng.integers(0, 4, n)
    counts[rng.integers(0, n)] = 0  # a dropped element, wherever it falls
    for dt in (np.int64, np.int32, np.uint8):
        got = xp.repeat(xp.asarray(h), xp.asarray(counts.astype(dt)), axis=axis)
        np.testing.assert_array_equal(np.asarray(got), np.repeat(h, counts, axis=axis))
    # one count for every element, as an int or as an array of one element
    np.testing.assert_array_equal(np.asarray(xp.repeat(xp.asarray(h), xp.asarray([2]), axis=axis)),
                                  np.repeat(h, 2, axis=axis))
    flags = rng.integers(0, 2, n).astype(bool)
    np.testing.assert_array_equal(np.asarray(xp.repeat(xp.asarray(h), xp.asarray(flags),
                                                       axis=axis)),
                                  np.repeat(h, flags, axis=axis))


def test_repeat_by_a_list_or_tuple_of_counts(xp, rng) -> None:
    h = random_values(rng, (3, 4), np.int32, False)
    x = xp.asarray(h)
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, [2, 0, 1, 3], axis=1)),
                                  np.repeat(h, [2, 0, 1, 3], axis=1))
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, (3,), axis=0)), np.repeat(h, 3, axis=0))
    with pytest.raises(TypeError):
        xp.repeat(x, [1.5, 1, 1], axis=0)  # NumPy truncates; a count is refused instead


def test_repeat_by_zero_counts_and_of_an_empty_axis(xp, rng) -> None:
    h = random_values(rng, (3, 4), np.int16, False)
    got = xp.repeat(xp.asarray(h), xp.asarray(np.zeros(4, np.int64)), axis=1)
    assert got.shape == (3, 0)
    empty = xp.asarray(np.zeros((0, 4), np.float32))
    assert xp.repeat(empty, xp.asarray(np.zeros(0, np.int64)), axis=0).shape == (0, 4)


def test_repeat_refuses_bad_counts_and_keeps_serving(xp, rng) -> None:
    h = random_values(rng, (4, 3), np.float64, False)
    x = xp.asarray(h)
    with pytest.raises(ValueError, match="non-negative"):
        xp.repeat(x, xp.asarray(np.array([1, -1, 2, 0])), axis=0)
    with pytest.raises(ValueError, match="repeats for an axis"):
        xp.repeat(x, xp.asarray(np.array([1, 2])), axis=0)
    with pytest.raises(TypeError):
        xp.repeat(x, xp.asarray(np.array([1.0, 2.0, 1.0])), axis=1)
    with pytest.raises(TypeError):
        xp.repeat(x, xp.asarray(np.ones((3, 1), np.int64)), axis=1)
    # counts whose sum passes int64 (it would wrap to a small total): refused, not computed
    with pytest.raises(ValueError, match="2\\*\\*63"):
        xp.repeat(x, xp.asarray(np.full(4, 2**62, np.int64)), axis=0)
    # a total that fits int64 but no device: the device's refusal, nothing made on the host
    with pytest.raises(OutOfMemory):
        xp.repeat(x, xp.asarray(np.full(4, 2**40, np.int64)), axis=0)
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, 2, axis=0)), np.repeat(h, 2, axis=0))


def test_broadcast(xp, rng) -> None:
    a = random_values(rng, (4, 1), np.float32, False)
    b = random_values(rng, (3,), np.float32, False)
    xa, xb = xp.broadcast_arrays(xp.asarray(a), xp.asarray(b))
    assert xa.shape == xb.shape == (4, 3)
    np.testing.assert_array_equal(np.asarray(xa), np.broadcast_to(a, (4, 3)))
    with pytest.raises(ValueError):
        xp.broadcast_to(xp.asarray(b), (3, 2))


def test_diff(xp, rng) -> None:
    h = random_values(rng, (4, 7), np.float64, False)
    x = xp.asarray(h)
    np.testing.assert_allclose(np.asarray(xp.diff(x, n=2)), np.diff(h, n=2))
    np.testing.assert_allclose(np.asarray(xp.diff(x, axis=0, prepend=x[:1])),
                               np.diff(h, axis=0, prepend=h[:1]))
