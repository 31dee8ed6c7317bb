"""Philox4x32-10, the counter-based generator the sampling kernels run inside each thread.

A counter of four 32-bit words and a key of two give four random words through ten rounds of
multiply-and-xor (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): no
state is kept between calls, so element ``i`` of a launch finds its own numbers by putting ``i``
in the counter, and a rejection loop takes as many fresh numbers as it needs by counting its
draws in another counter word. The counter of a draw is ``(i low, i high, draw, launch)``;
the key comes from the generator's seed.

:data:`CUDA` is the device code (a struct ``gm_rs`` that hands out uniforms and normals);
:class:`Draws` is its NumPy twin over a set of elements at once: each element takes the same
words in the same order as its GPU thread does, so that integer results agree bit for bit and
floating ones to the last few units of the math functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["CUDA", "philox", "Draws", "TWIN_SLICE", "slices", "M0", "M1", "W0", "W1"]

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85

CUDA = r"""
__device__ __forceinline__ uint4 gm_philox(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r) { k.x += 0x9E3779B9u; k.y += 0xBB67AE85u; }
    const unsigned int hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const unsigned int hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}
// one element's stream: counter (i low, i high, draw, launch), key from the seed; a Philox
// call gives two uniforms, the second kept for the next u(); Box-Muller gives two normals,
// the second kept for the next normal()
struct gm_rs {
  uint4 c; uint2 k; double spare, nspare; bool has, nhas;
  __device__ gm_rs(long long i, unsigned int call, unsigned int k0, unsigned int k1)
      : c(make_uint4((unsigned int)i, (unsigned int)((unsigned long long)i >> 32), 0u, call)),
        k(make_uint2(k0, k1)), spare(0.0), nspare(0.0), has(false), nhas(false) {}
  __device__ __forceinline__ uint4 words() { uint4 w = gm_philox(c, k); c.z += 1u; return w; }
  // 53 random bits as a double in (0, 1): (m + 1/2) 2^-53, never 0 nor 1
  static __device__ __forceinline__ double unit(unsigned int hi, unsigned int lo) {
    const unsigned long long m = ((unsigned long long)(hi >> 11) << 32) | lo;
    return ((double)m + 0.5) * 1.1102230246251565e-16;
  }
  __device__ __forceinline__ double u() {
    if (has) { has = false; return spare; }
    const uint4 w = words();
    spare = unit(w.z, w.w);
    has = true;
    return unit(w.x, w.y);
  }
  // 64 random bits (a Philox call of their own)
  __device__ __forceinline__ unsigned long long bits() {
    const uint4 w = words();
    return ((unsigned long long)w.x << 32) | w.y;
  }
  // standard normals by Box-Muller: two from two uniforms (cosine first, sine kept)
  __device__ __forceinline__ double normal() {
    if (nhas) { nhas = false; return nspare; }
    const double a = u(), b = u();
    const double r = sqrt(-2.0 * log(a));
    double sn, cs;
    sincospi(2.0 * b, &sn, &cs);
    nspare = r * sn;
    nhas = true;
    return r * cs;
  }
  __device__ __forceinline__ double expo() { return -log(u()); }
};
"""


def philox(c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: int,
           k1: int) -> tuple[np.ndarray, ...]:
    """Philox4x32-10 of the counters ``(c0, c1, c2, c3)`` (uint32 arrays) under key
    ``(k0, k1)``: the four output words, as :data:`CUDA`'s ``gm_philox``."""
    c = [np.asarray(v, np.uint32) for v in (c0, c1, c2, c3)]
    ka, kb = np.uint32(k0), np.uint32(k1)
    m0, m1, mask = np.uint64(M0), np.uint64(M1), np.uint64(0xFFFFFFFF)
    shift = np.uint64(32)
    with np.errstate(over="ignore"):
        for r in range(10):
            if r:
                ka = np.uint32((int(ka) + W0) & 0xFFFFFFFF)
                kb = np.uint32((int(kb) + W1) & 0xFFFFFFFF)
            p0 = m0 * c[0].astype(np.uint64)
            p1 = m1 * c[2].astype(np.uint64)
            hi0, lo0 = (p0 >> shift).astype(np.uint32), (p0 & mask).astype(np.uint32)
            hi1, lo1 = (p1 >> shift).astype(np.uint32), (p1 & mask).astype(np.uint32)
            c = [hi1 ^ c[1] ^ ka, lo1, hi0 ^ c[3] ^ kb, lo0]
    return tuple(c)


#: elements a twin draws at a time (its temporaries take some 100-200 bytes an element: a whole
#: launch of 2**29 elements at once needed more host memory than the simulator's machine had)
TWIN_SLICE = 1 << 20


def slices(n: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of the slices of ``n`` elements a twin draws in turn."""
    for start in range(0, n, TWIN_SLICE):
        yield start, min(n, start + TWIN_SLICE)


class Draws:
    """The streams of elements ``first .. first + n - 1`` of one launch (NumPy twin of
    ``gm_rs``): each method takes the indices (from 0, counted from ``first``) of the elements
    that draw now and advances their draw counters. A launch's twin draws in slices of
    :data:`TWIN_SLICE` elements, one Draws each, so that its temporaries stay bounded."""

    def __init__(self, n: int, call: int, k0: int, k1: int, first: int = 0) -> None:
        self.first = np.uint64(first)
        self.draw = np.zeros(n, np.uint32)
        self.spare = np.zeros(n)
        self.has = np.zeros(n, bool)
        self.nspare = np.zeros(n)
        self.nhas = np.zeros(n, bool)
        self.call = np.uint32(call)
        self.k0, self.k1 = int(k0), int(k1)

    def words(self, e: np.ndarray) -> tuple[np.ndarray, ...]:
        e64 = e.astype(np.uint64) + self.first
        c0 = (e64 & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        c1 = (e64 >> np.uint64(32)).astype(np.uint32)
        c3 = np.full(e.shape, self.call, np.uint32)
        w = philox(c0, c1, self.draw[e], c3, self.k0, self.k1)
        self.draw[e] += np.uint32(1)
        return w

    @staticmethod
    def _unit(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        m = ((hi >> np.uint32(11)).astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
        return (m.astype(np.float64) + 0.5) * 1.1102230246251565e-16

    def u(self, e: np.ndarray) -> np.ndarray:
        """One uniform per element of ``e`` (distinct indices): the kept second uniform of
        the element's last Philox call, else the first of a new call (keeping its second)."""
        out = np.empty(e.size)
        kept = self.has[e]
        ek, en = e[kept], e[~kept]
        out[kept] = self.spare[ek]
        self.has[ek] = False
        if en.size:
            w = self.words(en)
            out[~kept] = self._unit(w[0], w[1])
            self.spare[en] = self._unit(w[2], w[3])
            self.has[en] = True
        return out

    def bits(self, e: np.ndarray) -> np.ndarray:
        w = self.words(e)
        return (w[0].astype(np.uint64) << np.uint64(32)) | w[1].astype(np.uint64)

    def normal(self, e: np.ndarray) -> np.ndarray:
        """One standard normal per element of ``e``: the kept sine normal of the element's
        last Box-Muller pair, else the cosine one of a new pair (keeping the sine one)."""
        out = np.empty(e.size)
        kept = self.nhas[e]
        ek, en = e[kept], e[~kept]
        out[kept] = self.nspare[ek]
        self.nhas[ek] = False
        if en.size:
            a = self.u(en)
            b = self.u(en)
            r = np.sqrt(-2.0 * np.log(a))
            out[~kept] = r * np.cos(2.0 * np.pi * b)
            self.nspare[en] = r * np.sin(2.0 * np.pi * b)
            self.nhas[en] = True
        return out

    def expo(self, e: np.ndarray) -> np.ndarray:
        return -np.log(self.u(e))


def _lgamma1(v: float) -> float:
    try:
        return math.lgamma(v)
    except ValueError:  # a pole (0, -1, ...): +inf, as CUDA's lgamma answers
        return math.inf


def lgamma(x: Any) -> np.ndarray:
    """log|Gamma(x)| element-wise (the twin of CUDA's ``lgamma``)."""
    return np.frompyfunc(_lgamma1, 1, 1)(np.asarray(x, np.float64)).astype(np.float64)
