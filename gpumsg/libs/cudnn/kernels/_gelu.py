"""GELU forward and backward: gpumsg's own kernels (NVRTC, libs/nvrtc/builtin.py), because
cuDNN's legacy activation API (``cudnnActivationForward``) has no GELU mode.

* ``"gelu"`` (exact): y = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2,
  dy/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
* ``"gelu_tanh"`` (the tanh approximation): u = sqrt(2 / pi) (x + 0.044715 x^3),
  y = x (1 + tanh u) / 2, dy/dx = (1 + tanh u) / 2 + x (1 - tanh^2 u) sqrt(2 / pi)
  (1 + 3 0.044715 x^2) / 2.

f32 arithmetic for every element type (rowkern.TAG). ``gelu<K, VEC, A, BWD, U>``: each
thread handles U packs (16 bytes each, ``blockDim.x`` packs apart: coalesced; all loads first)
where every pointer is 16-byte aligned, else U elements; the tail of a length that is not a
multiple of the pack is done element by element by the first threads of block 0. The backward
reads x and dy and writes dx (y is not needed). In place (y = x, dx = dy) is safe: each element
is read and written by one thread.
"""

from __future__ import annotations

from typing import Any

from ._rowkern import PACK, PRELUDE, TAG, OwnKernels, aligned

__all__ = ["GELU_SOURCE", "GELU_MODES", "GeluKernels"]

#: activation name -> template tag A of the kernels
GELU_MODES = {"gelu": 0, "gelu_tanh": 1}

GELU_SOURCE = PRELUDE + r"""
template <int A, bool BWD>
__device__ __forceinline__ float gelu_f(float x, float g) {
    if constexpr (A == 0) {
        const float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752f));
        if constexpr (!BWD) return x * cdf;
        return g * (cdf + x * 0.39894228040143268f * expf(-0.5f * x * x));
    } else {
        const float k = 0.79788456080286536f;  /* sqrt(2 / pi) */
        const float x2 = x * x;
        const float t = tanhf(k * x * (1.f + 0.044715f * x2));
        if constexpr (!BWD) return 0.5f * x * (1.f + t);
        return g * (0.5f * (1.f + t)
                    + 0.5f * x * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * x2));
    }
}

template <int K, bool VEC, int A, bool BWD, int U>
__global__ void __launch_bounds__(256)
gelu(const typename E<K>::T* x, const typename E<K>::T* dy,
     typename E<K>::T* out, long long n) {
    typedef IO<K, VEC> io;
    constexpr int N = io::N;
    const long long npk = n / N;
    const long long i0 = (long long)blockIdx.x * blockDim.x * U + threadIdx.x;
    float v[U][N], g[U][N];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long i = i0 + (long long)u * blockDim.x;
        if (i < npk) {
            io::load(x, i, v[u]);
            if constexpr (BWD) io::load(dy, i, g[u]);
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long i = i0 + (long long)u * blockDim.x;
        if (i < npk) {
            float o[N];
#pragma unroll
            for (int j = 0; j < N; ++j) o[j] = gelu_f<A, BWD>(v[u][j], BWD ? g[u][j] : 0.f);
            io::store(out, i, o);
        }
    }
    if (VEC && blockIdx.x == 0 && threadIdx.x < n - npk * N) {
        const long long e = npk * N + threadIdx.x;
        const float xe = E<K>::get(x[e]);
        out[e] = E<K>::put(gelu_f<A, BWD>(xe, BWD ? E<K>::get(dy[e]) : 0.f));
    }
}
"""

_THREADS = 256


class GeluKernels(OwnKernels):
    """GELU kernels of one device, one program per (dtype, vector/scalar, mode) compiled on
    first use. ``run`` returns False (nothing issued) where NVRTC is unavailable. Device thread
    only."""

    #: packs per thread, forward and backward (class-level knobs a benchmark can change).
    #: H100, 8192 x 8192 bf16 exact GELU: forward 2 -> 0.965x torch (1: 0.942x, 4: 0.920x);
    #: backward 1 -> 0.943x (2: 0.886x, 4: 0.687x: two inputs per pack, the registers of 4
    #: packs cut the resident warps)
    unroll = 2
    unroll_backward = 1

    prefix = "gpumsg_gelu"

    def _get(self, tag: int, vec: bool, mode: int, unroll: int) -> Any:
        v = "true" if vec else "false"
        exprs = tuple(f"gelu<{tag}, {v}, {mode}, {b}, {unroll}>" for b in ("false", "true"))
        return self._program((tag, vec, mode, unroll), GELU_SOURCE, exprs)

    def run(self, stream: Any, dtype: str, size: int, activation: str, x: int, y: int,
            dy: int = 0, dx: int = 0) -> bool:
        """y = gelu(x) (``dy == 0``) or dx = gelu'(x) dy over ``size`` packed elements."""
        if dtype not in TAG or activation not in GELU_MODES:
            return False
        out = dx if dy else y
        vec = aligned(x, out, dy)
        unroll = self.unroll_backward if dy else self.unroll
        k = self._get(TAG[dtype], vec, GELU_MODES[activation], unroll)
        if k is None:
            return False
        mods, fns = k
        n_per = PACK[dtype] if vec else 1
        npk = size // n_per
        blocks = max(1, -(-npk // (unroll * _THREADS)))
        fn = fns[f"gelu<{TAG[dtype]}, {'true' if vec else 'false'}, {GELU_MODES[activation]}, "
                 f"{'true' if dy else 'false'}, {unroll}>"]
        mods.launch(stream, fn, (blocks, 1, 1), (_THREADS, 1, 1), 0,
                    ("ptr", "ptr", "ptr", "i64"), [x, dy, out, size], [])
        self.last_path = f"vec={vec} unroll={unroll}"
        return True
