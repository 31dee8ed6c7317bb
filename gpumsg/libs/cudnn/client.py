"""``dev.dnn``: the cuDNN messages as methods that return futures (caller's thread)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ...messages.base import as_ref
from ...messages.cudnn import (
    Activation,
    ActivationBackward,
    ConvBackwardData,
    ConvBackwardFilter,
    ConvForward,
    DnnCacheInfo,
    Pool,
    PoolBackward,
    Softmax,
    SoftmaxBackward,
    conv_output_shape,
    pool_output_shape,
)

if TYPE_CHECKING:
    from ...client.device import Device

__all__ = ["Dnn"]


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
            xr, wr = as_ref(x, "x"), as_ref(w, "w")
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
        dx = out if out is not None else dev.alloc(x_shape, as_ref(dy, "dy").dtype, order="C")
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
        dw = out if out is not None else dev.alloc(w_shape, as_ref(x, "x").dtype, order="C")
        done = dev.send(ConvBackwardFilter(x, dy, dw, stride, padding, dilation, groups, layout,
                                           math, "heuristic", workspace_limit))
        return done if out is not None else dev.buffer_after(done, dw)

    conv2d_backward_data = conv_backward_data
    conv2d_backward_filter = conv_backward_filter

    def _like(self, ref_of: Any, out: Any, shape: Any = None, field: str = "x") -> Any:
        if out is not None:
            return out
        r = as_ref(ref_of, field)
        return self._dev.alloc(tuple(r.shape) if shape is None else shape, r.dtype, order="C")

    def _send(self, msg_type: type, out: Any, given: Any, *args: Any) -> Future:
        dev = self._dev
        done = dev.send(msg_type(*args))
        return done if given is not None else dev.buffer_after(done, out)

    def activation(self, x: Any, activation: str = "relu", act_coef: float | None = None,
                   out: Any = None) -> Future:
        """act(x) elementwise (``out`` may be x: in place)."""
        self._dev._check_open()
        y = self._like(x, out)
        return self._send(Activation, y, out, x, y, activation, act_coef)

    def activation_backward(self, x: Any, y: Any, dy: Any, activation: str = "relu",
                            act_coef: float | None = None, out: Any = None) -> Future:
        """dx = act'(x) * dy, given x and y = act(x)."""
        self._dev._check_open()
        dx = self._like(x, out)
        return self._send(ActivationBackward, dx, out, x, y, dy, dx, activation, act_coef)

    def softmax(self, x: Any, mode: str = "channel", log: bool = False, layout: str = "NCHW",
                out: Any = None) -> Future:
        """softmax (or log-softmax) of x over channels ("channel") or over everything but the
        batch ("instance"); x is (N, C, ...) in ``layout``."""
        self._dev._check_open()
        y = self._like(x, out)
        return self._send(Softmax, y, out, x, y, mode, log, layout)

    def softmax_backward(self, y: Any, dy: Any, mode: str = "channel", log: bool = False,
                         layout: str = "NCHW", out: Any = None) -> Future:
        """The gradient of :meth:`softmax` given its output y and dy."""
        self._dev._check_open()
        dx = self._like(y, out, field="y")
        return self._send(SoftmaxBackward, dx, out, y, dy, dx, mode, log, layout)

    def pool(self, x: Any, window: Any = 2, stride: Any = None, padding: Any = 0,
             mode: str = "max", layout: str = "NCHW", out: Any = None) -> Future:
        """2-D or 3-D pooling: "max", "avg" (padding not counted) or "avg_include_pad"."""
        self._dev._check_open()
        y = out
        if y is None:
            xr = as_ref(x, "x")
            nd = len(xr.shape) - 2
            shape: tuple = tuple(xr.shape)
            try:
                if nd >= 1 and layout in ("NCHW", "NHWC"):
                    win = _tuple(window, nd)
                    cand = pool_output_shape(xr.shape, layout, win,
                                             win if stride is None else _tuple(stride, nd),
                                             _tuple(padding, nd))
                    if all(s > 0 for s in cand):
                        shape = cand
            except (TypeError, ValueError, ArithmeticError, IndexError):
                pass
            y = self._like(x, None, shape)
        return self._send(Pool, y, out, x, y, window, stride, padding, mode, layout)

    def pool_backward(self, x: Any, y: Any, dy: Any, window: Any = 2, stride: Any = None,
                      padding: Any = 0, mode: str = "max", layout: str = "NCHW",
                      out: Any = None) -> Future:
        """The gradient of :meth:`pool` given x, its output y and dy."""
        self._dev._check_open()
        dx = self._like(x, out)
        return self._send(PoolBackward, dx, out, x, y, dy, dx, window, stride, padding, mode,
                          layout)

    def cache_info(self) -> Future:
        """Resolves to the algorithm cache's counters: hits, misses, size, capacity."""
        return self._dev.send(DnnCacheInfo())
