"""The generated kernels of ``dev.nn`` (the calls cuDNN has no operation for): one CUDA C++
program, each kernel instantiated per element type from one text, compiled with NVRTC once per
device (through the disk cache) and launched from the caller's thread; the NumPy twin of each
kernel (registered with :func:`~gpumsg.libs.nvrtc.sim_kernel`) is what the simulator runs.

Element types: f32 and f64 compute in their own precision; f16 and bf16 are read as 16-bit
words, converted to f32 in registers and rounded back to nearest even (no CUDA header is
needed), so their pointers are declared ``unsigned short*`` and passed as
``dev.nvrtc.untyped`` buffers (the kernel is chosen by the buffer's dtype, so the element type
always matches). Sums that make a loss accumulate in f64 whatever the element type.

Every element-wise kernel takes the element count and covers it with a grid-stride loop, so
any launch shape is correct; :func:`launch` uses 256-thread blocks and at most 65535 blocks.
The reductions run as one block of 256 threads (:func:`launch_block`).
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from concurrent.futures import Future
from typing import Any

import numpy as np

from ....messages._base import BufRef
from ...nvrtc._sim import sim_kernel

__all__ = ["DTYPES", "PROGRAMS", "SOURCE", "launch", "launch_block", "kernel_name"]

#: element types of the generated kernels -> (C type, compute type, load, store)
_TYPES = {
    "f32": ("float", "float", "{}", "{}"),
    "f64": ("double", "double", "{}", "{}"),
    "f16": ("unsigned short", "float", "gm_h2f({})", "gm_f2h({})"),
    "bf16": ("unsigned short", "float", "gm_bf2f({})", "gm_f2bf({})"),
}
DTYPES = tuple(_TYPES)
#: index types of embedding and class targets -> C type
_INDEX = {"i64": "long long", "i32": "int"}

_PRELUDE = r"""
#define GM_NAN __int_as_float(0x7fc00000)
#define GRID_STRIDE(i, n) \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
         i += (long long)blockDim.x * gridDim.x)
__device__ __forceinline__ float gm_h2f(unsigned short v) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f;
}
__device__ __forceinline__ unsigned short gm_f2h(float f) {
    unsigned short v; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f)); return v;
}
__device__ __forceinline__ float gm_bf2f(unsigned short v) {
    return __uint_as_float(((unsigned int)v) << 16);
}
__device__ __forceinline__ unsigned short gm_f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
    return (unsigned short)(u >> 16);
}
/* the source index of output index o along one axis of a pad (mode 0 constant: -1 outside,
   1 reflect, 2 replicate, 3 circular) */
__device__ __forceinline__ long long gm_pad_src(long long o, long long lo, long long in,
                                                int mode) {
    long long s = o - lo;
    if (s >= 0 && s < in) return s;
    if (mode == 0) return -1;
    if (mode == 1) { s = s < 0 ? -s : 2 * (in - 1) - s; return s; }
    if (mode == 2) return s < 0 ? 0 : in - 1;
    s %= in; return s < 0 ? s + in : s;
}
/* interpolation along one axis: the two source indices and the weight of the second */
template <typename A>
__device__ __forceinline__ void gm_interp_src(long long o, long long in, A scale, int mode,
                                              int align, long long* i0, long long* i1, A* lam) {
    if (mode == 0 || mode == 1) {  /* nearest, nearest-exact: floor in f32, as torch */
        float f = mode == 0 ? floorf((float)o * (float)scale)
                            : floorf(((float)o + 0.5f) * (float)scale);
        long long s = (long long)f;
        *i0 = s < in - 1 ? s : in - 1; *i1 = *i0; *lam = (A)0;
        return;
    }
    A src = align ? (A)o * scale : ((A)o + (A)0.5) * scale - (A)0.5;
    if (src < (A)0) src = (A)0;
    long long s = (long long)src;
    if (s > in - 1) s = in - 1;
    *i0 = s; *i1 = s + 1 < in ? s + 1 : in - 1; *lam = src - (A)s;
}
"""

_PER_TYPE = r"""
//@@
extern "C" __global__ void gm_nn_leaky_relu_{S}(const {T}* x, {T}* y, long long n,
                                                double slope) {{
    GRID_STRIDE(i, n) {{
        {A} v = {LD_x};
        y[i] = {ST_lrelu};
    }}
}}
//@@
// y[i] += b[channel of i] for y (N, C, inner)
extern "C" __global__ void gm_nn_bias_{S}({T}* y, const {T}* b, long long n, long long c,
                                          long long inner) {{
    GRID_STRIDE(i, n) {{
        {A} v = {LD_y} + {LD_b};
        y[i] = {ST_v};
    }}
}}
//@@
// x as f32 (the statistics and affine vectors cuDNN takes)
extern "C" __global__ void gm_nn_to_f32_{S}(const {T}* x, float* y, long long n) {{
    GRID_STRIDE(i, n) y[i] = (float){LD_x};
}}
//@@
// the last three axes of y (outer, o0, o1, o2) padded from x (outer, i0, i1, i2)
extern "C" __global__ void gm_nn_pad_{S}(const {T}* x, {T}* y, long long n,
                                         long long i0, long long i1, long long i2,
                                         long long o0, long long o1, long long o2,
                                         long long l0, long long l1, long long l2, int mode,
                                         double value) {{
    GRID_STRIDE(i, n) {{
        long long t = i;
        long long w = t % o2; t /= o2;
        long long h = t % o1; t /= o1;
        long long d = t % o0; t /= o0;
        long long sd = gm_pad_src(d, l0, i0, mode), sh = gm_pad_src(h, l1, i1, mode),
                  sw = gm_pad_src(w, l2, i2, mode);
        {A} v;
        if (sd < 0 || sh < 0 || sw < 0) v = ({A})value;
        else {{ long long j = ((t * i0 + sd) * i1 + sh) * i2 + sw; v = {LD_xj}; }}
        y[i] = {ST_v};
    }}
}}
//@@
// y (outer, o0, o1, o2) resampled from x (outer, i0, i1, i2): nearest (mode 0),
// nearest-exact (1) or (multi)linear (2) along each axis, with that axis' scale
extern "C" __global__ void gm_nn_interp_{S}(const {T}* x, {T}* y, long long n,
                                            long long i0, long long i1, long long i2,
                                            long long o0, long long o1, long long o2,
                                            double s0, double s1, double s2, int mode,
                                            int align) {{
    GRID_STRIDE(i, n) {{
        long long t = i;
        long long w = t % o2; t /= o2;
        long long h = t % o1; t /= o1;
        long long d = t % o0; t /= o0;
        long long a0, b0, a1, b1, a2, b2;
        {A} l0, l1, l2;
        gm_interp_src<{A}>(d, i0, ({A})s0, mode, align, &a0, &b0, &l0);
        gm_interp_src<{A}>(h, i1, ({A})s1, mode, align, &a1, &b1, &l1);
        gm_interp_src<{A}>(w, i2, ({A})s2, mode, align, &a2, &b2, &l2);
        const {T}* p = x + t * i0 * i1 * i2;
        {A} v = ({A})0;
        for (int k = 0; k < 8; ++k) {{
            {A} f = ((k & 4) ? l0 : ({A})1 - l0) * ((k & 2) ? l1 : ({A})1 - l1)
                    * ((k & 1) ? l2 : ({A})1 - l2);
            if (f == ({A})0) continue;
            long long j = (((k & 4) ? b0 : a0) * i1 + ((k & 2) ? b1 : a1)) * i2
                          + ((k & 1) ? b2 : a2);
            v += f * {LD_pj};
        }}
        y[i] = {ST_v};
    }}
}}
//@@
// adaptive pooling of planes (ih, iw) to (oh, ow): window [floor(o in / out),
// ceil((o + 1) in / out)) per axis; max (NaN wins, as torch) with the flat index of the
// maximum in idx, or the average
extern "C" __global__ void gm_nn_adapool_{S}(const {T}* x, {T}* y, long long* idx,
                                             long long n, long long ih, long long iw,
                                             long long oh, long long ow, int is_max) {{
    GRID_STRIDE(i, n) {{
        long long ox = i % ow, oy = (i / ow) % oh, plane = i / (ow * oh);
        long long hs = (oy * ih) / oh, he = ((oy + 1) * ih + oh - 1) / oh;
        long long ws = (ox * iw) / ow, we = ((ox + 1) * iw + ow - 1) / ow;
        const {T}* p = x + plane * ih * iw;
        {A} acc = ({A})0;
        long long at = hs * iw + ws;
        bool first = true;
        for (long long r = hs; r < he; ++r) {{
            for (long long c = ws; c < we; ++c) {{
                long long j = r * iw + c;
                {A} v = {LD_pj};
                if (is_max) {{
                    if (first || v > acc || v != v) {{ acc = v; at = j; }}
                    first = false;
                }} else {{
                    acc += v;
                }}
            }}
        }}
        if (!is_max) acc = acc / ({A})((he - hs) * (we - ws));
        y[i] = {ST_acc};
        idx[i] = at;
    }}
}}
//@@
// pooling of (outer, i0, i1, i2) to (outer, o0, o1, o2) with torch's windows: start
// o s - p per axis; mode 0: max over the taps start + j d inside the input (NaN wins), the
// flat index of the maximum in idx; mode 1 / 2: the average over the window clipped to the
// input, divided by the window clipped to the padded input (1) or by the taps inside (2),
// or by ``divisor`` when it is positive
extern "C" __global__ void gm_nn_pool_{S}(const {T}* x, {T}* y, long long* idx, long long n,
                                          long long i0, long long i1, long long i2,
                                          long long o0, long long o1, long long o2,
                                          long long k0, long long k1, long long k2,
                                          long long s0, long long s1, long long s2,
                                          long long p0, long long p1, long long p2,
                                          long long d0, long long d1, long long d2, int mode,
                                          long long divisor) {{
    GRID_STRIDE(i, n) {{
        long long t = i;
        long long c = t % o2; t /= o2;
        long long b = t % o1; t /= o1;
        long long a = t % o0; t /= o0;
        const {T}* p = x + t * i0 * i1 * i2;
        long long st0 = a * s0 - p0, st1 = b * s1 - p1, st2 = c * s2 - p2;
        {A} acc = ({A})0;
        long long at = -1;
        if (mode == 0) {{
            bool first = true;
            for (long long j0 = 0; j0 < k0; ++j0) {{
                long long q0 = st0 + j0 * d0;
                if (q0 < 0 || q0 >= i0) continue;
                for (long long j1 = 0; j1 < k1; ++j1) {{
                    long long q1 = st1 + j1 * d1;
                    if (q1 < 0 || q1 >= i1) continue;
                    for (long long j2 = 0; j2 < k2; ++j2) {{
                        long long q2 = st2 + j2 * d2;
                        if (q2 < 0 || q2 >= i2) continue;
                        long long j = (q0 * i1 + q1) * i2 + q2;
                        {A} v = {LD_pj};
                        if (first || v > acc || v != v) {{ acc = v; at = j; }}
                        first = false;
                    }}
                }}
            }}
        }} else {{
            long long e0 = st0 + k0 < i0 + p0 ? st0 + k0 : i0 + p0;
            long long e1 = st1 + k1 < i1 + p1 ? st1 + k1 : i1 + p1;
            long long e2 = st2 + k2 < i2 + p2 ? st2 + k2 : i2 + p2;
            long long pool = (e0 - st0) * (e1 - st1) * (e2 - st2);
            long long a0 = st0 > 0 ? st0 : 0, a1 = st1 > 0 ? st1 : 0, a2 = st2 > 0 ? st2 : 0;
            long long b0 = e0 < i0 ? e0 : i0, b1 = e1 < i1 ? e1 : i1, b2 = e2 < i2 ? e2 : i2;
            for (long long q0 = a0; q0 < b0; ++q0)
                for (long long q1 = a1; q1 < b1; ++q1)
                    for (long long q2 = a2; q2 < b2; ++q2) {{
                        long long j = (q0 * i1 + q1) * i2 + q2;
                        acc += {LD_pj};
                    }}
            long long div = divisor > 0 ? divisor
                            : (mode == 1 ? pool : (b0 - a0) * (b1 - a1) * (b2 - a2));
            acc = acc / ({A})div;
        }}
        y[i] = {ST_acc};
        idx[i] = at;
    }}
}}
//@@
// sum((x - t)^2) (and / div), accumulated in f64 by one block of 256 threads
extern "C" __global__ void gm_nn_sqdiff_sum_{S}(const {T}* x, const {T}* t, {T}* out,
                                                long long n, double div) {{
    __shared__ double part[256];
    double s = 0.0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {{
        double e = (double){LD_x} - (double){LD_t};
        s += e * e;
    }}
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {{
        if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }}
    if (threadIdx.x == 0) {{ {A} v = ({A})(part[0] / div); out[0] = {ST_v}; }}
}}
//@@
// y = (x - t)^2 element-wise
extern "C" __global__ void gm_nn_sqdiff_{S}(const {T}* x, const {T}* t, {T}* y, long long n) {{
    GRID_STRIDE(i, n) {{
        {A} e = {LD_x} - {LD_t};
        {A} v = e * e;
        y[i] = {ST_v};
    }}
}}
//@@
// sum(a) / sum(d) (mean) or sum(a) (sum) of f64 parts, one block of 256 threads
extern "C" __global__ void gm_nn_ratio_{S}(const double* a, const double* d, {T}* out,
                                           long long n, int mean) {{
    __shared__ double pa[256];
    __shared__ double pd[256];
    double sa = 0.0, sd = 0.0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {{ sa += a[i]; sd += d[i]; }}
    pa[threadIdx.x] = sa;
    pd[threadIdx.x] = sd;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {{
        if (threadIdx.x < k) {{
            pa[threadIdx.x] += pa[threadIdx.x + k];
            pd[threadIdx.x] += pd[threadIdx.x + k];
        }}
        __syncthreads();
    }}
    if (threadIdx.x == 0) {{ {A} v = ({A})(mean ? pa[0] / pd[0] : pa[0]); out[0] = {ST_v}; }}
}}
//@@
// f64 parts as the element type
extern "C" __global__ void gm_nn_from_f64_{S}(const double* a, {T}* y, long long n) {{
    GRID_STRIDE(i, n) {{ {A} v = ({A})a[i]; y[i] = {ST_v}; }}
}}
//@@
// cross entropy of soft targets: per position p = (n, s) of logp (N, C, inner),
// loss[p] = -sum_c w_c t'_c logp[n, c, s] with t' = (1 - eps) t + eps / C; den[p] = 1
extern "C" __global__ void gm_nn_soft_ce_{S}(const {T}* logp, const {T}* tgt, const {T}* w,
                                             double* loss, double* den, long long n,
                                             long long c, long long inner, int has_w,
                                             double eps) {{
    GRID_STRIDE(p, n) {{
        long long b = p / inner, s = p % inner;
        double acc = 0.0;
        for (long long k = 0; k < c; ++k) {{
            long long j = (b * c + k) * inner + s;
            double wk = has_w ? (double){LD_wk} : 1.0;
            double tk = (1.0 - eps) * (double){LD_tgtj} + eps / (double)c;
            acc -= wk * tk * (double){LD_logpj};
        }}
        loss[p] = acc;
        den[p] = 1.0;
    }}
}}
"""

_PER_INDEX = r"""
//@@
// out[i, :] = w[idx[i], :]; an index outside [0, v) gives a row of NaN and sets bad[0]
extern "C" __global__ void gm_nn_embed_{S}_{I}(const {IT}* idx, const {T}* w, {T}* y,
                                               long long n, long long d, long long v,
                                               int* bad) {{
    GRID_STRIDE(i, n) {{
        long long r = (long long)idx[i / d];
        {A} x;
        if (r < 0 || r >= v) {{ x = ({A})GM_NAN; bad[0] = 1; }}
        else {{ long long j = r * d + i % d; x = {LD_wj}; }}
        y[i] = {ST_x};
    }}
}}
//@@
// cross entropy of class targets: per position p = (n, s) of logp (N, C, inner),
// target t: nll = -w_t logp[n, t, s], smooth = -sum_c w_c logp[n, c, s],
// loss[p] = (1 - eps) nll + eps / C smooth, den[p] = w_t (0 and 0 where t == ignore;
// NaN and bad[0] = 1 where t lies outside [0, C))
extern "C" __global__ void gm_nn_ce_{S}_{I}(const {T}* logp, const {IT}* tgt, const {T}* w,
                                            double* loss, double* den, long long n,
                                            long long c, long long inner, int has_w,
                                            long long ignore, double eps, int* bad) {{
    GRID_STRIDE(p, n) {{
        long long b = p / inner, s = p % inner;
        long long t = (long long)tgt[p];
        if (t == ignore) {{ loss[p] = 0.0; den[p] = 0.0; continue; }}
        if (t < 0 || t >= c) {{
            loss[p] = (double)GM_NAN; den[p] = (double)GM_NAN; bad[0] = 1; continue;
        }}
        long long k = t;
        double wt = has_w ? (double){LD_wk} : 1.0;
        long long j = (b * c + t) * inner + s;
        double nll = -wt * (double){LD_logpj};
        double smooth = 0.0;
        if (eps != 0.0) {{
            for (k = 0; k < c; ++k) {{
                j = (b * c + k) * inner + s;
                double wk = has_w ? (double){LD_wk} : 1.0;
                smooth -= wk * (double){LD_logpj};
            }}
        }}
        loss[p] = (1.0 - eps) * nll + eps / (double)c * smooth;
        den[p] = wt;
    }}
}}
"""


def _fill(text: str, s: str, extra: dict[str, str] | None = None) -> str:
    t, a, ld, st = _TYPES[s]
    loads = {"LD_x": "x[i]", "LD_y": "y[i]", "LD_b": "b[(i / inner) % c]", "LD_xj": "x[j]",
             "LD_pj": "p[j]", "LD_t": "t[i]", "LD_wk": "w[k]", "LD_tgtj": "tgt[j]",
             "LD_logpj": "logp[j]", "LD_wj": "w[j]"}
    fields = {k: ld.format(v) for k, v in loads.items()}
    fields.update({"ST_v": st.format("v"), "ST_acc": st.format("acc"),
                   "ST_x": st.format("x")})
    # leaky relu's value: x where positive, else slope x
    fields["ST_lrelu"] = st.format(f"(v > ({a})0 ? v : v * ({a})slope)")
    return text.format(S=s, T=t, A=a, **fields, **(extra or {}))


def _programs() -> dict[str, str]:
    """Kernel name -> its program: the prelude and that kernel alone (a small compile per
    kernel on first use, instead of every kernel for each)."""
    out: dict[str, str] = {}

    def add(text: str) -> None:
        for part in text.split("//@@"):
            if "extern" in part:
                name = part.split("void ", 1)[1].split("(", 1)[0]
                out[name] = _PRELUDE + part
    for s in _TYPES:
        add(_fill(_PER_TYPE, s))
        for i, it in _INDEX.items():
            add(_fill(_PER_INDEX, s, {"I": i, "IT": it}))
    return out


PROGRAMS = _programs()
#: every kernel, one program (for reading and for compiling all at once)
SOURCE = _PRELUDE + "\n".join(p[len(_PRELUDE):] for p in PROGRAMS.values())


def kernel_name(op: str, dtype: str, index: str | None = None) -> str:
    """The name of kernel ``op`` for element type ``dtype`` (and index type ``index``)."""
    return f"gm_nn_{op}_{dtype}" + (f"_{index}" if index else "")


# -- the simulator's twins (flat views of whole buffers; only the elements named are set) ----
def _wide(a: np.ndarray) -> np.ndarray:
    """float64 values of a float view (f16, bf16, f32 or f64)."""
    return a.astype(np.float64)


def _compute(dtype: np.dtype) -> Any:
    """The precision a kernel computes in for its element type (f64 for f64, else f32)."""
    return np.float64 if dtype == np.float64 else np.float32


def _twin(op: str, index: bool = False) -> Any:
    def wrap(fn: Any) -> Any:
        for s in _TYPES:
            if index:
                for i in _INDEX:
                    sim_kernel(kernel_name(op, s, i))(fn)
            else:
                sim_kernel(kernel_name(op, s))(fn)
        return fn

    return wrap


@_twin("leaky_relu")
def _leaky_relu(launch: Any, x: np.ndarray, y: np.ndarray, n: Any, slope: Any) -> None:
    m, c = int(n), _compute(x.dtype)
    v = x[:m].astype(c)
    with np.errstate(invalid="ignore", over="ignore"):
        y[:m] = np.where(v > 0, v, v * c(slope)).astype(y.dtype)


@_twin("bias")
def _bias(launch: Any, y: np.ndarray, b: np.ndarray, n: Any, c: Any, inner: Any) -> None:
    m, t = int(n), _compute(y.dtype)
    ch = (np.arange(m) // int(inner)) % int(c)
    with np.errstate(over="ignore", invalid="ignore"):
        y[:m] = (y[:m].astype(t) + b[ch].astype(t)).astype(y.dtype)


@_twin("to_f32")
def _to_f32(launch: Any, x: np.ndarray, y: np.ndarray, n: Any) -> None:
    m = int(n)
    y[:m] = x[:m].astype(np.float32)


def _pad_src(o: np.ndarray, lo: int, size: int, mode: int) -> np.ndarray:
    s = o - lo
    inside = (s >= 0) & (s < size)
    if mode == 0:
        return np.where(inside, s, -1)
    if mode == 1:
        return np.where(inside, s, np.where(s < 0, -s, 2 * (size - 1) - s))
    if mode == 2:
        return np.clip(s, 0, size - 1)
    return np.mod(s, size)


@_twin("pad")
def _pad(launch: Any, x: np.ndarray, y: np.ndarray, n: Any, i0: Any, i1: Any, i2: Any,
         o0: Any, o1: Any, o2: Any, l0: Any, l1: Any, l2: Any, mode: Any, value: Any) -> None:
    m = int(n)
    ins, outs = (int(i0), int(i1), int(i2)), (int(o0), int(o1), int(o2))
    outer = m // math.prod(outs) if m else 0
    src = x[:outer * math.prod(ins)].reshape(outer, *ins)
    idx = [_pad_src(np.arange(o), int(lo), size, int(mode))
           for o, lo, size in zip(outs, (l0, l1, l2), ins)]
    d, h, w = np.ix_(*idx)
    inside = (d >= 0) & (h >= 0) & (w >= 0)
    got = src[:, np.maximum(d, 0), np.maximum(h, 0), np.maximum(w, 0)]
    c = _compute(y.dtype)
    out = np.where(inside[None], got.astype(c), c(value))
    y[:m] = out.reshape(-1).astype(y.dtype)


def _interp_src(outs: int, size: int, scale: float, mode: int, align: int, c: Any
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    o = np.arange(outs)
    if mode in (0, 1):
        f = np.float32(scale)
        pos = o.astype(np.float32) if mode == 0 else o.astype(np.float32) + np.float32(0.5)
        s = np.floor(pos * f).astype(np.int64)
        i0 = np.minimum(s, size - 1)
        return i0, i0, np.zeros(outs, c)
    sc = c(scale)
    src = o.astype(c) * sc if align else (o.astype(c) + c(0.5)) * sc - c(0.5)
    src = np.maximum(src, c(0))
    s = np.minimum(src.astype(np.int64), size - 1)
    return s, np.minimum(s + 1, size - 1), (src - s.astype(c)).astype(c)


@_twin("interp")
def _interp(launch: Any, x: np.ndarray, y: np.ndarray, n: Any, i0: Any, i1: Any, i2: Any,
            o0: Any, o1: Any, o2: Any, s0: Any, s1: Any, s2: Any, mode: Any, align: Any
            ) -> None:
    m = int(n)
    ins, outs = (int(i0), int(i1), int(i2)), (int(o0), int(o1), int(o2))
    outer = m // math.prod(outs) if m else 0
    c = _compute(y.dtype)
    src = x[:outer * math.prod(ins)].reshape(outer, *ins).astype(c)
    axes = [_interp_src(o, size, float(s), int(mode), int(align), c)
            for o, size, s in zip(outs, ins, (s0, s1, s2))]
    out = np.zeros((outer, *outs), c)
    for k in range(8):
        pick = [(ax[1] if k & bit else ax[0], ax[2] if k & bit else c(1) - ax[2])
                for ax, bit in zip(axes, (4, 2, 1))]
        d, h, w = np.ix_(pick[0][0], pick[1][0], pick[2][0])
        f = (pick[0][1][:, None, None] * pick[1][1][None, :, None]
             * pick[2][1][None, None, :])
        out += f[None] * src[:, d, h, w]
    y[:m] = out.reshape(-1).astype(y.dtype)


@_twin("adapool")
def _adapool(launch: Any, x: np.ndarray, y: np.ndarray, idx: np.ndarray, n: Any, ih: Any,
             iw: Any, oh: Any, ow: Any, is_max: Any) -> None:
    m, ih, iw, oh, ow = int(n), int(ih), int(iw), int(oh), int(ow)
    planes = m // (oh * ow) if m else 0
    c = _compute(y.dtype)
    src = x[:planes * ih * iw].reshape(planes, ih, iw).astype(c)
    out = np.empty((planes, oh, ow), c)
    at = np.empty((planes, oh, ow), np.int64)
    for r in range(oh):
        hs, he = (r * ih) // oh, -(-((r + 1) * ih) // oh)
        for q in range(ow):
            ws, we = (q * iw) // ow, -(-((q + 1) * iw) // ow)
            win = src[:, hs:he, ws:we].reshape(planes, -1)
            if int(is_max):
                nan = np.isnan(win)
                # the last NaN of the window, else the first maximum
                last_nan = win.shape[1] - 1 - np.argmax(nan[:, ::-1], axis=1)
                k = np.where(nan.any(axis=1), last_nan, np.argmax(win, axis=1))
                out[:, r, q] = win[np.arange(planes), k]
                at[:, r, q] = (hs + k // (we - ws)) * iw + ws + k % (we - ws)
            else:
                out[:, r, q] = win.sum(axis=1, dtype=c) / c(win.shape[1])
                at[:, r, q] = hs * iw + ws
    y[:m] = out.reshape(-1).astype(y.dtype)
    idx[:m] = at.reshape(-1)


@_twin("pool")
def _pool(launch: Any, x: np.ndarray, y: np.ndarray, idx: np.ndarray, n: Any, i0: Any,
          i1: Any, i2: Any, o0: Any, o1: Any, o2: Any, k0: Any, k1: Any, k2: Any, s0: Any,
          s1: Any, s2: Any, p0: Any, p1: Any, p2: Any, d0: Any, d1: Any, d2: Any, mode: Any,
          divisor: Any) -> None:
    m = int(n)
    ins = tuple(int(v) for v in (i0, i1, i2))
    outs = tuple(int(v) for v in (o0, o1, o2))
    k, s, p, d = ((int(a), int(b), int(c)) for a, b, c in
                  ((k0, k1, k2), (s0, s1, s2), (p0, p1, p2), (d0, d1, d2)))
    mode, divisor = int(mode), int(divisor)
    outer = m // math.prod(outs) if m else 0
    c = _compute(y.dtype)
    src = x[:outer * math.prod(ins)].reshape(outer, -1).astype(c)
    out = np.empty((outer, *outs), c)
    at = np.full((outer, *outs), -1, np.int64)
    for o in itertools.product(*(range(v) for v in outs)):
        start = [o[a] * s[a] - p[a] for a in range(3)]
        if mode == 0:
            taps = [[start[a] + j * d[a] for j in range(k[a])
                     if 0 <= start[a] + j * d[a] < ins[a]] for a in range(3)]
        else:
            end = [min(start[a] + k[a], ins[a] + p[a]) for a in range(3)]
            pool = math.prod(end[a] - start[a] for a in range(3))
            taps = [list(range(max(start[a], 0), min(end[a], ins[a]))) for a in range(3)]
        flat = [(q0 * ins[1] + q1) * ins[2] + q2 for q0 in taps[0] for q1 in taps[1]
                for q2 in taps[2]]
        win = src[:, flat]
        if mode == 0:
            nan = np.isnan(win)
            last_nan = win.shape[1] - 1 - np.argmax(nan[:, ::-1], axis=1)
            j = np.where(nan.any(axis=1), last_nan, np.argmax(win, axis=1))
            out[(slice(None), *o)] = win[np.arange(outer), j]
            at[(slice(None), *o)] = np.asarray(flat)[j]
        else:
            div = divisor if divisor > 0 else (pool if mode == 1 else len(flat))
            out[(slice(None), *o)] = win.sum(axis=1, dtype=c) / c(div)
    y[:m] = out.reshape(-1).astype(y.dtype)
    idx[:m] = at.reshape(-1)


@_twin("sqdiff_sum")
def _sqdiff_sum(launch: Any, x: np.ndarray, t: np.ndarray, out: np.ndarray, n: Any,
                div: Any) -> None:
    m = int(n)
    e = _wide(x[:m]) - _wide(t[:m])
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        out[0] = np.asarray(float(np.sum(e * e)) / float(div)).astype(out.dtype)


@_twin("sqdiff")
def _sqdiff(launch: Any, x: np.ndarray, t: np.ndarray, y: np.ndarray, n: Any) -> None:
    m, c = int(n), _compute(y.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        e = x[:m].astype(c) - t[:m].astype(c)
        y[:m] = (e * e).astype(y.dtype)


@_twin("ratio")
def _ratio(launch: Any, a: np.ndarray, d: np.ndarray, out: np.ndarray, n: Any,
           mean: Any) -> None:
    m = int(n)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        sa, sd = float(np.sum(a[:m])), float(np.sum(d[:m]))
        out[0] = np.asarray(np.float64(sa) / np.float64(sd) if int(mean) else sa
                            ).astype(out.dtype)


@_twin("from_f64")
def _from_f64(launch: Any, a: np.ndarray, y: np.ndarray, n: Any) -> None:
    m = int(n)
    with np.errstate(over="ignore"):
        y[:m] = a[:m].astype(_compute(y.dtype)).astype(y.dtype)


@_twin("soft_ce")
def _soft_ce(launch: Any, logp: np.ndarray, tgt: np.ndarray, w: np.ndarray, loss: np.ndarray,
             den: np.ndarray, n: Any, c: Any, inner: Any, has_w: Any, eps: Any) -> None:
    m, c, inner = int(n), int(c), int(inner)
    batch = m // inner if inner else 0
    lp = _wide(logp[:batch * c * inner]).reshape(batch, c, inner)
    t = (1.0 - float(eps)) * _wide(tgt[:batch * c * inner]).reshape(batch, c, inner) \
        + float(eps) / c
    wk = _wide(w[:c]) if int(has_w) else np.ones(c)
    with np.errstate(invalid="ignore", over="ignore"):
        loss[:m] = -(wk[None, :, None] * t * lp).sum(axis=1).reshape(-1)
    den[:m] = 1.0


@_twin("embed", index=True)
def _embed(launch: Any, idx: np.ndarray, w: np.ndarray, y: np.ndarray, n: Any, d: Any,
           v: Any, bad: np.ndarray) -> None:
    m, d, v = int(n), int(d), int(v)
    rows = idx[:m // d if d else 0].astype(np.int64)
    ok = (rows >= 0) & (rows < v)
    table = w[:v * d].reshape(v, d)
    out = np.where(ok[:, None], table[np.where(ok, rows, 0)].astype(np.float64), np.nan)
    y[:m] = out.reshape(-1).astype(y.dtype)
    if not ok.all():
        bad[0] = 1


@_twin("ce", index=True)
def _ce(launch: Any, logp: np.ndarray, tgt: np.ndarray, w: np.ndarray, loss: np.ndarray,
        den: np.ndarray, n: Any, c: Any, inner: Any, has_w: Any, ignore: Any, eps: Any,
        bad: np.ndarray) -> None:
    m, c, inner, eps = int(n), int(c), int(inner), float(eps)
    batch = m // inner if inner else 0
    lp = _wide(logp[:batch * c * inner]).reshape(batch, c, inner)
    t = tgt[:m].astype(np.int64).reshape(batch, inner)
    wk = _wide(w[:c]) if int(has_w) else np.ones(c)
    ignored = t == int(ignore)
    bad_t = ~ignored & ((t < 0) | (t >= c))
    safe = np.where(ignored | bad_t, 0, t)
    picked = np.take_along_axis(lp, safe[:, None, :], axis=1)[:, 0, :]
    wt = wk[safe]
    with np.errstate(invalid="ignore", over="ignore"):
        nll = -wt * picked
        smooth = -(wk[None, :, None] * lp).sum(axis=1) if eps != 0.0 else 0.0
        value = (1.0 - eps) * nll + eps / c * smooth
    value = np.where(ignored, 0.0, np.where(bad_t, np.nan, value))
    weight = np.where(ignored, 0.0, np.where(bad_t, np.nan, wt))
    loss[:m] = value.reshape(-1)
    den[:m] = weight.reshape(-1)
    if bad_t.any():
        bad[0] = 1


# -- compiling once per device, launching --------------------------------------------------
_BLOCK = 256
_MAX_GRID = 65535
_LOCK = threading.Lock()
#: device -> {kernel name: the future of its Kernel}
_COMPILED: weakref.WeakKeyDictionary[Any, dict[str, Future]] = weakref.WeakKeyDictionary()


def _kernel(dev: Any, name: str) -> Any:
    """Kernel ``name`` of :data:`SOURCE` on ``dev``, compiled and loaded on its first use (that
    caller waits for NVRTC or the disk cache; a failed compile is tried again next time)."""
    with _LOCK:
        table = _COMPILED.setdefault(dev, {})
        fut = table.get(name)
        if fut is None:
            fut = table[name] = dev.nvrtc.compile(PROGRAMS[name], name)
    try:
        return fut.result()
    except BaseException:
        with _LOCK:
            if table.get(name) is fut:
                del table[name]
        raise


def _arg(dev: Any, a: Any) -> Any:
    """A launch argument: 16-bit float buffers go as untyped (declared ``unsigned short*``)."""
    ref = a if type(a) is BufRef else getattr(a, "ref", None)
    if type(ref) is BufRef and ref.dtype in ("f16", "bf16"):
        return dev.nvrtc.untyped(a)
    return a


def launch(dev: Any, name: str, n: int, args: tuple, reads: tuple, writes: tuple) -> Future:
    """Launch kernel ``name`` over ``n`` elements (grid-stride) on ``dev``; a future of None,
    ordered on the compute stream like every message."""
    grid = max(1, min(_MAX_GRID, -(-n // _BLOCK)))
    return dev.nvrtc.launch(_kernel(dev, name), grid, _BLOCK, tuple(_arg(dev, a) for a in args),
                            reads=reads, writes=writes)


def launch_block(dev: Any, name: str, args: tuple, reads: tuple, writes: tuple) -> Future:
    """Launch reduction kernel ``name`` as one block of 256 threads."""
    return dev.nvrtc.launch(_kernel(dev, name), 1, _BLOCK, tuple(_arg(dev, a) for a in args),
                            reads=reads, writes=writes)
