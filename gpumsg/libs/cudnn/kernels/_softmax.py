"""Softmax and log-softmax over contiguous rows: gpumsg's own kernels (NVRTC), taken where the
normalized elements of each softmax lie next to each other in memory (``mode="instance"`` in
either layout; ``mode="channel"`` in NHWC, or NCHW without spatial extent: a framework's
last-dimension softmax), because cuDNN's ``cudnnSoftmaxForward`` treats such a row as C
channels of a 1 x 1 image (see docs/performance.md for the measured difference). Everything
else goes to cuDNN.

The row is kept in registers as in layer_norm.py (16-byte packs where the pointers are
aligned and the row length a multiple of the pack; a warp per row up to 128 packs, else a
block): one read and one write per element.

* ``sm_fwd_r<K, VEC, V, W, LOG>``: m = max of the row, s = sum of exp(x - m);
  y = exp(x - m) / s, or with LOG y = x - m - log s.
* ``sm_bwd_r<K, VEC, V, W, LOG>``: from y and dy: dx = y (dy - sum(y dy)), or with LOG
  dx = dy - exp(y) sum(dy).

f32 arithmetic for every element type. dx may be dy, y may be x (in place): each element is
read and written by one thread, reads first.
"""

from __future__ import annotations

import math
from typing import Any

from ._rowkern import PACK, PRELUDE, TAG, OwnKernels, aligned, row_shape

__all__ = ["SOFTMAX_SOURCE", "SoftmaxKernels", "softmax_rows"]

SOFTMAX_SOURCE = PRELUDE + r"""
template <int K, bool VEC, int V> struct LBS {
    static constexpr int PT = V * IO<K, VEC>::N;
    static constexpr int fwd = PT <= 32 ? 1024 : 512;
    static constexpr int bwd = 2 * PT <= 8 ? 1024 : (2 * PT <= 64 ? 512 : 256);
};

template <int K, bool VEC, int V, bool W, bool LOG>
__global__ void __launch_bounds__(LBS<K, VEC, V>::fwd)
sm_fwd_r(const typename E<K>::T* x, typename E<K>::T* y, long long rows, int d) {
    typedef IO<K, VEC> io;
    constexpr int N = io::N;
    __shared__ float sh[32];
    int lane, nt;
    long long g, ng;
    row_group<W>(lane, nt, g, ng);
    const int nvec = d / N;
    const float ninf = -__int_as_float(0x7f800000);
    for (long long r = g; r < rows; r += ng) {
        float v[V][N];
        float m = ninf;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                io::load(x + r * d, i, v[k]);
#pragma unroll
                for (int j = 0; j < N; ++j) m = fmaxf(m, v[k][j]);
            }
        }
        m = group_max<W>(m, sh);
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (lane + k * nt < nvec) {
#pragma unroll
                for (int j = 0; j < N; ++j) {
                    const float e = expf(v[k][j] - m);
                    if constexpr (!LOG) v[k][j] = e;
                    s += e;
                }
            }
        }
        group_sum<W, 1>(&s, sh);
        const float f = LOG ? m + logf(s) : 1.f / s;
        typename E<K>::T* yr = y + r * d;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                float o[N];
#pragma unroll
                for (int j = 0; j < N; ++j) o[j] = LOG ? v[k][j] - f : v[k][j] * f;
                io::store(yr, i, o);
            }
        }
    }
}

template <int K, bool VEC, int V, bool W, bool LOG>
__global__ void __launch_bounds__(LBS<K, VEC, V>::bwd)
sm_bwd_r(const typename E<K>::T* y, const typename E<K>::T* dy, typename E<K>::T* dx,
         long long rows, int d) {
    typedef IO<K, VEC> io;
    constexpr int N = io::N;
    __shared__ float sh[32];
    int lane, nt;
    long long g, ng;
    row_group<W>(lane, nt, g, ng);
    const int nvec = d / N;
    for (long long r = g; r < rows; r += ng) {
        float yv[V][N], gv[V][N];
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                io::load(y + r * d, i, yv[k]);
                io::load(dy + r * d, i, gv[k]);
#pragma unroll
                for (int j = 0; j < N; ++j) s += LOG ? gv[k][j] : yv[k][j] * gv[k][j];
            }
        }
        group_sum<W, 1>(&s, sh);
        typename E<K>::T* dr = dx + r * d;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                float o[N];
#pragma unroll
                for (int j = 0; j < N; ++j)
                    o[j] = LOG ? gv[k][j] - expf(yv[k][j]) * s : yv[k][j] * (gv[k][j] - s);
                io::store(dr, i, o);
            }
        }
    }
}
"""


def softmax_rows(layout: str, shape: tuple[int, ...], mode: str) -> tuple[int, int] | None:
    """(rows, row length) when every softmax of this problem normalizes one contiguous run of
    memory, else None."""
    if mode == "instance":
        return shape[0], math.prod(shape[1:])
    if layout == "NHWC":
        return math.prod(shape[:-1]), shape[-1]
    if math.prod(shape[2:]) == 1:
        return shape[0], shape[1]
    return None


def _max_threads(backward: bool, per_thread: int) -> int:
    """LBS of the source."""
    if backward:
        return 1024 if 2 * per_thread <= 8 else 512 if 2 * per_thread <= 64 else 256
    return 1024 if per_thread <= 32 else 512


class SoftmaxKernels(OwnKernels):
    """The row-softmax kernels of one device, one program per (dtype, pack, shape, log)
    compiled on first use. ``run`` returns False (nothing issued) when the problem is not one
    of contiguous rows, a row is too long for the registers of a block, or NVRTC is
    unavailable: the caller takes cuDNN then. Device thread only."""

    #: False: every softmax goes to cuDNN (a benchmark compares the two)
    enabled = True
    #: threads a block aims at (a class-level knob a benchmark can change)
    target_threads = 256
    v_max = 8

    prefix = "gpumsg_softmax"

    def run(self, stream: Any, dtype: str, layout: str, shape: tuple[int, ...], mode: str,
            log: bool, x: int, y: int, dy: int = 0, dx: int = 0) -> bool:
        """y = softmax(x) (``dy == 0``) or dx from y and dy; see the module docstring."""
        rd = softmax_rows(layout, shape, mode)
        if rd is None or dtype not in TAG or not self.enabled:
            return False
        rows, d = rd
        backward = bool(dy)
        ptrs = (y, dy, dx) if backward else (x, y)
        vec = d % PACK[dtype] == 0 and aligned(*ptrs)
        per = PACK[dtype] if vec else 1
        shape_ = row_shape(d // per, self.target_threads, self.v_max,
                           lambda v: _max_threads(backward, v * per))
        if shape_ is None:
            return False
        warp, v, threads = shape_
        b = lambda f: "true" if f else "false"  # noqa: E731
        args = f"<{TAG[dtype]}, {b(vec)}, {v}, {b(warp)}, {b(log)}>"
        k = self._program((TAG[dtype], vec, v, warp, log), SOFTMAX_SOURCE,
                          (f"sm_fwd_r{args}", f"sm_bwd_r{args}"))
        if k is None:
            return False
        mods, fns = k
        blocks = -(-rows // (threads // 32)) if warp else rows
        if backward:
            mods.launch(stream, fns[f"sm_bwd_r{args}"], (blocks, 1, 1), (threads, 1, 1), 0,
                        ("ptr", "ptr", "ptr", "i64", "i32"), [y, dy, dx, rows, d], [])
        else:
            mods.launch(stream, fns[f"sm_fwd_r{args}"], (blocks, 1, 1), (threads, 1, 1), 0,
                        ("ptr", "ptr", "i64", "i32"), [x, y, rows, d], [])
        self.last_path = f"rows vec={vec} warp={warp} V={v} threads={threads}"
        return True
