"""cuDNN on the simulator: direct-sum convolutions (every direction, layout, stride, padding,
dilation and group count), bias and activations in NumPy, with the same algorithm-cache
bookkeeping as on a GPU. f16/bf16 accumulate in f32, f32 in f64 (the GPU's FMA path is at
least as accurate as the tolerance tests use), TF32 rounds the operands first."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ...backends.sim.device import SimBackend
from ...dtypes import dtype_of
from ...service.plans import PlanCache
from ..cublas.sim import tf32
from .handle import ConvCall

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


def activate(y: np.ndarray, activation: str, coef: float) -> np.ndarray:
    """cuDNN's activation functions (``coef``: ELU alpha, clipped-ReLU ceiling, swish beta)."""
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
    """One convolution on simulated memory (see :class:`~gpumsg.libs.cudnn.handle.ConvCall`)."""
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


class SimDnn:
    """The simulator's cuDNN handle, with the same algorithm-cache bookkeeping as on a GPU."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.cache = PlanCache(256)

    def conv(self, stream: Any, call: ConvCall) -> None:
        key = call.plan_key()
        if self.cache.get(key) is None:
            self.cache.put(key, True)
        stream.put(lambda: run_conv(self.sim, call))

    def cache_info(self) -> dict[str, int]:
        return self.cache.info()

    def close(self) -> None:
        pass
