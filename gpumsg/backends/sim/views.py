"""Views of simulated device memory as NumPy arrays: column-major matrices with leading
dimensions and strided vectors, bounds-checked (a stray range is a sticky illegal-address fault).
Library simulations (``gpumsg/libs/<library>/sim.py``) build on these."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .device import SimBackend

__all__ = ["matrix", "vector", "strided"]


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def strided(sim: SimBackend, ptr: int, span: int, dtype: np.dtype, shape: tuple,
             strides: tuple) -> np.ndarray:
    # as_strided goes through the array interface, which the ml_dtypes types (bf16, fp8) do not
    # survive: stride a same-size unsigned view instead and view the result back
    carrier = dtype if dtype.isbuiltin == 1 else np.dtype(_UINT[dtype.itemsize])
    flat = sim.view(ptr, span).view(carrier)
    out = as_strided(flat, shape=shape, strides=strides)
    return out if carrier is dtype else out.view(dtype)


def matrix(sim: SimBackend, ptr: int, rows: int, cols: int, ld: int, dtype: Any) -> np.ndarray:
    """A writable view of the column-major ``rows`` x ``cols`` matrix at ``ptr`` with leading
    dimension ``ld`` (elements). Out-of-bounds ranges raise an illegal-address fault."""
    dtype = np.dtype(dtype)
    if rows == 0 or cols == 0:
        return np.empty((rows, cols), dtype)
    span = (ld * (cols - 1) + rows) * dtype.itemsize
    return strided(sim, ptr, span, dtype, (rows, cols), (dtype.itemsize, ld * dtype.itemsize))


def vector(sim: SimBackend, ptr: int, n: int, inc: int, dtype: Any) -> np.ndarray:
    """A writable view of ``n`` elements at stride ``inc`` starting at ``ptr``."""
    dtype = np.dtype(dtype)
    if n == 0:
        return np.empty(0, dtype)
    return strided(sim, ptr, ((n - 1) * inc + 1) * dtype.itemsize, dtype, (n,),
                    (inc * dtype.itemsize,))
