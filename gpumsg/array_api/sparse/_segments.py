"""Sums of the runs of sorted sparse entries, and gathers of values, as generated kernels.

``segment_sums(values, order, starts)``: run ``r`` of the sorted entries covers sorted positions
``starts[r]`` to ``starts[r + 1] - 1``; sorted position ``k`` is the entry at ``order[k]`` of
``values``; the run's sum is taken in ``values``' own type, left to right from its first entry
(so a run of one entry is that entry, bit for bit, ``-0.0`` included), complex parts apart. One
thread a run. This is how :func:`~._primitives.coalesce` sums repeated positions: an earlier
SpMV with a selection matrix (row ``r`` holding ones at the run's positions) answered a wrong
last row on its first call on an H200 with every input verified in place, so the entries'
arithmetic no longer goes through cuSPARSE. The simulator runs the NumPy twin."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from .._array import Array, new_array
from .._codegen import kernel_for

__all__ = ["segment_sums"]

#: value dtype -> (C type of one part, parts per element)
_PARTS = {np.dtype(np.float32): ("float", 1), np.dtype(np.float64): ("double", 1),
          np.dtype(np.complex64): ("float", 2), np.dtype(np.complex128): ("double", 2)}
_INDEX = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}


def _render(dt: np.dtype, order_dt: np.dtype, starts_dt: np.dtype) -> tuple[
        str, str, tuple[str, ...]]:
    part, parts = _PARTS[dt]
    oi, si = _INDEX[order_dt], _INDEX[starts_dt]
    name = f"gm_segsum_{dt.name}_{order_dt.name}_{starts_dt.name}"
    src = f"""
extern "C" __global__ void {name}(long long nrun, {part}* __restrict__ out,
    const {part}* __restrict__ vals, const {oi}* __restrict__ order,
    const {si}* __restrict__ starts) {{
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < nrun;
       r += (long long)blockDim.x * gridDim.x) {{
    const long long lo = (long long)starts[r], hi = (long long)starts[r + 1];
    for (int c = 0; c < {parts}; ++c) {{
      {part} acc = vals[(long long)order[lo] * {parts} + c];
      for (long long k = lo + 1; k < hi; ++k) acc += vals[(long long)order[k] * {parts} + c];
      out[r * {parts} + c] = acc;
    }}
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_twin, dt, order_dt, starts_dt))
    return name, src, ("i64", "ptr", "ptr", "ptr", "ptr")


def _twin(dt: np.dtype, order_dt: np.dtype, starts_dt: np.dtype) -> Any:
    def run(info: Any, nrun: Any, out: np.ndarray, vals: np.ndarray, order: np.ndarray,
            starts: np.ndarray) -> None:
        n = int(nrun)
        st = starts.view(starts_dt)[:n + 1].astype(np.int64)
        picked = vals.view(dt)[order.view(order_dt)[:st[-1]].astype(np.int64)]
        # NumPy may add a long run pairwise where the kernel adds left to right: the sums
        # agree to the dtype's rounding, not bit for bit
        out.view(dt)[:n] = np.add.reduceat(picked, st[:-1]) if n else picked[:0]

    return run


def segment_sums(values: Array, order: Array, starts: Array) -> Array:
    """The sums of ``values[order[starts[r]:starts[r + 1]]]`` for each run ``r`` (``starts``:
    ``nrun + 1`` non-decreasing offsets into ``order``, each run non-empty), a new array of
    ``values``' dtype. ``values``, ``order`` and ``starts`` are whole 1-D arrays."""
    dev = values.device
    nrun = starts.shape[0] - 1
    out = new_array(dev, (nrun,), values.dtype)
    if nrun <= 0:
        return out
    name, source, kinds = _render(values.dtype, order.dtype, starts.dtype)
    kernel = kernel_for(dev, name, source, kinds)
    grid = max(1, min((nrun + 255) // 256, 1 << 16))
    out._wrote(dev.launch(kernel, grid, 256, (nrun, out.buffer, values.buffer, order.buffer,
                                              starts.buffer),
                          reads=[values.buffer, order.buffer, starts.buffer],
                          writes=[out.buffer]))
    return out
