"""CUDA C++ kernels of the NVRTC and graph tests, with the NumPy versions the simulator runs."""

from __future__ import annotations

import numpy as np

from gpumsg.libs.nvrtc import sim_kernel

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    extern __shared__ float s[];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""

SCALE = r"""
#include "mul.h"
template <typename T>
__global__ void scale(T* x, T a, unsigned long long n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) x[i] = mul(x[i], a);
}
"""
SCALE_HEADERS = {"mul.h": "template <typename T> __device__ T mul(T x, T a) { return x * a; }\n"}

BROKEN = r"""
extern "C" __global__ void broken(float* x) { x[0] = no_such_variable; }
"""


@sim_kernel("saxpy")
def _saxpy(launch, a, x, y, n) -> None:
    m = min(int(n), launch.grid[0] * launch.block[0])
    y[:m] = a * x[:m] + y[:m]


@sim_kernel("block_sum")
def _block_sum(launch, x, out, n) -> None:
    bs = launch.block[0]
    assert launch.shared >= bs * 4, "block_sum needs blockDim.x floats of shared memory"
    for b in range(launch.grid[0]):
        out[b] = np.float32(x[b * bs:min((b + 1) * bs, int(n))].sum(dtype=np.float32))


@sim_kernel("scale<double>")
@sim_kernel("scale<float>")
def _scale(launch, x, a, n) -> None:
    m = min(int(n), launch.grid[0] * launch.block[0])
    x[:m] *= a
