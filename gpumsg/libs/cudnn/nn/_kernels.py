"""The generated kernels of ``dev.nn`` (the calls cuDNN has no operation for): one CUDA C++
program, each kernel instantiated per element type from one text, compiled with NVRTC once per
device (through the disk cache) and launched from the caller's thread; the NumPy twin of each
kernel (registered with :func:`~gpumsg.libs.nvrtc.sim_kernel`) is what the simulator runs.

Element types: f32 and f64 compute in their own precision; f16 and bf16 are read as 16-bit
words, converted to f32 in registers and rounded back to nearest even (no CUDA header is
needed), so their pointers are declared ``unsigned short*`` and passed as
``dev.nvrtc.untyped`` buffers (the kernel is chosen by the buffer's dtype, so the element type
always matches). Sums that make a loss accumulate in f64 whatever the element type.

The simulator's twins live in ``twins.py``.

Every element-wise kernel takes the element count and covers it with a grid-stride loop, so
any launch shape is correct; :func:`launch` uses 256-thread blocks and at most 65535 blocks.
The reductions run as one block of 256 threads (:func:`launch_block`).
"""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import Future
from typing import Any

from ....messages._base import BufRef

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
