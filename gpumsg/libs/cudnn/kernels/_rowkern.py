"""CUDA C++ pieces shared by gpumsg's own row kernels (layer norm, softmax, GELU): element
types by template tag (0 f32, 1 f16, 2 bf16; halves kept as 16-bit words and converted in
registers, so no CUDA header is needed), 16-byte packed loads and stores, and sums over a warp
or a block. Also the host-side choices every row kernel makes the same way: whether the
16-byte path applies (alignment, row length), and the (warp or block, packs per thread,
threads) shape of a row length.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRELUDE", "TAG", "PACK", "OwnKernels", "row_shape", "aligned", "pow2_at_least"]

#: element type -> template tag of the kernels
TAG = {"f32": 0, "f16": 1, "bf16": 2}
#: element type -> elements in one 16-byte pack
PACK = {"f32": 4, "f16": 8, "bf16": 8}

PRELUDE = r"""
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
#if __CUDA_ARCH__ >= 800
        T v; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f)); return v;
#else
        unsigned int u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (T)((u >> 16) | 0x40u);  /* NaN stays NaN */
        u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
        return (T)(u >> 16);
#endif
    }
};

/* Two f32 values rounded to nearest even and packed into one 32-bit word, lo in the low half:
   one instruction for both on sm_80 and later. */
template <int K>
__device__ __forceinline__ unsigned int put2(float lo, float hi) {
#if __CUDA_ARCH__ >= 800
    unsigned int w;
    if constexpr (K == 2) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
#else
    return (unsigned int)E<K>::put(lo) | ((unsigned int)E<K>::put(hi) << 16);
#endif
}

struct alignas(16) U4 { unsigned int x, y, z, w; };
struct alignas(16) F4 { float x, y, z, w; };

/* Loads and stores of N elements at pack index i (elements i*N .. i*N+N-1) converted to or
   from f32: VEC, one 16-byte access (the pointer 16-byte aligned); otherwise one element. */
template <int K, bool VEC> struct IO;
template <int K> struct IO<K, false> {
    typedef typename E<K>::T T;
    static constexpr int N = 1;
    static __device__ __forceinline__ void load(const T* p, long long i, float* f) {
        f[0] = E<K>::get(p[i]);
    }
    static __device__ __forceinline__ void store(T* p, long long i, const float* f) {
        p[i] = E<K>::put(f[0]);
    }
    static __device__ __forceinline__ void loadf(const float* p, long long i, float* f) {
        f[0] = p[i];
    }
    static __device__ __forceinline__ void storef(float* p, long long i, const float* f) {
        p[i] = f[0];
    }
};
template <int K> struct IO<K, true> {
    typedef typename E<K>::T T;
    static constexpr int N = 16 / (int)sizeof(T);
    static __device__ __forceinline__ void load(const T* p, long long i, float* f) {
        const U4 u = reinterpret_cast<const U4*>(p)[i];
        const unsigned int w[4] = {u.x, u.y, u.z, u.w};
        if constexpr (N == 4) {
#pragma unroll
            for (int k = 0; k < 4; ++k) f[k] = __uint_as_float(w[k]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                f[2 * k] = E<K>::get((T)(w[k] & 0xffffu));
                f[2 * k + 1] = E<K>::get((T)(w[k] >> 16));
            }
        }
    }
    static __device__ __forceinline__ void store(T* p, long long i, const float* f) {
        unsigned int w[4];
        if constexpr (N == 4) {
#pragma unroll
            for (int k = 0; k < 4; ++k) w[k] = __float_as_uint(f[k]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) w[k] = put2<K>(f[2 * k], f[2 * k + 1]);
        }
        U4 u; u.x = w[0]; u.y = w[1]; u.z = w[2]; u.w = w[3];
        reinterpret_cast<U4*>(p)[i] = u;
    }
    /* N f32 values (the pointer 16-byte aligned) */
    static __device__ __forceinline__ void loadf(const float* p, long long i, float* f) {
#pragma unroll
        for (int k = 0; k < N / 4; ++k) {
            const F4 v = reinterpret_cast<const F4*>(p)[i * (N / 4) + k];
            f[4 * k] = v.x; f[4 * k + 1] = v.y; f[4 * k + 2] = v.z; f[4 * k + 3] = v.w;
        }
    }
    static __device__ __forceinline__ void storef(float* p, long long i, const float* f) {
#pragma unroll
        for (int k = 0; k < N / 4; ++k) {
            F4 v; v.x = f[4 * k]; v.y = f[4 * k + 1]; v.z = f[4 * k + 2]; v.w = f[4 * k + 3];
            reinterpret_cast<F4*>(p)[i * (N / 4) + k] = v;
        }
    }
};

/* The sums of v[0..M) over the row's group: a warp (W) or the whole block (blockDim.x a
   multiple of 32, at most 1024); every thread of the group gets them. sh: 32 M floats of
   shared memory (block groups only), reusable right after the call returns. */
template <bool W, int M>
__device__ __forceinline__ void group_sum(float* v, float* sh) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int o = 16; o; o >>= 1) v[m] += __shfl_xor_sync(0xffffffffu, v[m], o);
    if constexpr (!W) {
        const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        __syncthreads();  /* every reader of the previous sums is done with sh */
        if (lane == 0) {
#pragma unroll
            for (int m = 0; m < M; ++m) sh[m * 32 + w] = v[m];
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < M; ++m) {
            float t = lane < nw ? sh[m * 32 + lane] : 0.f;
#pragma unroll
            for (int o = 16; o; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
            v[m] = t;
        }
    }
}

/* The maximum of v over the row's group (as group_sum). */
template <bool W>
__device__ __forceinline__ float group_max(float v, float* sh) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if constexpr (!W) {
        const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        __syncthreads();
        if (lane == 0) sh[w] = v;
        __syncthreads();
        float t = lane < nw ? sh[lane] : -__int_as_float(0x7f800000);
#pragma unroll
        for (int o = 16; o; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
        v = t;
    }
    return v;
}

/* The row group of this thread: (lane within the group, threads in a group, group index,
   number of groups). W: a warp per row group (blockDim.x / 32 groups per block). */
template <bool W>
__device__ __forceinline__ void row_group(int& lane, int& nt, long long& g, long long& ng) {
    if constexpr (W) {
        lane = threadIdx.x & 31;
        nt = 32;
        g = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
        ng = (long long)gridDim.x * (blockDim.x >> 5);
    } else {
        lane = threadIdx.x;
        nt = blockDim.x;
        g = blockIdx.x;
        ng = gridDim.x;
    }
}
"""

#: threads of a block of warp-per-row groups (4 rows at a time)
WARP_BLOCK = 128


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def row_shape(nvec: int, target: int, v_max: int, max_threads: Any = None
              ) -> tuple[bool, int, int] | None:
    """(warp per row, packs per thread V, threads per block) for rows of ``nvec`` packs, or None
    when a row does not fit in the registers of one block.

    Rows of at most 128 packs take one warp each (V = 1, 2 or 4; blocks of 4 warps); longer
    ones a block: V the smallest power of two up to ``v_max`` that keeps the block at most
    ``target`` threads, else the smallest that keeps it within ``max_threads(V)`` (the
    kernel's launch bound; 1024 when not given)."""
    if nvec <= 32 * 4:
        return True, pow2_at_least(-(-nvec // 32)), WARP_BLOCK
    bound = max_threads or (lambda v: 1024)
    for limit in (lambda v: min(target, bound(v)), bound):
        v = 1
        while v <= v_max:
            threads = 32 * _cdiv(_cdiv(nvec, v), 32)
            if threads <= limit(v):
                return False, v, threads
            v *= 2
    return None


def aligned(*ptrs: int) -> bool:
    """Every nonzero pointer 16-byte aligned."""
    return all(p % 16 == 0 for p in ptrs if p)


class OwnKernels:
    """The programs of one family of gpumsg's own kernels on one device, each compiled with
    NVRTC on first use and kept by key (libs/nvrtc/builtin.py caches the binaries on disk).
    Device thread only. ``prefix`` names the family's source files."""

    prefix = "gpumsg_kernels"

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._programs: dict[tuple, Any] = {}
        self.last_path = ""  # the kernels the latest call used (tests and benchmarks read it)

    @property
    def status(self) -> str:
        """Why the family cannot run ("unavailable: ..."), else the state of its programs."""
        known = [p.status for p in self._programs.values()]
        bad = [s for s in known if s.startswith("unavailable")]
        return bad[0] if bad else (known[0] if known else "not built yet")

    def _program(self, key: tuple, source: str, expressions: tuple[str, ...]) -> Any:
        """(modules, functions) of the program of ``key`` (``source`` compiled for
        ``expressions`` the first time), or None where NVRTC is unavailable."""
        prog = self._programs.get(key)
        if prog is None:
            from ...nvrtc._builtin import BuiltinKernels

            name = self.prefix + "_" + "_".join(str(int(k)) if isinstance(k, bool) else str(k)
                                                for k in key) + ".cu"
            prog = BuiltinKernels(self._ctx, source, name, expressions=expressions,
                                  options=("-std=c++17",))
            self._programs[key] = prog
        return prog.get()
