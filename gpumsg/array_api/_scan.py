"""``cumulative_sum`` and ``cumulative_prod``: a device-wide scan along an axis, from CUB's
block primitives, for rows of any length, in one pass over the data.

The rows (the axis moved last, C order) are cut into tiles of :data:`TILE` elements, one block
each, all rows at once. A block takes the next tile from a counter, scans it
(``cub::BlockScan``) and publishes its total; its first warp then looks back over the tiles
before it in its row, 32 at a time, combining their totals until it meets one that has
published its inclusive prefix (a decoupled look-back, as CUB's device-wide scan does), then
publishes its own and writes its elements. Each element is read once and written once: the
three-kernel scan this replaces (tile totals, their scan, the tiles' scans) read the input
twice and was five messages; this is two (the zeroed look-back state, and the launch that
allocates its output). Elements are accumulated in the result's dtype (float32 for the
16-bit floats), so a float result differs from NumPy's sequential one by rounding only. The
simulator's twin accumulates each row with NumPy."""

from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as np

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from ..messages.device import Memset
from . import _dtypes as D
from ._array import Array, new_array
from ._codegen import _send
from ._cub import cub_kernel, tag
from ._expr import PRELUDE
from ._gather import whole
from ._manipulation import moveaxis
from ._reductions import _acc, _numeric, _sum_dtype, normalize_axes

__all__ = ["cumulative_sum", "cumulative_prod", "TILE", "state_bytes"]

THREADS = 256
ITEMS = 8
#: the look-back state's zeroing, built unchecked (its reference was minted just before)
_MEMSET = Memset.unchecked  # type: ignore[attr-defined]
TILE = THREADS * ITEMS
_OPS = {"sum": ("+", 0, np.add), "prod": ("*", 1, np.multiply)}


def _state_code(a: str, size: int) -> str:
    """The look-back state's two device functions for an accumulator ``a`` of ``size`` bytes:
    ``gm_scan_publish`` (a tile's total, flag 1, or its inclusive prefix, flag 2) and
    ``gm_scan_peek`` (a tile's flag, 0 while it has published nothing, and its value). Up to
    8 bytes, value and flag share one word (8 or 16 bytes) stored and loaded whole, as CUB's
    tile states are: a reader sees both or neither, with no fence between them (written and
    read apart, with a fence, the kernel took twice as long at 64 Mi float32 on an H200: 544
    against 271 µs, CUB's 209-214). Wider values (complex128) are written before their flag,
    with a fence between, and read past L1."""
    if size <= 8:
        if size <= 4:
            word = """  unsigned int bits = 0;
  memcpy(&bits, &v, sizeof(v));
  *(volatile unsigned long long*)(st + 16 + 8 * t) =
      ((unsigned long long)(unsigned int)f << 32) | bits;"""
            peek = """  const unsigned long long w =
      *(const volatile unsigned long long*)(st + 16 + 8 * k);
  const unsigned int bits = (unsigned int)w;
  memcpy(&v, &bits, sizeof(v));
  return (int)(w >> 32);"""
        else:
            word = """  unsigned long long bits;
  memcpy(&bits, &v, 8);
  asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::
               "l"(st + 16 + 16 * t), "l"(bits), "l"((unsigned long long)f) : "memory");"""
            peek = """  unsigned long long bits, f;
  asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(bits), "=l"(f) :
               "l"(st + 16 + 16 * k) : "memory");
  memcpy(&v, &bits, 8);
  return (int)f;"""
    else:
        word = f"""  const long long fl = (16 + 4 * ntiles + 15) & ~15LL;
  {a}* val = ({a}*)(st + fl + (f == 2 ? {size} * ntiles : 0)) + t;
  *val = v;
  __threadfence();
  *(volatile int*)(st + 16 + 4 * t) = f;"""
        peek = f"""  const int f = *(const volatile int*)(st + 16 + 4 * k);
  if (f == 0) return 0;
  __threadfence();
  const long long fl = (16 + 4 * ntiles + 15) & ~15LL;
  const volatile unsigned int* src =
      (const volatile unsigned int*)(({a}*)(st + fl + (f == 2 ? {size} * ntiles : 0)) + k);
  unsigned int* dst = (unsigned int*)&v;
  #pragma unroll
  for (int i = 0; i < {size // 4}; ++i) dst[i] = src[i];
  return f;"""
    return f"""// the look-back's state: the tile counter, then each tile's flag (0: nothing yet,
// 1: its total, 2: its inclusive prefix) and value
__device__ __forceinline__ void gm_scan_publish(unsigned char* st, long long t, long long ntiles,
                                                const {a}& v, int f) {{
{word}
}}
__device__ __forceinline__ int gm_scan_peek(const unsigned char* st, long long k,
                                            long long ntiles, {a}& v) {{
{peek}
}}
"""


def _head(op: str, acc: np.dtype) -> str:
    a = D.CTYPE[acc][1]
    sym = _OPS[op][0]
    return f"""{PRELUDE}
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/warp/warp_reduce.cuh>
struct gm_scan_op {{
  __device__ __forceinline__ {a} operator()(const {a}& x, const {a}& y) const {{
    return x {sym} y; }}
}};
{_state_code(a, acc.itemsize)}"""


def _render(op: str, in_dt: np.dtype, acc: np.dtype,
            out_dt: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """The single-pass scan kernel: one block per tile, tiles taken in order from a counter."""
    a = D.CTYPE[acc][1]
    ident = f"(({a})({_OPS[op][1]}))"
    name = f"gm_cum{op}_{tag(in_dt)}_{tag(acc)}_{tag(out_dt)}"
    sin = D.CTYPE[in_dt][0]
    load = D.CTYPE[in_dt][3].format("raw[q]")
    o = D.CTYPE[out_dt]
    store = o[4].format(f"({o[1]})(s[q])")
    init_store = o[4].format(f"({o[1]})({ident})")
    kinds = ("i64", "i64", "i64", "ptr", "ptr", "ptr")
    body = f"""
extern "C" __global__ void {name}(long long n, long long tpr, long long init,
                                  const {sin}* __restrict__ x, {o[0]}* __restrict__ out,
                                  unsigned char* state) {{
  typedef cub::BlockLoad<{sin}, {THREADS}, {ITEMS}, cub::BLOCK_LOAD_WARP_TRANSPOSE> Load;
  typedef cub::BlockScan<{a}, {THREADS}> Scan;
  typedef cub::BlockStore<{o[0]}, {THREADS}, {ITEMS}, cub::BLOCK_STORE_WARP_TRANSPOSE> Store;
  typedef cub::WarpReduce<{a}> Warp;
  __shared__ union {{
    typename Load::TempStorage load;
    typename Scan::TempStorage scan;
    typename Store::TempStorage store;
    typename Warp::TempStorage warp;
  }} tmp;
  __shared__ long long tile_id;
  __shared__ {a} before_tile;
  const long long ntiles = (long long)gridDim.x;
  unsigned int* counter = (unsigned int*)state;
  // tiles are taken in the order blocks start: every tile a block waits for belongs to a
  // block already running, so the wait ends
  if (threadIdx.x == 0) tile_id = (long long)atomicAdd(counter, 1u);
  __syncthreads();
  const long long t = tile_id;
  const long long row = t / tpr, tile = t % tpr;
  const long long first = tile * {TILE};
  const int valid = (int)(n - first < {TILE} ? n - first : {TILE});
  {sin} raw[{ITEMS}];
  Load(tmp.load).Load(x + row * n + first, raw, valid);
  __syncthreads();
  {a} v[{ITEMS}];
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q)
    v[q] = threadIdx.x * {ITEMS} + q < valid ? ({a})({load}) : {ident};
  {a} s[{ITEMS}];
  {a} total;
  Scan(tmp.scan).InclusiveScan(v, s, gm_scan_op(), total);
  __syncthreads();
  if (threadIdx.x < 32) {{
    const int lane = threadIdx.x;
    if (tile == 0) {{
      if (lane == 0) {{
        gm_scan_publish(state, t, ntiles, total, 2);
        before_tile = {ident};
      }}
    }} else {{
      if (lane == 0)  // this tile's own total first: later tiles look back through it
        gm_scan_publish(state, t, ntiles, total, 1);
      // look back over the tiles before, 32 at a time, nearest first, until one holds its
      // inclusive prefix (the row's first tile always does)
      {a} exclusive = {ident};
      long long j = t - 1;
      const long long row_first = row * tpr;
      while (true) {{
        const long long k = j - lane;
        int f = 2;
        {a} val = {ident};
        if (k >= row_first) {{
          do {{ f = gm_scan_peek(state, k, ntiles, val); }} while (f == 0);
        }}
        const unsigned int done = __ballot_sync(0xffffffffu, f == 2);
        const int stop = done ? __ffs(done) - 1 : 31;
        const {a} part = Warp(tmp.warp).Reduce(lane <= stop ? val : {ident}, gm_scan_op());
        if (lane == 0) exclusive = gm_scan_op()(part, exclusive);
        if (done) break;
        j -= 32;
        __syncwarp();
      }}
      if (lane == 0) {{
        gm_scan_publish(state, t, ntiles, gm_scan_op()(exclusive, total), 2);
        before_tile = exclusive;
      }}
    }}
  }}
  __syncthreads();
  const {a} p = before_tile;
  {o[0]} w[{ITEMS}];
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) {{ s[q] = gm_scan_op()(p, s[q]); w[q] = {store}; }}
  const long long out_n = n + init;
  Store(tmp.store).Store(out + row * out_n + init + first, w, valid);
  if (init && tile == 0 && threadIdx.x == 0) out[row * out_n] = {init_store};
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_twin, op, in_dt, acc, out_dt))
    return name, _head(op, acc) + body, kinds


def _np(buf: np.ndarray, dt: np.dtype) -> np.ndarray:
    return buf.view(np.bool_) if dt == D.bool else buf


def _twin(op: str, in_dt: np.dtype, acc: np.dtype, out_dt: np.dtype) -> Any:
    ufunc = _OPS[op][2]
    comp = D.CTYPE[acc][2]
    ident = comp.type(_OPS[op][1])

    def run(info: Any, n: Any, tpr: Any, init: Any, x: np.ndarray, out: np.ndarray,
            state: np.ndarray) -> None:
        n, tpr, init = int(n), int(tpr), int(init)
        nrows = int(info.grid[0]) // tpr
        with np.errstate(all="ignore"):
            rows = _np(x, in_dt)[:nrows * n].reshape(nrows, n).astype(comp)
            s = ufunc.accumulate(rows, axis=1)
            dst = _np(out, out_dt)[:nrows * (n + init)].reshape(nrows, n + init)
            dst[:, init:] = s.astype(D.CTYPE[out_dt][2]).astype(dst.dtype)
            if init:
                dst[:, 0] = ident

    return run


def state_bytes(ntiles: int, acc: np.dtype) -> int:
    """The bytes of the look-back's state for ``ntiles`` tiles accumulating in ``acc``: the
    tile counter, then a word per tile holding its flag and value (8 bytes for values up to
    4 bytes, 16 for 8), or a flag and two values per tile for wider ones (zeroed before the
    launch)."""
    size = acc.itemsize
    if size <= 8:
        return 16 + (8 if size <= 4 else 16) * ntiles
    return ((16 + 4 * ntiles + 15) & ~15) + 2 * size * ntiles


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
    last = ax == x.ndim - 1
    rows = whole(x if last else moveaxis(x, ax, -1))
    n = rows.shape[-1]
    init = 1 if include_initial else 0
    shape = rows.shape[:-1] + (n + init,)
    nrows = math.prod(shape) // (n + init) if n + init else 0
    dev = x.device
    if nrows and n:
        # two messages: the zeroed look-back state, then the scan allocating its output
        tpr = (n + TILE - 1) // TILE
        if nrows * tpr >= 1 << 31:
            raise ValueError(f"{name}: {nrows * tpr} tiles of {TILE} exceed one launch")
        port = dev.port
        nbytes = state_bytes(nrows * tpr, acc)
        state_ref = port.mint((nbytes,), "u8", "C")
        state = port.send_new(state_ref, _MEMSET(state_ref, 0, 0, nbytes, 1))
        state_ref = state.ref  # taken from the buffer: a message besides its producer names it
        out_ref = port.mint(shape, D.storage_name(dt), "C")
        rows_ref = rows.buffer.ref
        fut = _send(dev, ("cumulative", op, x.dtype, acc, dt),
                    lambda: _render(op, x.dtype, acc, dt), nrows * tpr, THREADS,
                    (n, tpr, init, rows_ref, out_ref, state_ref), (rows_ref, state_ref),
                    (out_ref, state_ref), out_ref, cub_kernel)
        del state  # freed behind the launch, the last message naming it
        out = Array(fut, shape, dt, dev)
    else:
        out = new_array(dev, shape, dt)
        if nrows:  # empty rows: only the initial value
            from ._elementwise import cast_into

            cast_into(out, builtins.bool(_OPS[op][1]) if dt == D.bool else _OPS[op][1])
    return out if last else moveaxis(out, -1, ax)


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
