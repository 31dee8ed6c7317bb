"""``dev.cudnn``: the cuDNN messages as methods that return futures (caller's thread)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidMessage
from ...messages._base import as_ref
from ...messages._memo import MessageMemo
from ...messages.cudnn import (
    Activation,
    ActivationBackward,
    BatchNormBackward,
    BatchNormInference,
    BatchNormTrain,
    ConvBackwardData,
    ConvBackwardFilter,
    ConvForward,
    DnnCacheInfo,
    Dropout,
    DropoutBackward,
    DropoutReserveSize,
    GroupNorm,
    GroupNormBackward,
    LayerNorm,
    LayerNormBackward,
    Pool,
    PoolBackward,
    Softmax,
    SoftmaxBackward,
    conv_output_shape,
    group_norm_dims,
    layer_norm_dims,
    pool_output_shape,
)
from .._answers import Dropout as DropoutOutputs
from .._answers import NormGrads, NormOutputs, tuple_after

if TYPE_CHECKING:
    from ...client._device import Device

#: the ConvForward fields that hold its buffers
_CONV_BUFFERS = ("x", "w", "y", "bias")

__all__ = ["Dnn"]


def _ints(value: Any, nd: int) -> tuple[int, ...] | None:
    """``value`` (an int, or a tuple or list of them) as ints for working out an output shape;
    None for anything else (an array is never computed with here): the message then refuses
    it, naming the field."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
        return tuple(int(v) for v in items)
    return None


class Dnn:
    """``dev.cudnn``: convolutions through cuDNN (see :mod:`gpumsg.messages.cudnn` for layouts
    and precisions). Each method returns a future; the ones that allocate their output return a
    future of the new buffer (row-major, the input's dtype)."""

    _dev: Device

    def __init__(self, device: Device) -> None:
        self._dev = device
        self._reserve: dict[tuple[str, int], int] = {}
        # convolutions repeated with the same buffers reuse their message (validating one
        # costs about 14 µs of the caller's time, a lookup about 2)
        self._memo = MessageMemo()

    def _memo_send(self, msg_type: type, buffers: tuple, args: tuple) -> Future:
        return self._dev.port.send_memo(self._memo.entry(msg_type, buffers, args))

    def conv(self, x: Any, w: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
             dilation: Any = 1, groups: int = 1, layout: str = "NCHW", activation: str = "none",
             act_coef: float | None = None, math: str = "default",
             workspace_limit: int | None = None, out: Any = None, algo: str = "heuristic"
             ) -> Future:
        """y = activation(conv(x, w) + bias), 1-D, 2-D or 3-D by x's rank. ``out`` (optional)
        receives y; otherwise a new buffer is allocated. ``algo``: "heuristic" (cuDNN's
        heuristics choose the plan) or "find" (every candidate plan is run and timed once per
        problem, the fastest kept; the first call synchronizes the device's stream). Bad shapes
        raise InvalidMessage here."""
        dev = self._dev
        dev.port.check_open()
        if out is None:
            xr, wr = as_ref(x, "x"), as_ref(w, "w")
            nd = max(len(xr.shape) - 2, 1)
            sizes = (_ints(stride, nd), _ints(padding, nd), _ints(dilation, nd))
            shape = ()
            if None not in sizes:
                try:
                    shape = conv_output_shape(xr.shape, wr.shape, layout, *sizes)
                except (TypeError, ValueError, ArithmeticError, IndexError):
                    shape = ()
            if len(shape) != len(xr.shape) or any(s <= 0 for s in shape):
                shape = xr.shape  # a bad argument: the message names the field
            y = dev.port.mint(shape, xr.dtype, "C")
            msg = ConvForward(x, w, y, stride, padding, dilation, groups, layout, math,
                              algo, workspace_limit, bias, activation, act_coef)
            return dev.port.send_new(y, msg)
        return dev.port.send_memo(self._memo.entry(
            ConvForward, (x, w, out, bias),
            (stride, padding, dilation, groups, layout, math, algo, workspace_limit, activation,
             act_coef),
            lambda r: ConvForward(r[0], r[1], r[2], stride, padding, dilation, groups, layout,
                                  math, algo, workspace_limit, r[3], activation, act_coef),
            _CONV_BUFFERS))

    conv1d = conv2d = conv3d = conv

    def conv_backward_data(self, dy: Any, w: Any, x_shape: Any, stride: Any = 1,
                           padding: Any = 0, dilation: Any = 1, groups: int = 1,
                           layout: str = "NCHW", math: str = "default",
                           workspace_limit: int | None = None, out: Any = None,
                           algo: str = "heuristic") -> Future:
        """dx (shape ``x_shape``), the gradient of the forward convolution with respect to x
        (``algo``: as in :meth:`conv`)."""
        dev = self._dev
        dev.port.check_open()
        if out is not None:
            return self._memo_send(ConvBackwardData, (dy, w, out),
                                   (stride, padding, dilation, groups, layout, math, algo,
                                    workspace_limit))
        dx = dev.port.mint(x_shape, as_ref(dy, "dy").dtype, "C")
        return dev.port.send_new(dx, ConvBackwardData(dy, w, dx, stride, padding, dilation, groups,
                                                  layout, math, algo, workspace_limit))

    def conv_backward_filter(self, x: Any, dy: Any, w_shape: Any, stride: Any = 1,
                             padding: Any = 0, dilation: Any = 1, groups: int = 1,
                             layout: str = "NCHW", math: str = "default",
                             workspace_limit: int | None = None, out: Any = None,
                             algo: str = "heuristic") -> Future:
        """dw (shape ``w_shape``), the gradient of the forward convolution with respect to w
        (``algo``: as in :meth:`conv`)."""
        dev = self._dev
        dev.port.check_open()
        if out is not None:
            return self._memo_send(ConvBackwardFilter, (x, dy, out),
                                   (stride, padding, dilation, groups, layout, math, algo,
                                    workspace_limit))
        dw = dev.port.mint(w_shape, as_ref(x, "x").dtype, "C")
        return dev.port.send_new(dw, ConvBackwardFilter(x, dy, dw, stride, padding, dilation,
                                                    groups, layout, math, algo,
                                                    workspace_limit))

    conv2d_backward_data = conv_backward_data
    conv2d_backward_filter = conv_backward_filter

    def _like(self, ref_of: Any, out: Any, shape: Any = None, field: str = "x") -> Any:
        if out is not None:
            return out
        r = as_ref(ref_of, field)
        return self._dev.alloc(tuple(r.shape) if shape is None else shape, r.dtype, order="C")

    def _new_like(self, ref_of: Any, out: Any, shape: Any = None, field: str = "x") -> Any:
        """``out``, or the reference of a new C-ordered buffer like ``ref_of`` (``shape``
        instead of its shape), minted but not allocated yet: :meth:`_send` sends its
        allocation with the message that writes it."""
        if out is not None:
            return out
        r = as_ref(ref_of, field)
        return self._dev.port.mint(tuple(r.shape) if shape is None else shape, r.dtype, "C")

    def _send(self, msg_type: type, out: Any, given: Any, *args: Any) -> Future:
        """``msg_type(*args)`` into ``given``, or into ``out`` (from :meth:`_new_like`), a new
        buffer allocated with it."""
        dev = self._dev
        msg = msg_type(*args)
        return dev.send(msg) if given is not None else dev.port.send_new(out, msg)

    def activation(self, x: Any, activation: str = "relu", act_coef: float | None = None,
                   out: Any = None) -> Future:
        """act(x) elementwise (``out`` may be x: in place)."""
        self._dev.port.check_open()
        y = self._new_like(x, out)
        return self._send(Activation, y, out, x, y, activation, act_coef)

    def activation_backward(self, x: Any, y: Any, dy: Any, activation: str = "relu",
                            act_coef: float | None = None, out: Any = None) -> Future:
        """dx = act'(x) * dy, given x and y = act(x)."""
        self._dev.port.check_open()
        dx = self._new_like(x, out)
        return self._send(ActivationBackward, dx, out, x, y, dy, dx, activation, act_coef)

    def softmax(self, x: Any, mode: str = "channel", log: bool = False, layout: str = "NCHW",
                out: Any = None) -> Future:
        """softmax (or log-softmax) of x over channels ("channel") or over everything but the
        batch ("instance"); x is (N, C, ...) in ``layout``."""
        self._dev.port.check_open()
        y = self._new_like(x, out)
        return self._send(Softmax, y, out, x, y, mode, log, layout)

    def softmax_backward(self, y: Any, dy: Any, mode: str = "channel", log: bool = False,
                         layout: str = "NCHW", out: Any = None) -> Future:
        """The gradient of :meth:`softmax` given its output y and dy."""
        self._dev.port.check_open()
        dx = self._new_like(y, out, field="y")
        return self._send(SoftmaxBackward, dx, out, y, dy, dx, mode, log, layout)

    def pool(self, x: Any, window: Any = 2, stride: Any = None, padding: Any = 0,
             mode: str = "max", layout: str = "NCHW", out: Any = None) -> Future:
        """2-D or 3-D pooling: "max", "avg" (padding not counted) or "avg_include_pad"."""
        self._dev.port.check_open()
        y = out
        if y is None:
            xr = as_ref(x, "x")
            nd = len(xr.shape) - 2
            shape: tuple = tuple(xr.shape)
            win = _ints(window, nd)
            sizes = (win, win if stride is None else _ints(stride, nd), _ints(padding, nd))
            try:
                if nd >= 1 and layout in ("NCHW", "NHWC") and None not in sizes:
                    cand = pool_output_shape(xr.shape, layout, *sizes)
                    if all(s > 0 for s in cand):
                        shape = cand
            except (TypeError, ValueError, ArithmeticError, IndexError):
                pass
            y = self._new_like(x, None, shape)
        return self._send(Pool, y, out, x, y, window, stride, padding, mode, layout)

    def pool_backward(self, x: Any, y: Any, dy: Any, window: Any = 2, stride: Any = None,
                      padding: Any = 0, mode: str = "max", layout: str = "NCHW",
                      out: Any = None) -> Future:
        """The gradient of :meth:`pool` given x, its output y and dy."""
        self._dev.port.check_open()
        dx = self._new_like(x, out)
        return self._send(PoolBackward, dx, out, x, y, dy, dx, window, stride, padding, mode,
                          layout)

    # -- batch normalization ----------------------------------------------------------------
    def _stat_vector(self, x: Any, layout: str) -> Any:
        """A new f32 vector of x's channel count (x's shape checked by the message)."""
        shape = as_ref(x, "x").shape
        if not isinstance(layout, str) or layout not in ("NCHW", "NHWC"):
            raise InvalidMessage(f"layout: expected 'NCHW' or 'NHWC', got {layout!r}",
                                 field="layout")
        c = (shape[1] if layout == "NCHW" else shape[-1]) if len(shape) >= 2 else 1
        return self._dev.alloc((c,), "f32", order="C")

    def batch_norm_train(self, x: Any, gamma: Any, beta: Any, running_mean: Any = None,
                         running_var: Any = None, factor: float = 0.1, eps: float = 1e-5,
                         layout: str = "NCHW", out: Any = None) -> Future:
        """Training-mode batch normalization (see
        :class:`~gpumsg.messages.cudnn.BatchNormTrain`): a future of (y, mean, invstd), the
        saved statistics; the running statistics (f32 vectors, optional) are updated in place with
        the exponential average ``factor`` (torch's ``momentum``)."""
        dev = self._dev
        dev.port.check_open()
        y = self._like(x, out)
        mean, invstd = self._stat_vector(x, layout), self._stat_vector(x, layout)
        done = dev.send(BatchNormTrain(x, gamma, beta, y, mean, invstd, running_mean,
                                       running_var, factor, eps, layout))
        return tuple_after(done, NormOutputs, y, mean, invstd)

    def batch_norm_inference(self, x: Any, gamma: Any, beta: Any, mean: Any, var: Any,
                             eps: float = 1e-5, layout: str = "NCHW", out: Any = None) -> Future:
        """y = gamma (x - mean) / sqrt(var + eps) + beta per channel (f32 vectors of C)."""
        self._dev.port.check_open()
        y = self._new_like(x, out)
        return self._send(BatchNormInference, y, out, x, gamma, beta, mean, var, y, eps, layout)

    def batch_norm_backward(self, x: Any, dy: Any, gamma: Any, save_mean: Any, save_invstd: Any,
                            eps: float = 1e-5, layout: str = "NCHW") -> Future:
        """A future of (dx, dgamma, dbeta), the gradients of :meth:`batch_norm_train` given its
        saved statistics."""
        dev = self._dev
        dev.port.check_open()
        dx = self._like(x, None)
        dgamma, dbeta = self._stat_vector(x, layout), self._stat_vector(x, layout)
        done = dev.send(BatchNormBackward(x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta,
                                          eps, layout))
        return tuple_after(done, NormGrads, dx, dgamma, dbeta)

    # -- layer, group and instance norms --------------------------------------------------------
    def _vec(self, n: int) -> Any:
        return self._dev.alloc((max(n, 1),), "f32", order="C")

    def _rows(self, x: Any, normalized_ndim: Any = None, groups: Any = None) -> int:
        """Rows of statistics (a best guess for bad arguments: the message names the field)."""
        shape = tuple(as_ref(x, "x").shape)
        try:
            if groups is not None:
                return group_norm_dims(shape, int(groups))[0] if len(shape) >= 2 else 1
            return layer_norm_dims(shape, min(int(normalized_ndim), len(shape)))[0]
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            return 1

    def _affine_grads(self, gamma: Any) -> tuple[Any, Any]:
        if gamma is None:
            return None, None
        return self._vec(as_ref(gamma, "gamma").size), self._vec(as_ref(gamma, "gamma").size)

    def layer_norm(self, x: Any, gamma: Any = None, beta: Any = None, normalized_ndim: int = 1,
                   eps: float = 1e-5, out: Any = None, mean_out: Any = None,
                   invstd_out: Any = None) -> Future:
        """A future of (y, mean, invstd): x normalized over its last ``normalized_ndim``
        dimensions, then y = x_hat gamma + beta (f32 vectors of the normalized size, optional;
        see :class:`~gpumsg.messages.cudnn.LayerNorm` for how cuDNN runs it). ``out``,
        ``mean_out`` and ``invstd_out`` (optional) receive y and the per-row f32 statistics;
        given all three, nothing is allocated (as inside a ``dev.graph`` recording)."""
        dev = self._dev
        dev.port.check_open()
        y = self._like(x, out)
        rows = self._rows(x, normalized_ndim)
        mean = mean_out if mean_out is not None else self._vec(rows)
        inv = invstd_out if invstd_out is not None else self._vec(rows)
        done = dev.send(LayerNorm(x, y, mean, inv, gamma, beta, normalized_ndim, eps))
        return tuple_after(done, NormOutputs, y, mean, inv)

    def layer_norm_backward(self, x: Any, dy: Any, mean: Any, invstd: Any, gamma: Any = None,
                            normalized_ndim: int = 1, eps: float = 1e-5) -> Future:
        """A future of (dx, dgamma, dbeta) of :meth:`layer_norm` (the last two None without
        gamma)."""
        dev = self._dev
        dev.port.check_open()
        dx = self._like(x, None)
        dg, db = self._affine_grads(gamma)
        done = dev.send(LayerNormBackward(x, dy, mean, invstd, dx, gamma, dg, db,
                                          normalized_ndim, eps))
        return tuple_after(done, NormGrads, dx, dg, db)

    def group_norm(self, x: Any, groups: int, gamma: Any = None, beta: Any = None,
                   eps: float = 1e-5, out: Any = None) -> Future:
        """A future of (y, mean, invstd) of a group norm of x (N, C, *spatial), NCHW; mean and
        invstd are (N * groups) f32 (see :class:`~gpumsg.messages.cudnn.GroupNorm`)."""
        dev = self._dev
        dev.port.check_open()
        y = self._like(x, out)
        rows = self._rows(x, groups=groups)
        mean, inv = self._vec(rows), self._vec(rows)
        done = dev.send(GroupNorm(x, y, mean, inv, groups, gamma, beta, eps))
        return tuple_after(done, NormOutputs, y, mean, inv)

    def group_norm_backward(self, x: Any, dy: Any, mean: Any, invstd: Any, groups: int,
                            gamma: Any = None, eps: float = 1e-5) -> Future:
        """A future of (dx, dgamma, dbeta) of :meth:`group_norm` (None, None without gamma)."""
        dev = self._dev
        dev.port.check_open()
        dx = self._like(x, None)
        dg, db = self._affine_grads(gamma)
        done = dev.send(GroupNormBackward(x, dy, mean, invstd, dx, groups, gamma, dg, db, eps))
        return tuple_after(done, NormGrads, dx, dg, db)

    def instance_norm(self, x: Any, gamma: Any = None, beta: Any = None, eps: float = 1e-5,
                      out: Any = None) -> Future:
        """:meth:`group_norm` with one group per channel."""
        return self.group_norm(x, _channels(x), gamma, beta, eps, out)

    def instance_norm_backward(self, x: Any, dy: Any, mean: Any, invstd: Any, gamma: Any = None,
                               eps: float = 1e-5) -> Future:
        """:meth:`group_norm_backward` with one group per channel."""
        return self.group_norm_backward(x, dy, mean, invstd, _channels(x), gamma, eps)

    # -- dropout ------------------------------------------------------------------------------
    def dropout_reserve_bytes(self, x: Any) -> int:
        """Bytes of the reserve buffer a dropout of x needs (asked of the device once per dtype
        and element count, then remembered; the first ask waits for the answer)."""
        r = as_ref(x, "x")
        key = (r.dtype, r.size)
        n = self._reserve.get(key)
        if n is None:
            n = self._reserve[key] = int(self._dev.send(DropoutReserveSize(x)).result())
        return n

    #: for dropout and its backward, which dev.nn shows without dropout_reserve_bytes
    _dropout_reserve_bytes = dropout_reserve_bytes

    def dropout(self, x: Any, p: float = 0.5, seed: int = 0, out: Any = None) -> Future:
        """A future of (y, reserve): y = x * mask / (1 - p), the mask a function of (seed, p,
        x's size) only (see :class:`~gpumsg.messages.cudnn.Dropout`); ``reserve`` (u8) holds
        it for :meth:`dropout_backward`. ``out`` may be x (in place)."""
        dev = self._dev
        dev.port.check_open()
        nbytes = max(self._dropout_reserve_bytes(x), 1)
        y = self._like(x, out)
        reserve = dev.alloc((nbytes,), "u8", order="C")
        done = dev.send(Dropout(x, y, reserve, p, seed))
        return tuple_after(done, DropoutOutputs, y, reserve)

    def dropout_backward(self, dy: Any, reserve: Any, p: float = 0.5, seed: int = 0,
                         out: Any = None) -> Future:
        """dx = dy * mask / (1 - p) with the forward's mask (its ``reserve``, p and seed)."""
        self._dev.port.check_open()
        dx = self._like(dy, out)
        msg = DropoutBackward(dy, reserve, dx, p, seed)  # checks the fields first
        need = self._dropout_reserve_bytes(dy)
        if msg.reserve.nbytes < need:
            raise InvalidMessage(f"DropoutBackward.reserve: {msg.reserve.describe()} holds "
                                 f"{msg.reserve.nbytes} bytes; this dropout needs {need}",
                                 field="reserve")
        done = self._dev.send(msg)
        return done if out is not None else self._dev.buffer_after(done, dx)

    def cache_info(self) -> Future:
        """Resolves to the plan cache's counters (hits, misses, size, capacity, evictions); on
        a GPU also the convolution plans per path (graph_plans, legacy_plans), the frontend's
        state (frontend) and the last reasons a problem fell back (graph_declines)."""
        return self._dev.send(DnnCacheInfo())


def _channels(x: Any) -> int:
    """C of an (N, C, ...) buffer ``x``; InvalidMessage naming ``x`` when it has no C axis."""
    shape = as_ref(x, "x").shape
    if len(shape) < 2:
        raise InvalidMessage(f"x: expected (N, C, ...) with at least 2 axes, got shape "
                             f"{tuple(shape)}", field="x")
    return shape[1]
