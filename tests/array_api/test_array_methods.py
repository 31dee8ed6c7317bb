"""The NumPy- and CuPy-style methods of an array (``x.sum()``, ``x.reshape(...)``, ...), on an
Array and on a buffer, checked against NumPy on random data, on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values

from tests.tolerance import assert_rel, sum_cond


@pytest.fixture(params=["array", "buffer"])
def make(request, xp, dev):
    """``make(host)``: an Array of ``host``, or a gpumsg buffer of it."""
    if request.param == "array":
        return xp.asarray
    return dev.to_device


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), [1, 2]])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(make, rng, axis, keepdims) -> None:
    h = random_values(rng, (3, 4, 5), np.float64, False)
    x = make(h)
    ax = tuple(axis) if isinstance(axis, list) else axis
    n = h.size if ax is None else int(np.prod([h.shape[a] for a in np.atleast_1d(ax)]))
    for name in ("sum", "prod", "mean"):
        got = getattr(x, name)(axis=axis, keepdims=keepdims)
        # signed terms may cancel: a sum's (and a mean's) error grows by its condition number
        cond = 1.0 if name == "prod" else sum_cond(h, ax)
        assert_rel(np.asarray(got), getattr(h, name)(axis=ax, keepdims=keepdims), "f64", n=n,
                   cond=cond)
    for name in ("max", "min"):
        got = getattr(x, name)(axis=axis, keepdims=keepdims)
        np.testing.assert_array_equal(np.asarray(got),
                                      getattr(h, name)(axis=ax, keepdims=keepdims))
    for ddof in (0, 1):
        for name in ("var", "std"):
            got = getattr(x, name)(axis=axis, ddof=ddof, keepdims=keepdims)
            ref = getattr(h, name)(axis=ax, ddof=ddof, keepdims=keepdims)
            assert_rel(np.asarray(got), ref, "f64", n=n, c=8.0)
    b = make((h > 0.25).astype(np.uint8))  # buffers hold no bool: bytes, tested != 0
    for name in ("all", "any"):
        np.testing.assert_array_equal(np.asarray(getattr(b, name)(axis=axis, keepdims=keepdims)),
                                      getattr(h > 0.25, name)(axis=ax, keepdims=keepdims))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_arg_extremes_and_cumsum(make, rng, axis) -> None:
    h = random_values(rng, (6, 7), np.float32, False)
    x = make(h)
    np.testing.assert_array_equal(np.asarray(x.argmax(axis=axis)), h.argmax(axis=axis))
    np.testing.assert_array_equal(np.asarray(x.argmin(axis=axis)), h.argmin(axis=axis))
    got = x.cumsum(axis=axis)
    assert got.shape == np.cumsum(h, axis=axis).shape
    assert_rel(np.asarray(got), np.cumsum(h.astype(np.float64), axis=axis), "f32", n=42)
    i = make(random_values(rng, (6, 7), np.int16, False) % 100)
    hi = np.asarray(i)
    assert np.asarray(i.sum(axis=axis)).dtype == np.int64
    np.testing.assert_array_equal(np.asarray(i.sum(axis=axis)), hi.sum(axis=axis))
    np.testing.assert_array_equal(np.asarray(i.sum(axis=axis, dtype="int32")),
                                  hi.sum(axis=axis, dtype=np.int32))
    np.testing.assert_array_equal(np.asarray(i.cumsum(axis=axis)), hi.cumsum(axis=axis))


def test_dtype_and_correction_arguments(make, rng) -> None:
    h = random_values(rng, (5, 6), np.float32, False)
    x = make(h)
    got = x.mean(axis=0, dtype="float64")
    assert got.dtype == np.float64
    assert_rel(np.asarray(got), h.astype(np.float64).mean(axis=0), "f64", n=5,
               cond=sum_cond(h.astype(np.float64), 0))
    assert_rel(np.asarray(x.std(correction=1)), h.astype(np.float64).std(ddof=1), "f32", n=30)
    with pytest.raises(ValueError, match="ddof or correction"):
        x.var(ddof=1, correction=1)


def test_out_argument(xp, make, dev, rng) -> None:
    h = random_values(rng, (4, 5), np.float64, False)
    x = make(h)
    out = xp.empty((5,), dtype=xp.float64)
    assert x.sum(axis=0, out=out) is out
    assert_rel(np.asarray(out), h.sum(axis=0), "f64", n=4, cond=sum_cond(h, 0))
    obuf = dev.alloc((4,), np.float64)
    assert x.max(axis=1, out=obuf) is obuf
    np.testing.assert_array_equal(np.asarray(obuf), h.max(axis=1))
    with pytest.raises(ValueError, match="shape"):
        x.min(out=out)
    with pytest.raises(TypeError, match="out must be"):
        x.sum(out=np.empty(()))


@pytest.mark.parametrize("order", ["C", "F"])
def test_shape_methods(make, rng, order) -> None:
    h = random_values(rng, (2, 3, 4), np.float32, False)
    x = make(np.asarray(h, order=order))
    for got, ref in ((x.reshape(6, 4), h.reshape(6, 4)), (x.reshape((4, -1)), h.reshape(4, -1)),
                     (x.reshape(4, 6, order="F"), h.reshape(4, 6, order="F")),
                     (x.reshape((3, 8), order="F"), h.reshape(3, 8, order="F")),
                     (x.transpose(), h.transpose()), (x.transpose(1, 0, 2), h.transpose(1, 0, 2)),
                     (x.transpose((2, 0, 1)), h.transpose(2, 0, 1)),
                     (x.swapaxes(0, -1), h.swapaxes(0, -1)), (x.flatten(), h.flatten()),
                     (x.ravel(), h.ravel()), (x.copy(), h),
                     (x[:, :1].squeeze(), h[:, :1].squeeze()),
                     (x[:1, :, :1].squeeze(axis=0), h[:1, :, :1].squeeze(axis=0))):
        assert got.shape == ref.shape
        np.testing.assert_array_equal(np.asarray(got), ref)
    with pytest.raises(ValueError, match="order"):
        x.reshape(24, order="K")


def test_copies_are_new_memory(xp, rng) -> None:
    h = random_values(rng, (3, 4), np.float32, False)
    x = xp.asarray(h)
    c, f = x.copy(), x.flatten()
    x[...] = 0.0
    np.testing.assert_array_equal(np.asarray(c), h)
    np.testing.assert_array_equal(np.asarray(f), h.ravel())
    assert x.nbytes == h.nbytes and x.itemsize == 4


def test_conversions_and_elementwise_methods(make, rng) -> None:
    h = random_values(rng, (4, 5), np.float64, False) * 10
    x = make(h)
    got = x.astype("float32")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(got), h.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(x.clip(-1.0, 2.0)), h.clip(-1.0, 2.0))
    np.testing.assert_array_equal(np.asarray(x.clip(max=0.5)), np.minimum(h, 0.5))
    np.testing.assert_array_equal(np.asarray(x.round()), h.round())
    for d in (1, 2, -1):
        np.testing.assert_allclose(np.asarray(x.round(d)), h.round(d), rtol=1e-15, atol=1e-12)
    z = make((h + 1j * h[::-1]).astype(np.complex128))
    np.testing.assert_array_equal(np.asarray(z.conj()), np.conj(np.asarray(z)))
    np.testing.assert_array_equal(x.get(), h)
    assert x.tolist() == h.tolist()
    assert x[1, 2].item() == h[1, 2]


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint16", "int8"])
def test_integer_round(make, rng, dtype) -> None:
    info = np.iinfo(dtype)
    h = random_values(rng, (64,), dtype, False)
    h[:4] = np.array([15, 25, -15 if info.min < 0 else 35, 5], dtype)  # the halves
    x = make(h)
    span = 2 ** info.bits
    for d in (0, 2, -1, -2, -30):
        # exact, half to even (Python's round of ints), wrapped into the dtype as NumPy's
        # (whose int64 rounding goes through float64 and is off past 2**53)
        ref = [(round(int(v), d) - int(info.min)) % span + int(info.min) for v in h]
        np.testing.assert_array_equal(np.asarray(x.round(d)), np.array(ref, dtype))


def test_numpy_functions_call_the_methods(make, rng) -> None:
    """NumPy's reductions and shape functions call an object's method of the same name: on an
    array or a buffer they run on the device and answer a gpumsg array. The sums are held to
    their condition (random signed terms may cancel: a mean of -0.004 from terms near 1 has a
    relative error 250 times its terms')."""
    import gpumsg.array_api as xpm

    h = random_values(rng, (4, 6), np.float64, False)
    x = make(h)
    prefix = float(np.linalg.norm(np.cumsum(abs(h), 1)) / np.linalg.norm(h.cumsum(1)))
    for got, ref, cond in ((np.sum(x, axis=0), h.sum(0), sum_cond(h, 0)),
                           (np.mean(x), h.mean(), sum_cond(h)),
                           (np.max(x, axis=1, keepdims=True), h.max(1, keepdims=True), 1.0),
                           (np.std(x, ddof=1), h.std(ddof=1), 1.0),
                           (np.argmin(x, axis=0), h.argmin(0), 1.0),
                           (np.cumsum(x, axis=1), h.cumsum(1), prefix),
                           (np.transpose(x), h.T, 1.0),
                           (np.reshape(x, (3, 8)), h.reshape(3, 8), 1.0),
                           (np.round(x, 1), h.round(1), 1.0),
                           (np.clip(x, -1.0, 1.0), h.clip(-1.0, 1.0), 1.0)):
        assert isinstance(got, xpm.Array)
        assert_rel(np.asarray(got), ref, "f64", n=24, c=8.0, cond=cond)
