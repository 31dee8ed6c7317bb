"""Valid calls of cuRAND (the distribution at the sample size), NVRTC (a kernel launched with
random grids, blocks and strides) and cuDNN (softmax, activations, layer norm, convolution), each
with a NumPy/SciPy reference (see fuzz_answers.py for the contract of a valid call)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import oracles
from fuzz_checks import WAIT_S, _close, _get, _rand, _w
from scipy import stats

import gpumsg
from gpumsg.libs.nvrtc import sim_kernel

__all__ = ["RAND_NN_VALID"]


# -- cuRAND: the distribution at the sample size -------------------------------------------------
#: a correct generator fails one check in this many cases (KS and moment tests at p = 1e-6)
_P_FALSE = 1e-6


def _random(dev: Any, rng: np.random.Generator) -> int:
    gen = dev.random.default_rng(int(rng.integers(0, 2**31)))
    n = int(rng.integers(2000, 20000))
    which = str(rng.choice(["random", "uniform", "standard_normal", "normal", "lognormal",
                            "poisson"]))
    dt = str(rng.choice(["f32", "f64"]))
    dtype = gpumsg.as_dtype(dt)
    if which == "poisson":
        lam = float(rng.uniform(0.5, 50))
        x = _get(dev, gen.poisson(lam, size=n))
        mean_z = (x.mean() - lam) / math.sqrt(lam / n)
        if x.min() < 0 or abs(mean_z) > 5.3:
            raise oracles.Mismatch(f"random.poisson({lam:.3g}): mean {x.mean():.4g} "
                                   f"({mean_z:.2f} standard errors)")
        disp = x.var() / lam
        if abs(disp - 1) > 6 * math.sqrt(2 / n) + 0.02:
            raise oracles.Mismatch(f"random.poisson({lam:.3g}): variance / mean {disp:.4f}")
        return 1
    if which == "random":
        x, dist = _get(dev, gen.random(size=n, dtype=dtype)), stats.uniform()
    elif which == "uniform":
        lo = float(rng.uniform(-5, 5))
        hi = lo + float(rng.uniform(0.1, 10))
        x, dist = _get(dev, gen.uniform(lo, hi, size=n, dtype=dtype)), \
            stats.uniform(lo, hi - lo)
        # the bounds as the dtype holds them, one unit in the last place wide (the values are
        # rounded to the dtype after scaling)
        t = dtype.type
        if (x.min() < np.nextafter(t(lo), t(-np.inf))
                or x.max() > np.nextafter(t(hi), t(np.inf))):
            raise oracles.Mismatch(f"random.uniform({lo}, {hi}): values outside the range")
    elif which == "standard_normal":
        x, dist = _get(dev, gen.standard_normal(size=n, dtype=dtype)), stats.norm()
    elif which == "normal":
        loc, scale = float(rng.uniform(-5, 5)), float(rng.uniform(0.1, 4))
        x, dist = _get(dev, gen.normal(loc, scale, size=n, dtype=dtype)), \
            stats.norm(loc, scale)
    else:
        mean, sigma = float(rng.uniform(-1, 1)), float(rng.uniform(0.1, 1.5))
        x, dist = _get(dev, gen.lognormal(mean, sigma, size=n, dtype=dtype)), \
            stats.lognorm(sigma, scale=math.exp(mean))
    if x.shape != (n,) or x.dtype != dtype or not np.isfinite(x).all():
        raise oracles.Mismatch(f"random.{which}: {x.shape} {x.dtype}, expected ({n},) {dt}")
    p = stats.kstest(x.astype(np.float64), dist.cdf).pvalue
    if p < _P_FALSE:
        raise oracles.Mismatch(f"random.{which}({dt}, n={n}): KS p-value {p:.3g}")
    return 1


# -- NVRTC --------------------------------------------------------------------------------------
_AXPBY = r"""
template <typename T>
__device__ void axpby(T a, const T* x, long incx, T b, T* y, long incy, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        y[i * incy] = a * x[i * incx] + b * y[i * incy];
}
extern "C" __global__ void fuzz_axpby_f32(float a, const float* x, long incx, float b,
                                          float* y, long incy, long n) {
    axpby(a, x, incx, b, y, incy, n);
}
extern "C" __global__ void fuzz_axpby_f64(double a, const double* x, long incx, double b,
                                          double* y, long incy, long n) {
    axpby(a, x, incx, b, y, incy, n);
}
"""


def _axpby_twin(launch: Any, a: Any, x: np.ndarray, incx: int, b: Any, y: np.ndarray,
                incy: int, n: int) -> None:
    y[:n * incy:incy] = a * x[:n * incx:incx] + b * y[:n * incy:incy]


sim_kernel("fuzz_axpby_f32")(_axpby_twin)
sim_kernel("fuzz_axpby_f64")(_axpby_twin)


def _nvrtc(dev: Any, rng: np.random.Generator) -> int:
    dt = str(rng.choice(["f32", "f64"]))
    n = int(rng.integers(1, 3000))
    incx, incy = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    x, y = _rand(rng, (n - 1) * incx + 1, dt), _rand(rng, (n - 1) * incy + 1, dt)
    a, b = float(rng.uniform(-2, 2)), float(rng.uniform(-2, 2))
    kernel = dev.nvrtc.compile(_AXPBY, f"fuzz_axpby_{dt}").result(WAIT_S)
    xb, yb = dev.to_device(x), dev.to_device(y)
    grid, block = int(rng.integers(1, 9)), int(rng.choice([32, 64, 128, 256]))
    dev.nvrtc.launch(kernel, grid=(grid,), block=(block,), args=(a, xb, incx, b, yb, incy, n),
                     reads=(xb, yb), writes=(yb,)).result(WAIT_S)
    ref = _w(y).real.copy()
    ref[::incy] = a * x[::incx].astype(np.float64) + b * y[::incy].astype(np.float64)
    _close(f"nvrtc.launch axpby {dt} grid {grid} block {block}",
           dev.copy_to_host(yb).result(WAIT_S), ref, dt, n=2)
    return 1


# -- cuDNN --------------------------------------------------------------------------------------
_ACTS = {"relu": lambda x, c: np.maximum(x, 0), "sigmoid": lambda x, c: 1 / (1 + np.exp(-x)),
         "tanh": lambda x, c: np.tanh(x), "elu": lambda x, c: np.where(x > 0, x, c * np.expm1(x))}


def _cudnn(dev: Any, rng: np.random.Generator) -> int:
    dt = "f32"  # cuDNN's types: f32, f16, bf16 (the reference rounds to f32 only)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 6)),
             int(rng.integers(1, 6)))
    x = np.ascontiguousarray(_rand(rng, shape, dt) * 2)
    x64 = x.astype(np.float64)
    which = str(rng.choice(["softmax", "activation", "layer_norm", "conv2d"]))
    if which == "softmax":
        log = bool(rng.random() < 0.5)
        mode = str(rng.choice(["channel", "instance"]))
        axes = (1,) if mode == "channel" else (1, 2, 3)
        shifted = x64 - x64.max(axis=axes, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=axes, keepdims=True))
        ref = shifted - lse if log else np.exp(shifted - lse)
        got = _get(dev, dev.cudnn.softmax(dev.to_device(x), mode=mode, log=log))
        _close(f"nn.softmax({mode}, log={log})", got, ref, dt, n=x.size)
    elif which == "activation":
        act = str(rng.choice(list(_ACTS)))
        coef = 1.0 if act == "elu" else None
        got = _get(dev, dev.cudnn.activation(dev.to_device(x), activation=act, act_coef=coef))
        _close(f"cudnn.activation({act})", got, _ACTS[act](x64, coef), dt, n=4)
    elif which == "layer_norm":
        nd = int(rng.integers(1, 4))
        if math.prod(shape[4 - nd:]) < 2:  # statistics need two values per row
            shape = shape[:3] + (shape[3] + 1,)
            x = np.ascontiguousarray(_rand(rng, shape, "f32") * 2)
            x64 = x.astype(np.float64)
        axes = tuple(range(4 - nd, 4))
        norm_shape = shape[4 - nd:]
        gamma = _rand(rng, math.prod(norm_shape), "f32")
        beta = _rand(rng, math.prod(norm_shape), "f32")
        eps = 1e-5
        mu = x64.mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(x64.var(axis=axes, keepdims=True) + eps)
        ref = (x64 - mu) * inv * gamma.reshape(norm_shape) + beta.reshape(norm_shape)
        y, mean, invstd = _get(dev, dev.cudnn.layer_norm(
            dev.to_device(x), dev.to_device(gamma), dev.to_device(beta), normalized_ndim=nd,
            eps=eps))
        _close(f"nn.layer_norm(ndim={nd})", y, ref, "f32", n=math.prod(norm_shape))
        _close("nn.layer_norm mean", np.ravel(mean), mu.ravel(), "f32",
               n=math.prod(norm_shape))
        _close("nn.layer_norm invstd", np.ravel(invstd), inv.ravel(), "f32",
               n=math.prod(norm_shape))
    else:
        cin, cout = shape[1], int(rng.integers(1, 5))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        pad = (int(rng.integers(0, 2)), int(rng.integers(0, 2)))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        xs = np.ascontiguousarray(_rand(rng, (shape[0], cin, shape[2] + 3, shape[3] + 3), dt))
        w = np.ascontiguousarray(_rand(rng, (cout, cin, kh, kw), dt))
        got = _get(dev, dev.nn.conv2d(dev.to_device(xs), dev.to_device(w), stride=stride,
                                      padding=pad))
        xp_ = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
        ho = (xp_.shape[2] - kh) // stride[0] + 1
        wo = (xp_.shape[3] - kw) // stride[1] + 1
        ref = np.zeros((shape[0], cout, ho, wo))
        for i in range(kh):
            for j in range(kw):
                patch = xp_[:, :, i:i + stride[0] * ho:stride[0], j:j + stride[1] * wo:stride[1]]
                ref += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
        _close(f"nn.conv2d(stride={stride}, padding={pad})", got, ref, dt, n=cin * kh * kw)
    return 1


RAND_NN_VALID = {"random": _random, "nvrtc": _nvrtc, "cudnn": _cudnn}
