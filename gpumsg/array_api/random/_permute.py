"""Uniform random permutations of ``0 .. n - 1`` by random buckets, exactly uniform.

Each index ``i`` gets an independent uniform label of ``L`` bits (:func:`label_bits`: buckets of
about :data:`MEAN` indices); a stable radix sort of the labels (``L <= 8``: one pass, ``L <= 16``:
two) lays the buckets out in label order; a warp per bucket finds where it starts (a 32-way
search of the sorted labels); then one block per bucket shuffles it: each index in
the bucket gets an independent uniform 8-bit sub-label, the block ranks them
(``cub::BlockRadixRankMatch``, stable) into 256 sub-buckets in shared memory, and thread ``t``
shuffles sub-bucket ``t`` by Fisher-Yates with exactly uniform integers (masked rejection).

Why it is uniform: put ``n`` items in ``B`` buckets by independent uniform labels and shuffle
each bucket uniformly and independently; a given order ``s`` comes out when the labels put in
each bucket exactly the items ``s`` lists at that bucket's places (probability ``B**-n`` for
each bucket-size vector ``c``) and each bucket's shuffle then gives their order in ``s``
(probability ``1 / prod(c_b!)``): ``P(s) = B**-n * sum_c prod(1 / c_b!) = B**-n * B**n / n! =
1 / n!`` by the multinomial theorem. The sub-buckets are the same argument one level down, and
Fisher-Yates with exact integers is uniform; so the whole is, for any ``n`` (no ties of random
keys to break, unlike a sort by random keys). A bucket larger than a block's :data:`CAP` (about
``exp(-129)`` likely with the buckets' mean) is shuffled by Fisher-Yates in global memory by one
thread: slower, as uniform.

Random words: the labels of a launch are 16 (or 32) bit fields of Philox4x32-10 calls with
counter ``(i // 8, 0, launch)`` (``i // 4`` for 32-bit labels); the shuffle's launch draws the
sub-label of index ``v`` from counter ``(v, 0, launch)`` and the Fisher-Yates words of thread
``t`` of bucket ``b`` from counters ``(512 b + t, 1 + k, launch)`` (``t = 256``: the bucket's
one-thread shuffle), four words per call in order. The simulator's twins draw the same words,
so a seed gives the same permutation on both backends.
"""

from __future__ import annotations

import functools
import math
import threading
import weakref
from typing import Any

import numpy as np

from ...libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from .. import _dtypes as D
from .._array import Array, new_array
from .._codegen import kernel_for
from .._cub import cub_kernel, unsigned_type
from .._radix import TILE, RadixScratch, payload_dtype, radix_sort
from ._philox import CUDA as PHILOX
from ._philox import philox

__all__ = ["permutation_order", "label_bits", "MEAN", "CAP"]

THREADS = 256
ITEMS = 11
#: the most indices a block shuffles in shared memory (a larger bucket: one thread, globally)
CAP = THREADS * ITEMS
#: the buckets' mean size: far enough below CAP that a larger bucket does not happen
MEAN = 2048
assert TILE % 8 == 0


def label_bits(n: int, mean: int = MEAN) -> int:
    """The label width for ``n`` indices: buckets of at most ``mean`` indices on average."""
    return max(0, math.ceil(math.log2(n / mean))) if n > mean else 0


def _split(key: int) -> tuple[int, int]:
    return key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF


# -- labels ---------------------------------------------------------------------------------------
@functools.cache  # the source of a kernel is rendered once per process
def _render_labels(lt: np.dtype, ot: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """Labels of a tile of TILE indices per block (per = 8 16-bit or 4 32-bit labels from each
    Philox call, stored as one 16-byte vector where the group is whole), and the tile's count of
    each low 8-bit digit: the first radix pass's counts (``counts[digit * ntiles + tile]``)."""
    per = 16 // lt.itemsize
    lc, o = unsigned_type(lt.itemsize), unsigned_type(ot.itemsize)
    name = f"gm_perm_labels_{lt.name}_{ot.name}"
    groups = TILE // per
    if per == 8:
        field = "(unsigned int)(((&w.x)[h >> 1] >> (16 * (h & 1))) & mask)"
        packed = "const unsigned int pm = mask | (mask << 16);"
        vec = "make_uint4(w.x & pm, w.y & pm, w.z & pm, w.w & pm)"
    else:
        field = "((&w.x)[h] & mask)"
        packed = "const unsigned int pm = mask;"
        vec = "make_uint4(w.x & pm, w.y & pm, w.z & pm, w.w & pm)"
    src = f"""{PHILOX}
extern "C" __global__ void __launch_bounds__({THREADS}) {name}(
    long long n, long long ntiles, unsigned long long key, unsigned long long call,
    unsigned int mask, {lc}* __restrict__ labels, {o}* __restrict__ counts) {{
  __shared__ unsigned int hist[256];
  hist[threadIdx.x] = 0;
  __syncthreads();
  {packed}
  const uint2 k = make_uint2((unsigned int)key, (unsigned int)(key >> 32));
  for (int r = threadIdx.x; r < {groups}; r += {THREADS}) {{
    const long long g = (long long)blockIdx.x * {groups} + r;
    const long long i0 = g * {per};
    if (i0 >= n) break;
    uint4 w = gm_philox(make_uint4((unsigned int)g, (unsigned int)((unsigned long long)g >> 32),
                                   0u, (unsigned int)call), k);
    if (i0 + {per} <= n) {{
      *reinterpret_cast<uint4*>(labels + i0) = {vec};
      #pragma unroll
      for (int h = 0; h < {per}; ++h) atomicAdd(&hist[{field} & 255u], 1u);
    }} else {{
      for (int h = 0; i0 + h < n; ++h) {{
        const unsigned int v = {field};
        labels[i0 + h] = ({lc})v;
        atomicAdd(&hist[v & 255u], 1u);
      }}
    }}
  }}
  __syncthreads();
  counts[(long long)threadIdx.x * ntiles + blockIdx.x] = ({o})hist[threadIdx.x];
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_labels_twin, per))
    return name, src, ("i64", "i64", "u64", "u64", "u32", "ptr", "ptr")


def labels_np(idx: np.ndarray, per: int, call: int, key: int, mask: int) -> np.ndarray:
    """The labels of indices ``idx`` (int64) as the labels kernel draws them (uint64)."""
    g = (idx // per).astype(np.uint64)
    k0, k1 = _split(key)
    w = philox((g & np.uint64(0xFFFFFFFF)).astype(np.uint32), (g >> np.uint64(32)).astype(
        np.uint32), np.zeros(g.size, np.uint32), np.full(g.size, call, np.uint32), k0, k1)
    words = np.stack(w, axis=1).astype(np.uint64)
    h = idx % per
    if per == 8:
        v = words[np.arange(idx.size), h >> 1] >> (16 * (h & 1)).astype(np.uint64)
    else:
        v = words[np.arange(idx.size), h]
    return v & np.uint64(mask)


def _labels_twin(per: int) -> Any:
    def run(info: Any, n: Any, ntiles: Any, key: Any, call: Any, mask: Any,
            labels: np.ndarray, counts: np.ndarray) -> None:
        n, ntiles = int(n), int(ntiles)
        idx = np.arange(n, dtype=np.int64)
        lab = labels_np(idx, per, int(call), int(key), int(mask))
        labels[:n] = lab.astype(labels.dtype)
        tile = idx // TILE
        dig = (lab & np.uint64(255)).astype(np.int64)
        counts[:256 * ntiles] = np.bincount(dig * ntiles + tile, minlength=256 * ntiles)

    return run


# -- the buckets' shuffle -------------------------------------------------------------------------
_STREAM = r"""
// the Fisher-Yates words of one thread: Philox counters (sid, 1 + k, launch), four words a call
struct gm_perm_stream {
  uint4 w; uint2 k; unsigned long long sid; unsigned int ctr, call; int have;
  __device__ gm_perm_stream(unsigned long long s, unsigned int c, uint2 key)
      : w(make_uint4(0u, 0u, 0u, 0u)), k(key), sid(s), ctr(1u), call(c), have(0) {}
  __device__ __forceinline__ unsigned int word() {
    if (have == 0) {
      w = gm_philox(make_uint4((unsigned int)sid, (unsigned int)(sid >> 32), ctr, call), k);
      ++ctr;
      have = 4;
    }
    const unsigned int r = have == 4 ? w.x : (have == 3 ? w.y : (have == 2 ? w.z : w.w));
    --have;
    return r;
  }
  // uniform in [0, i] (i >= 1): the bits up to i's top bit, drawn again while above i (two
  // words, high first, where i needs more than 32 bits)
  __device__ __forceinline__ unsigned long long below(unsigned long long i) {
    const unsigned long long mask = ~0ULL >> __clzll((long long)i);
    for (;;) {
      unsigned long long r = word();
      if (mask > 0xFFFFFFFFULL) r = (r << 32) | word();
      r &= mask;
      if (r <= i) return r;
    }
  }
};
"""


_LOWER = """
// first position p in [0, n) whose bucket (the label of the index there) is >= t, else n: a
// 32-way search by one warp (each step probes 32 places at once and keeps one 32nd)
__device__ long long gm_perm_lower(long long n, unsigned long long t,
                                   const LABEL* __restrict__ labels,
                                   const PAY* __restrict__ pay, int lane) {
  long long lo = 0, hi = n;  // the answer is in [lo, hi]
  while (hi - lo > 32) {
    const long long step = (hi - lo + 31) / 32;
    const long long q = lo + (long long)(lane + 1) * step;
    const bool ge = q >= hi || (unsigned long long)labels[pay[q]] >= t;
    const unsigned int ball = __ballot_sync(0xffffffffu, ge);
    const int f = __ffs(ball) - 1;  // lane 31's probe is at or past hi: some lane is set
    const long long nlo = f == 0 ? lo : lo + (long long)f * step + 1;
    const long long qf = lo + (long long)(f + 1) * step;
    hi = qf < hi ? qf : hi;
    lo = nlo;
  }
  const long long q = lo + lane;
  const bool ge = q < hi && (unsigned long long)labels[pay[q]] >= t;
  const unsigned int ball = __ballot_sync(0xffffffffu, ge);
  return ball ? lo + (__ffs(ball) - 1) : hi;
}
"""


@functools.cache  # the source of a kernel is rendered once per process
def _render_bounds(lt: np.dtype, pt: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """Where each bucket starts in the sorted order (``bounds[b]``, ``b <= nb``; ``bounds[nb] =
    n``): a warp per bucket, all at once (a search inside each shuffle block would leave the
    block waiting on its dependent loads)."""
    lc, p = unsigned_type(lt.itemsize), unsigned_type(pt.itemsize)
    name = f"gm_perm_bounds_{lt.name}_{pt.name}"
    src = _LOWER.replace("LABEL", lc).replace("PAY", p) + f"""
extern "C" __global__ void __launch_bounds__({THREADS}) {name}(
    long long n, long long nb, const {lc}* __restrict__ labels, const {p}* __restrict__ pay,
    long long* __restrict__ bounds) {{
  const long long t = ((long long)blockIdx.x * {THREADS} + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (t > nb) return;  // whole warps: t is the same across a warp
  const long long at = t == nb ? n : gm_perm_lower(n, (unsigned long long)t, labels, pay, lane);
  if (lane == 0) bounds[t] = at;
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(_bounds_twin)
    return name, src, ("i64", "i64", "ptr", "ptr", "ptr")


def _bounds_twin(info: Any, n: Any, nb: Any, labels: np.ndarray, pay: np.ndarray,
                 bounds: np.ndarray) -> None:
    n, nb = int(n), int(nb)
    keys = labels[pay[:n].astype(np.int64)].astype(np.int64)
    bounds[:nb + 1] = np.searchsorted(keys, np.arange(nb + 1), side="left")
    bounds[nb] = n


@functools.cache  # the source of a kernel is rendered once per process
def _render_shuffle(pt: np.dtype) -> tuple[str, str, tuple[str, ...]]:
    """One block per bucket (its bounds from the bounds kernel): sub-labels, ranking,
    per-thread Fisher-Yates, int64 stores. ``ident``: one bucket of the identity (no bounds,
    no payload: the values are the positions)."""
    p = unsigned_type(pt.itemsize)
    name = f"gm_perm_shuffle_{pt.name}"
    src = f"""
#include <cub/block/block_radix_rank.cuh>
{PHILOX}
{_STREAM}
struct gm_perm_digit {{
  __device__ __forceinline__ unsigned int Digit(unsigned int key) const {{ return key & 255u; }}
}};
extern "C" __global__ void __launch_bounds__({THREADS}, 4) {name}(
    long long n, int ident, const long long* __restrict__ bounds,
    const {p}* __restrict__ pay, long long* __restrict__ out, unsigned long long key,
    unsigned long long call) {{
  typedef cub::BlockRadixRankMatch<{THREADS}, 8, false> Rank;
  __shared__ union {{
    typename Rank::TempStorage rank;
    {p} xp[{CAP}];
  }} sh;
  __shared__ int sub[{THREADS + 1}];
  const uint2 k = make_uint2((unsigned int)key, (unsigned int)(key >> 32));
  const long long b = blockIdx.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long s = ident ? 0 : bounds[b];
  const long long m = (ident ? n : bounds[b + 1]) - s;
  if (m > {CAP}) {{
    // a bucket larger than the block holds: Fisher-Yates over it in global memory, by one
    // thread (as uniform; about exp(-129) likely at the buckets' mean size)
    for (long long j = threadIdx.x; j < m; j += {THREADS})
      out[s + j] = ident ? (long long)j : (long long)pay[s + j];
    __syncthreads();
    if (threadIdx.x == 0) {{
      gm_perm_stream st((unsigned long long)b * 512ULL + {THREADS}ULL, (unsigned int)call, k);
      for (long long i = m - 1; i >= 1; --i) {{
        const long long j = (long long)st.below((unsigned long long)i);
        const long long x = out[s + i];
        out[s + i] = out[s + j];
        out[s + j] = x;
      }}
    }}
    return;
  }}
  const int valid = (int)m;
  unsigned int rk[{ITEMS}];
  {p} pv[{ITEMS}];
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q) {{
    // warp-striped: the order in which BlockRadixRankMatch ranks equal digits
    const int j = warp * (32 * {ITEMS}) + q * 32 + lane;
    if (j < valid) {{
      const {p} v = ident ? ({p})j : pay[s + j];
      pv[q] = v;
      rk[q] = gm_philox(make_uint4((unsigned int)v,
                                   (unsigned int)((unsigned long long)v >> 32), 0u,
                                   (unsigned int)call), k).x & 255u;
    }} else {{
      pv[q] = 0;
      rk[q] = 0xffffffffu;  // after every index of digit 255
    }}
  }}
  int ranks[{ITEMS}];
  int before[1];
  gm_perm_digit ext;
  Rank(sh.rank).RankKeys(rk, ranks, ext, before);
  sub[threadIdx.x] = before[0];
  if (threadIdx.x == 0) sub[{THREADS}] = valid;
  __syncthreads();
  #pragma unroll
  for (int q = 0; q < {ITEMS}; ++q)
    if (ranks[q] < valid) sh.xp[ranks[q]] = pv[q];
  __syncthreads();
  {{
    const int lo = sub[threadIdx.x], c = sub[threadIdx.x + 1] - lo;
    gm_perm_stream st((unsigned long long)b * 512ULL + threadIdx.x, (unsigned int)call, k);
    for (int i = c - 1; i >= 1; --i) {{
      const int j = (int)st.below((unsigned long long)i);
      const {p} x = sh.xp[lo + i];
      sh.xp[lo + i] = sh.xp[lo + j];
      sh.xp[lo + j] = x;
    }}
  }}
  __syncthreads();
  for (int j = threadIdx.x; j < valid; j += {THREADS}) out[s + j] = (long long)sh.xp[j];
}}
"""
    if name not in SIM_KERNELS:
        sim_kernel(name)(Recipe(_shuffle_twin, pt))
    return name, src, ("i64", "i32", "ptr", "ptr", "ptr", "u64", "u64")


class _Streams:
    """The Fisher-Yates words of a set of threads (twin of ``gm_perm_stream``): word ``k`` of
    thread ``sid`` is word ``k % 4`` of the Philox call with counter (sid, 1 + k // 4)."""

    def __init__(self, sids: np.ndarray, call: int, key: int) -> None:
        self.sids = sids.astype(np.uint64)
        self.k = np.zeros(sids.size, np.int64)
        self.call = call
        self.k0, self.k1 = _split(key)

    def _word(self, e: np.ndarray) -> np.ndarray:
        s, k = self.sids[e], self.k[e]
        w = philox((s & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                   (s >> np.uint64(32)).astype(np.uint32), (1 + k // 4).astype(np.uint32),
                   np.full(e.size, self.call, np.uint32), self.k0, self.k1)
        self.k[e] += 1
        return np.stack(w, axis=1)[np.arange(e.size), k % 4].astype(np.uint64)

    def below(self, e: np.ndarray, i: np.ndarray) -> np.ndarray:
        """Uniform integers in [0, i[j]] for the threads ``e`` (distinct)."""
        i = i.astype(np.uint64)
        mask = i.copy()  # i with every bit below its top bit set
        for sh in (1, 2, 4, 8, 16, 32):
            mask |= mask >> np.uint64(sh)
        out = np.zeros(e.size, np.uint64)
        pend = np.arange(e.size)
        while pend.size:
            r = self._word(e[pend])
            wide = mask[pend] > np.uint64(0xFFFFFFFF)
            if wide.any():
                r[wide] = (r[wide] << np.uint64(32)) | self._word(e[pend[wide]])
            r &= mask[pend]
            ok = r <= i[pend]
            out[pend[ok]] = r[ok]
            pend = pend[~ok]
        return out


def fisher_yates(arr: np.ndarray, starts: np.ndarray, sizes: np.ndarray, sids: np.ndarray,
                 call: int, key: int) -> None:
    """Shuffle the disjoint regions ``arr[starts[r] : starts[r] + sizes[r]]`` in place, region
    ``r`` by the Fisher-Yates of thread ``sids[r]`` (the kernels' order: ``i`` from the last
    place down to 1 swapped with a uniform place in [0, i])."""
    keep = sizes > 1
    st, sz = starts[keep].astype(np.int64), sizes[keep].astype(np.int64)
    streams = _Streams(sids[keep], call, key)
    i = sz - 1
    while True:
        e = np.flatnonzero(i >= 1)
        if e.size == 0:
            return
        j = streams.below(e, i[e]).astype(np.int64)
        a, b = st[e] + i[e], st[e] + j
        x = arr[a].copy()
        arr[a] = arr[b]
        arr[b] = x
        i[e] -= 1


def _shuffle_twin(pt: np.dtype) -> Any:
    def run(info: Any, n: Any, ident: Any, bounds_buf: np.ndarray, pay: np.ndarray,
            out: np.ndarray, key: Any, call: Any) -> None:
        n, key, call = int(n), int(key), int(call)
        nb = int(info.grid[0])
        if int(ident):
            vals = np.arange(n, dtype=np.uint64)
            bounds = np.array([0, n], np.int64)
        else:
            vals = pay[:n].astype(np.uint64)
            bounds = bounds_buf[:nb + 1].astype(np.int64)
        sizes = np.diff(bounds)
        bucket = np.repeat(np.arange(nb, dtype=np.int64), sizes)
        k0, k1 = _split(key)
        w0 = philox((vals & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                    (vals >> np.uint64(32)).astype(np.uint32), np.zeros(n, np.uint32),
                    np.full(n, call, np.uint32), k0, k1)[0]
        sub = (w0 & np.uint32(255)).astype(np.int64)
        big = sizes > CAP
        sub[big[bucket]] = 0  # a big bucket is one region (its sub-labels are not drawn)
        # each bucket's indices ranked by sub-label, stably (the block's ranking)
        order = np.argsort(bucket * 256 + sub, kind="stable")
        arr = vals[order].copy()
        grp = bucket[order] * 256 + sub[order]
        starts_all = np.searchsorted(grp, np.arange(nb * 256), side="left")
        ends_all = np.searchsorted(grp, np.arange(nb * 256), side="right")
        gid = np.arange(nb * 256)
        gb, gt = gid // 256, gid % 256
        small = ~big[gb]
        sids = gb.astype(np.uint64) * np.uint64(512) + gt.astype(np.uint64)
        fisher_yates(arr, starts_all[small], (ends_all - starts_all)[small], sids[small],
                     call, key)
        bigb = np.flatnonzero(big)
        if bigb.size:
            fisher_yates(arr, bounds[bigb], sizes[bigb],
                         bigb.astype(np.uint64) * np.uint64(512) + np.uint64(THREADS), call,
                         key)
        out[:n] = arr.astype(np.int64)

    return run


# -- dispatch -------------------------------------------------------------------------------------
class _Work:
    """The scratch of the permutations of one length on one device (labels, their counts, the
    sorted payloads, the bucket bounds, the radix sort's buffers), kept for the next call of
    that length: a permutation's calls then allocate only their result, and the launches over
    the same buffers and values are messages built once. ``lock``: a call's launches are
    issued together (another thread's call would overwrite the scratch between them)."""

    def __init__(self, dev: Any, n: int, bits: int, lt: np.dtype, ot: np.dtype) -> None:
        self.key = (n, bits)
        self.lock = threading.Lock()
        ntiles = (n + TILE - 1) // TILE
        self.labels = new_array(dev, (n,), lt)
        self.counts = new_array(dev, (256 * ntiles,), ot)
        self.pay = new_array(dev, (n,), ot)
        self.bounds = new_array(dev, ((1 << bits) + 1,), D.int64)
        self.radix = RadixScratch(dev, n, lt, ot)


#: device -> the scratch of its latest permutation length (one length kept per device; the
#: scratch's arrays hold their device, so closed devices' entries are dropped at each lookup)
_works: weakref.WeakKeyDictionary[Any, _Work] = weakref.WeakKeyDictionary()
_works_lock = threading.Lock()


def _work(dev: Any, n: int, bits: int, lt: np.dtype, ot: np.dtype) -> _Work:
    with _works_lock:
        for gone in [d for d in _works if getattr(d, "closed", False)]:
            del _works[gone]
        w = _works.get(dev)
        if w is None or w.key != (n, bits):
            w = _works[dev] = _Work(dev, n, bits, lt, ot)
        return w


def permutation_order(dev: Any, n: int, key: int, calls: tuple[int, int],
                      mean: int = MEAN) -> Array:
    """A uniform random permutation of ``0 .. n - 1`` (int64) from the Philox key ``key`` and
    the launch numbers ``calls`` (labels, shuffle). ``mean``: the buckets' mean size (tests
    pass a large one to reach the one-thread shuffle of a bucket past :data:`CAP`)."""
    out = new_array(dev, (n,), D.int64)
    if n == 0:
        return out
    bits = label_bits(n, mean)
    ot = payload_dtype(n)
    lt = np.dtype(np.uint16 if bits <= 16 else np.uint32)
    nb = 1 << bits
    if not bits:  # one bucket of the identity: no labels, bounds or payload read
        name, src, sig = _render_shuffle(ot)
        out._wrote(dev.launch(cub_kernel(dev, name, src, sig), 1, THREADS,
                              (n, 1, out.buffer, out.buffer, out.buffer, key, calls[1]),
                              writes=[out.buffer]))
        return out
    w = _work(dev, n, bits, lt, ot)
    with w.lock:
        ntiles = (n + TILE - 1) // TILE
        name, src, sig = _render_labels(lt, ot)
        done = dev.launch(kernel_for(dev, name, src, sig), ntiles, THREADS,
                          (n, ntiles, key, calls[0], (1 << bits) - 1, w.labels.buffer,
                           w.counts.buffer), writes=[w.labels.buffer, w.counts.buffer])
        w.labels._wrote(done)
        w.counts._wrote(done)
        radix_sort(w.labels, 1, n, False, False, w.pay, payload=True, key_bits=bits,
                   first_counts=w.counts, scratch=w.radix)
        name, src, sig = _render_bounds(lt, ot)
        w.bounds._wrote(dev.launch(kernel_for(dev, name, src, sig),
                                   -(-(nb + 1) * 32 // THREADS), THREADS,
                                   (n, nb, w.labels.buffer, w.pay.buffer, w.bounds.buffer),
                                   reads=[w.labels.buffer, w.pay.buffer],
                                   writes=[w.bounds.buffer]))
        name, src, sig = _render_shuffle(ot)
        out._wrote(dev.launch(cub_kernel(dev, name, src, sig), nb, THREADS,
                              (n, 0, w.bounds.buffer, w.pay.buffer, out.buffer, key, calls[1]),
                              reads=[w.bounds.buffer, w.pay.buffer], writes=[out.buffer]))
    return out
