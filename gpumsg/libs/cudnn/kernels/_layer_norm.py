"""Layer norm: gpumsg's own kernels (NVRTC, libs/nvrtc/builtin.py), because cuDNN's legacy API
has none and the batch-norm route (see LayerNorm's docstring) costs three cuDNN calls and two
temporaries per direction.

Layout: x is ``rows`` x ``d``, row-major; statistics in f32 per row; gamma/beta f32 of ``d``.
Element types by template tag (rowkern.TAG: 0 f32, 1 f16, 2 bf16), converted in registers,
f32 arithmetic throughout.

The row kernels keep a whole row in registers: one global read of x (and of dy), one write of
y (dx). Each thread owns the packs ``lane + k * threads`` (k < V) of the row; a pack is 16 bytes
(8 f16/bf16 or 4 f32, one vector load) where every pointer is 16-byte aligned and the row
length is a multiple of the pack, else one element (the scalar path, same code). A row group is
one warp (rows of at most 128 packs, 4 rows per block) or one block (up to 1024 threads).
Each (dtype, pack, warp/block, V) is its own small program, compiled on first use through the
BuiltinKernels cache.

* ``ln_fwd_r<K, VEC, V, W>``: the mean from the registers, then the biased variance from the
  same registers (two passes, no cancellation), ``invstd = rsqrt(var + eps)``, then y.
* ``ln_bwd_r<K, VEC, V, W>``: with g = dy gamma and x_hat = (x - mean) invstd,
  dx = invstd (g - x_hat mean(g x_hat) - mean(g)), one fused sum over the group for both
  means. The groups are persistent (as many as fit on the device at once, each looping over
  rows), and each thread adds dy x_hat and dy of its own columns over its rows in registers;
  at the end every group writes its column sums to a partial row of a pool workspace, and
  ``ln_part_sum`` adds the partial rows into dgamma and dbeta (no atomics: deterministic).

Rows too long for the registers of one block (more than 1024 V_max packs) take the generic
kernels, which read the row again in every pass:

* ``ln_fwd<K>``: one block per row: mean, then variance from a second read, then y.
* ``ln_bwd_dx<K>``: one block per row; ``ln_bwd_dgb<K>``: dgamma/dbeta, 32 columns per block,
  the rows split over ``gridDim.y`` slices added with atomics into outputs zeroed first.
"""

from __future__ import annotations

from typing import Any

from ._rowkern import PACK, PRELUDE, TAG, OwnKernels, aligned, row_shape

__all__ = ["LAYER_NORM_SOURCE", "LAYER_NORM_GENERIC", "LayerNormKernels", "TAG", "TUNE"]

LAYER_NORM_SOURCE = PRELUDE + r"""
/* The most threads a block of each row kernel may have: the registers of a row (V N floats
   forward; x, dy and two column sums, 4 V N, backward) fit without spilling. */
template <int K, bool VEC, int V> struct LB {
    static constexpr int PT = V * IO<K, VEC>::N;
    static constexpr int fwd = PT <= 32 ? 1024 : 512;
    static constexpr int bwd = PT <= 8 ? 1024 : (PT <= 16 ? 512 : 256);
};

template <int K, bool VEC, int V, bool W>
__global__ void __launch_bounds__(LB<K, VEC, V>::fwd)
ln_fwd_r(const typename E<K>::T* __restrict__ x, const float* __restrict__ gamma,
         const float* __restrict__ beta, typename E<K>::T* __restrict__ y,
         float* __restrict__ mean, float* __restrict__ invstd, long long rows, int d,
         float eps) {
    typedef IO<K, VEC> io;
    constexpr int N = io::N;
    __shared__ float sh[32];
    int lane, nt;
    long long g, ng;
    row_group<W>(lane, nt, g, ng);
    const int nvec = d / N;
    const float inv_d = 1.f / (float)d;
    for (long long r = g; r < rows; r += ng) {
        const typename E<K>::T* xr = x + r * d;
        float v[V][N];
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                io::load(xr, i, v[k]);
            } else {
#pragma unroll
                for (int j = 0; j < N; ++j) v[k][j] = 0.f;
            }
        }
#pragma unroll
        for (int k = 0; k < V; ++k)
#pragma unroll
            for (int j = 0; j < N; ++j) s += v[k][j];
        group_sum<W, 1>(&s, sh);
        const float mu = s * inv_d;
        float q = 0.f;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (lane + k * nt < nvec) {
#pragma unroll
                for (int j = 0; j < N; ++j) {
                    const float t = v[k][j] - mu;
                    q += t * t;
                }
            }
        }
        group_sum<W, 1>(&q, sh);
        const float rs = rsqrtf(q * inv_d + eps);
        if (lane == 0) { mean[r] = mu; invstd[r] = rs; }
        typename E<K>::T* yr = y + r * d;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                float o[N];
#pragma unroll
                for (int j = 0; j < N; ++j) o[j] = (v[k][j] - mu) * rs;
                if (gamma) {
                    float gm[N], bt[N];
                    io::loadf(gamma, i, gm);
                    io::loadf(beta, i, bt);
#pragma unroll
                    for (int j = 0; j < N; ++j) o[j] = o[j] * gm[j] + bt[j];
                }
                io::store(yr, i, o);
            }
        }
    }
}

template <int K, bool VEC, int V, bool W>
__global__ void __launch_bounds__(LB<K, VEC, V>::bwd)
ln_bwd_r(const typename E<K>::T* __restrict__ x, const typename E<K>::T* __restrict__ dy,
         const float* __restrict__ gamma, const float* __restrict__ mean,
         const float* __restrict__ invstd, typename E<K>::T* __restrict__ dx,
         float* __restrict__ part, long long rows, int d) {
    typedef IO<K, VEC> io;
    constexpr int N = io::N;
    __shared__ float sh[64];
    int lane, nt;
    long long g, ng;
    row_group<W>(lane, nt, g, ng);
    const int nvec = d / N;
    const float inv_d = 1.f / (float)d;
    float ag[V][N], ab[V][N];  /* this thread's column sums of dy x_hat and dy */
#pragma unroll
    for (int k = 0; k < V; ++k)
#pragma unroll
        for (int j = 0; j < N; ++j) { ag[k][j] = 0.f; ab[k][j] = 0.f; }
    for (long long r = g; r < rows; r += ng) {
        const float mu = mean[r], rs = invstd[r];
        float xv[V][N], gv[V][N];
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                io::load(x + r * d, i, xv[k]);
                io::load(dy + r * d, i, gv[k]);
            }
        }
        float s[2] = {0.f, 0.f};
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                float gm[N];
                if (gamma) io::loadf(gamma, i, gm);
#pragma unroll
                for (int j = 0; j < N; ++j) {
                    const float xh = (xv[k][j] - mu) * rs;
                    xv[k][j] = xh;
                    float t = gv[k][j];
                    if (gamma) {
                        ag[k][j] += t * xh;
                        ab[k][j] += t;
                        t *= gm[j];
                    }
                    gv[k][j] = t;
                    s[0] += t * xh;
                    s[1] += t;
                }
            }
        }
        group_sum<W, 2>(s, sh);
        const float ma = s[0] * inv_d, mb = s[1] * inv_d;
        typename E<K>::T* dr = dx + r * d;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                float o[N];
#pragma unroll
                for (int j = 0; j < N; ++j) o[j] = rs * (gv[k][j] - xv[k][j] * ma - mb);
                io::store(dr, i, o);
            }
        }
    }
    if (gamma && g < rows) {
        float* pg = part + g * d;
        float* pb = part + (ng + g) * d;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int i = lane + k * nt;
            if (i < nvec) {
                io::storef(pg, i, ag[k]);
                io::storef(pb, i, ab[k]);
            }
        }
    }
}

/* dgamma[c] = sum of part[p][c], dbeta[c] = sum of part[np + p][c] over p < np (the partial
   rows of ln_bwd_r's groups that had rows): 32 columns per block, 16 row lanes. */
__global__ void __launch_bounds__(512)
ln_part_sum(const float* __restrict__ part, long long ng, long long np, int d,
            float* __restrict__ dgamma, float* __restrict__ dbeta) {
    __shared__ float sg[16][33], sb[16][33];
    const long long c = (long long)blockIdx.x * 32 + threadIdx.x;
    float g = 0.f, b = 0.f;
    if (c < d) {
#pragma unroll 4
        for (long long p = threadIdx.y; p < np; p += 16) {
            g += part[p * d + c];
            b += part[(ng + p) * d + c];
        }
    }
    sg[threadIdx.y][threadIdx.x] = g;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < d) {
        for (int i = 1; i < 16; ++i) { g += sg[i][threadIdx.x]; b += sb[i][threadIdx.x]; }
        dgamma[c] = g;
        dbeta[c] = b;
    }
}
"""

LAYER_NORM_GENERIC = PRELUDE + r"""
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

#: the row-kernel shapes: threads a block aims at and the most packs a thread keeps, forward
#: and backward (the backward keeps x, dy and two column sums per element: fewer packs), and
#: the persistent backward groups per multiprocessor (0: as many as fit, by the occupancy API).
#: A module-level dict, so a benchmark can try other shapes.
TUNE: dict[str, int] = {"fwd_threads": 256, "fwd_vmax": 8, "bwd_threads": 1024, "bwd_vmax": 4,
                        "bwd_blocks_per_sm": 0}

_GENERIC = {(name, tag): f"{name}<{tag}>" for name in ("ln_fwd", "ln_bwd_dx", "ln_bwd_dgb")
            for tag in TAG.values()}
_ROW_THREADS_MAX = 1024


def _row_threads(d: int) -> int:
    """Threads per block of the generic kernels: about 8 elements each, a multiple of 32."""
    per_thread = -(-d // 8)
    return max(32, min(_ROW_THREADS_MAX, -(-per_thread // 32) * 32))


def _max_threads(backward: bool, per_thread: int) -> int:
    """lb_fwd / lb_bwd of the source: the launch bound of a row kernel keeping ``per_thread``
    elements of a row per thread."""
    if backward:
        return 1024 if per_thread <= 8 else 512 if per_thread <= 16 else 256
    return 1024 if per_thread <= 32 else 512


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class LayerNormKernels(OwnKernels):
    """The layer-norm kernels of one device, each program compiled on first use.
    ``forward``/``backward`` return False (nothing issued) where NVRTC is unavailable: the
    caller takes the batch-norm route then. Device thread only."""

    prefix = "gpumsg_layer_norm"

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._occupancy: dict[tuple, int] = {}

    def _row(self, dtype: str, d: int, ptrs: tuple[int, ...], backward: bool
             ) -> tuple[Any, dict, str, tuple[bool, bool, int, int]] | None:
        """(modules, functions, expression prefix, (vec, warp, V, threads)) of the row kernels
        for rows of ``d``, or None (the generic kernels then)."""
        tag = TAG[dtype]
        vec = d % PACK[dtype] == 0 and aligned(*ptrs)
        nvec = d // PACK[dtype] if vec else d
        which = "bwd" if backward else "fwd"
        shape = row_shape(nvec, TUNE[f"{which}_threads"], TUNE[f"{which}_vmax"],
                          lambda v: _max_threads(backward, v * (PACK[dtype] if vec else 1)))
        if shape is None:
            return None
        warp, v, threads = shape
        args = f"<{tag}, {'true' if vec else 'false'}, {v}, {'true' if warp else 'false'}>"
        exprs = (f"ln_fwd_r{args}", f"ln_bwd_r{args}", "ln_part_sum")
        k = self._program(("r", tag, vec, v, warp), LAYER_NORM_SOURCE, exprs)
        if k is None:
            return None
        mods, fns = k
        return mods, fns, args, (vec, warp, v, threads)

    def forward(self, stream: Any, dtype: str, rows: int, d: int, eps: float, x: int,
                gamma: int, beta: int, y: int, mean: int, invstd: int) -> bool:
        if dtype not in TAG:
            return False
        row = self._row(dtype, d, (x, y, gamma, beta), False)
        if row is not None:
            mods, fns, args, (vec, warp, v, threads) = row
            blocks = _cdiv(rows, threads // 32) if warp else rows
            mods.launch(stream, fns[f"ln_fwd_r{args}"], (blocks, 1, 1), (threads, 1, 1), 0,
                        ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64", "i32", "f32"),
                        [x, gamma, beta, y, mean, invstd, rows, d, eps], [])
            self.last_path = f"row vec={vec} warp={warp} V={v} threads={threads}"
            return True
        k = self._program(("g", TAG[dtype]), LAYER_NORM_GENERIC,
                          tuple(_GENERIC[(n, TAG[dtype])] for n in
                                ("ln_fwd", "ln_bwd_dx", "ln_bwd_dgb")))
        if k is None:
            return False
        mods, fns = k
        mods.launch(stream, fns[_GENERIC[("ln_fwd", TAG[dtype])]], (rows, 1, 1),
                    (_row_threads(d), 1, 1), 0,
                    ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64", "f32"),
                    [x, gamma, beta, y, mean, invstd, d, eps], [])
        self.last_path = "generic"
        return True

    def backward(self, stream: Any, dtype: str, rows: int, d: int, x: int, dy: int,
                 gamma: int, mean: int, invstd: int, dx: int, dgamma: int,
                 dbeta: int) -> bool:
        if dtype not in TAG:
            return False
        row = self._row(dtype, d, (x, dy, dx, gamma), True)
        if row is not None:
            self._backward_rows(stream, row, rows, d, x, dy, gamma, mean, invstd, dx, dgamma,
                                dbeta)
            return True
        tag = TAG[dtype]
        k = self._program(("g", tag), LAYER_NORM_GENERIC,
                          tuple(_GENERIC[(n, tag)] for n in ("ln_fwd", "ln_bwd_dx", "ln_bwd_dgb")))
        if k is None:
            return False
        mods, fns = k
        if gamma:  # before dx: dx may overwrite dy (in place)
            backend = self._ctx.backend
            backend.memset(stream, dgamma, 0, d, 4)
            backend.memset(stream, dbeta, 0, d, 4)
            cols = _cdiv(d, 32)
            slices = max(1, min(_cdiv(rows, 8), _cdiv(4 * self._sm_count(), cols), 65535))
            mods.launch(stream, fns[_GENERIC[("ln_bwd_dgb", tag)]], (cols, slices, 1),
                        (32, 8, 1), 0, ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64", "i64"),
                        [x, dy, mean, invstd, dgamma, dbeta, rows, d], [])
        mods.launch(stream, fns[_GENERIC[("ln_bwd_dx", tag)]], (rows, 1, 1),
                    (_row_threads(d), 1, 1), 0,
                    ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64"),
                    [x, dy, gamma, mean, invstd, dx, d], [])
        self.last_path = "generic"
        return True

    def _backward_rows(self, stream: Any, row: tuple, rows: int, d: int, x: int, dy: int,
                       gamma: int, mean: int, invstd: int, dx: int, dgamma: int,
                       dbeta: int) -> None:
        mods, fns, args, (vec, warp, v, threads) = row
        fn = fns[f"ln_bwd_r{args}"]
        per_block = threads // 32 if warp else 1
        per_sm = TUNE["bwd_blocks_per_sm"] or self._blocks_per_sm(fn, threads)
        blocks = max(1, min(_cdiv(rows, per_block), per_sm * self._sm_count()))
        ng = blocks * per_block
        np_ = min(ng, rows)
        memory = self._ctx.memory
        nbytes = 2 * ng * d * 4 if gamma else 0
        part = memory.allocate(nbytes, stream) if nbytes else 0
        try:
            mods.launch(stream, fn, (blocks, 1, 1), (threads, 1, 1), 0,
                        ("ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "ptr", "i64", "i32"),
                        [x, dy, gamma, mean, invstd, dx, part, rows, d], [])
            if gamma:
                mods.launch(stream, fns["ln_part_sum"], (_cdiv(d, 32), 1, 1), (32, 16, 1), 0,
                            ("ptr", "i64", "i64", "i32", "ptr", "ptr"),
                            [part, ng, np_, d, dgamma, dbeta], [])
        finally:
            if nbytes:
                memory.deallocate(part, nbytes, stream)  # stream-ordered: after the kernels
        self.last_path = (f"row vec={vec} warp={warp} V={v} threads={threads} "
                          f"groups={ng}")

    def _blocks_per_sm(self, fn: Any, threads: int) -> int:
        """Blocks of ``threads`` that fit on one multiprocessor at once (occupancy API)."""
        key = (id(fn), threads)
        n = self._occupancy.get(key)
        if n is None:
            n = 1
            try:
                from ....backends.cuda._driver import _driver

                err, got = _driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, threads, 0)
                if not int(err) and int(got) > 0:
                    n = int(got)
            except Exception:  # noqa: BLE001 - one block per multiprocessor is always right
                n = 1
            self._occupancy[key] = n
        return n

    def _sm_count(self) -> int:
        return int(self._ctx.props.multiprocessors) or 132
