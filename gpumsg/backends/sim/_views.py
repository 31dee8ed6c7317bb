"""Views of simulated device memory as NumPy arrays: column-major matrices with leading
dimensions and strided vectors, bounds-checked (a stray range is a sticky illegal-address fault).
Library simulations (``gpumsg/libs/<library>/sim.py``) build on these."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._device import SimBackend, SimFault

__all__ = ["matrix", "vector", "strided"]


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def strided(sim: SimBackend, ptr: int, span: int, dtype: np.dtype, shape: tuple,
            strides: tuple) -> np.ndarray:
    """A writable view of ``shape`` elements at byte ``strides`` from ``ptr``. The bytes the
    view can reach are computed here from ``shape`` and ``strides`` (in Python integers, so a
    NumPy scalar cannot wrap; negative strides reach below ``ptr``) and must lie inside one
    live allocation, else an illegal-address fault: whatever ``span`` the caller computed,
    ``as_strided`` never reaches host memory outside the simulated buffer."""
    shape = tuple(operator.index(n) for n in shape)
    strides = tuple(operator.index(s) for s in strides)
    if any(n < 0 for n in shape):
        raise SimFault(700, f"negative extent {shape} at {ptr:#x}")
    if 0 in shape:
        return np.empty(shape, dtype)
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + dtype.itemsize
    # as_strided goes through the array interface, which the ml_dtypes types (bf16, fp8) do not
    # survive: stride a same-size unsigned view instead and view the result back
    carrier = dtype if dtype.isbuiltin == 1 else np.dtype(_UINT[dtype.itemsize])
    flat = sim.view(ptr + lo, hi - lo)
    out = as_strided(flat[-lo:].view(carrier), shape=shape, strides=strides)
    return out if carrier is dtype else out.view(dtype)


def matrix(sim: SimBackend, ptr: int, rows: int, cols: int, ld: int, dtype: Any) -> np.ndarray:
    """A writable view of the column-major ``rows`` x ``cols`` matrix at ``ptr`` with leading
    dimension ``ld`` (elements). Out-of-bounds ranges raise an illegal-address fault."""
    dtype = np.dtype(dtype)
    rows, cols, ld = operator.index(rows), operator.index(cols), operator.index(ld)
    if rows == 0 or cols == 0:
        return np.empty((rows, cols), dtype)
    span = (ld * (cols - 1) + rows) * dtype.itemsize
    return strided(sim, ptr, span, dtype, (rows, cols), (dtype.itemsize, ld * dtype.itemsize))


def vector(sim: SimBackend, ptr: int, n: int, inc: int, dtype: Any) -> np.ndarray:
    """A writable view of ``n`` elements at stride ``inc`` starting at ``ptr``."""
    dtype = np.dtype(dtype)
    n, inc = operator.index(n), operator.index(inc)
    if n == 0:
        return np.empty(0, dtype)
    return strided(sim, ptr, ((n - 1) * inc + 1) * dtype.itemsize, dtype, (n,),
                    (inc * dtype.itemsize,))
