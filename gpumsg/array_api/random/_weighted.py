"""Weighted picks with replacement: ``choice(a, size, p=p)`` for a population that fits in shared
memory, in one kernel.

NumPy draws such a sample as ``searchsorted(cdf / cdf[-1], u, side="right")`` with ``cdf`` the
running sum of ``p`` and ``u`` uniform in [0, 1). Done with the namespace's calls that is a
three-launch running sum, a division, a search and their host work per call; here one kernel
does it: each block loads the weights, scans them in shared memory (a sequential run per thread,
then a scan of the runs' totals), divides by the total (the last entry becomes exactly 1, above
every ``u``, so every search lands below ``n``) and binary-searches its share of the uniforms
there. The simulator's twin computes the same with NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from .. import _dtypes as D
from .._array import Array, new_array
from .._codegen import kernel_for

__all__ = ["MAX_WEIGHTS", "weighted_pick"]

#: the most weights one pick kernel takes (float64 running sums in 32 KiB of shared memory)
MAX_WEIGHTS = 4096
_THREADS = 256
#: blocks of the pick kernel: each scans the weights once, so a few per SM, not one per 256
#: samples
_BLOCKS = 1024
_NAME = "gm_weighted_pick_f64"
_SOURCE = rf"""
extern "C" __global__ void {_NAME}(long long m, long long n, const double* __restrict__ w,
                                   long long off_w, long long stride_w,
                                   const double* __restrict__ u, long long* __restrict__ out) {{
  __shared__ double cdf[{MAX_WEIGHTS}];
  __shared__ double runs[{_THREADS}];
  const int t = threadIdx.x;
  const long long seg = (n + blockDim.x - 1) / blockDim.x;
  const long long lo = (long long)t * seg;
  double s = 0.0;
  for (long long k = 0; k < seg; ++k) {{
    const long long i = lo + k;
    if (i < n) {{ s += w[off_w + i * stride_w]; cdf[i] = s; }}
  }}
  runs[t] = s;
  __syncthreads();
  for (int d = 1; d < (int)blockDim.x; d <<= 1) {{  // inclusive scan of the runs' totals
    const double v = t >= d ? runs[t - d] : 0.0;
    __syncthreads();
    runs[t] += v;
    __syncthreads();
  }}
  const double before = t ? runs[t - 1] : 0.0;
  for (long long k = 0; k < seg; ++k) {{
    const long long i = lo + k;
    if (i < n) cdf[i] += before;
  }}
  __syncthreads();
  const double total = cdf[n - 1];
  __syncthreads();  // every thread has read the total before any entry is divided
  for (long long i = t; i < n; i += blockDim.x) cdf[i] = cdf[i] / total;
  __syncthreads();
  for (long long j = (long long)blockIdx.x * blockDim.x + t; j < m;
       j += (long long)blockDim.x * gridDim.x) {{
    const double key = u[j];
    long long a = 0, b = n;
    while (a < b) {{  // the first entry above key (side "right")
      const long long mid = (a + b) >> 1;
      if (cdf[mid] <= key) a = mid + 1; else b = mid;
    }}
    out[j] = a < n ? a : n - 1;
  }}
}}
"""


def _twin() -> Any:
    def run(info: Any, m: Any, n: Any, w: np.ndarray, off: Any, stride: Any, u: np.ndarray,
            out: np.ndarray) -> None:
        m, n, off, stride = int(m), int(n), int(off), int(stride)
        cdf = np.cumsum(as_strided(w[off:], (n,), (stride * w.dtype.itemsize,)))
        cdf = cdf / cdf[-1]
        idx = np.searchsorted(cdf, u[:m], side="right")
        out[:m] = np.minimum(idx, n - 1)

    return run


if _NAME not in SIM_KERNELS:
    sim_kernel(_NAME)(Recipe(_twin))


def weighted_pick(probs: Array, u: Array) -> Array:
    """For each uniform of ``u`` (float64, 1-D, contiguous, in [0, 1)) the index NumPy's
    weighted ``choice`` gives it: the first entry of the normalised running sum of ``probs``
    (float64, 1-D, at most :data:`MAX_WEIGHTS` entries, checked non-negative and summing to 1
    by the caller) above it. An int64 array of ``u``'s shape."""
    dev = probs.device
    n, m = probs.shape[0], u.shape[0]
    out = new_array(dev, (m,), D.int64)
    if m == 0:
        return out
    kernel = kernel_for(dev, _NAME, _SOURCE, ("i64", "i64", "ptr", "i64", "i64", "ptr", "ptr"))
    grid = max(1, min(-(-m // _THREADS), _BLOCKS))
    out._wrote(dev.launch(kernel, grid, _THREADS, (m, n, probs.buffer, probs._offset,
                                                   probs.strides[0], u.buffer, out.buffer),
                          reads=[probs.buffer, u.buffer], writes=[out.buffer]))
    return out
