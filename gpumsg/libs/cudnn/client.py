"""``dev.dnn``: the cuDNN messages as methods that return futures (caller's thread)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ...messages.base import BufRef
from ...messages.cudnn import (
    ConvBackwardData,
    ConvBackwardFilter,
    ConvForward,
    DnnCacheInfo,
    conv_output_shape,
)

if TYPE_CHECKING:
    from ...client.device import Device

__all__ = ["Dnn"]


def _ref_of(value: Any) -> BufRef:
    return value if isinstance(value, BufRef) else value.ref


def _tuple(value: Any, nd: int) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd


class Dnn:
    """``dev.dnn``: convolutions through cuDNN (see :mod:`gpumsg.messages.cudnn` for layouts
    and precisions). Each method returns a future; the ones that allocate their output return a
    future of the new buffer (row-major, the input's dtype)."""

    _dev: Device

    def __init__(self, device: Device) -> None:
        self._dev = device

    def conv(self, x: Any, w: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
             dilation: Any = 1, groups: int = 1, layout: str = "NCHW", activation: str = "none",
             act_coef: float | None = None, math: str = "default",
             workspace_limit: int | None = None, out: Any = None) -> Future:
        """y = activation(conv(x, w) + bias), 1-D, 2-D or 3-D by x's rank. ``out`` (optional)
        receives y; otherwise a new buffer is allocated. Bad shapes raise InvalidMessage here."""
        dev = self._dev
        dev._check_open()
        if out is None:
            xr, wr = _ref_of(x), _ref_of(w)
            nd = max(len(xr.shape) - 2, 1)
            try:
                shape = conv_output_shape(xr.shape, wr.shape, layout, _tuple(stride, nd),
                                          _tuple(padding, nd), _tuple(dilation, nd))
            except (TypeError, ValueError, ArithmeticError, IndexError):
                shape = ()
            if len(shape) != len(xr.shape) or any(s <= 0 for s in shape):
                shape = xr.shape  # a bad argument: the message names the field
            y = dev.alloc(shape, xr.dtype, order="C")
            msg = ConvForward(x, w, y, stride, padding, dilation, groups, layout, math,
                              "heuristic", workspace_limit, bias, activation, act_coef)
            return dev.buffer_after(dev.send(msg), y)
        return dev.send(ConvForward(x, w, out, stride, padding, dilation, groups, layout, math,
                                    "heuristic", workspace_limit, bias, activation, act_coef))

    conv1d = conv2d = conv3d = conv

    def conv_backward_data(self, dy: Any, w: Any, x_shape: Any, stride: Any = 1,
                           padding: Any = 0, dilation: Any = 1, groups: int = 1,
                           layout: str = "NCHW", math: str = "default",
                           workspace_limit: int | None = None, out: Any = None) -> Future:
        """dx (shape ``x_shape``), the gradient of the forward convolution with respect to x."""
        dev = self._dev
        dev._check_open()
        dx = out if out is not None else dev.alloc(tuple(x_shape), _ref_of(dy).dtype, order="C")
        done = dev.send(ConvBackwardData(dy, w, dx, stride, padding, dilation, groups, layout,
                                         math, "heuristic", workspace_limit))
        return done if out is not None else dev.buffer_after(done, dx)

    def conv_backward_filter(self, x: Any, dy: Any, w_shape: Any, stride: Any = 1,
                             padding: Any = 0, dilation: Any = 1, groups: int = 1,
                             layout: str = "NCHW", math: str = "default",
                             workspace_limit: int | None = None, out: Any = None) -> Future:
        """dw (shape ``w_shape``), the gradient of the forward convolution with respect to w."""
        dev = self._dev
        dev._check_open()
        dw = out if out is not None else dev.alloc(tuple(w_shape), _ref_of(x).dtype, order="C")
        done = dev.send(ConvBackwardFilter(x, dy, dw, stride, padding, dilation, groups, layout,
                                           math, "heuristic", workspace_limit))
        return done if out is not None else dev.buffer_after(done, dw)

    conv2d_backward_data = conv_backward_data
    conv2d_backward_filter = conv_backward_filter

    def cache_info(self) -> Future:
        """Resolves to the algorithm cache's counters: hits, misses, size, capacity."""
        return self._dev.send(DnnCacheInfo())
