"""The random kernels: rendered per (distribution, output dtype, which parameters are arrays),
compiled with NVRTC once per device, and registered with their NumPy twins for the simulator.

Three families, all one pass over the output with a grid-stride loop:

* ``sample``: element ``i`` draws from its own Philox stream (``gm_rs``) and calls the
  distribution's ``gm_s_<name>`` with its parameters, each a scalar argument or an element of a
  float64 array of the output's shape;
* ``uniform``: the fast path of ``random``/``uniform``: one Philox call gives four float32 (or
  two float64) values of consecutive elements, NumPy's mapping of 24 (53) random bits to
  [0, 1);
* ``integers``: ``low + r``, ``r`` the random bits below the top bit of ``range - 1``, drawn
  again while not below ``range`` (exactly uniform, no division; fewer than two tries on
  average): four candidates per Philox call for ranges of at most ``2**32`` values, two
  above.

Arguments of every kernel: ``n``, the output pointer and its element offset, the key (two
32-bit words in one 64-bit argument), the launch number, then the parameters.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ...libs.nvrtc._sim import SIM_KERNELS, Recipe, sim_kernel
from .. import _dtypes as D
from .._array import Array
from .._codegen import MAX_GRID, kernel_for
from ._philox import CUDA as PHILOX
from ._philox import Draws, philox, slices
from ._samplers import CUDA as SAMPLERS_CUDA
from ._samplers import SAMPLERS

__all__ = ["launch_sample", "launch_uniform", "launch_integers"]

BLOCK = 256
_HEAD = "#define GM_LOOP(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + " \
        "threadIdx.x; i < (n); i += (long long)blockDim.x * gridDim.x)\n"


def _grid(n: int, per_thread: int = 1) -> int:
    return max(1, min(math.ceil(n / (BLOCK * per_thread)), MAX_GRID))


#: laws whose CUDA code has a constants struct (``law(params)``, ``law.draw(s)``): with scalar
#: parameters the kernel makes it once per thread and each thread draws :data:`HOIST_PER`
#: elements (an element's numbers depend on its index alone, not on the thread drawing it)
HOISTED = {"binomial": "gm_binom"}
#: Philox calls (groups of four f32 or two f64) per thread of the uniform kernel
UNIFORM_PER_THREAD = 8
HOIST_PER = 8


def _hoisted(name: str, pattern: str) -> bool:
    return name in HOISTED and "a" not in pattern


def _ctype(dt: np.dtype) -> str:
    return D.CTYPE[dt][0]


def _split(key: int) -> tuple[int, int]:
    return key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF


def _params(out_dt: np.dtype, pattern: str, ctype: str, kind: str) -> tuple[
        list[str], list[str], list[str]]:
    """A sampling kernel's C parameters, their kinds and each parameter's per-element read:
    the count, the output, its offset, the stream's key and call, then per ``pattern``
    letter an array (``a``: ``ctype`` pointer, read at ``i``) or a scalar (of ``kind``)."""
    cparams = ["long long n", f"{_ctype(out_dt)}* __restrict__ out", "long long off",
               "unsigned long long key", "unsigned long long call"]
    kinds = ["i64", "ptr", "i64", "u64", "u64"]
    loads = []
    for j, letter in enumerate(pattern):
        if letter == "a":
            cparams.append(f"const {ctype}* __restrict__ p{j}")
            kinds.append("ptr")
            loads.append(f"p{j}[i]")
        else:
            cparams.append(f"{ctype} v{j}")
            kinds.append(kind)
            loads.append(f"v{j}")
    return cparams, kinds, loads


# -- sample ---------------------------------------------------------------------------------------
@functools.cache  # the source of a kernel is rendered once per process
def _render_sample(name: str, out_dt: np.dtype, pattern: str) -> tuple[str, str, tuple]:
    sampler = SAMPLERS[name]
    kname = f"gm_rng_{name}_{D.storage_name(out_dt)}_{pattern or 'x'}"
    cparams, kinds, loads = _params(out_dt, pattern, "double", "f64")
    conv = "(long long)" if sampler.integer else ""
    law = HOISTED.get(name) if _hoisted(name, pattern) else None
    if law is not None:
        # scalar parameters: the law's constants once per thread, many elements drawn from them
        make = f"  const {law} law({', '.join(loads)});\n"
        draw = "law.draw(s)"
    else:
        make, draw = "", f"gm_s_{name}({', '.join(['s', *loads])})"
    body = f"""
extern "C" __global__ void {kname}({", ".join(cparams)}) {{
{make}  GM_LOOP(i, n) {{
    gm_rs s(i, (unsigned int)call, (unsigned int)key, (unsigned int)(key >> 32));
    out[off + i] = ({_ctype(out_dt)})({conv}{draw});
  }}
}}
"""
    if kname not in SIM_KERNELS:
        sim_kernel(kname)(Recipe(_sample_twin, name, pattern))
    return kname, _HEAD + PHILOX + SAMPLERS_CUDA + body, tuple(kinds)


def _sample_twin(name: str, pattern: str) -> Any:
    sampler = SAMPLERS[name]

    def run(info: Any, n: Any, out: np.ndarray, off: Any, key: Any, call: Any,
            *params: Any) -> None:
        n, off = int(n), int(off)
        k0, k1 = _split(int(key))
        for start, stop in slices(n):
            m = stop - start
            ps = [p[start:stop].astype(np.float64) if kind == "a" else np.full(m, float(p))
                  for kind, p in zip(pattern, params)]
            d = Draws(m, int(call), k0, k1, start)
            with np.errstate(all="ignore"):
                vals = sampler.twin(d, np.arange(m), *ps)
                if sampler.integer:
                    vals = np.clip(np.nan_to_num(vals), -2.0 ** 63, 2.0 ** 63 - 1024)
            out[off + start:off + stop] = vals.astype(out.dtype)

    return run


def launch_sample(out: Array, name: str, params: list[Any], key: int, call: int) -> None:
    """Fill ``out`` (C-contiguous) with variates of ``name``: ``params`` are Python floats or
    C-contiguous float64 arrays of ``out``'s shape."""
    n = out.size
    if n == 0:
        return
    pattern = "".join("a" if isinstance(p, Array) else "s" for p in params)
    kname, source, kinds = _render_sample(name, out.dtype, pattern)
    kernel = kernel_for(out.device, kname, source, kinds)
    args: list[Any] = [n, out.buffer, out._offset, key, call]
    reads = []
    for p in params:
        if isinstance(p, Array):
            args.append(p.buffer)
            reads.append(p.buffer)
        else:
            args.append(float(p))
    per = HOIST_PER if _hoisted(name, pattern) else 1
    done = out.device.launch(kernel, _grid(n, per), BLOCK, tuple(args), reads=reads,
                             writes=[out.buffer])
    out._wrote(done)


# -- uniform (random's fast path) ------------------------------------------------------------------
@functools.cache  # the source of a kernel is rendered once per process
def _render_uniform(out_dt: np.dtype) -> tuple[str, str, tuple]:
    kname = f"gm_rng_random_{D.storage_name(out_dt)}"
    if out_dt == D.float32:
        per, store = 4, """
    const float w[4] = {(float)(r.x >> 8) * 5.9604644775390625e-08f,
                        (float)(r.y >> 8) * 5.9604644775390625e-08f,
                        (float)(r.z >> 8) * 5.9604644775390625e-08f,
                        (float)(r.w >> 8) * 5.9604644775390625e-08f};
    if (base + 4 <= n && ((off + base) & 3) == 0) {
      *reinterpret_cast<float4*>(out + off + base) = make_float4(w[0], w[1], w[2], w[3]);
    } else {
      for (int j = 0; j < 4 && base + j < n; ++j) out[off + base + j] = w[j];
    }"""
    else:
        per, store = 2, """
    const double w[2] = {
        (double)(((unsigned long long)r.x << 21) | (r.y >> 11)) * 1.1102230246251565e-16,
        (double)(((unsigned long long)r.z << 21) | (r.w >> 11)) * 1.1102230246251565e-16};
    for (int j = 0; j < 2 && base + j < n; ++j) {
      const double v = low + width * w[j];
      out[off + base + j] = v >= high ? fmax(low, nextafter(high, low)) : v;
    }"""
    fast = ""
    if out_dt == D.float32:
        # whole groups into a 16-byte aligned output (the usual case): one float4 store per
        # Philox call, a 32-bit index, no per-group checks; the general loop below does the rest
        fast = """
  const long long whole = (off & 3) == 0 ? n / 4 : 0;
  const uint2 kk = make_uint2((unsigned int)key, (unsigned int)(key >> 32));
  long long first = 0;
  if (whole <= 0x7fffffffLL) {
    float4* __restrict__ o4 = reinterpret_cast<float4*>(out + off);
    const unsigned int stride = blockDim.x * gridDim.x;
    for (unsigned int g = blockIdx.x * blockDim.x + threadIdx.x; g < (unsigned int)whole;
         g += stride) {
      const uint4 r = gm_philox(make_uint4(g, 0u, 0u, (unsigned int)call), kk);
      o4[g] = make_float4((float)(r.x >> 8) * 5.9604644775390625e-08f,
                          (float)(r.y >> 8) * 5.9604644775390625e-08f,
                          (float)(r.z >> 8) * 5.9604644775390625e-08f,
                          (float)(r.w >> 8) * 5.9604644775390625e-08f);
    }
    first = whole;
  }"""
    body = f"""
extern "C" __global__ void {kname}(long long n, {_ctype(out_dt)}* __restrict__ out, long long off,
                                   unsigned long long key, unsigned long long call, double low,
                                   double width, double high) {{
  const long long groups = (n + {per - 1}) / {per};{fast}
  for (long long g = {"first + " if fast else ""}(long long)blockIdx.x * blockDim.x + threadIdx.x;
       g < groups; g += (long long)blockDim.x * gridDim.x) {{
    const long long base = g * {per};
    const uint4 r = gm_philox(make_uint4((unsigned int)g,
                                         (unsigned int)((unsigned long long)g >> 32), 0u,
                                         (unsigned int)call),
                              make_uint2((unsigned int)key, (unsigned int)(key >> 32)));{store}
  }}
}}
"""
    if kname not in SIM_KERNELS:
        sim_kernel(kname)(Recipe(_uniform_twin, per))
    return kname, _HEAD + PHILOX + body, ("i64", "ptr", "i64", "u64", "u64", "f64", "f64",
                                          "f64")


def _uniform_twin(per: int) -> Any:
    def run(info: Any, n: Any, out: np.ndarray, off: Any, key: Any, call: Any, low: Any,
            width: Any, high: Any) -> None:
        n, off = int(n), int(off)
        k0, k1 = _split(int(key))
        for start, stop in slices(-(-n // per)):  # groups of `per` values, a slice at a time
            vals = draw(np.arange(start, stop, dtype=np.uint64), int(call), k0, k1, low, width,
                        high)
            first, last = start * per, min(n, stop * per)
            out[off + first:off + last] = vals.reshape(-1)[:last - first]

    def draw(g: np.ndarray, call: int, k0: int, k1: int, low: Any, width: Any,
             high: Any) -> np.ndarray:
        groups = g.size
        w = philox((g & np.uint64(0xFFFFFFFF)).astype(np.uint32),
                   (g >> np.uint64(32)).astype(np.uint32), np.zeros(groups, np.uint32),
                   np.full(groups, call, np.uint32), k0, k1)
        if per == 4:
            vals = np.stack([(x >> np.uint32(8)).astype(np.float32) *
                             np.float32(5.9604644775390625e-08) for x in w], axis=1)
        else:
            a = (w[0].astype(np.uint64) << np.uint64(21)) | (w[1] >> np.uint32(11)).astype(
                np.uint64)
            b = (w[2].astype(np.uint64) << np.uint64(21)) | (w[3] >> np.uint32(11)).astype(
                np.uint64)
            u = np.stack([a, b], axis=1).astype(np.float64) * 1.1102230246251565e-16
            lo, hi = float(low), float(high)
            vals = lo + float(width) * u
            vals = np.where(vals >= hi, max(lo, float(np.nextafter(hi, lo))), vals)
        return vals

    return run


def launch_uniform(out: Array, key: int, call: int, low: float = 0.0,
                   high: float = 1.0) -> None:
    """Fill ``out`` (C-contiguous float32 or float64) with uniforms in [low, high) (float32:
    [0, 1) only)."""
    n = out.size
    if n == 0:
        return
    kname, source, kinds = _render_uniform(out.dtype)
    kernel = kernel_for(out.device, kname, source, kinds)
    per = 4 if out.dtype == D.float32 else 2
    # eight Philox calls per thread: 234 us for 256 Mi f32 on an H200, against 247 at four and
    # 373 at one (the grid-stride loop gives the same numbers for any grid)
    done = out.device.launch(kernel, _grid(-(-n // per), UNIFORM_PER_THREAD), BLOCK,
                             (n, out.buffer, out._offset, key, call, float(low),
                              float(high) - float(low), float(high)), writes=[out.buffer])
    out._wrote(done)


# -- integers --------------------------------------------------------------------------------------
@functools.cache  # the source of a kernel is rendered once per process
def _render_integers(out_dt: np.dtype, pattern: str) -> tuple[str, str, tuple]:
    kname = f"gm_rng_integers_{D.storage_name(out_dt)}_{pattern}"
    cparams, kinds, loads = _params(out_dt, pattern, "unsigned long long", "u64")
    body = f"""
extern "C" __global__ void {kname}({", ".join(cparams)}) {{
  GM_LOOP(i, n) {{
    gm_rs s(i, (unsigned int)call, (unsigned int)key, (unsigned int)(key >> 32));
    const unsigned long long lo = {loads[0]}, span = {loads[1]} - lo;  // range - 1
    // the bits below the range's top bit, drawn again while not below the range: four
    // candidates per Philox call for a range of at most 2^32 values, two above
    const unsigned long long mask = span == 0ULL ? 0ULL : (~0ULL >> __clzll(span));
    unsigned long long r;
    if (span <= 0xFFFFFFFFULL) {{
      for (;;) {{
        const uint4 w = s.words();
        if ((w.x & mask) <= span) {{ r = w.x & mask; break; }}
        if ((w.y & mask) <= span) {{ r = w.y & mask; break; }}
        if ((w.z & mask) <= span) {{ r = w.z & mask; break; }}
        if ((w.w & mask) <= span) {{ r = w.w & mask; break; }}
      }}
    }} else {{
      for (;;) {{
        const uint4 w = s.words();
        const unsigned long long a = (((unsigned long long)w.x << 32) | w.y) & mask;
        if (a <= span) {{ r = a; break; }}
        const unsigned long long b = (((unsigned long long)w.z << 32) | w.w) & mask;
        if (b <= span) {{ r = b; break; }}
      }}
    }}
    out[off + i] = ({_ctype(out_dt)})(lo + r);
  }}
}}
"""
    if kname not in SIM_KERNELS:
        sim_kernel(kname)(Recipe(_integers_twin, pattern))
    return kname, _HEAD + PHILOX + body, tuple(kinds)


def _integers_twin(pattern: str) -> Any:
    def run(info: Any, n: Any, out: np.ndarray, off: Any, key: Any, call: Any,
            *params: Any) -> None:
        n, off = int(n), int(off)
        k0, k1 = _split(int(key))
        for start, stop in slices(n):
            lo, hi = (p[start:stop].view(np.uint64) if kind == "a" else
                      np.full(stop - start, int(p) & 0xFFFFFFFFFFFFFFFF, np.uint64)
                      for kind, p in zip(pattern, params))
            d = Draws(stop - start, int(call), k0, k1, start)
            out[off + start:off + stop] = draw(d, lo, hi, out.dtype)

    def draw(d: Draws, lo: np.ndarray, hi: np.ndarray, dtype: np.dtype) -> np.ndarray:
        n = lo.size
        with np.errstate(over="ignore"):
            span = hi - lo
            # the bits up to span's top bit: span with every lower bit set
            mask = span.copy()
            for k in (1, 2, 4, 8, 16, 32):
                mask |= mask >> np.uint64(k)
            small = span <= np.uint64(0xFFFFFFFF)
            r = np.zeros(n, np.uint64)
            pend = np.arange(n)
            while pend.size:
                w = [x.astype(np.uint64) for x in d.words(pend)]
                m, sp, sm = mask[pend], span[pend], small[pend]
                cands = [w[0] & m, w[1] & m, w[2] & m, w[3] & m]
                wide = [((w[0] << np.uint64(32)) | w[1]) & m, ((w[2] << np.uint64(32)) | w[3]) & m]
                got = np.zeros(pend.size, bool)
                val = np.zeros(pend.size, np.uint64)
                for c in cands:
                    take = sm & ~got & (c <= sp)
                    val[take] = c[take]
                    got |= take
                for c in wide:
                    take = ~sm & ~got & (c <= sp)
                    val[take] = c[take]
                    got |= take
                r[pend[got]] = val[got]
                pend = pend[~got]
            val = lo + r
        return val.astype(dtype, casting="unsafe") if dtype != np.uint64 else val
    return run


def launch_integers(out: Array, low: Any, high: Any, key: int, call: int) -> None:
    """Fill ``out`` with integers in [low, high] (inclusive): each bound a Python int (taken
    modulo 2**64) or a C-contiguous int64/uint64 array of ``out``'s shape."""
    n = out.size
    if n == 0:
        return
    params = [low, high]
    pattern = "".join("a" if isinstance(p, Array) else "s" for p in params)
    kname, source, kinds = _render_integers(out.dtype, pattern)
    kernel = kernel_for(out.device, kname, source, kinds)
    args: list[Any] = [n, out.buffer, out._offset, key, call]
    reads = []
    for p in params:
        if isinstance(p, Array):
            args.append(p.buffer)
            reads.append(p.buffer)
        else:
            args.append(int(p) & 0xFFFFFFFFFFFFFFFF)
    done = out.device.launch(kernel, _grid(n), BLOCK, tuple(args), reads=reads,
                             writes=[out.buffer])
    out._wrote(done)
