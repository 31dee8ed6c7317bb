"""``nonzero`` and the compaction behind boolean masks and ``unique_*``: a count per tile
(``cub::BlockReduce``), the tiles' offsets (a scan on the device), then a compaction per tile
(``cub::BlockScan``) writing the positions of the non-zero elements, or another array's elements
there. The total is read back to size the result (a data-dependent shape: these calls wait for
it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array, new_array
from ._codegen import _send
from ._cub import cub_kernel
from ._expr import PRELUDE
from ._gather import whole

__all__ = ["nonzero", "compact"]

THREADS = 256
# -- nonzero: a count per tile (CUB BlockReduce), the tiles' offsets, a compaction per tile
#    (CUB BlockScan) -------------------------------------------------------------------------
TILE_ITEMS = 16
TILE = THREADS * TILE_ITEMS
_COUNT_KINDS = ("i64", "i64", "ptr", "ptr")


def _render_nonzero(dt: np.dtype, write: bool, values: np.dtype | None = None) -> tuple[
        str, str]:
    """The count kernel, or the write kernel: the positions of ``x``'s non-zero elements, or
    (``values``) the elements of a second array at those positions."""
    storage, ct = D.CTYPE[dt][0], D.CTYPE[dt][1]
    test = f"(({ct})({D.CTYPE[dt][3].format('x[j]')}) != ({ct})0)"
    name = f"gm_nonzero_{'write' if write else 'count'}_{D.storage_name(dt)}"
    if dt == D.bool:
        name += "_b"
    vs = "long long"
    if values is not None:
        vs = D.CTYPE[values][0]
        name += f"_v{D.storage_name(values)}"
    head = f"""
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
extern "C" __global__ void {name}(long long n, long long ntiles, const {storage}* __restrict__ x,
"""
    if not write:
        body = head + f"""                                  long long* __restrict__ counts) {{
  typedef cub::BlockReduce<int, {THREADS}> Reduce;
  __shared__ typename Reduce::TempStorage tmp;
  for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {{
    int c = 0;
    for (int k = 0; k < {TILE_ITEMS}; ++k) {{
      const long long j = t * {TILE} + threadIdx.x * {TILE_ITEMS} + k;
      if (j < n && {test}) ++c;
    }}
    const int total = Reduce(tmp).Sum(c);
    if (threadIdx.x == 0) counts[t] = total;
    __syncthreads();
  }}
}}
"""
    else:
        src = f"const {vs}* __restrict__ src, " if values is not None else ""
        body = head + f"""  {src}const long long* __restrict__ offsets,
                                  {vs}* __restrict__ out) {{
  typedef cub::BlockScan<int, {THREADS}> Scan;
  __shared__ typename Scan::TempStorage tmp;
  for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {{
    int c = 0;
    for (int k = 0; k < {TILE_ITEMS}; ++k) {{
      const long long j = t * {TILE} + threadIdx.x * {TILE_ITEMS} + k;
      if (j < n && {test}) ++c;
    }}
    int start;
    Scan(tmp).ExclusiveSum(c, start);
    long long at = offsets[t] + start;
    for (int k = 0; k < {TILE_ITEMS}; ++k) {{
      const long long j = t * {TILE} + threadIdx.x * {TILE_ITEMS} + k;
      if (j < n && {test}) out[at++] = {'src[j]' if values is not None else 'j'};
    }}
    __syncthreads();
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_nonzero_twin, dt, write, values is not None))
    return name, PRELUDE + body


def _nonzero_twin(dt: np.dtype, write: bool, with_values: bool = False) -> Any:
    def flags(x: np.ndarray, n: int) -> np.ndarray:
        v = x[:n].view(np.bool_) if dt == D.bool else x[:n]
        return v != 0

    if not write:
        def count(info: Any, n: Any, ntiles: Any, x: np.ndarray, counts: np.ndarray) -> None:
            n, ntiles = int(n), int(ntiles)
            f = np.zeros(ntiles * TILE, bool)
            f[:n] = flags(x, n)
            counts[:ntiles] = f.reshape(ntiles, TILE).sum(axis=1)

        return count

    def write(info: Any, n: Any, ntiles: Any, x: np.ndarray, *rest: np.ndarray) -> None:
        n = int(n)
        found = np.flatnonzero(flags(x, n))
        out = rest[-1]
        out[:len(found)] = rest[0][found] if with_values else found

    return write


def compact(x: Array, values: Array | None = None) -> Array:
    """The (C-order) positions of ``x``'s non-zero elements, or the elements of ``values`` (of
    ``x``'s shape) there, as a new 1-D array. Waits for the count."""
    from ._scan import cumulative_sum

    dev = x.device
    n = x.size
    flat = whole(x)
    src = whole(values) if values is not None else None
    out_dt = values.dtype if values is not None else D.int64
    ntiles = (n + TILE - 1) // TILE
    if n == 0:
        return new_array(dev, (0,), out_dt)
    port = dev.port
    grid = min(ntiles, 1 << 16)
    flat_ref = flat.buffer.ref
    counts_ref = port.mint((ntiles,), "i64", "C")  # allocated by the launch that writes it
    counts = Array(_send(dev, ("nonzero", x.dtype, False, None),
                         lambda: (*_render_nonzero(x.dtype, False), _COUNT_KINDS), grid,
                         THREADS,
                         (n, ntiles, flat_ref, counts_ref), (flat_ref,), (counts_ref,),
                         counts_ref, cub_kernel), (ntiles,), D.int64, dev)
    # each tile's offset: a scan on the device; only the total is read back
    offs = cumulative_sum(counts, include_initial=True)
    total = int(offs[ntiles])
    if not total:
        return new_array(dev, (0,), out_dt)
    vdt = None if src is None else src.dtype
    extra = () if src is None else (src.buffer.ref,)
    found_ref = port.mint((total,), D.storage_name(out_dt), "C")
    offs_ref = offs.buffer.ref
    found = Array(_send(dev, ("nonzero", x.dtype, True, vdt),
                        lambda: (*_render_nonzero(x.dtype, True, vdt),
                                 ("i64", "i64", "ptr") + ("ptr",) * (len(extra) + 2)),
                        grid, THREADS,
                        (n, ntiles, flat_ref, *extra, offs_ref, found_ref),
                        (flat_ref, *extra, offs_ref), (found_ref,), found_ref, cub_kernel),
                  (total,), out_dt, dev)
    return found


def nonzero(x: Array, /) -> tuple[Array, ...]:
    """The indices of the non-zero elements, one int64 array per dimension (C order). The
    count is read back to size the result (a data-dependent shape: this call waits)."""
    from ._elementwise import TABLE, apply

    if not isinstance(x, Array):
        raise TypeError(f"nonzero: expected an array, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("nonzero: a 0-d array (use atleast_1d semantics explicitly)")
    found = compact(x)
    if x.ndim == 1:
        return (found,)
    out = []
    stride = 1
    strides = []
    for d in reversed(x.shape):
        strides.append(stride)
        stride *= d
    for d, st in zip(x.shape, reversed(strides)):
        q = apply(TABLE["floor_divide"], found, st) if st != 1 else found
        out.append(apply(TABLE["remainder"], q, d))
    return tuple(out)




