"""``x[key]`` and ``x[key] = value`` against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import in_threads, random_values

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


ADVANCED = [
    lambda a, i, j, m: (i,),
    lambda a, i, j, m: (slice(None), j),
    lambda a, i, j, m: (j, slice(1, 3), i),  # apart: the index dimensions lead
    lambda a, i, j, m: (0, slice(None), i),  # an int counts as an index array here
    lambda a, i, j, m: (Ellipsis, i),
    lambda a, i, j, m: (None, i, 1),
    lambda a, i, j, m: (np.abs(a.astype(np.complex128)) > 1,),
    lambda a, i, j, m: (m, slice(None, None, -1)),
    lambda a, i, j, m: (slice(None), slice(1, None), -i),  # negative indices count from the end
]


@pytest.mark.parametrize("case", range(len(ADVANCED)))
@pytest.mark.parametrize("dtype", ["bool", "int16", "float32", "float64", "complex128"])
def test_advanced_getitem(xp, rng, case, dtype) -> None:
    a = random_values(rng, (4, 5, 6), np.dtype(dtype))
    i = rng.integers(-4, 4, size=4)
    j = rng.integers(0, 4, size=(2, 1))
    m = rng.random((4, 5)) < 0.5
    key = ADVANCED[case](a, i, j, m)
    dkey = tuple(xp.asarray(k) if isinstance(k, np.ndarray) else k for k in key)
    x = xp.asarray(a)
    got = x[dkey]
    ref = a[key]
    assert got.shape == ref.shape and got.dtype == x.dtype
    assert np.asarray(got).tobytes() == ref.tobytes()


def test_take(xp, rng) -> None:
    h = random_values(rng, (6, 4, 3), np.float32)
    x = xp.asarray(h)
    idx = rng.integers(-6, 6, size=9)
    for axis in (0, -1):
        k = idx % h.shape[axis] - (h.shape[axis] if axis else 0)
        np.testing.assert_array_equal(np.asarray(xp.take(x, xp.asarray(k), axis=axis)),
                                      np.take(h, k, axis=axis))
    v = xp.asarray(h[:, 0, 0])
    np.testing.assert_array_equal(np.asarray(xp.take(v, xp.asarray(idx.astype(np.int32)))),
                                  np.take(h[:, 0, 0], idx))
    with pytest.raises(ValueError):
        xp.take(x, xp.asarray(idx))
    with pytest.raises(TypeError):
        xp.take(x, xp.asarray(np.ones(2)), axis=0)


@pytest.mark.parametrize("dtype", ["uint8", "int64", "float16", "complex64"])
def test_take_along_axis(xp, rng, dtype) -> None:
    h = random_values(rng, (5, 7, 3), np.dtype(dtype))
    x = xp.asarray(h)
    for axis in (0, 1, -1):
        idx = rng.integers(0, h.shape[axis], size=h.shape)
        got = xp.take_along_axis(x, xp.asarray(idx), axis=axis)
        assert np.asarray(got).tobytes() == np.take_along_axis(h, idx, axis=axis).tobytes()
    idx = rng.integers(0, 7, size=(1, 4, 3))  # broadcast over the first axis
    np.testing.assert_array_equal(np.asarray(xp.take_along_axis(x, xp.asarray(idx), axis=1)),
                                  np.take_along_axis(h, idx, axis=1))


def test_advanced_edges(xp, rng) -> None:
    h = random_values(rng, (3, 4), np.float64)
    x = xp.asarray(h)
    assert x[xp.asarray(np.zeros(0, np.int64))].shape == (0, 4)
    assert x[xp.asarray(np.zeros((3, 4), bool))].shape == (0,)
    np.testing.assert_array_equal(np.asarray(x[True]), h[True])
    assert x[False].shape == h[False].shape
    with pytest.raises(IndexError):  # past the end raises when read (no wrap-around)
        np.asarray(x[xp.asarray(np.array([4, -4]))])
    with pytest.raises(IndexError):
        x[xp.asarray(np.ones(2))]
    with pytest.raises(IndexError):
        x[xp.asarray(np.ones(2, bool))]  # a mask of the wrong shape
    assert x[xp.asarray(np.ones((0, 4), bool))].shape == (0,)  # an empty mask selects nothing
    assert x[xp.asarray(np.ones(0, bool))].shape == (0, 4)
    with pytest.raises(IndexError):
        x[0, 0, xp.asarray(np.array([0]))]


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


@pytest.mark.parametrize("dtype", ["int8", "float32", "complex128"])
def test_advanced_setitem(xp, rng, dtype) -> None:
    dt = np.dtype(dtype)
    h = random_values(rng, (5, 6, 3), dt)
    x = xp.asarray(h)
    i = rng.permutation(5)[:3] - 2  # distinct, some negative
    v = random_values(rng, (3, 6, 3), dt)
    x[xp.asarray(i)] = xp.asarray(v)
    h[i] = v
    j = rng.permutation(6)[:2]
    x[:, xp.asarray(j), 1] = xp.asarray(v[:, :2, 0].T[None, :, 0])  # broadcast value
    h[:, j, 1] = v[:, :2, 0].T[None, :, 0]
    mask = rng.random((5, 6, 3)) < 0.4
    x[xp.asarray(mask)] = 1  # a where: no count needed
    h[mask] = 1
    m2 = rng.random(5) < 0.5
    vals = random_values(rng, (int(m2.sum()), 6, 3), dt)
    x[xp.asarray(m2)] = xp.asarray(vals)
    h[m2] = vals
    # the value is read before the scatter writes
    x[xp.asarray(np.array([1, 3])), 2] = x[xp.asarray(np.array([3, 1])), 2]
    h[[1, 3], 2] = h[[3, 1], 2].copy()
    assert np.asarray(x).tobytes() == h.tobytes()


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


@pytest.mark.parametrize("index", ["int8", "int32", "int64", "uint8", "uint64"])
def test_one_index_array_is_one_checked_gather(xp, dev, rng, posted, index) -> None:
    """``x[i]`` with one device index array: the gather (which computes each offset itself)
    and the check, two messages (the thread's flag is made once); any integer dtype; an index
    outside ``[-n, n)`` is refused, the array answering with IndexOutOfRange where it is
    read, and the gathers after it are checked as before."""
    import gpumsg
    from gpumsg.messages import Alloc, AllocThen, Free, IndexCheck, Launch, Memset

    h = random_values(rng, (6, 5), np.float64, False)
    x = xp.asarray(h)
    lo = -6 if np.dtype(index).kind == "i" else 0
    ih = rng.integers(lo, 6, size=(3, 4)).astype(index)
    i = xp.asarray(ih)
    np.testing.assert_array_equal(np.asarray(x[i]), h[ih])  # compiles once
    j = i[:, :1] % 5
    np.asarray(j)
    sent = posted(dev, Alloc, AllocThen, Launch, Memset, IndexCheck, Free)
    got = x[:, j]
    assert [type(m).__name__ for m in sent] == ["AllocThen", "IndexCheck"]
    assert type(sent[0].then) is Launch
    np.testing.assert_array_equal(np.asarray(got), h[:, ih[:, :1] % 5])
    bad = np.array([1, 6] if lo == 0 else [1, -7], dtype=index)
    for _ in range(2):  # a flag left holding a found token does not fail the next gathers
        with pytest.raises(gpumsg.IndexOutOfRange, match="outside"):
            np.asarray(x[xp.asarray(bad)])
        np.testing.assert_array_equal(np.asarray(x[i]), h[ih])
    if index == "uint64":  # compared unsigned: 2**64 - 1 is not -1
        with pytest.raises(gpumsg.IndexOutOfRange):
            np.asarray(x[xp.asarray(np.array([2**64 - 1], np.uint64))])
    np.testing.assert_array_equal(np.asarray(x[i]), h[ih])  # the device serves on


def test_threads_gathering_at_once_each_get_their_own_verdict(xp, rng) -> None:
    """Threads interleave gathers and scatters with indices in and out of range, pipelined
    (several posted before any is read): each result is refused exactly when its own indices
    were out of range, never for another thread's, and the others hold NumPy's values."""
    import gpumsg

    h = random_values(rng, (50, 3), np.float32, False)
    x = xp.asarray(h)
    good_h = rng.integers(-50, 50, size=40)
    bad_h = good_h.copy()
    bad_h[17] = 50
    good, bad = xp.asarray(good_h), xp.asarray(bad_h)

    def work(seed: int) -> None:
        pick = np.random.default_rng(seed).random(60) < 0.3
        pending = [(x[bad if b else good], b) for b in pick]  # posted before any read
        for got, was_bad in pending:
            if was_bad:
                with pytest.raises(gpumsg.IndexOutOfRange):
                    np.asarray(got)
            else:
                np.testing.assert_array_equal(np.asarray(got), h[good_h])
        want = h.copy()
        want[good_h] = 2.0
        for b in pick[:20]:  # scatters: the array written is refused, or right
            y = xp.asarray(h)
            y[bad if b else good] = 1.0 if b else 2.0
            if b:
                with pytest.raises(gpumsg.IndexOutOfRange):
                    np.asarray(y)
            else:
                np.testing.assert_array_equal(np.asarray(y), want)

    in_threads(work)


def test_a_gather_of_a_failed_array_raises() -> None:
    """A gather whose input has no valid contents (its allocation failed) raises that where
    the result is read, rather than answering what the memory holds (the failure injected on
    a simulated device of its own)."""
    import gpumsg
    import gpumsg.array_api as xp

    with gpumsg.open_device(0, backend="sim", allow_fault_injection=True) as d:
        x = xp.asarray(np.arange(10, dtype=np.float32), device=d)
        idx = xp.asarray(np.array([1, 2, 3]), device=d)
        with xp.fusion(False):
            xp.exp(x)
            d.synchronize().result()
            d.inject_fault("oom", count=2).result()
            y = xp.exp(x)  # its allocation fails: OutOfMemory, the device serves on
            z = y[idx]
        with pytest.raises(gpumsg.GpuError):
            np.asarray(z)
        np.testing.assert_array_equal(np.asarray(x[idx]), [1, 2, 3])
