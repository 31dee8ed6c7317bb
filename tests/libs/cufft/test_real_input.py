"""dev.fft takes real input to its complex transforms as NumPy does: made complex first, f32 ->
c64 and f64 -> c128, the values numpy.fft's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.libs.harness import assert_close, random_array


def host(dev, fut):
    return dev.copy_to_host(fut.result(60)).result(60)


@pytest.mark.parametrize("dtype, out", [("f32", np.complex64), ("f64", np.complex128)])
@pytest.mark.parametrize("name, shape, kw", [
    ("fft", (6, 40), {}), ("ifft", (33,), {"norm": "ortho"}), ("fft", (5, 16), {"n": 20}),
    ("fft2", (12, 10), {}), ("ifftn", (4, 6, 8), {"axes": (0, 2)}),
    ("fftn", (3, 8, 5), {})])
def test_complex_transform_of_real_input(dev, rng, dtype, out, name, shape, kw) -> None:
    x = random_array(rng, shape, dtype)
    got = host(dev, getattr(dev.fft, name)(dev.to_device(x), **kw))
    ref = getattr(np.fft, name)(x.astype(np.float64), **kw)
    assert got.dtype == out and got.shape == ref.shape
    assert_close(got, ref, "c64" if dtype == "f32" else "c128")


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_irfft_of_real_input(dev, rng, dtype) -> None:
    x = random_array(rng, (4, 17), dtype)
    got = host(dev, dev.fft.irfft(dev.to_device(x)))
    ref = np.fft.irfft(x.astype(np.float64))
    assert got.dtype == x.dtype and got.shape == ref.shape
    assert_close(got, ref, dtype)


def test_input_is_untouched_and_the_copy_is_freed(dev, rng) -> None:
    x = random_array(rng, (64,), "f32")
    xd = dev.to_device(x)
    for _ in range(3):
        host(dev, dev.fft.fft(xd))
    np.testing.assert_array_equal(dev.copy_to_host(xd).result(60), x)
