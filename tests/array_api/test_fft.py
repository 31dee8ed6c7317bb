"""The fft extension against numpy.fft."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values

import gpumsg


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_transforms(xp, rng, norm) -> None:
    c = random_values(rng, (4, 6, 8), np.complex128, False)
    r = random_values(rng, (4, 6, 8), np.float64, False)
    f = xp.fft
    xc, xr = xp.asarray(c), xp.asarray(r)
    cases = [
        (f.fft(xc, norm=norm), np.fft.fft(c, norm=norm)),
        (f.ifft(xc, n=5, axis=1, norm=norm), np.fft.ifft(c, n=5, axis=1, norm=norm)),
        (f.fftn(xc, norm=norm), np.fft.fftn(c, norm=norm)),
        (f.ifftn(xc, s=(3, 8), axes=(0, 2), norm=norm),
         np.fft.ifftn(c, s=(3, 8), axes=(0, 2), norm=norm)),
        (f.rfft(xr, norm=norm), np.fft.rfft(r, norm=norm)),
        (f.irfft(xc, n=10, norm=norm), np.fft.irfft(c, n=10, norm=norm)),
        (f.rfftn(xr, norm=norm), np.fft.rfftn(r, norm=norm)),
        (f.irfftn(xc, norm=norm), np.fft.irfftn(c, norm=norm)),
        (f.hfft(xc, norm=norm), np.fft.hfft(c, norm=norm)),
        (f.ihfft(xr, norm=norm), np.fft.ihfft(r, norm=norm)),
        (f.fft(xc[:, ::2].mT, norm=norm), np.fft.fft(np.swapaxes(c[:, ::2], -1, -2),
                                                     norm=norm)),
    ]
    for got, ref in cases:
        assert got.shape == ref.shape
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-10, atol=1e-10)


def test_helpers(xp, rng) -> None:
    f = xp.fft
    np.testing.assert_allclose(np.asarray(f.fftfreq(7, d=0.5)), np.fft.fftfreq(7, 0.5))
    np.testing.assert_allclose(np.asarray(f.rfftfreq(8)), np.fft.rfftfreq(8))
    h = random_values(rng, (5, 6), np.float32, False)
    x = xp.asarray(h)
    np.testing.assert_array_equal(np.asarray(f.fftshift(x)), np.fft.fftshift(h))
    np.testing.assert_array_equal(np.asarray(f.ifftshift(x, axes=(1,))),
                                  np.fft.ifftshift(h, axes=(1,)))
    with pytest.raises(TypeError):
        f.fft(x)  # a real array: rfft is the transform for it


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
def test_frequencies_are_numpys_and_made_on_the_device(xp, rng, name) -> None:
    """Bit for bit NumPy's (integer indices times 1 / (n d) in float64, then the dtype), for
    random windows and spacings; a window too long for the device is refused as device
    memory (OutOfMemory) before any host copy of it is made (a host copy of 2**31 float64
    frequencies ended a fuzz run's interpreter)."""
    fn, ref = getattr(xp.fft, name), getattr(np.fft, name)
    for n in [1, 2, 3, *rng.integers(4, 5000, 4).tolist()]:
        d = float(rng.uniform(-3, 3)) or 1.0
        for dt, npdt in ((None, np.float64), (xp.float32, np.float32)):
            got = np.asarray(fn(n, d, dtype=dt))
            assert got.dtype == npdt
            np.testing.assert_array_equal(got, ref(n, d).astype(npdt))
    with pytest.raises(gpumsg.OutOfMemory):
        fn(2 ** 40, 1.0)


def test_numpy_surface(xp, rng) -> None:
    """The 18 functions of numpy.fft, with NumPy's positional arguments and ``norm=None``."""
    f = xp.fft
    names = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2",
             "rfftn", "irfftn", "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
    assert all(callable(getattr(f, n)) for n in names)
    c = random_values(rng, (3, 6, 8), np.complex128, False)
    r = random_values(rng, (3, 6, 8), np.float64, False)
    xc, xr = xp.asarray(c), xp.asarray(r)
    cases = [
        (f.fft2(xc), np.fft.fft2(c)),
        (f.ifft2(xc, (4, 5), (0, 2), "ortho"), np.fft.ifft2(c, (4, 5), (0, 2), "ortho")),
        (f.rfft2(xr, None, (-2, -1), None), np.fft.rfft2(r)),
        (f.irfft2(xc, (6, 10)), np.fft.irfft2(c, (6, 10))),
        (f.fft(xc, 5, 1, None), np.fft.fft(c, 5, 1)),
        (f.irfft(xc, 9, 0, "forward"), np.fft.irfft(c, 9, 0, "forward")),
        (f.hfft(xc, 12, 1, "ortho"), np.fft.hfft(c, 12, 1, "ortho")),
        (f.ihfft(xr, 7, 0, None), np.fft.ihfft(r, 7, 0)),
        (f.fftshift(xr, (0, 2)), np.fft.fftshift(r, (0, 2))),
        (f.fftfreq(9, 0.25), np.fft.fftfreq(9, 0.25)),
        (f.rfftfreq(9, 0.25), np.fft.rfftfreq(9, 0.25)),
    ]
    for got, ref in cases:
        assert got.shape == ref.shape
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-10, atol=1e-10)
    c32 = c.astype(np.complex64)
    np.testing.assert_allclose(np.asarray(f.fft2(xp.asarray(c32))), np.fft.fft2(c),
                               rtol=2e-5, atol=2e-4)
    with pytest.raises(ValueError):
        f.fft2(xc, (4, 5, 6), (0, 1))
    with pytest.raises(ValueError):
        f.fft(xc, norm="both")
