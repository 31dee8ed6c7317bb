"""``cumulative_sum`` and ``cumulative_prod``: a device-wide scan along an axis, from CUB's
block primitives, for rows of any length.

The rows (the axis moved last, C order) are cut into tiles of :data:`TILE` elements; three
kernels run over all tiles of all rows at once: each tile's total (``cub::BlockReduce``), each
row's exclusive scan of its tiles' totals (``cub::BlockScan``, one block per row, a running
carry), then each tile's inclusive scan (``cub::BlockScan``) combined with its tile's prefix.
Elements are accumulated in the result's dtype (float32 for the 16-bit floats). The simulator
runs NumPy twins of the same three steps."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array, new_array
from ._cub import cub_kernel, tag
from ._expr import PRELUDE
from ._gather import whole
from ._manipulation import moveaxis
from ._reductions import _acc, _numeric, _sum_dtype, normalize_axes

__all__ = ["cumulative_sum", "cumulative_prod", "TILE"]

THREADS = 256
ITEMS = 8
TILE = THREADS * ITEMS
_OPS = {"sum": ("+", 0, np.add), "prod": ("*", 1, np.multiply)}


def _head(op: str, acc: np.dtype) -> str:
    a = D.CTYPE[acc][1]
    sym = _OPS[op][0]
    return f"""{PRELUDE}
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
struct gm_scan_op {{
  __device__ __forceinline__ {a} operator()(const {a}& x, const {a}& y) const {{
    return x {sym} y; }}
}};
"""


def _render(step: str, op: str, in_dt: np.dtype, acc: np.dtype,
            out_dt: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """One of the three kernels ('tiles': each tile's total; 'carry': each row's exclusive scan
    of them; 'scan': the tiles' scans with their prefixes)."""
    a = D.CTYPE[acc][1]
    ident = f"(({a})({_OPS[op][1]}))"
    name = (f"gm_cum{op}_{step}_{tag(in_dt)}_{tag(acc)}_"
            f"{tag(out_dt)}")
    sin = D.CTYPE[in_dt][0]
    load = D.CTYPE[in_dt][3].format("raw[q]")
    # loads through shared memory (cub::BlockLoad, warp-transposed): coalesced, and each
    # thread then holds consecutive elements (a blocked arrangement, as the scan wants)
    loading = f"""
  typedef cub::BlockLoad<{sin}, {THREADS}, {ITEMS}, cub::BLOCK_LOAD_WARP_TRANSPOSE> Load;
  const long long row = blockIdx.x / tpr, tile = blockIdx.x % tpr;
  const long long first = tile * {TILE};
  const int valid = (int)(n - first < {TILE} ? n - first : {TILE});
  {sin} raw[{ITEMS}];
  Load(tmp.load).Load(x + row * n + first, raw, valid);
  __syncthreads();
  {a} v[{ITEMS}];
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q)
    v[q] = threadIdx.x * {ITEMS} + q < valid ? ({a})({load}) : {ident};"""
    if step == "tiles":
        kinds = ("i64", "i64", "ptr", "ptr")
        body = f"""
extern "C" __global__ void {name}(long long n, long long tpr,
                                  const {sin}* __restrict__ x,
                                  {a}* __restrict__ tot) {{
  typedef cub::BlockReduce<{a}, {THREADS}> Reduce;
  __shared__ union {{
    typename cub::BlockLoad<{sin}, {THREADS}, {ITEMS}, cub::BLOCK_LOAD_WARP_TRANSPOSE>::TempStorage
        load;
    typename Reduce::TempStorage reduce;
  }} tmp;{loading}
  const {a} total = Reduce(tmp.reduce).Reduce(v, gm_scan_op());
  if (threadIdx.x == 0) tot[blockIdx.x] = total;
}}
"""
    elif step == "carry":
        kinds = ("i64", "ptr")
        body = f"""
extern "C" __global__ void {name}(long long tpr, {a}* __restrict__ tot) {{
  typedef cub::BlockScan<{a}, {THREADS}> Scan;
  __shared__ typename Scan::TempStorage tmp;
  {a}* row = tot + (long long)blockIdx.x * tpr;
  {a} carry = {ident};
  for (long long base = 0; base < tpr; base += {THREADS}) {{
    const long long i = base + threadIdx.x;
    const {a} v = i < tpr ? row[i] : {ident};
    {a} before, chunk;
    Scan(tmp).ExclusiveScan(v, before, carry, gm_scan_op(), chunk);
    if (i < tpr) row[i] = before;
    carry = gm_scan_op()(carry, chunk);
    __syncthreads();
  }}
}}
"""
    else:
        o = D.CTYPE[out_dt]
        store = o[4].format(f"({o[1]})(s[q])")
        init_store = o[4].format(f"({o[1]})({ident})")
        kinds = ("i64", "i64", "i64", "ptr", "ptr", "ptr")
        body = f"""
extern "C" __global__ void {name}(long long n, long long tpr, long long init,
                                  const {sin}* __restrict__ x,
                                  const {a}* __restrict__ prefix, {o[0]}* __restrict__ out) {{
  typedef cub::BlockScan<{a}, {THREADS}> Scan;
  typedef cub::BlockStore<{o[0]}, {THREADS}, {ITEMS}, cub::BLOCK_STORE_WARP_TRANSPOSE> Store;
  __shared__ union {{
    typename cub::BlockLoad<{sin}, {THREADS}, {ITEMS}, cub::BLOCK_LOAD_WARP_TRANSPOSE>::TempStorage
        load;
    typename Scan::TempStorage scan;
    typename Store::TempStorage store;
  }} tmp;{loading}
  {a} s[{ITEMS}];
  Scan(tmp.scan).InclusiveScan(v, s, gm_scan_op());
  const {a} p = prefix[blockIdx.x];
  {o[0]} w[{ITEMS}];
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) {{ s[q] = gm_scan_op()(p, s[q]); w[q] = {store}; }}
  __syncthreads();
  const long long out_n = n + init;
  Store(tmp.store).Store(out + row * out_n + init + first, w, valid);
  if (init && tile == 0 && threadIdx.x == 0) out[row * out_n] = {init_store};
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_twin, step, op, in_dt, acc, out_dt))
    return name, _head(op, acc) + body, kinds


def _np(buf: np.ndarray, dt: np.dtype) -> np.ndarray:
    return buf.view(np.bool_) if dt == D.bool else buf


def _twin(step: str, op: str, in_dt: np.dtype, acc: np.dtype, out_dt: np.dtype) -> Any:
    ufunc = _OPS[op][2]
    comp = D.CTYPE[acc][2]
    ident = comp.type(_OPS[op][1])

    def tiles_of(x: np.ndarray, nrows: int, n: int, tpr: int) -> np.ndarray:
        full = np.full((nrows, tpr * TILE), ident, comp)
        with np.errstate(all="ignore"):
            full[:, :n] = _np(x, in_dt)[:nrows * n].reshape(nrows, n).astype(comp)
        return full.reshape(nrows * tpr, TILE)

    def run(info: Any, *args: Any) -> None:
        with np.errstate(all="ignore"):
            if step == "tiles":
                n, tpr, x, tot = int(args[0]), int(args[1]), args[2], args[3]
                nrows = int(info.grid[0]) // tpr
                tot[:nrows * tpr] = ufunc.reduce(tiles_of(x, nrows, n, tpr), axis=1)
            elif step == "carry":
                tpr, tot = int(args[0]), args[1]
                nrows = int(info.grid[0])
                t = tot[:nrows * tpr].reshape(nrows, tpr)
                inc = ufunc.accumulate(t, axis=1)
                t[:, 1:] = inc[:, :-1]
                t[:, 0] = ident
            else:
                n, tpr, init = int(args[0]), int(args[1]), int(args[2])
                x, prefix, out = args[3], args[4], args[5]
                nrows = int(info.grid[0]) // tpr
                s = ufunc.accumulate(tiles_of(x, nrows, n, tpr), axis=1)
                s = ufunc(prefix[:nrows * tpr, None].astype(comp), s)
                s = s.reshape(nrows, tpr * TILE)[:, :n]
                dst = _np(out, out_dt)[:nrows * (n + init)].reshape(nrows, n + init)
                dst[:, init:] = s.astype(D.CTYPE[out_dt][2]).astype(dst.dtype)
                if init:
                    dst[:, 0] = ident

    return run


def _cumulative(x: Array, axis: Any, dtype: Any, include_initial: bool, op: str) -> Array:
    name = f"cumulative_{op}"
    _numeric(x, name, "biufc")
    if x.ndim == 0:
        raise ValueError(f"{name}: needs at least one dimension")
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"{name}: axis is required for arrays of more than one dimension")
        axis = 0
    ax = normalize_axes(axis, x.ndim)[0]
    dt = _sum_dtype(x, dtype)
    if D.kind_of(x.dtype) == "c" and D.kind_of(dt) != "c":
        raise TypeError(f"{name}: a complex array cannot accumulate in {dt}")
    acc = _acc(dt)
    rows = whole(moveaxis(x, ax, -1))
    n = rows.shape[-1]
    init = 1 if include_initial else 0
    shape = rows.shape[:-1] + (n + init,)
    out = new_array(x.device, shape, dt)
    nrows = out.size // (n + init) if n + init else 0
    dev = x.device
    if nrows and n:
        tpr = (n + TILE - 1) // TILE
        tot = new_array(dev, (nrows * tpr,), acc)
        name_, src, sig = _render("tiles", op, x.dtype, acc, dt)
        tot._wrote(dev.launch(cub_kernel(dev, name_, src, sig), nrows * tpr, THREADS,
                              (n, tpr, rows.buffer, tot.buffer), reads=[rows.buffer],
                              writes=[tot.buffer]))
        name_, src, sig = _render("carry", op, x.dtype, acc, dt)
        tot._wrote(dev.launch(cub_kernel(dev, name_, src, sig), nrows, THREADS,
                              (tpr, tot.buffer), reads=[tot.buffer], writes=[tot.buffer]))
        name_, src, sig = _render("scan", op, x.dtype, acc, dt)
        out._wrote(dev.launch(cub_kernel(dev, name_, src, sig), nrows * tpr, THREADS,
                              (n, tpr, init, rows.buffer, tot.buffer, out.buffer),
                              reads=[rows.buffer, tot.buffer], writes=[out.buffer]))
    elif nrows:  # empty rows: only the initial value
        from ._elementwise import cast_into

        cast_into(out, builtins.bool(_OPS[op][1]) if dt == D.bool else _OPS[op][1])
    return moveaxis(out, -1, ax)


def cumulative_sum(x: Array, /, *, axis: Any = None, dtype: Any = None,
                   include_initial: bool = False) -> Array:
    """The running sums of ``x`` along ``axis`` (the ``sum`` dtype rules; ``include_initial``
    puts a 0 first)."""
    return _cumulative(x, axis, dtype, include_initial, "sum")


def cumulative_prod(x: Array, /, *, axis: Any = None, dtype: Any = None,
                    include_initial: bool = False) -> Array:
    """The running products of ``x`` along ``axis`` (the ``prod`` dtype rules;
    ``include_initial`` puts a 1 first)."""
    return _cumulative(x, axis, dtype, include_initial, "prod")
