"""The device functions of the generated kernels (``gpumsg.array_api._expr.PRELUDE``) built for
the host with g++, so that their C text is checked where there is no GPU.

The CUDA keywords become nothing (``__device__``, ``__forceinline__`` -> ``inline``), the one
intrinsic the functions use (``__int_as_float``) is a bit copy, and the half-precision
conversions (inline PTX) are left out under ``GM_HOST_CHECK``. Contraction into fused
multiply-adds is off, as it is for the kernels (``--fmad=false``), and no fast-math flag is
given. Each exported ``h_<function>_<c64|c128|f32|f64>`` applies the device function to arrays
of parts: ``(n, re, im, out_re, out_im)`` for complex functions, ``(n, x, out)`` for real ones.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from typing import Any

import numpy as np

from gpumsg.array_api._expr import PRELUDE

__all__ = ["GXX", "COMPLEX_UNARY", "REAL_UNARY", "build", "build_kernel", "launch_host",
           "call_complex", "call_real", "call_complex_pow"]

GXX = shutil.which("g++")

#: the complex device functions of one argument the checks cover
COMPLEX_UNARY = ("exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan",
                 "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
                 "sign", "conj", "round")
#: real device functions of one argument whose logic is the prelude's own
REAL_UNARY = ("sign",)

_HEAD = r"""
#include <math.h>
#include <string.h>
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, sizeof f); return f; }
"""

#: what a generated kernel needs besides the prelude: one thread of one block walks the whole
#: grid-stride loop; the half conversions round to nearest even as the PTX instructions do
_KERNEL_HEAD = _HEAD + r"""
#define __global__
#define __restrict__ __restrict
struct gm_dim3 { unsigned int x, y, z; };
static const gm_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static const gm_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
struct ulonglong2 { unsigned long long x, y; };
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
static inline float gm_h2f(unsigned short h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
static inline unsigned short gm_f2h(float x) {
  _Float16 f = (_Float16)x; unsigned short h; memcpy(&h, &f, 2); return h; }
static inline float gm_bf2f(unsigned short h) {
  unsigned int u = ((unsigned int)h) << 16; float f; memcpy(&f, &u, 4); return f; }
static inline unsigned short gm_f2bf(float x) {
  unsigned int u; memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u); return (unsigned short)(u >> 16); }
"""


def _exports() -> str:
    out = []
    for tag, ctype, ftype in (("c64", "gm_c64", "float"), ("c128", "gm_c128", "double")):
        for fn in COMPLEX_UNARY:
            out.append(f"""
extern "C" void h_{fn}_{tag}(long long n, const {ftype}* re, const {ftype}* im, {ftype}* ore,
                          {ftype}* oim) {{
  for (long long i = 0; i < n; ++i) {{
    {ctype} r = gm_{fn}({ctype}(re[i], im[i])); ore[i] = r.re; oim[i] = r.im; }}
}}""")
        out.append(f"""
extern "C" void h_abs_{tag}(long long n, const {ftype}* re, const {ftype}* im, {ftype}* ore,
                         {ftype}* oim) {{
  for (long long i = 0; i < n; ++i) {{ ore[i] = gm_abs({ctype}(re[i], im[i])); oim[i] = 0; }}
}}
extern "C" void h_pow_{tag}(long long n, const {ftype}* re, const {ftype}* im,
                         const {ftype}* re2, const {ftype}* im2, {ftype}* ore, {ftype}* oim) {{
  for (long long i = 0; i < n; ++i) {{
    {ctype} r = gm_pow({ctype}(re[i], im[i]), {ctype}(re2[i], im2[i]));
    ore[i] = r.re; oim[i] = r.im; }}
}}
extern "C" void h_divide_{tag}(long long n, const {ftype}* re, const {ftype}* im,
                            const {ftype}* re2, const {ftype}* im2, {ftype}* ore,
                            {ftype}* oim) {{
  for (long long i = 0; i < n; ++i) {{
    {ctype} r = {ctype}(re[i], im[i]) / {ctype}(re2[i], im2[i]);
    ore[i] = r.re; oim[i] = r.im; }}
}}""")
    for tag, ftype in (("f32", "float"), ("f64", "double")):
        for fn in REAL_UNARY:
            out.append(f"""
extern "C" void h_{fn}_{tag}(long long n, const {ftype}* x, {ftype}* out) {{
  for (long long i = 0; i < n; ++i) out[i] = gm_{fn}(x[i]);
}}""")
    return "\n".join(out)


def _compile(folder: str, stem: str, text: str) -> ctypes.CDLL:
    if GXX is None:
        raise RuntimeError("g++ is not on the PATH")
    src = os.path.join(folder, stem + ".cpp")
    lib = os.path.join(folder, stem + ".so")
    with open(src, "w") as f:
        f.write(text)
    cmd = [GXX, "-std=c++17", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math",
           "-D__device__=", "-D__host__=", "-D__forceinline__=inline", "-DGM_HOST_CHECK",
           "-Wno-unused-function", src, "-o", lib]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"g++ failed on {src}:\n{run.stderr[-4000:]}")
    return ctypes.CDLL(lib)


def build(folder: str) -> ctypes.CDLL:
    """Compile the prelude and its exports into ``folder``; the loaded library."""
    return _compile(folder, "prelude_host", _HEAD + PRELUDE + _exports())


def build_kernel(folder: str, name: str, source: str) -> Any:
    """Compile the CUDA source of one generated kernel (which may include the prelude) for the
    host; the function ``name``, which runs the kernel's whole grid in the calling thread."""
    text = source if "gm_cplx" in source else PRELUDE + source
    return getattr(_compile(folder, name, _KERNEL_HEAD + text), name)


def launch_host(kernel: Any, kinds: tuple[str, ...], args: tuple) -> None:
    """Call a kernel from :func:`build_kernel` with ``args`` of the parameter ``kinds`` of
    ``dev.launch`` ("ptr": a NumPy array, "i64"/"i32": ints, "f64"/"f32": floats)."""
    conv = {"i64": ctypes.c_longlong, "i32": ctypes.c_int, "u64": ctypes.c_ulonglong,
            "f64": ctypes.c_double, "f32": ctypes.c_float}
    out = []
    for kind, a in zip(kinds, args, strict=True):
        out.append(_ptr(a) if kind == "ptr" else conv[kind](a))
    kernel(*out)


def _ptr(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.c_void_p)


def call_complex(lib: ctypes.CDLL, fn: str, z: np.ndarray) -> np.ndarray:
    """``gm_<fn>`` on each element of the complex64 or complex128 ``z``: complex results (real
    ones for ``abs``) of ``z``'s dtype."""
    z = np.ascontiguousarray(z)
    real = np.float32 if z.dtype == np.complex64 else np.float64
    tag = "c64" if z.dtype == np.complex64 else "c128"
    re, im = np.ascontiguousarray(z.real, real), np.ascontiguousarray(z.imag, real)
    ore, oim = np.empty_like(re), np.empty_like(re)
    getattr(lib, f"h_{fn}_{tag}")(ctypes.c_longlong(z.size), _ptr(re), _ptr(im), _ptr(ore),
                                  _ptr(oim))
    if fn == "abs":
        return ore
    out = np.empty(z.shape, z.dtype)
    out.real, out.imag = ore, oim  # parts set one by one: arithmetic would lose zero signs
    return out


def call_complex_pow(lib: ctypes.CDLL, a: np.ndarray, b: np.ndarray,
                     fn: str = "pow") -> np.ndarray:
    """``gm_pow`` (or with ``fn="divide"`` the operator ``/``) on each pair of elements of the
    complex arrays ``a`` and ``b`` (one dtype)."""
    real = np.float32 if a.dtype == np.complex64 else np.float64
    tag = "c64" if a.dtype == np.complex64 else "c128"
    parts = [np.ascontiguousarray(p, real) for p in (a.real, a.imag, b.real, b.imag)]
    ore, oim = np.empty_like(parts[0]), np.empty_like(parts[0])
    lib[f"h_{fn}_{tag}"](ctypes.c_longlong(a.size), *(_ptr(p) for p in parts), _ptr(ore),
                         _ptr(oim))
    out = np.empty(a.shape, a.dtype)
    out.real, out.imag = ore, oim
    return out


def call_real(lib: ctypes.CDLL, fn: str, x: np.ndarray) -> np.ndarray:
    """``gm_<fn>`` on each element of the float32 or float64 ``x``."""
    x = np.ascontiguousarray(x)
    tag = "f32" if x.dtype == np.float32 else "f64"
    out = np.empty_like(x)
    getattr(lib, f"h_{fn}_{tag}")(ctypes.c_longlong(x.size), _ptr(x), _ptr(out))
    return out
