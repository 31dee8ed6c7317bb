"""The fft extension against numpy.fft."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import random_values


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
