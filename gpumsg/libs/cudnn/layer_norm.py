"""Layer norm in one pass per row: gpumsg's own kernels (NVRTC, libs/nvrtc/builtin.py), because
cuDNN's legacy API has none and the batch-norm route (see LayerNorm's docstring) costs three
cuDNN calls and two temporaries per direction.

Layout: x is ``rows`` x ``d``, row-major; statistics in f32 per row; gamma/beta f32 of ``d``.
Element types by template tag: 0 f32, 1 f16, 2 bf16 (halves stored as 16-bit words, converted
in registers, so no CUDA header is needed).

* ``ln_fwd<K>``: one block per row: mean, then the biased variance from a second read of the
  row (two passes: no cancellation), ``invstd = rsqrt(var + eps)``, then y.
* ``ln_bwd_dx<K>``: one block per row: with g = dy * gamma and x_hat = (x - mean) invstd,
  dx = invstd (g - x_hat mean(g x_hat) - mean(g)).
* ``ln_bwd_dgb<K>``: dgamma = sum over rows of dy x_hat, dbeta = sum of dy: 32 columns per block
  (8 row lanes), the rows split over ``gridDim.y`` slices whose partial sums are added with
  atomics into outputs zeroed first.

Each thread of a row kernel reads and writes only its own elements in every pass, so y may be
x and dx may be dy (in place).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LAYER_NORM_SOURCE", "LayerNormKernels", "TAG"]

#: element type -> template tag of LAYER_NORM_SOURCE
TAG = {"f32": 0, "f16": 1, "bf16": 2}

LAYER_NORM_SOURCE = r"""
template <int K> struct E;
template <> struct E<0> {
    typedef float T;
    static __device__ __forceinline__ float get(T v) { return v; }
    static __device__ __forceinline__ T put(float f) { return f; }
};
template <> struct E<1> {
    typedef unsigned short T;
    static __device__ __forceinline__ float get(T v) {
        float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f;
    }
    static __device__ __forceinline__ T put(float f) {
        T v; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f)); return v;
    }
};
template <> struct E<2> {
    typedef unsigned short T;
    static __device__ __forceinline__ float get(T v) {
        return __uint_as_float(((unsigned int)v) << 16);
    }
    static __device__ __forceinline__ T put(float f) {
        unsigned int u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (T)((u >> 16) | 0x40u);  /* NaN stays NaN */
        u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
        return (T)(u >> 16);
    }
};

/* The sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets
   it. sh: 33 floats of shared memory, reusable right after the call returns. */
__device__ __forceinline__ float block_sum(float v, float* sh) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.f;
        for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) sh[32] = v;
    }
    __syncthreads();
    return sh[32];
}

template <int K>
__global__ void ln_fwd(const typename E<K>::T* __restrict__ x, const float* gamma,
                       const float* beta, typename E<K>::T* y, float* mean, float* invstd,
                       long long d, float eps) {
    __shared__ float sh[33];
    const long long row = blockIdx.x;
    const typename E<K>::T* xr = x + row * d;
    typename E<K>::T* yr = y + row * d;
    float s = 0.f;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) s += E<K>::get(xr[j]);
    const float mu = block_sum(s, sh) / (float)d;
    float q = 0.f;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const float t = E<K>::get(xr[j]) - mu;
        q += t * t;
    }
    const float rs = rsqrtf(block_sum(q, sh) / (float)d + eps);
    if (threadIdx.x == 0) { mean[row] = mu; invstd[row] = rs; }
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        float v = (E<K>::get(xr[j]) - mu) * rs;
        if (gamma) v = v * gamma[j] + beta[j];
        yr[j] = E<K>::put(v);
    }
}

template <int K>
__global__ void ln_bwd_dx(const typename E<K>::T* __restrict__ x, const typename E<K>::T* dy,
                          const float* gamma, const float* mean, const float* invstd,
                          typename E<K>::T* dx, long long d) {
    __shared__ float sh[33];
    const long long row = blockIdx.x;
    const typename E<K>::T* xr = x + row * d;
    const typename E<K>::T* gr = dy + row * d;
    typename E<K>::T* dr = dx + row * d;
    const float mu = mean[row], rs = invstd[row];
    float a = 0.f, b = 0.f;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const float g = E<K>::get(gr[j]) * (gamma ? gamma[j] : 1.f);
        a += g * (E<K>::get(xr[j]) - mu) * rs;
        b += g;
    }
    const float ma = block_sum(a, sh) / (float)d;
    const float mb = block_sum(b, sh) / (float)d;
    for (long long j = threadIdx.x; j < d; j += blockDim.x) {
        const float g = E<K>::get(gr[j]) * (gamma ? gamma[j] : 1.f);
        const float xh = (E<K>::get(xr[j]) - mu) * rs;
        dr[j] = E<K>::put(rs * (g - xh * ma - mb));
    }
}

template <int K>
__global__ void ln_bwd_dgb(const typename E<K>::T* __restrict__ x,
                           const typename E<K>::T* __restrict__ dy, const float* mean,
                           const float* invstd, float* dgamma, float* dbeta, long long rows,
                           long long d) {
    __shared__ float sg[8][33], sb[8][33];
    const long long c = (long long)blockIdx.x * 32 + threadIdx.x;
    float g = 0.f, b = 0.f;
    if (c < d) {
        for (long long r = (long long)blockIdx.y * 8 + threadIdx.y; r < rows;
             r += 8LL * gridDim.y) {
            const float t = E<K>::get(dy[r * d + c]);
            g += t * (E<K>::get(x[r * d + c]) - mean[r]) * invstd[r];
            b += t;
        }
    }
    sg[threadIdx.y][threadIdx.x] = g;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < d) {
        for (int i = 1; i < 8; ++i) { g += sg[i][threadIdx.x]; b += sb[i][threadIdx.x]; }
        atomicAdd(dgamma + c, g);
        atomicAdd(dbeta + c, b);
    }
}
"""

_EXPRS = {(name, tag): f"{name}<{tag}>" for name in ("ln_fwd", "ln_bwd_dx", "ln_bwd_dgb")
          for tag in TAG.values()}
_ROW_THREADS_MAX = 1024


def _row_threads(d: int) -> int:
    """Threads per row block: about 8 elements each, a multiple of 32, at most 1024."""
    per_thread = -(-d // 8)
    return max(32, min(_ROW_THREADS_MAX, -(-per_thread // 32) * 32))


class LayerNormKernels:
    """The three kernels for one device, compiled on first use. ``forward``/``backward``
    return False (nothing issued) where NVRTC is unavailable: the caller takes the batch-norm
    route then."""

    def __init__(self, ctx: Any) -> None:
        from ..nvrtc.builtin import BuiltinKernels

        self._ctx = ctx
        self._kernels = BuiltinKernels(ctx, LAYER_NORM_SOURCE, "gpumsg_layer_norm.cu",
                                       expressions=tuple(_EXPRS.values()),
                                       options=("-std=c++17",))

    @property
    def status(self) -> str:
        return self._kernels.status

    def forward(self, stream: Any, dtype: str, rows: int, d: int, eps: float, x: int,
                gamma: int, beta: int, y: int, mean: int, invstd: int) -> bool:
        k = self._kernels.get()
        if k is None or dtype not in TAG:
            return False
        mods, fns = k
        if rows and d:
            mods.launch(stream, fns[_EXPRS[("ln_fwd", TAG[dtype])]], (rows, 1, 1),
                        (_row_threads(d), 1, 1), 0,
                        ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64", "f32"),
                        [x, gamma, beta, y, mean, invstd, d, eps], [])
        return True

    def backward(self, stream: Any, dtype: str, rows: int, d: int, x: int, dy: int,
                 gamma: int, mean: int, invstd: int, dx: int, dgamma: int,
                 dbeta: int) -> bool:
        k = self._kernels.get()
        if k is None or dtype not in TAG:
            return False
        mods, fns = k
        tag = TAG[dtype]
        if gamma and d:
            backend = self._ctx.backend
            backend.memset(stream, dgamma, 0, d, 4)
            backend.memset(stream, dbeta, 0, d, 4)
        if not (rows and d):
            return True
        if gamma:  # before dx: dx may overwrite dy (in place)
            cols = -(-d // 32)
            slices = max(1, min(-(-rows // 8), -(-4 * self._sm_count() // cols), 65535))
            mods.launch(stream, fns[_EXPRS[("ln_bwd_dgb", tag)]], (cols, slices, 1),
                        (32, 8, 1), 0, ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64", "i64"),
                        [x, dy, mean, invstd, dgamma, dbeta, rows, d], [])
        mods.launch(stream, fns[_EXPRS[("ln_bwd_dx", tag)]], (rows, 1, 1),
                    (_row_threads(d), 1, 1), 0,
                    ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64"),
                    [x, dy, gamma, mean, invstd, dx, d], [])
        return True

    def _sm_count(self) -> int:
        return int(self._ctx.props.multiprocessors) or 132
