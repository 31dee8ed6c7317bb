"""Batch normalization in inference mode as gpumsg's own kernel (NVRTC, libs/nvrtc/builtin.py):
y = gamma (x - mean) / sqrt(var + eps) + beta, per channel, with f32 arithmetic.

Why not cuDNN's: ``cudnnBatchNormalizationForwardInference`` has no channels-last kernel of its
own; on the H100 it ran 64 x 256 x 56 x 56 bf16 NHWC at 0.62x torch's (benchmarks/results/
cudnn_norm.md). This is one pass over x at memory speed in any layout.

``bn_infer<K, VEC, U>`` (K: element type tag, rowkern.TAG): element e's channel is
``(e / inner) % C``, ``inner`` being 1 for NHWC and the spatial size for NCHW. With VEC every
thread handles U packs of 16 bytes (``blockDim.x`` packs apart: coalesced) whose elements are
C consecutive channels of one position (NHWC, C a multiple of the pack) or one channel
(NCHW, ``inner`` a multiple of the pack); the four f32 vectors are read in packs as well (they
stay in L1). Otherwise U elements per thread. The scale and shift of a channel are computed
where they are used (one ``rsqrtf``): no temporary, so the kernel can be recorded in a graph.
"""

from __future__ import annotations

from typing import Any

from ._rowkern import PACK, PRELUDE, TAG, OwnKernels, aligned

__all__ = ["BN_INFER_SOURCE", "BnInferenceKernels"]

BN_INFER_SOURCE = PRELUDE + r"""
template <int K, bool VEC, int U>
__global__ void __launch_bounds__(256)
bn_infer(const typename E<K>::T* x, const float* gamma, const float* beta, const float* mean,
         const float* var, typename E<K>::T* y, long long n, long long C, long long inner,
         float eps) {
    typedef IO<K, VEC> io;
    constexpr int N = io::N;
    const long long npk = n / N;
    const long long i0 = (long long)blockIdx.x * blockDim.x * U + threadIdx.x;
    float v[U][N];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long i = i0 + (long long)u * blockDim.x;
        if (i < npk) io::load(x, i, v[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long i = i0 + (long long)u * blockDim.x;
        if (i >= npk) continue;
        const long long e = i * N;
        float g[N], b[N], m[N], s[N], o[N];
        if (N > 1 && inner == 1) {  /* N consecutive channels of one position */
            const long long cp = (e % C) / N;
            io::loadf(gamma, cp, g); io::loadf(beta, cp, b);
            io::loadf(mean, cp, m); io::loadf(var, cp, s);
        } else {  /* one channel */
            const long long c = (e / inner) % C;
#pragma unroll
            for (int j = 0; j < N; ++j) {
                g[j] = gamma[c]; b[j] = beta[c]; m[j] = mean[c]; s[j] = var[c];
            }
        }
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const float scale = g[j] * rsqrtf(s[j] + eps);
            o[j] = (v[u][j] - m[j]) * scale + b[j];
        }
        io::store(y, i, o);
    }
}
"""

_THREADS = 256


class BnInferenceKernels(OwnKernels):
    """The batch-norm inference kernels of one device, one program per (dtype, vector/scalar)
    compiled on first use. ``run`` returns False (nothing issued) where NVRTC is unavailable.
    Device thread only."""

    prefix = "gpumsg_bn_infer"
    #: packs (or elements) per thread
    unroll = 2

    def run(self, stream: Any, dtype: str, layout: str, shape: tuple[int, ...], eps: float,
            x: int, gamma: int, beta: int, mean: int, var: int, y: int) -> bool:
        """y = gamma (x - mean) / sqrt(var + eps) + beta for x of ``shape`` in ``layout``
        (row-major; NCHW: channels second, NHWC: channels last)."""
        if dtype not in TAG:
            return False
        n = 1
        for d in shape:
            n *= d
        if layout == "NHWC":
            c, inner = shape[-1], 1
        else:
            c, inner = shape[1], n // (shape[0] * shape[1])
        pack = PACK[dtype]
        vec = aligned(x, y, gamma, beta, mean, var) and (
            c % pack == 0 if inner == 1 else inner % pack == 0)
        expr = f"bn_infer<{TAG[dtype]}, {'true' if vec else 'false'}, {self.unroll}>"
        k = self._program((TAG[dtype], vec, self.unroll), BN_INFER_SOURCE, (expr,))
        if k is None:
            return False
        mods, fns = k
        npk = n // pack if vec else n
        blocks = max(1, -(-npk // (self.unroll * _THREADS)))
        fn = fns[expr]
        mods.launch(stream, fn, (blocks, 1, 1), (_THREADS, 1, 1), 0,
                    ("ptr",) * 6 + ("i64", "i64", "i64", "f32"),
                    [x, gamma, beta, mean, var, y, n, c, inner, eps], [])
        self.last_path = f"vec={vec} unroll={self.unroll}"
        return True
