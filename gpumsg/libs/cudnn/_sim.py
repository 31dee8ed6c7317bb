"""cuDNN on the simulator: direct-sum convolutions (every direction, layout, stride, padding,
dilation and group count), bias and activations in NumPy, with the same algorithm-cache
bookkeeping as on a GPU. f16/bf16 accumulate in f32, f32 in f64 (the GPU's FMA path is at
least as accurate as the tolerance tests use), TF32 rounds the operands first."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ...backends.sim._device import SimBackend
from ...dtypes import dtype_of
from ...service._plans import PlanCache
from ..cublas._sim import tf32
from ._handle import ConvCall

__all__ = ["SimDnn", "conv_forward", "conv_backward_data", "conv_backward_filter", "activate"]


def _channels_first(a: np.ndarray, layout: str) -> np.ndarray:
    return a if layout == "NCHW" else np.moveaxis(a, -1, 1)


def _channels_last(a: np.ndarray, layout: str) -> np.ndarray:
    return a if layout == "NCHW" else np.moveaxis(a, 1, -1)


def _windows(kernel: tuple[int, ...], out: tuple[int, ...], stride: tuple[int, ...],
             dilation: tuple[int, ...]) -> Any:
    """(kernel offset, slices of the padded input it meets over the whole output)."""
    for r in itertools.product(*(range(k) for k in kernel)):
        yield r, tuple(slice(ri * d, ri * d + (o - 1) * s + 1, s)
                       for ri, o, s, d in zip(r, out, stride, dilation))


def conv_forward(x: np.ndarray, w: np.ndarray, stride: tuple[int, ...],
                 padding: tuple[int, ...], dilation: tuple[int, ...], groups: int
                 ) -> np.ndarray:
    """Cross-correlation of channels-first ``x`` (N, C, *S) with ``w`` (K, C/g, *R)."""
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    kernel = w.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    out = tuple((i + 2 * p - d * (r - 1) - 1) // s + 1
                for i, r, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation))
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = w.reshape(groups, k // groups, cg, *kernel)
    y = np.zeros((n, groups, k // groups, *out), np.result_type(x, w))
    for r, sl in _windows(kernel, out, stride, dilation):
        patch = xg[(slice(None),) * 3 + sl]  # (n, g, cg, *out)
        y += np.einsum("ngc...,gkc->ngk...", patch, wg[(slice(None),) * 3 + r])
    return y.reshape(n, k, *out)


def conv_backward_data(dy: np.ndarray, w: np.ndarray, x_shape: tuple[int, ...],
                       stride: tuple[int, ...], padding: tuple[int, ...],
                       dilation: tuple[int, ...], groups: int) -> np.ndarray:
    """The gradient of :func:`conv_forward` with respect to x (channels first)."""
    n, k = dy.shape[:2]
    cg = w.shape[1]
    kernel, out = w.shape[2:], dy.shape[2:]
    padded = [s + 2 * p for s, p in zip(x_shape[2:], padding)]
    dxp = np.zeros((n, groups, cg, *padded), dy.dtype)
    dyg = dy.reshape(n, groups, k // groups, *out)
    wg = w.reshape(groups, k // groups, cg, *kernel)
    for r, sl in _windows(kernel, out, stride, dilation):
        dxp[(slice(None),) * 3 + sl] += np.einsum("ngk...,gkc->ngc...", dyg,
                                                   wg[(slice(None),) * 3 + r])
    inner = tuple(slice(p, p + s) for p, s in zip(padding, x_shape[2:]))
    return dxp[(slice(None),) * 3 + inner].reshape(x_shape)


def conv_backward_filter(x: np.ndarray, dy: np.ndarray, w_shape: tuple[int, ...],
                         stride: tuple[int, ...], padding: tuple[int, ...],
                         dilation: tuple[int, ...], groups: int) -> np.ndarray:
    """The gradient of :func:`conv_forward` with respect to w (K, C/g, *R)."""
    n, c = x.shape[:2]
    k, cg = w_shape[:2]
    kernel, out = w_shape[2:], dy.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    dyg = dy.reshape(n, groups, k // groups, *out)
    dw = np.zeros((groups, k // groups, cg, *kernel), dy.dtype)
    for r, sl in _windows(kernel, out, stride, dilation):
        patch = xg[(slice(None),) * 3 + sl].reshape(n, groups, cg, -1)
        dw[(slice(None),) * 3 + r] = np.einsum("ngcs,ngks->gkc", patch,
                                               dyg.reshape(n, groups, k // groups, -1))
    return dw.reshape(w_shape)


_GELU_K = np.sqrt(2 / np.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # SciPy is optional: the scalar erf, element by element
        import math

        return np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype)
    return erf(x)


def activate(y: np.ndarray, activation: str, coef: float) -> np.ndarray:
    """cuDNN's activation functions (``coef``: ELU alpha, clipped-ReLU ceiling, swish beta) and
    gpumsg's GELU (exact and tanh approximation)."""
    if activation == "gelu":
        return 0.5 * y * (1 + _erf(y / np.sqrt(2)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(_GELU_K * (y + 0.044715 * y ** 3)))
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "sigmoid":
        return 1 / (1 + np.exp(-y))
    if activation == "tanh":
        return np.tanh(y)
    if activation == "clipped_relu":
        return np.clip(y, 0, coef)
    if activation == "elu":
        return np.where(y > 0, y, coef * np.expm1(np.minimum(y, 0)))
    if activation == "swish":
        return y / (1 + np.exp(-coef * y))
    return y


def run_conv(sim: SimBackend, call: ConvCall) -> None:
    """One convolution on simulated memory (see :class:`~gpumsg.libs.cudnn._handle.ConvCall`)."""
    t = dtype_of(call.dtype)
    wide = np.float64 if call.dtype == "f32" else np.float32

    def load(ptr: int, shape: tuple[int, ...]) -> np.ndarray:
        a = sim.view(ptr, int(np.prod(shape)) * t.itemsize).view(t).reshape(shape)
        a = a.astype(np.float32)
        if call.math == "tf32":
            a = tf32(a)
        return _channels_first(a.astype(wide), call.layout)

    def store(ptr: int, value: np.ndarray) -> None:
        value = np.ascontiguousarray(_channels_last(value, call.layout))
        sim.view(ptr, value.size * t.itemsize).view(t).reshape(value.shape)[...] = \
            value.astype(t)

    geometry = (call.stride, call.padding, call.dilation, call.groups)
    if call.direction == "fwd":
        y = conv_forward(load(call.x, call.x_shape), load(call.w, call.w_shape), *geometry)
        if call.bias:
            k = y.shape[1]
            bias = sim.view(call.bias, k * t.itemsize).view(t).astype(wide)
            y = y + bias.reshape((1, k) + (1,) * (y.ndim - 2))
        store(call.y, activate(y, call.activation, call.act_coef))
    elif call.direction == "bwd_data":
        dy, w = load(call.y, call.y_shape), load(call.w, call.w_shape)
        x_shape = _channels_first(np.empty(call.x_shape, np.uint8), call.layout).shape
        store(call.x, conv_backward_data(dy, w, x_shape, *geometry))
    else:
        x, dy = load(call.x, call.x_shape), load(call.y, call.y_shape)
        w_shape = _channels_first(np.empty(call.w_shape, np.uint8), call.layout).shape
        store(call.w, conv_backward_filter(x, dy, w_shape, *geometry))


def activation_grad(x: np.ndarray, y: np.ndarray, activation: str, coef: float) -> np.ndarray:
    """d act / dx at x (y = act(x))."""
    if activation == "gelu":
        return 0.5 * (1 + _erf(x / np.sqrt(2))) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    if activation == "gelu_tanh":
        t = np.tanh(_GELU_K * (x + 0.044715 * x ** 3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_K * (1 + 3 * 0.044715 * x * x)
    if activation == "relu":
        return (x > 0).astype(x.dtype)
    if activation == "sigmoid":
        return y * (1 - y)
    if activation == "tanh":
        return 1 - y * y
    if activation == "clipped_relu":
        return ((x > 0) & (x < coef)).astype(x.dtype)
    if activation == "elu":
        return np.where(x > 0, 1.0, y + coef)
    sig = 1 / (1 + np.exp(-coef * x))  # swish
    return sig + coef * x * sig * (1 - sig)


def softmax(x: np.ndarray, axes: tuple[int, ...], log: bool) -> np.ndarray:
    z = x - x.max(axis=axes, keepdims=True)
    if log:
        return z - np.log(np.exp(z).sum(axis=axes, keepdims=True))
    e = np.exp(z)
    return e / e.sum(axis=axes, keepdims=True)


def softmax_grad(y: np.ndarray, dy: np.ndarray, axes: tuple[int, ...], log: bool) -> np.ndarray:
    if log:
        return dy - np.exp(y) * dy.sum(axis=axes, keepdims=True)
    return y * (dy - (y * dy).sum(axis=axes, keepdims=True))


def _pool_windows(x_shape: tuple[int, ...], window: tuple[int, ...], stride: tuple[int, ...],
                  padding: tuple[int, ...]) -> Any:
    """(output index, input slices, count of in-bounds elements) of every pooling window."""
    sp = x_shape[2:]
    out = [(i + 2 * p - r) // s + 1 for i, r, s, p in zip(sp, window, stride, padding)]
    for o in itertools.product(*(range(n) for n in out)):
        lo = [oi * s - p for oi, s, p in zip(o, stride, padding)]
        sl = tuple(slice(max(a, 0), min(a + r, i)) for a, r, i in zip(lo, window, sp))
        yield o, sl


def pool_forward(x: np.ndarray, mode: str, window: tuple[int, ...], stride: tuple[int, ...],
                 padding: tuple[int, ...], y_shape: tuple[int, ...]) -> np.ndarray:
    y = np.zeros(y_shape, x.dtype)
    full = float(np.prod(window))
    for o, sl in _pool_windows(x.shape, window, stride, padding):
        patch = x[(slice(None), slice(None)) + sl].reshape(x.shape[0], x.shape[1], -1)
        if mode == "max":
            y[(slice(None), slice(None)) + o] = patch.max(axis=2)
        else:
            y[(slice(None), slice(None)) + o] = patch.sum(axis=2) / (
                full if mode == "avg_include_pad" else patch.shape[2])
    return y


def pool_backward(x: np.ndarray, dy: np.ndarray, mode: str, window: tuple[int, ...],
                  stride: tuple[int, ...], padding: tuple[int, ...]) -> np.ndarray:
    dx = np.zeros_like(x)
    n, c = x.shape[:2]
    full = float(np.prod(window))
    for o, sl in _pool_windows(x.shape, window, stride, padding):
        idx = (slice(None), slice(None)) + sl
        g = dy[(slice(None), slice(None)) + o]  # (n, c)
        if mode == "max":
            patch = x[idx].reshape(n, c, -1)
            hit = np.zeros_like(patch)
            np.put_along_axis(hit, patch.argmax(axis=2)[..., None], 1.0, axis=2)
            dx[idx] += (hit * g[..., None]).reshape(x[idx].shape)
        else:
            count = full if mode == "avg_include_pad" else float(np.prod(x[idx].shape[2:]))
            dx[idx] += (g / count).reshape(n, c, *([1] * len(sl)))
    return dx


class _Memory:
    """Typed views of simulated memory for the pointwise operations."""

    def __init__(self, sim: SimBackend, dtype: str, layout: str = "NCHW") -> None:
        self.sim, self.t, self.layout = sim, dtype_of(dtype), layout
        self.wide = np.float64 if dtype == "f32" else np.float32

    def load(self, ptr: int, shape: tuple[int, ...]) -> np.ndarray:
        a = self.sim.view(ptr, int(np.prod(shape)) * self.t.itemsize).view(self.t)
        return _channels_first(a.reshape(shape).astype(self.wide), self.layout)

    def store(self, ptr: int, value: np.ndarray) -> None:
        value = np.ascontiguousarray(_channels_last(value, self.layout))
        self.sim.view(ptr, value.size * self.t.itemsize).view(self.t).reshape(value.shape)[...] \
            = value.astype(self.t)


def _f32(sim: SimBackend, ptr: int, n: int) -> np.ndarray:
    """A writable view of ``n`` f32 values of simulated memory."""
    return sim.view(ptr, 4 * n).view(np.float32)


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.astype(np.float64).reshape((1, -1) + (1,) * (ndim - 2))


def bn_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and biased variance of channels-first ``x`` (float64)."""
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axis=axes)
    var = ((x - _per_channel(mean, x.ndim)) ** 2).mean(axis=axes)
    return mean, var


def bn_backward(x: np.ndarray, dy: np.ndarray, gamma: np.ndarray, mean: np.ndarray,
                invstd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dx, dgamma, dbeta of training-mode batch normalization (channels first, float64)."""
    axes = (0,) + tuple(range(2, x.ndim))
    m = x.size // x.shape[1]
    xhat = (x - _per_channel(mean, x.ndim)) * _per_channel(invstd, x.ndim)
    dbeta = dy.sum(axis=axes)
    dgamma = (dy * xhat).sum(axis=axes)
    dx = _per_channel(gamma * invstd, x.ndim) * (
        dy - (_per_channel(dbeta, x.ndim) + xhat * _per_channel(dgamma, x.ndim)) / m)
    return dx, dgamma, dbeta


def dropout_mask(seed: int, p: float, size: int) -> np.ndarray:
    """The simulator's dropout mask (u8, 1 = kept): a function of (seed, p, size) alone."""
    return (np.random.default_rng(seed).random(size) >= p).astype(np.uint8)


class SimDnn:
    """The simulator's cuDNN handle, with the same algorithm-cache bookkeeping as on a GPU."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.cache = PlanCache(256)
        self.dropouts = PlanCache(8)

    def conv(self, stream: Any, call: ConvCall) -> None:
        key = call.plan_key()
        if self.cache.get(key) is None:
            self.cache.put(key, True)
        stream.put(lambda: run_conv(self.sim, call))

    def activation(self, stream: Any, dtype: str, size: int, activation: str, coef: float,
                   x: int, y: int, dy: int = 0, dx: int = 0) -> None:
        def work() -> None:
            m = _Memory(self.sim, dtype)
            xv = m.load(x, (size,))
            if not dy:
                m.store(y, activate(xv, activation, coef))
            else:
                yv, dyv = m.load(y, (size,)), m.load(dy, (size,))
                m.store(dx, dyv * activation_grad(xv, yv, activation, coef))
        stream.put(work)

    def softmax(self, stream: Any, dtype: str, layout: str, shape: tuple[int, ...], mode: str,
                log: bool, x: int, y: int, dy: int = 0, dx: int = 0) -> None:
        axes = (1,) if mode == "channel" else tuple(range(1, len(shape)))

        def work() -> None:
            m = _Memory(self.sim, dtype, layout)
            if not dy:
                m.store(y, softmax(m.load(x, shape), axes, log))
            else:
                m.store(dx, softmax_grad(m.load(y, shape), m.load(dy, shape), axes, log))
        stream.put(work)

    def pool(self, stream: Any, dtype: str, layout: str, x_shape: tuple[int, ...],
             y_shape: tuple[int, ...], mode: str, window: tuple[int, ...],
             stride: tuple[int, ...], padding: tuple[int, ...], x: int, y: int, dy: int = 0,
             dx: int = 0) -> None:
        def work() -> None:
            m = _Memory(self.sim, dtype, layout)
            xv = m.load(x, x_shape)
            if not dy:
                ys = _channels_first(np.empty(y_shape, np.uint8), layout).shape
                m.store(y, pool_forward(xv, mode, window, stride, padding, ys))
            else:
                m.store(dx, pool_backward(xv, m.load(dy, y_shape), mode, window, stride,
                                          padding))
        stream.put(work)

    def _bn_plan(self, dtype: str, layout: str, shape: tuple[int, ...]) -> None:
        key = ("bn", dtype, layout, shape)
        if self.cache.get(key) is None:
            self.cache.put(key, True)

    def batch_norm_train(self, stream: Any, dtype: str, layout: str, shape: tuple[int, ...],
                         factor: float, eps: float, x: int, gamma: int, beta: int, y: int,
                         save_mean: int, save_invstd: int, running_mean: int = 0,
                         running_var: int = 0) -> None:
        self._bn_plan(dtype, layout, shape)
        c = shape[1] if layout == "NCHW" else shape[-1]

        def work() -> None:
            m = _Memory(self.sim, dtype, layout)
            xv = m.load(x, shape).astype(np.float64)
            mean, var = bn_stats(xv)
            invstd = 1.0 / np.sqrt(var + eps)
            g, b = _f32(self.sim, gamma, c), _f32(self.sim, beta, c)
            nd = xv.ndim
            m.store(y, (xv - _per_channel(mean, nd)) * _per_channel(invstd * g, nd)
                    + _per_channel(b, nd))
            _f32(self.sim, save_mean, c)[:] = mean
            _f32(self.sim, save_invstd, c)[:] = invstd
            if running_mean:
                count = xv.size // c
                rm, rv = _f32(self.sim, running_mean, c), _f32(self.sim, running_var, c)
                rm[:] = (1 - factor) * rm.astype(np.float64) + factor * mean
                rv[:] = (1 - factor) * rv.astype(np.float64) + factor * var * count / (count - 1)
        stream.put(work)

    def batch_norm_inference(self, stream: Any, dtype: str, layout: str,
                             shape: tuple[int, ...], eps: float, x: int, gamma: int, beta: int,
                             mean: int, var: int, y: int) -> None:
        self._bn_plan(dtype, layout, shape)
        c = shape[1] if layout == "NCHW" else shape[-1]

        def work() -> None:
            m = _Memory(self.sim, dtype, layout)
            xv = m.load(x, shape).astype(np.float64)
            nd = xv.ndim
            mu, va = _f32(self.sim, mean, c), _f32(self.sim, var, c).astype(np.float64)
            scale = _f32(self.sim, gamma, c) / np.sqrt(va + eps)
            m.store(y, (xv - _per_channel(mu, nd)) * _per_channel(scale, nd)
                    + _per_channel(_f32(self.sim, beta, c), nd))
        stream.put(work)

    def batch_norm_backward(self, stream: Any, dtype: str, layout: str,
                            shape: tuple[int, ...], eps: float, x: int, dy: int, gamma: int,
                            save_mean: int, save_invstd: int, dx: int, dgamma: int,
                            dbeta: int) -> None:
        self._bn_plan(dtype, layout, shape)
        c = shape[1] if layout == "NCHW" else shape[-1]

        def work() -> None:
            m = _Memory(self.sim, dtype, layout)
            xv, dyv = m.load(x, shape).astype(np.float64), m.load(dy, shape).astype(np.float64)
            sim = self.sim
            g, dg, db = bn_backward(xv, dyv, _f32(sim, gamma, c).astype(np.float64),
                                    _f32(sim, save_mean, c).astype(np.float64),
                                    _f32(sim, save_invstd, c).astype(np.float64))
            m.store(dx, g)
            _f32(sim, dgamma, c)[:] = dg
            _f32(sim, dbeta, c)[:] = db
        stream.put(work)

    def norm_forward(self, stream: Any, dtype: str, rows: int, per_row: int,
                     affine: tuple[int, int, int], eps: float, x: int, gamma: int, beta: int,
                     y: int, mean: int, invstd: int) -> None:
        k = affine[1]
        self._bn_plan(dtype, "NCHW", (1, rows, per_row))  # the plans the GPU handle uses
        if gamma:
            self._bn_plan(dtype, "NCHW", affine)

        def work() -> None:
            m = _Memory(self.sim, dtype)
            xv = m.load(x, (rows, per_row)).astype(np.float64)
            mu = xv.mean(axis=1)
            inv = 1.0 / np.sqrt(xv.var(axis=1) + eps)
            out = ((xv - mu[:, None]) * inv[:, None]).reshape(affine)
            if gamma:
                g, b = _f32(self.sim, gamma, k), _f32(self.sim, beta, k)
                out = out * g.reshape(1, k, 1) + b.reshape(1, k, 1)
            m.store(y, out.reshape(-1))
            _f32(self.sim, mean, rows)[:] = mu
            _f32(self.sim, invstd, rows)[:] = inv
        stream.put(work)

    def norm_backward(self, stream: Any, dtype: str, rows: int, per_row: int,
                      affine: tuple[int, int, int], eps: float, x: int, dy: int, gamma: int,
                      mean: int, invstd: int, dx: int, dgamma: int, dbeta: int) -> None:
        k = affine[1]
        if gamma:
            for shape in ((1, rows, per_row), affine, affine):
                self._bn_plan(dtype, "NCHW", shape)
        self._bn_plan(dtype, "NCHW", (1, rows, per_row))

        def work() -> None:
            m, sim = _Memory(self.sim, dtype), self.sim
            xv = m.load(x, (rows, per_row)).astype(np.float64)
            dyv = m.load(dy, affine).astype(np.float64)
            mu = _f32(sim, mean, rows).astype(np.float64)[:, None]
            inv = _f32(sim, invstd, rows).astype(np.float64)[:, None]
            xhat = (xv - mu) * inv
            if gamma:
                xa = xhat.reshape(affine)
                _f32(sim, dgamma, k)[:] = (dyv * xa).sum(axis=(0, 2))
                _f32(sim, dbeta, k)[:] = dyv.sum(axis=(0, 2))
                dyv = dyv * _f32(sim, gamma, k).astype(np.float64).reshape(1, k, 1)
            g = dyv.reshape(rows, per_row)
            out = inv * (g - g.mean(axis=1, keepdims=True)
                         - xhat * (g * xhat).mean(axis=1, keepdims=True))
            m.store(dx, out.reshape(-1))
        stream.put(work)

    def dropout_reserve_size(self, dtype: str, size: int) -> int:
        return size  # the simulator keeps the mask as one byte per element

    def dropout(self, stream: Any, dtype: str, size: int, p: float, seed: int, x: int, y: int,
                reserve: int, reserve_bytes: int, backward: bool = False) -> None:
        if self.dropouts.get((seed, p)) is None:
            self.dropouts.put((seed, p), True)

        def work() -> None:
            m = _Memory(self.sim, dtype)
            mask = self.sim.view(reserve, size)
            if not backward:
                mask[:] = dropout_mask(seed, p, size)
            m.store(y, m.load(x, (size,)) * mask / (1.0 - p))
        stream.put(work)

    def cache_info(self) -> dict[str, int]:
        return self.cache.info()

    def close(self) -> None:
        pass
