"""The float64 references shared by the cuDNN tests: a direct-sum convolution, activations,
softmax, pooling and batch normalization, and central finite differences."""

from __future__ import annotations

import itertools

import numpy as np

import gpumsg
from tests.libs.harness import random_array, wide


# -- the float64 reference: a direct sum over every output position -------------------------------
def ref_conv(x, w, stride, padding, dilation, groups):
    """y[n, k, o] = sum over c in k's group and r of x[n, c, o*s + r*d - p] w[k, c, r]
    (channels first, float64), and the two gradients of <y, dy> as closures."""
    x, w = wide(x), wide(w)
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    kernel = w.shape[2:]
    nd = len(kernel)
    out = tuple((x.shape[2 + i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1)
                // stride[i] + 1 for i in range(nd))
    kg = k // groups

    def taps(o):
        """(kernel offset, input position) pairs of output position o that land inside x."""
        for r in itertools.product(*(range(s) for s in kernel)):
            pos = tuple(o[i] * stride[i] + r[i] * dilation[i] - padding[i] for i in range(nd))
            if all(0 <= pos[i] < x.shape[2 + i] for i in range(nd)):
                yield r, pos

    y = np.zeros((n, k, *out))
    for o in itertools.product(*(range(s) for s in out)):
        for r, pos in taps(o):
            for g in range(groups):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]  # (n, cg)
                ws = w[(slice(g * kg, (g + 1) * kg), slice(None)) + r]  # (kg, cg)
                y[(slice(None), slice(g * kg, (g + 1) * kg)) + o] += xs @ ws.T

    def grads(dy):
        dy = wide(dy)
        dx, dw = np.zeros_like(x), np.zeros_like(w)
        for o in itertools.product(*(range(s) for s in out)):
            for r, pos in taps(o):
                for g in range(groups):
                    gy = dy[(slice(None), slice(g * kg, (g + 1) * kg)) + o]  # (n, kg)
                    ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
                    dx[(slice(None), cs) + pos] += gy @ w[(ks, slice(None)) + r]
                    dw[(ks, slice(None)) + r] += gy.T @ x[(slice(None), cs) + pos]
        return dx, dw

    return y, grads


def first(a, layout):
    return a if layout == "NCHW" else np.moveaxis(a, -1, 1)


def last(a, layout):
    return a if layout == "NCHW" else np.ascontiguousarray(np.moveaxis(a, 1, -1))


# name: (x shape channels first, K, kernel, stride, padding, dilation, groups)
CASES = {
    "plain": ((2, 3, 6, 7), 4, (3, 3), 1, 0, 1, 1),
    "stride_pad_groups": ((2, 4, 7, 6), 6, (3, 3), 2, 1, 1, 2),
    "dilated": ((1, 3, 9, 8), 4, (3, 2), 1, (2, 1), (2, 3), 1),
    "depthwise": ((2, 4, 6, 6), 4, (3, 3), 1, 1, 1, 4),
    "1x1_stride2": ((2, 8, 6, 6), 4, (1, 1), 2, 0, 1, 1),
    "1d": ((2, 4, 11), 6, (3,), 2, 1, 2, 2),
    "3d": ((1, 2, 4, 5, 4), 4, (2, 3, 2), (1, 2, 1), 1, 1, 1),
}


PREC = {"f32": "f32", "f16": "f16", "bf16": "bf16"}


def problem(rng, case, dtype, layout):
    shape, k, kernel, stride, padding, dilation, groups = CASES[case]
    nd = len(kernel)
    tup = lambda v: tuple(v) if isinstance(v, tuple) else (v,) * nd  # noqa: E731
    geo = (tup(stride), tup(padding), tup(dilation), groups)
    x = random_array(rng, shape, dtype)
    w = random_array(rng, (k, shape[1] // groups, *kernel), dtype)
    return x, w, geo


def act_ref(y, name, coef):
    return {"relu": lambda: np.maximum(y, 0), "sigmoid": lambda: 1 / (1 + np.exp(-y)),
            "tanh": lambda: np.tanh(y), "clipped_relu": lambda: np.clip(y, 0, coef),
            "elu": lambda: np.where(y > 0, y, coef * (np.exp(np.minimum(y, 0)) - 1)),
            "swish": lambda: y / (1 + np.exp(-coef * y)), "none": lambda: y}[name]()


def softmax_ref(x, axes, log):
    z = x - x.max(axis=axes, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axes, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def pool_ref(x, mode, window, stride, padding):
    """Pooling by a loop over output positions (channels first, float64)."""
    n, c = x.shape[:2]
    sp = x.shape[2:]
    out = [(i + 2 * p - r) // s + 1 for i, r, s, p in zip(sp, window, stride, padding)]
    y = np.zeros((n, c, *out))
    for o in itertools.product(*(range(m) for m in out)):
        lo = [oi * s - p for oi, s, p in zip(o, stride, padding)]
        sl = tuple(slice(max(a, 0), min(a + r, i)) for a, r, i in zip(lo, window, sp))
        patch = x[(slice(None), slice(None)) + sl].reshape(n, c, -1)
        if mode == "max":
            y[(slice(None), slice(None)) + o] = patch.max(axis=2)
        elif mode == "avg":
            y[(slice(None), slice(None)) + o] = patch.mean(axis=2)
        else:
            y[(slice(None), slice(None)) + o] = patch.sum(axis=2) / np.prod(window)
    return y


def _x(dev, shape=(2, 4, 6, 6), dtype="f32"):
    return dev.to_device(np.ones(shape, gpumsg.as_dtype(dtype)) + 0.5)


# -- batch normalization ----------------------------------------------------------------------
def bn_ref(x, gamma, beta, eps):
    """Training-mode batch norm of channels-first float64 x: y, mean, biased var, invstd."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    invstd = 1 / np.sqrt(var + eps)
    y = (x - mean.reshape(shape)) * (gamma * invstd).reshape(shape) + beta.reshape(shape)
    return y, mean, var, invstd


def fd_grads(f, args, dy, h=1e-6):
    """Central-difference gradients of <f(*args), dy> with respect to every element of every
    argument (float64, small shapes)."""
    out = []
    for i, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(*a.shape):
            plus = [b.copy() for b in args]
            minus = [b.copy() for b in args]
            plus[i][idx] += h
            minus[i][idx] -= h
            g[idx] = np.sum((f(*plus) - f(*minus)) * dy) / (2 * h)
        out.append(g)
    return out
