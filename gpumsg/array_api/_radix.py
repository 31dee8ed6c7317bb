"""Device-wide stable radix sort of rows of any length, from CUB's block primitives.

A least-significant-digit radix sort over 8-bit digits. Each pass is three kernels over tiles of
:data:`TILE` elements:

1. ``hist``: each tile's count of every digit (``counts[digit * ntiles + tile]``);
2. ``colscan``: per digit, the exclusive scan of its counts over the tiles (``cub::BlockScan``)
   and the digit's total;
3. ``pass``: each tile ranks its keys by the digit (``cub::BlockRadixRankMatch``: stable, keys
   loaded warp-striped, as it ranks them), the totals' exclusive scan gives each digit's start,
   and the tile scatters keys and payloads through shared memory to
   ``start[d] + counts[d][tile] + (rank - the tile's count of smaller digits)``, in order.

Keys are the elements' bits made unsigned so that unsigned order is the standard's order:
floats with the sign bit flipped (all bits of negatives), every NaN made one NaN (after +inf),
-0 made +0 (the sort is stable, so -0 and +0 keep their order, as NumPy's); signed integers with
the sign bit flipped; bool as 0/1; descending flips every bit (ties stay in order). Several rows
sort as one array: the payload is the flat index and the last passes sort by its row (the index
divided by the row length), the most significant digits. The payload of one row sorted for its
values is the element's own bits (so -0 and NaN payloads come out as they went in); otherwise it
is the index (``argsort``, or a gather from the source in the last pass). The first pass reads
the source and makes the keys; the last writes the result.

The simulator runs NumPy twins that compute the same counts, scans and positions.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from . import _dtypes as D
from ._array import Array, new_array
from ._codegen import _send
from ._cub import cub_kernel, tag, unsigned_type

__all__ = ["radix_sort", "radix_sorted", "payload_dtype", "RadixScratch", "TILE"]

THREADS = 256
ITEMS = 16
TILE = THREADS * ITEMS
SCAN_ITEMS = 16
_UDT = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
        8: np.dtype(np.uint64)}


def _key_c(dt: np.dtype) -> str:
    """C statements turning the unsigned bits ``u`` (type K) of an element into its ascending
    key (a descending sort flips every bit of it: the kernels' ``flip`` argument)."""
    bits = dt.itemsize * 8
    k = unsigned_type(dt.itemsize)
    top = f"(({k})1 << {bits - 1})"
    if dt == D.bool:
        body = f"u = ({k})(u != 0);"
    elif D.kind_of(dt) == "u":
        body = ""
    elif D.kind_of(dt) == "i":
        body = f"u = ({k})(u ^ {top});"
    else:
        mag = f"({k})~{top}"
        inf = {D.float16: "0x7c00", D.bfloat16: "0x7f80", D.float32: "0x7f800000u",
               D.float64: "0x7ff0000000000000ull"}[dt]
        nan = {D.float16: "0x7e00", D.bfloat16: "0x7fc0", D.float32: "0x7fc00000u",
               D.float64: "0x7ff8000000000000ull"}[dt]
        body = (f"if ((u & {mag}) > ({k}){inf}) u = ({k}){nan}; else if (u == {top}) u = 0; "
                f"u = (u & {top}) ? ({k})~u : ({k})(u | {top});")
    return body


def _np_key(u: np.ndarray, dt: np.dtype, descending: bool) -> np.ndarray:
    """The twin of :func:`_key_c` on an array of unsigned bits."""
    ut = u.dtype
    top = ut.type(1 << (ut.itemsize * 8 - 1))
    if dt == D.bool:
        u = (u != 0).astype(ut)
    elif D.kind_of(dt) == "i":
        u = u ^ top
    elif D.kind_of(dt) == "f":
        info = {D.float16: (0x7c00, 0x7e00), D.bfloat16: (0x7f80, 0x7fc0),
                D.float32: (0x7f800000, 0x7fc00000),
                D.float64: (0x7ff0000000000000, 0x7ff8000000000000)}[dt]
        u = u.copy()
        u[(u & ~top) > info[0]] = info[1]
        u[u == top] = 0
        u = np.where(u & top, ~u, u | top).astype(ut)
    if descending:
        u = ~u
    return u


def _digit_np(v: np.ndarray, shift: int) -> np.ndarray:
    return ((v >> v.dtype.type(shift)) & v.dtype.type(255)).astype(np.int64)


# -- kernels --------------------------------------------------------------------------------------
def _names(dt: np.dtype, pt: str, ot: str, keyed: bool) -> str:
    """The part of a kernel's name that its source depends on: the key transform (the dtype)
    only where the kernel makes keys from the source (``keyed``), else the key's width alone
    (later passes move bits), so that dtypes of one width share those kernels. The direction
    is an argument (``flip``: the bits a descending sort flips), not a kernel of its own."""
    who = tag(dt) if keyed else f"k{dt.itemsize}"
    return f"{who}_{pt}_{ot}"


def _rkey(dt: np.dtype, keyed: bool) -> str:
    """The device function making a key from an element's bits (where the kernel needs it)."""
    if not keyed:
        return ""
    k = unsigned_type(dt.itemsize)
    return f"__device__ __forceinline__ {k} gm_rkey({k} u) {{ {_key_c(dt)} return u; }}"


@functools.cache  # the source of a kernel is rendered once per process
def _render_hist(dt: np.dtype, mode: str, pt: np.dtype,
                 ot: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """Count of each digit per tile. ``mode``: 'src' (keys made from the source), 'key' (the
    keys of an earlier pass), 'row' (the row of each payload index)."""
    k, p, o = unsigned_type(dt.itemsize), unsigned_type(pt.itemsize), unsigned_type(ot.itemsize)
    name = f"gm_radix_hist_{mode}_{_names(dt, pt.name, ot.name, mode == 'src')}"
    if mode == "row":
        load, it = f"(({p})(in[i] / ({p})rowlen))", p
    elif mode == "key":
        load, it = "in[i]", k
    else:
        load, it = f"(({k})(gm_rkey(in[i]) ^ ({k})flip))", k
    src = f"""
{_rkey(dt, mode == "src")}
extern "C" __global__ void {name}(long long n, long long ntiles, long long rowlen, int shift,
                                  unsigned long long flip, const {it}* __restrict__ in,
                                  {o}* __restrict__ counts) {{
  __shared__ unsigned int hist[{THREADS}];
  hist[threadIdx.x] = 0;
  __syncthreads();
  const long long start = (long long)blockIdx.x * {TILE};
  #pragma unroll
  for (int k = 0; k < {ITEMS}; ++k) {{
    const long long i = start + k * {THREADS} + threadIdx.x;
    if (i < n) atomicAdd(&hist[(unsigned int)({load} >> shift) & 255u], 1u);
  }}
  __syncthreads();
  counts[(long long)threadIdx.x * ntiles + blockIdx.x] = ({o})hist[threadIdx.x];
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_hist_twin, dt, mode))
    return name, src, ("i64", "i64", "i64", "i32", "u64", "ptr", "ptr")


def _hist_twin(dt: np.dtype, mode: str) -> Any:
    def run(info: Any, n: Any, ntiles: Any, rowlen: Any, shift: Any, flip: Any,
            inp: np.ndarray, counts: np.ndarray) -> None:
        n, ntiles = int(n), int(ntiles)
        v = _digits(inp[:n], dt, mode, int(rowlen), int(shift), int(flip) != 0)
        tile = np.arange(n, dtype=np.int64) // TILE
        counts[:256 * ntiles] = np.bincount(v * ntiles + tile, minlength=256 * ntiles)

    return run


def _digits(inp: np.ndarray, dt: np.dtype, mode: str, rowlen: int, shift: int,
            descending: bool) -> np.ndarray:
    u = inp.view(_UDT[inp.dtype.itemsize])
    if mode == "row":
        return _digit_np(u // u.dtype.type(rowlen), shift)
    if mode == "src":
        u = _np_key(u, dt, descending)
    return _digit_np(u, shift)


@functools.cache  # the source of a kernel is rendered once per process
def _render_colscan(ot: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """Per digit (a block each): the exclusive scan of its counts over the tiles, in place, and
    its total. Loops over the tiles :data:`SCAN_ITEMS` per thread at a time, carrying the sum."""
    o = unsigned_type(ot.itemsize)
    name = f"gm_radix_colscan_{ot.name}"
    src = f"""
#include <cub/block/block_scan.cuh>
extern "C" __global__ void {name}(long long ntiles, {o}* __restrict__ counts,
                                  {o}* __restrict__ totals) {{
  typedef cub::BlockScan<{o}, {THREADS}> Scan;
  __shared__ typename Scan::TempStorage tmp;
  {o}* row = counts + (long long)blockIdx.x * ntiles;
  {o} carry = 0;
  for (long long base = 0; base < ntiles; base += {THREADS} * {SCAN_ITEMS}) {{
    {o} v[{SCAN_ITEMS}], s[{SCAN_ITEMS}];
    #pragma unroll
    for (int k = 0; k < {SCAN_ITEMS}; ++k) {{
      const long long i = base + threadIdx.x * {SCAN_ITEMS} + k;
      v[k] = i < ntiles ? row[i] : ({o})0;
    }}
    {o} total;
    Scan(tmp).ExclusiveSum(v, s, total);
    #pragma unroll
    for (int k = 0; k < {SCAN_ITEMS}; ++k) {{
      const long long i = base + threadIdx.x * {SCAN_ITEMS} + k;
      if (i < ntiles) row[i] = s[k] + carry;
    }}
    carry += total;
    __syncthreads();
  }}
  if (threadIdx.x == 0) totals[blockIdx.x] = carry;
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(_colscan_twin)
    return name, src, ("i64", "ptr", "ptr")


def _colscan_twin(info: Any, ntiles: Any, counts: np.ndarray, totals: np.ndarray) -> None:
    ntiles = int(ntiles)
    c = counts[:256 * ntiles].reshape(256, ntiles)
    totals[:256] = c.sum(axis=1)
    c[...] = np.cumsum(c, axis=1) - c


#: pass input modes: 'src' (the source's bits: keys made here, payload the index or the bits),
#: 'kv' (keys and payloads of the last pass), 'row' (payloads alone, ranked by their row);
#: output modes: 'kv' (keys and payloads), 'p' (payloads), 'index' (int64 positions in the
#: row), 'gather' (the source's element at each payload index)
@functools.cache  # the source of a kernel is rendered once per process
def _render_pass(dt: np.dtype, pt: np.dtype, ot: np.dtype, inm: str,
                 outm: str, bits_payload: bool, one_row: bool) -> tuple[str, str,
                                                                       tuple[str, ...]]:
    k, p, o = unsigned_type(dt.itemsize), unsigned_type(pt.itemsize), unsigned_type(ot.itemsize)
    name = (f"gm_radix_pass_{inm}_{outm}_{'b' if bits_payload else 'i'}"
            f"{'1' if one_row else 'n'}_{_names(dt, pt.name, ot.name, inm == 'src')}")
    rk = p if inm == "row" else k  # the type ranked
    params = ["long long n", "long long ntiles", "long long rowlen", "int shift",
              "unsigned long long flip"]
    kinds = ["i64", "i64", "i64", "i32", "u64"]
    if inm != "row":
        params.append(f"const {k}* __restrict__ kin")
        kinds.append("ptr")
    if inm != "src":
        params.append(f"const {p}* __restrict__ pin")
        kinds.append("ptr")
    if outm == "kv":
        params.append(f"{k}* __restrict__ kout")
        kinds.append("ptr")
    if outm == "gather":
        params += [f"const {k}* __restrict__ src", f"{k}* __restrict__ out"]
        kinds += ["ptr", "ptr"]
    elif outm == "index":
        params.append("long long* __restrict__ out")
        kinds.append("ptr")
    else:
        params.append(f"{p}* __restrict__ pout")
        kinds.append("ptr")
    params += [f"const {o}* __restrict__ counts", f"const {o}* __restrict__ totals"]
    kinds += ["ptr", "ptr"]
    if inm == "src":
        load = (f"const {k} s = kin[start + j]; rk[q] = ({k})(gm_rkey(s) ^ ({k})flip); "
                f"pv[q] = {'s' if bits_payload else f'({p})(start + j)'};")
    elif inm == "kv":
        load = "rk[q] = kin[start + j]; pv[q] = pin[start + j];"
    else:
        load = f"pv[q] = pin[start + j]; rk[q] = ({p})(pv[q] / ({p})rowlen);"
    if outm == "index":
        store = f"out[at] = (long long)({'v' if one_row else f'v % ({p})rowlen'});"
    elif outm == "gather":
        store = "out[at] = src[v];"
    else:
        store = "pout[at] = v;"
    if inm == "row":
        keys_step = ""
        digit_of_payload = f"dg[q] = (unsigned int)(({p})(v / ({p})rowlen) >> shift) & 255u;"
    else:
        write_key = "kout[base[dg[q]] + pos] = v;" if outm == "kv" else ""
        keys_step = f"""
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) sh.xk[ranks[q]] = rk[q];
  __syncthreads();
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) {{
    const int pos = q * {THREADS} + threadIdx.x;
    if (pos < valid) {{
      const {k} v = sh.xk[pos];
      dg[q] = (unsigned int)(v >> shift) & 255u;
      {write_key}
    }}
  }}
  __syncthreads();"""
        digit_of_payload = ""
    src = f"""
#include <cub/block/block_radix_rank.cuh>
#include <cub/block/block_scan.cuh>
{_rkey(dt, inm == "src")}
struct gm_digit_{name} {{
  int shift;
  __device__ __forceinline__ unsigned int Digit({rk} key) const {{
    return (unsigned int)(key >> shift) & 255u; }}
}};
extern "C" __global__ void __launch_bounds__({THREADS}) {name}({", ".join(params)}) {{
  typedef cub::BlockRadixRankMatch<{THREADS}, 8, false> Rank;
  typedef cub::BlockScan<{o}, {THREADS}> Scan;
  __shared__ union {{
    typename Rank::TempStorage rank;
    typename Scan::TempStorage scan;
    {rk} xk[{TILE}];
    {p} xp[{TILE}];
  }} sh;
  __shared__ long long base[{THREADS}];
  const long long tile = blockIdx.x;
  const long long start = tile * {TILE};
  const int valid = (int)(n - start < {TILE} ? n - start : {TILE});
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  {rk} rk[{ITEMS}];
  {p} pv[{ITEMS}];
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) {{
    // warp-striped: the order in which BlockRadixRankMatch ranks equal digits
    const int j = warp * (32 * {ITEMS}) + q * 32 + lane;
    if (j < valid) {{ {load} }}
    else {{ rk[q] = ({rk})~({rk})0; pv[q] = 0; }}
  }}
  {o} digit_start;
  Scan(sh.scan).ExclusiveSum(totals[threadIdx.x], digit_start);
  __syncthreads();
  int ranks[{ITEMS}];
  int before[1];
  gm_digit_{name} ext;
  ext.shift = shift;
  Rank(sh.rank).RankKeys(rk, ranks, ext, before);
  base[threadIdx.x] = (long long)digit_start
                      + (long long)counts[(long long)threadIdx.x * ntiles + tile]
                      - (long long)before[0];
  __syncthreads();
  unsigned int dg[{ITEMS}];{keys_step}
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) sh.xp[ranks[q]] = pv[q];
  __syncthreads();
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) {{
    const int pos = q * {THREADS} + threadIdx.x;
    if (pos < valid) {{
      const {p} v = sh.xp[pos];
      {digit_of_payload}
      const long long at = base[dg[q]] + pos;
      {store}
    }}
  }}
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_pass_twin, dt, inm, outm, bits_payload, one_row, pt))
    return name, src, tuple(kinds)


def _pass_twin(dt: np.dtype, inm: str, outm: str, bits_payload: bool,
               one_row: bool, pt: np.dtype) -> Any:
    ut = _UDT[dt.itemsize]

    def run(info: Any, n: Any, ntiles: Any, rowlen: Any, shift: Any, flip: Any,
            *ptrs: np.ndarray) -> None:
        n, ntiles, rowlen, shift = int(n), int(ntiles), int(rowlen), int(shift)
        descending = int(flip) != 0
        ptrs = list(ptrs)
        counts, totals = ptrs[-2], ptrs[-1]
        pos = 0
        if inm != "row":
            kin = ptrs[pos][:n].view(ut)
            pos += 1
        if inm != "src":
            pin = ptrs[pos][:n]
            pos += 1
        if inm == "src":
            keys = _np_key(kin, dt, descending)
            pay = kin.copy() if bits_payload else np.arange(n, dtype=pt)
            dig = _digit_np(keys, shift)
        elif inm == "kv":
            keys, pay = kin, pin
            dig = _digit_np(keys, shift)
        else:
            pay = pin
            dig = _digit_np(pay // pay.dtype.type(rowlen), shift)
        # where each element goes: its digit's start, the tiles before it, the elements of its
        # digit before it in its tile
        tile = np.arange(n, dtype=np.int64) // TILE
        group = dig * ntiles + tile
        order = np.argsort(group, kind="stable")
        sorted_group = group[order]
        first = np.searchsorted(sorted_group, sorted_group, side="left")
        within = np.empty(n, np.int64)
        within[order] = np.arange(n) - first
        c = counts[:256 * ntiles].reshape(256, ntiles).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(totals[:256].astype(np.int64))[:-1]])
        at = starts[dig] + c[dig, tile] + within
        if outm == "kv":
            ptrs[pos][at] = keys
            pos += 1
        if outm == "gather":
            src, out = ptrs[pos].view(ut), ptrs[pos + 1].view(ut)
            out[at] = src[pay.astype(np.int64)]
        elif outm == "index":
            idx = pay.astype(np.int64)
            ptrs[pos][at] = idx if one_row else idx % rowlen
        else:
            dst = ptrs[pos]
            dst.view(_UDT[dst.dtype.itemsize])[at] = pay

    return run


# -- dispatch -------------------------------------------------------------------------------------
class _Slot:
    """A scratch buffer of ``shape`` and ``dt``, made when a launch first writes it: that
    launch's message allocates it (:func:`_issue`)."""

    __slots__ = ("shape", "dt", "array")

    def __init__(self, shape: tuple[int, ...], dt: np.dtype) -> None:
        self.shape, self.dt = shape, dt
        self.array: Array | None = None


class _PingPong:
    """Two scratch buffers of ``total`` elements of ``dt``, each made when first written."""

    def __init__(self, total: int, dt: np.dtype) -> None:
        self._slots = (_Slot((total,), dt), _Slot((total,), dt))

    def __getitem__(self, i: int) -> _Slot:
        return self._slots[i]


class RadixScratch:
    """The buffers a radix sort of ``total`` keys of width ``key_dt`` with payloads of
    ``pay_dt`` works in (per-tile counts, digit totals, ping-pong keys and payloads), each made
    by the first launch that writes it. A caller that sorts arrays of one size again and again
    keeps one and passes it to every :func:`radix_sort` (a new buffer per call costs an
    allocation and a free, and makes every launch a new message); the calls must then be
    issued one after another on the device (the scratch of one is overwritten by the next, in
    stream order)."""

    def __init__(self, dev: Any, total: int, key_dt: np.dtype, pay_dt: np.dtype) -> None:
        ot = payload_dtype(total)
        self.total, self.key_dt, self.pay_dt = total, _UDT[key_dt.itemsize], pay_dt
        ntiles = (total + TILE - 1) // TILE
        self.counts = _Slot((256 * ntiles,), ot)
        self.totals = _Slot((256,), ot)
        self.keys = _PingPong(total, self.key_dt)
        self.pays = _PingPong(total, pay_dt)


def _issue(dev: Any, key: tuple, render: Any, grid: int, args: list[Any], reads: list[Any],
           writes: list[Any]) -> None:
    """Launch the kernel ``render()`` makes (name, source, signature; ``key`` names it) over
    ``args`` (numbers, arrays or scratch slots; ``reads`` and ``writes`` are among them). The
    first slot written that is not made yet is allocated by the launch's own message; any
    other such slot by a message of its own before it. A launch over made buffers only goes
    through ``dev.launch``, which keeps its message for a repeat over the same buffers (a
    kept :class:`RadixScratch`)."""
    minted: tuple[_Slot, Any] | None = None
    for w in writes:
        if type(w) is _Slot and w.array is None:
            if minted is None:
                minted = (w, dev.port.mint(w.shape, D.storage_name(w.dt), "C"))
            else:
                w.array = new_array(dev, w.shape, w.dt)
    if minted is None:
        def buf(v: Any) -> Any:
            return (v.array if type(v) is _Slot else v).buffer

        name, src, sig = render()
        done = dev.launch(cub_kernel(dev, name, src, sig), grid, THREADS,
                          tuple(buf(a) if isinstance(a, (Array, _Slot)) else a for a in args),
                          reads=[buf(r) for r in reads], writes=[buf(w) for w in writes])
    else:
        slot, new = minted

        def ref(v: Any) -> Any:
            if v is slot:
                return new
            return (v.array if type(v) is _Slot else v).buffer.ref

        done = _send(dev, key, render, grid, THREADS,
                     tuple(ref(a) if isinstance(a, (Array, _Slot)) else a for a in args),
                     tuple(dict.fromkeys(ref(r) for r in reads)),
                     tuple(dict.fromkeys(ref(w) for w in writes)), new, cub_kernel)
        slot.array = Array(done, slot.shape, slot.dt, dev)
    for w in writes:
        if minted is None or w is not minted[0]:
            (w.array if type(w) is _Slot else w)._wrote(done)


def payload_dtype(total: int) -> np.dtype:
    """The dtype of the sort's index payloads for ``total`` elements (uint32 below 2**32)."""
    return np.dtype(np.uint64 if total >= (1 << 32) else np.uint32)


def radix_sorted(rows: Array, nrows: int, n: int, descending: bool, indices: bool,
                 shape: tuple[int, ...], dtype: np.dtype) -> Array:
    """:func:`radix_sort` into a new array of ``shape`` and ``dtype``, allocated by the message
    of the pass that writes it."""
    out = _Slot(shape, dtype)
    radix_sort(rows, nrows, n, descending, indices, out)  # type: ignore[arg-type]
    assert out.array is not None
    return out.array


def radix_sort(rows: Array, nrows: int, n: int, descending: bool, indices: bool,
               out: Array, *, payload: bool = False, key_bits: int | None = None,
               first_counts: Array | None = None, scratch: RadixScratch | None = None) -> None:
    """Sort each of the ``nrows`` rows of ``n`` elements of the C-contiguous ``rows`` (which
    fills its buffer from offset 0) into ``out`` (a new array of the same shape: the values, or
    with ``indices`` their int64 positions in the row).

    For one row of unsigned keys, ``payload`` writes the sorting order as the index payload
    itself (:func:`payload_dtype`, no widening to int64), ``key_bits`` says that only the low
    ``key_bits`` bits of the keys can be set (the passes over higher digits, which would move
    nothing, are left out), and ``first_counts`` holds the first pass's per-tile digit counts
    already (``counts[digit * ntiles + tile]`` over tiles of :data:`TILE`, as a kernel that
    made the keys counted them), so that pass reads no histogram of its own. ``scratch``: the
    buffers to work in (:class:`RadixScratch` of this size and these dtypes; default: new
    ones)."""
    dev = rows.device
    dt = rows.dtype
    total = nrows * n
    if total == 0:
        return
    ut = _UDT[dt.itemsize]
    ot = payload_dtype(total)
    bits_payload = nrows == 1 and not indices and not payload
    pt = ut if bits_payload else ot
    top = dt.itemsize * 8 if key_bits is None else max(1, min(key_bits, dt.itemsize * 8))
    passes: list[tuple[str, int]] = [("key", s) for s in range(0, top, 8)]
    passes += [("row", s) for s in range(0, max(nrows - 1, 0).bit_length(), 8)]
    ntiles = (total + TILE - 1) // TILE
    flip = (1 << (dt.itemsize * 8)) - 1 if descending else 0
    if scratch is None:
        scratch = RadixScratch(dev, total, dt, pt)
    elif (scratch.total, scratch.key_dt, scratch.pay_dt) != (total, ut, pt):
        raise ValueError("radix_sort: the scratch is for another size or other dtypes")
    counts = first_counts if first_counts is not None else scratch.counts
    totals = scratch.totals
    # ping-pong buffers between passes, made when a pass first writes one (none for a sort of
    # one pass, one pair for two passes)
    keys, pays = scratch.keys, scratch.pays
    final = "index" if indices else ("p" if bits_payload or payload else "gather")
    cur = 0
    for i, (kind, shift) in enumerate(passes):
        last = i == len(passes) - 1
        inm = "src" if i == 0 else ("row" if kind == "row" else "kv")
        if last:
            outm = final
        else:
            outm = "kv" if passes[i + 1][0] == "key" else "p"
        # 1. per tile counts of the digit (the first pass's may come with the keys)
        hmode = "row" if kind == "row" else ("src" if i == 0 else "key")
        hin = rows if i == 0 else (pays[cur] if kind == "row" else keys[cur])
        if i > 0 or first_counts is None:
            _issue(dev, ("radix_hist", dt, hmode, pt, ot),
                   functools.partial(_render_hist, dt, hmode, pt, ot), ntiles,
                   [total, ntiles, n, shift, flip, hin, counts], [hin], [counts])
        # 2. per digit scan over the tiles, and the totals
        _issue(dev, ("radix_colscan", ot), functools.partial(_render_colscan, ot), 256,
               [ntiles, counts, totals], [counts], [counts, totals])
        # 3. rank and scatter
        nxt = 1 - cur
        args: list[Any] = [total, ntiles, n, shift, flip]
        reads: list[Any] = []
        if inm != "row":
            kin = rows if inm == "src" else keys[cur]
            args.append(kin)
            reads.append(kin)
        if inm != "src":
            args.append(pays[cur])
            reads.append(pays[cur])
        written: list[Any] = []
        if outm == "kv":
            written.append(keys[nxt])
        if outm == "gather":
            args.append(rows)
            reads.append(rows)
            written.append(out)
        elif outm == "index" or (outm == "p" and last):
            written.append(out)
        else:
            written.append(pays[nxt])
        args += written
        args += [counts, totals]
        reads += [counts, totals]
        key = ("radix_pass", dt, pt, ot, inm, outm, bits_payload, nrows == 1)
        _issue(dev, key, functools.partial(_render_pass, dt, pt, ot, inm, outm, bits_payload,
                                           nrows == 1), ntiles, args, reads, written)
        cur = nxt
