"""Handlers of the cuDNN messages (device thread)."""

from __future__ import annotations

from typing import Any

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
)
from ...service.registry import COMPUTE, handles
from .handle import ConvCall

__all__: list[str] = []


def _call(msg: Any, direction: str, x: Any, w: Any, y: Any, x_ptr: int, w_ptr: int,
          y_ptr: int, **extra: Any) -> ConvCall:
    return ConvCall(direction, x.dtype, msg.layout, tuple(x.shape), tuple(w.shape),
                    tuple(y.shape), msg.stride, msg.padding, msg.dilation, msg.groups, msg.math,
                    msg.workspace_limit, x_ptr, w_ptr, y_ptr, **extra)


@handles(ConvForward)
def _conv_forward(ctx: Any, msg: ConvForward, reply: Any) -> None:
    reads = [ctx.resolve(msg.x, "x"), ctx.resolve(msg.w, "w")]
    bias = 0
    if msg.bias is not None:
        b = ctx.resolve(msg.bias, "bias")
        reads.append(b)
        bias = b.ptr
    y = ctx.resolve_out(msg.y, "y")
    call = _call(msg, "fwd", msg.x, msg.w, msg.y, reads[0].ptr, reads[1].ptr, y.ptr, bias=bias,
                 activation=msg.activation, act_coef=msg.act_coef)
    ctx.run(reply, COMPUTE, tuple(reads), (y,), ctx.library("cudnn").conv, call)


@handles(ConvBackwardData)
def _conv_backward_data(ctx: Any, msg: ConvBackwardData, reply: Any) -> None:
    dy, w = ctx.resolve(msg.dy, "dy"), ctx.resolve(msg.w, "w")
    dx = ctx.resolve_out(msg.dx, "dx")
    call = _call(msg, "bwd_data", msg.dx, msg.w, msg.dy, dx.ptr, w.ptr, dy.ptr)
    ctx.run(reply, COMPUTE, (dy, w), (dx,), ctx.library("cudnn").conv, call)


@handles(ConvBackwardFilter)
def _conv_backward_filter(ctx: Any, msg: ConvBackwardFilter, reply: Any) -> None:
    x, dy = ctx.resolve(msg.x, "x"), ctx.resolve(msg.dy, "dy")
    dw = ctx.resolve_out(msg.dw, "dw")
    call = _call(msg, "bwd_filter", msg.x, msg.dw, msg.dy, x.ptr, dw.ptr, dy.ptr)
    ctx.run(reply, COMPUTE, (x, dy), (dw,), ctx.library("cudnn").conv, call)


@handles(DnnCacheInfo)
def _cache_info(ctx: Any, msg: DnnCacheInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cudnn").cache_info())


@handles(Activation)
def _activation(ctx: Any, msg: Activation, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = x if msg.y == msg.x else ctx.resolve_out(msg.y, "y")
    ctx.run(reply, COMPUTE, (x,), (y,), ctx.library("cudnn").activation, msg.x.dtype,
            msg.x.size, msg.activation, msg.act_coef, x.ptr, y.ptr)


@handles(ActivationBackward)
def _activation_backward(ctx: Any, msg: ActivationBackward, reply: Any) -> None:
    x, y, dy = (ctx.resolve(getattr(msg, n), n) for n in ("x", "y", "dy"))
    dx = ctx.resolve_out(msg.dx, "dx")
    ctx.run(reply, COMPUTE, (x, y, dy), (dx,), ctx.library("cudnn").activation, msg.x.dtype,
            msg.x.size, msg.activation, msg.act_coef, x.ptr, y.ptr, dy.ptr, dx.ptr)


@handles(Softmax)
def _softmax(ctx: Any, msg: Softmax, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = x if msg.y == msg.x else ctx.resolve_out(msg.y, "y")
    ctx.run(reply, COMPUTE, (x,), (y,), ctx.library("cudnn").softmax, msg.x.dtype, msg.layout,
            tuple(msg.x.shape), msg.mode, msg.log, x.ptr, y.ptr)


@handles(SoftmaxBackward)
def _softmax_backward(ctx: Any, msg: SoftmaxBackward, reply: Any) -> None:
    y, dy = ctx.resolve(msg.y, "y"), ctx.resolve(msg.dy, "dy")
    dx = ctx.resolve_out(msg.dx, "dx")
    ctx.run(reply, COMPUTE, (y, dy), (dx,), ctx.library("cudnn").softmax, msg.y.dtype,
            msg.layout, tuple(msg.y.shape), msg.mode, msg.log, 0, y.ptr, dy.ptr, dx.ptr)


@handles(Pool)
def _pool(ctx: Any, msg: Pool, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = ctx.resolve_out(msg.y, "y")
    ctx.run(reply, COMPUTE, (x,), (y,), ctx.library("cudnn").pool, msg.x.dtype, msg.layout,
            tuple(msg.x.shape), tuple(msg.y.shape), msg.mode, msg.window, msg.stride,
            msg.padding, x.ptr, y.ptr)


@handles(PoolBackward)
def _pool_backward(ctx: Any, msg: PoolBackward, reply: Any) -> None:
    x, y, dy = (ctx.resolve(getattr(msg, n), n) for n in ("x", "y", "dy"))
    dx = ctx.resolve_out(msg.dx, "dx")
    ctx.run(reply, COMPUTE, (x, y, dy), (dx,), ctx.library("cudnn").pool, msg.x.dtype,
            msg.layout, tuple(msg.x.shape), tuple(msg.y.shape), msg.mode, msg.window,
            msg.stride, msg.padding, x.ptr, y.ptr, dy.ptr, dx.ptr)
