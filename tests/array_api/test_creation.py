"""Creation functions against NumPy; the dtypes the standard gives Python data."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import ALL_DTYPES, random_values

import gpumsg.array_api as xpm


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_round_trip(xp, rng, dtype) -> None:
    h = random_values(rng, (3, 4), getattr(xpm, dtype))
    x = xp.asarray(h)
    assert x.dtype == h.dtype and x.shape == h.shape and x.device is xp.default_device()
    got = np.asarray(x)
    assert got.dtype == h.dtype and got.tobytes() == h.tobytes()  # bit for bit, NaN included
    z = xp.asarray(h[0, 0])
    assert z.shape == () and z.ndim == 0 and z.size == 1


def test_python_data(xp) -> None:
    assert xp.asarray(True).dtype == xp.bool
    assert xp.asarray([1, 2]).dtype == xp.int64
    assert xp.asarray([1, 2.5]).dtype == xp.float64
    assert xp.asarray([[1j]]).dtype == xp.complex128
    assert xp.asarray(3).shape == ()
    np.testing.assert_array_equal(np.asarray(xp.asarray([[1, 2], [3, 4]], dtype=xp.int8)),
                                  np.array([[1, 2], [3, 4]], np.int8))
    with pytest.raises(OverflowError):
        xp.asarray(300, dtype=xp.uint8)
    with pytest.raises(ValueError):
        xp.asarray([1.0], copy=False)


def test_python_data_of_numpy_scalars_and_refused_text(xp) -> None:
    # NumPy scalars in a sequence keep their kind, as NumPy keeps it
    assert xp.asarray([np.int64(1), np.int64(2)]).dtype == xp.int64
    assert xp.asarray([np.bool_(True), False]).dtype == xp.bool
    assert xp.asarray([np.float32(1.5), 2]).dtype == xp.float64
    # text and None are not numbers: refused, not parsed ('1' became 1.0 before)
    for bad in (["1", "2"], [[1, 2], [3, None]], [b"1"]):
        with pytest.raises(TypeError):
            xp.asarray(bad)
    with pytest.raises(TypeError):
        xp.linspace("0", 1, 3)
    np.testing.assert_array_equal(np.asarray(xp.linspace(xp.asarray(0.0), 1, 3)),
                                  [0.0, 0.5, 1.0])  # a 0-d array still bounds it


def test_asarray_of_an_array(xp, rng) -> None:
    x = xp.asarray(random_values(rng, (5,), np.float32, False))
    assert xp.asarray(x) is x
    y = xp.asarray(x, copy=True)
    assert y.buffer is not x.buffer
    y[0] = 7.0
    assert float(x[0]) != 7.0
    assert xp.asarray(x, dtype=xp.float64).dtype == xp.float64


def test_fills(xp) -> None:
    np.testing.assert_array_equal(np.asarray(xp.zeros((2, 3), dtype=xp.int16)),
                                  np.zeros((2, 3), np.int16))
    np.testing.assert_array_equal(np.asarray(xp.ones(4, dtype=xp.bool)), np.ones(4, bool))
    f = xp.full((2, 2), -0.0)
    assert np.signbit(np.asarray(f)).all()
    assert np.isnan(np.asarray(xp.full((3,), float("nan")))).all()
    np.testing.assert_array_equal(np.asarray(xp.full((2,), 1 + 2j, dtype=xp.complex64)),
                                  np.full(2, 1 + 2j, np.complex64))
    x = xp.full((2, 3), 5, dtype=xp.uint32)
    assert xp.zeros_like(x).dtype == xp.uint32
    np.testing.assert_array_equal(np.asarray(xp.full_like(x, 9)), np.full((2, 3), 9))
    np.testing.assert_array_equal(np.asarray(xp.ones_like(x, dtype=xp.float32)),
                                  np.ones((2, 3), np.float32))
    assert xp.empty((0, 4)).shape == (0, 4)
    with pytest.raises(TypeError):
        xp.full((2,), 1.5, dtype=xp.int32)


def test_ranges(xp) -> None:
    np.testing.assert_array_equal(np.asarray(xp.arange(5)), np.arange(5))
    np.testing.assert_allclose(np.asarray(xp.arange(1.0, 2.0, 0.25)), np.arange(1, 2, 0.25))
    np.testing.assert_array_equal(np.asarray(xp.arange(10, 2, -3)), np.arange(10, 2, -3))
    np.testing.assert_allclose(np.asarray(xp.linspace(0, 1, 7)), np.linspace(0, 1, 7))
    np.testing.assert_allclose(np.asarray(xp.linspace(0, 1, 4, endpoint=False)),
                               np.linspace(0, 1, 4, endpoint=False))
    np.testing.assert_array_equal(np.asarray(xp.eye(3, 4, k=1)), np.eye(3, 4, k=1))


@pytest.mark.parametrize("dtype", [None, "int8", "uint32", "int64", "float16", "float32",
                                   "float64", "complex64"])
def test_arange_on_the_device(xp, rng, dtype) -> None:
    """arange is a generated ramp kernel: NumPy's values (its step is the difference of the
    first two values), converted to the dtype on store."""
    dt = None if dtype is None else getattr(xpm, dtype)
    start = int(rng.integers(-100, 100))
    step = int(rng.integers(1, 7)) * (1 if rng.random() < 0.5 else -1)
    stop = start + step * int(rng.integers(3, 5000))
    got = xp.arange(start, stop, step, dtype=dt)
    ref = np.arange(start, stop, step, dtype=np.int64)
    if dtype not in (None, "int64"):
        ref = ref.astype(dt)
    if dtype is not None and np.dtype(dt).kind in "fc":
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-3)
    else:
        np.testing.assert_array_equal(np.asarray(got), ref)
    if dtype is None or np.dtype(dt).kind in "fc":
        a, s = float(rng.standard_normal()), 0.1 + float(rng.random())
        b = a + s * float(rng.integers(2, 3000)) + 0.5 * s
        got = np.asarray(xp.arange(a, b, s, dtype=dt))
        ref = np.arange(a, b, s)
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref.astype(got.dtype),
                                   rtol=1e-2 if dtype == "float16" else 1e-6, atol=1e-6)
    assert xp.arange(5, 1).shape == (0,)
    with pytest.raises(ValueError):
        xp.arange(0, 5, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("num,endpoint", [(0, True), (1, True), (1, False), (2, True),
                                          (1001, True), (1001, False)])
def test_linspace_on_the_device(xp, rng, dtype, num, endpoint) -> None:
    a, b = float(rng.standard_normal() * 10), float(rng.standard_normal() * 10)
    if dtype == "complex128":
        a, b = complex(a, -b), complex(b, a)
    got = np.asarray(xp.linspace(a, b, num, dtype=getattr(xpm, dtype), endpoint=endpoint))
    ref = np.linspace(a, b, num, endpoint=endpoint).astype(dtype)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-6 if dtype == "float32" else 1e-13,
                               atol=1e-5 if dtype == "float32" else 1e-12)
    if endpoint and num > 1:
        assert got[-1] == ref[-1]  # the end point exactly
    with pytest.raises(TypeError):
        xp.linspace(0, 1, 5, dtype=xp.int32)


def test_meshgrid_tril_triu(xp, rng) -> None:
    a, b = np.arange(3.0), np.arange(4.0) + 10
    for indexing in ("xy", "ij"):
        got = xp.meshgrid(xp.asarray(a), xp.asarray(b), indexing=indexing)
        for g, r in zip(got, np.meshgrid(a, b, indexing=indexing)):
            np.testing.assert_array_equal(np.asarray(g), r)
    h = random_values(rng, (2, 4, 5), np.float64, False)
    x = xp.asarray(h)
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(np.asarray(xp.tril(x, k=k)), np.tril(h, k=k))
        np.testing.assert_array_equal(np.asarray(xp.triu(x, k=k)), np.triu(h, k=k))


def test_from_dlpack(xp, backend, rng) -> None:
    h = random_values(rng, (3, 3), np.float32, False)
    x = xp.from_dlpack(h)
    np.testing.assert_array_equal(np.asarray(x), h)
    y = xp.asarray(h)
    np.testing.assert_array_equal(np.from_dlpack(y) if backend == "sim" else np.asarray(y), h)
