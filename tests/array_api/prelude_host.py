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

__all__ = ["GXX", "COMPLEX_UNARY", "REAL_UNARY", "build", "call_complex", "call_real",
           "call_complex_pow"]

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
}}""")
    for tag, ftype in (("f32", "float"), ("f64", "double")):
        for fn in REAL_UNARY:
            out.append(f"""
extern "C" void h_{fn}_{tag}(long long n, const {ftype}* x, {ftype}* out) {{
  for (long long i = 0; i < n; ++i) out[i] = gm_{fn}(x[i]);
}}""")
    return "\n".join(out)


def build(folder: str) -> ctypes.CDLL:
    """Compile the prelude and its exports into ``folder``; the loaded library."""
    if GXX is None:
        raise RuntimeError("g++ is not on the PATH")
    src = os.path.join(folder, "prelude_host.cpp")
    lib = os.path.join(folder, "prelude_host.so")
    with open(src, "w") as f:
        f.write(_HEAD + PRELUDE + _exports())
    cmd = [GXX, "-std=c++17", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math",
           "-D__device__=", "-D__host__=", "-D__forceinline__=inline", "-DGM_HOST_CHECK",
           "-Wno-unused-function", src, "-o", lib]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"g++ failed:\n{run.stderr[-4000:]}")
    return ctypes.CDLL(lib)


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


def call_complex_pow(lib: ctypes.CDLL, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``gm_pow`` on each pair of elements of the complex arrays ``a`` and ``b`` (one dtype)."""
    real = np.float32 if a.dtype == np.complex64 else np.float64
    tag = "c64" if a.dtype == np.complex64 else "c128"
    parts = [np.ascontiguousarray(p, real) for p in (a.real, a.imag, b.real, b.imag)]
    ore, oim = np.empty_like(parts[0]), np.empty_like(parts[0])
    lib[f"h_pow_{tag}"](ctypes.c_longlong(a.size), *(_ptr(p) for p in parts), _ptr(ore),
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
