"""Inputs and references of the cuFFT tests: random complex and real arrays, strided (advanced)
layouts and the NumPy transform of the data a layout addresses."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

import gpumsg
from gpumsg.messages.cufft import FftSpec
from tests.libs.harness import wide

CPLX = {"f32": np.complex64, "f64": np.complex128}


REAL = {"f32": np.float32, "f64": np.float64}


PREC = {"c64": "f32", "c128": "f64", "f32": "f32", "f64": "f64"}


NORMS = ["backward", "ortho", "forward"]


SHAPE = (6, 7, 11)  # odd and prime sizes


def crand(rng, shape, dtype) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


# -- explicit plans, advanced layouts -----------------------------------------------------------
def _strides(embed, stride, item):
    out, inner = [], stride
    for e in reversed(embed):
        out.append(inner * item)
        inner *= e
    return tuple(reversed(out))


def layout(flat: np.ndarray, dims, embed, stride, dist, batch, offset=0) -> np.ndarray:
    """The (batch, *dims) view of a cuFFT layout over a host array."""
    item = flat.itemsize
    return as_strided(flat[offset:], (batch, *dims), (dist * item, *_strides(embed, stride,
                                                                                item)),
                      writeable=True)


def reference(kind, x: np.ndarray, n, direction) -> np.ndarray:
    axes = tuple(range(1, len(n) + 1))
    if kind == "c2c":
        return (np.fft.fftn(wide(x), axes=axes) if direction == "forward"
                else np.fft.ifftn(wide(x), axes=axes, norm="forward"))
    if kind == "r2c":
        return np.fft.rfftn(wide(x), axes=axes)
    return np.fft.irfftn(wide(x), s=n, axes=axes, norm="forward")


def flat_random(rng, count: int, dtype: str) -> np.ndarray:
    t = gpumsg.as_dtype(dtype)
    return crand(rng, count, t) if t.kind == "c" else (rng.standard_normal(count) + 0.1
                                                        ).astype(t)


def _input(rng, spec: FftSpec, count: int, offset: int) -> np.ndarray:
    flat = flat_random(rng, count, spec.in_dtype)
    if spec.kind == "c2r":
        # a consistent half spectrum: the forward transform of real data, in the input layout
        real = rng.standard_normal((spec.batch, *spec.n))
        half = np.fft.rfftn(real, axes=tuple(range(1, len(spec.n) + 1)))
        layout(flat, spec.in_dims, spec.inembed, spec.istride, spec.idist, spec.batch,
               offset)[...] = half
    return flat
