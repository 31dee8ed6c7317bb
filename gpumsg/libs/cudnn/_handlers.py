"""Handlers of the cuDNN messages (device thread)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import GraphCaptureError, IndexOutOfRange, InvalidMessage
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
    IndexCheck,
    LayerNorm,
    LayerNormBackward,
    Pool,
    PoolBackward,
    Softmax,
    SoftmaxBackward,
    group_norm_dims,
    layer_norm_dims,
)
from ...service._plans import merge_info
from ...service._registry import COMPUTE, handles
from ._handle import ConvCall

__all__: list[str] = []


def _call(ctx: Any, msg: Any, direction: str, x: Any, w: Any, y: Any, x_ptr: int, w_ptr: int,
          y_ptr: int, bias: int = 0, activation: str = "none", act_coef: float = 0.0
          ) -> ConvCall:
    """The ConvCall of ``msg``: built once per message and set of pointers (building one costs
    about 5 µs of the device thread's time on the H100; a repeated convolution comes as the
    same message, service/derived.py)."""
    return ctx.derived.get(msg, (x_ptr, w_ptr, y_ptr, bias), lambda: ConvCall(
        direction, x.dtype, msg.layout, tuple(x.shape), tuple(w.shape), tuple(y.shape),
        msg.stride, msg.padding, msg.dilation, msg.groups, msg.math, msg.workspace_limit, x_ptr,
        w_ptr, y_ptr, bias, activation, act_coef, msg.algo))


def _conv(ctx: Any, reply: Any, reads: tuple, writes: tuple, call: ConvCall) -> None:
    """Issue one convolution through the envelope. Inside a ``dev.graph`` recording only a
    problem planned before (it ran once outside) can be recorded, on every backend alike:
    planning cannot happen under a stream capture."""
    lib = ctx.library("cudnn")
    if ctx.capture is not None and call.plan_key() not in lib.cache:
        name = type(ctx.current).__name__
        raise GraphCaptureError(f"{name} cannot be recorded before the same convolution "
                                "(shapes, layout, dtype, math, algo) has run once outside the "
                                "graph: planning it cannot happen under capture", name)
    ctx.run(reply, COMPUTE, reads, writes, lib.conv, call)


@handles(ConvForward)
def _conv_forward(ctx: Any, msg: ConvForward, reply: Any) -> None:
    reads = [ctx.resolve(msg.x, "x"), ctx.resolve(msg.w, "w")]
    bias = 0
    if msg.bias is not None:
        b = ctx.resolve(msg.bias, "bias")
        reads.append(b)
        bias = b.ptr
    y = ctx.resolve_out(msg.y, "y")
    call = _call(ctx, msg, "fwd", msg.x, msg.w, msg.y, reads[0].ptr, reads[1].ptr, y.ptr, bias,
                 msg.activation, msg.act_coef)
    _conv(ctx, reply, tuple(reads), (y,), call)


@handles(ConvBackwardData)
def _conv_backward_data(ctx: Any, msg: ConvBackwardData, reply: Any) -> None:
    dy, w = ctx.resolve(msg.dy, "dy"), ctx.resolve(msg.w, "w")
    dx = ctx.resolve_out(msg.dx, "dx")
    call = _call(ctx, msg, "bwd_data", msg.dx, msg.w, msg.dy, dx.ptr, w.ptr, dy.ptr)
    _conv(ctx, reply, (dy, w), (dx,), call)


@handles(ConvBackwardFilter)
def _conv_backward_filter(ctx: Any, msg: ConvBackwardFilter, reply: Any) -> None:
    x, dy = ctx.resolve(msg.x, "x"), ctx.resolve(msg.dy, "dy")
    dw = ctx.resolve_out(msg.dw, "dw")
    call = _call(ctx, msg, "bwd_filter", msg.x, msg.dw, msg.dy, x.ptr, dw.ptr, dy.ptr)
    _conv(ctx, reply, (x, dy), (dw,), call)


@handles(DnnCacheInfo)
def _cache_info(ctx: Any, msg: DnnCacheInfo, reply: Any) -> None:
    infos = ctx.over_handles("cudnn", lambda h: h.cache_info())  # one per stream used
    ctx.reply_now(reply, merge_info(infos or [ctx.library("cudnn").cache_info()]))


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


def _ptr(ctx: Any, ref: Any, field: str, out: bool = False) -> Any:
    return None if ref is None else (ctx.resolve_out(ref, field) if out
                                     else ctx.resolve(ref, field))


@handles(BatchNormTrain)
def _batch_norm_train(ctx: Any, msg: BatchNormTrain, reply: Any) -> None:
    x, g, b = (ctx.resolve(getattr(msg, n), n) for n in ("x", "gamma", "beta"))
    y, sm, si = (ctx.resolve_out(getattr(msg, n), n) for n in ("y", "save_mean", "save_invstd"))
    rm, rv = _ptr(ctx, msg.running_mean, "running_mean"), _ptr(ctx, msg.running_var,
                                                               "running_var")
    running = (rm, rv) if rm is not None else ()
    ctx.run(reply, COMPUTE, (x, g, b, *running), (y, sm, si, *running),
            ctx.library("cudnn").batch_norm_train, msg.x.dtype, msg.layout, tuple(msg.x.shape),
            msg.factor, msg.eps, x.ptr, g.ptr, b.ptr, y.ptr, sm.ptr, si.ptr,
            rm.ptr if rm is not None else 0, rv.ptr if rv is not None else 0)


@handles(BatchNormInference)
def _batch_norm_inference(ctx: Any, msg: BatchNormInference, reply: Any) -> None:
    x, g, b, m, v = (ctx.resolve(getattr(msg, n), n) for n in ("x", "gamma", "beta", "mean",
                                                                 "var"))
    y = ctx.resolve_out(msg.y, "y")
    ctx.run(reply, COMPUTE, (x, g, b, m, v), (y,), ctx.library("cudnn").batch_norm_inference,
            msg.x.dtype, msg.layout, tuple(msg.x.shape), msg.eps, x.ptr, g.ptr, b.ptr, m.ptr,
            v.ptr, y.ptr)


@handles(BatchNormBackward)
def _batch_norm_backward(ctx: Any, msg: BatchNormBackward, reply: Any) -> None:
    reads = [ctx.resolve(getattr(msg, n), n) for n in ("x", "dy", "gamma", "save_mean",
                                                       "save_invstd")]
    writes = [ctx.resolve_out(getattr(msg, n), n) for n in ("dx", "dgamma", "dbeta")]
    ctx.run(reply, COMPUTE, tuple(reads), tuple(writes),
            ctx.library("cudnn").batch_norm_backward, msg.x.dtype, msg.layout,
            tuple(msg.x.shape), msg.eps, *(a.ptr for a in reads), *(a.ptr for a in writes))


@handles(DropoutReserveSize)
def _dropout_reserve_size(ctx: Any, msg: DropoutReserveSize, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cudnn").dropout_reserve_size(msg.x.dtype, msg.x.size))


def _reserve_bytes(lib: Any, msg: Any, dtype: str, size: int) -> int:
    need = lib.dropout_reserve_size(dtype, size)
    if msg.reserve.nbytes < need:
        raise InvalidMessage(f"{type(msg).__name__}.reserve: {msg.reserve.describe()} holds "
                             f"{msg.reserve.nbytes} bytes; this dropout needs {need}",
                             field="reserve")
    return need


@handles(Dropout)
def _dropout(ctx: Any, msg: Dropout, reply: Any) -> None:
    lib = ctx.library("cudnn")
    nbytes = _reserve_bytes(lib, msg, msg.x.dtype, msg.x.size)
    x = ctx.resolve(msg.x, "x")
    y = x if msg.y == msg.x else ctx.resolve_out(msg.y, "y")
    r = ctx.resolve_out(msg.reserve, "reserve")
    ctx.run(reply, COMPUTE, (x,), (y, r), lib.dropout, msg.x.dtype, msg.x.size, msg.p, msg.seed,
            x.ptr, y.ptr, r.ptr, nbytes)


@handles(DropoutBackward)
def _dropout_backward(ctx: Any, msg: DropoutBackward, reply: Any) -> None:
    lib = ctx.library("cudnn")
    nbytes = _reserve_bytes(lib, msg, msg.dy.dtype, msg.dy.size)
    dy, r = ctx.resolve(msg.dy, "dy"), ctx.resolve(msg.reserve, "reserve")
    dx = dy if msg.dx == msg.dy else ctx.resolve_out(msg.dx, "dx")
    ctx.run(reply, COMPUTE, (dy, r), (dx,), lib.dropout, msg.dy.dtype, msg.dy.size, msg.p,
            msg.seed, dy.ptr, dx.ptr, r.ptr, nbytes, True)


def _norm_geometry(msg: Any) -> tuple[int, int, tuple[int, int, int]]:
    shape = tuple(msg.x.shape)
    if isinstance(msg, (LayerNorm, LayerNormBackward)):
        rows, d = layer_norm_dims(shape, msg.normalized_ndim)
        return rows, d, (rows, d, 1)
    return group_norm_dims(shape, msg.groups)


def _norm_forward(ctx: Any, msg: Any, reply: Any) -> None:
    rows, per_row, affine = _norm_geometry(msg)
    reads = [ctx.resolve(msg.x, "x")]
    g = b = 0
    if msg.gamma is not None:
        ga, be = ctx.resolve(msg.gamma, "gamma"), ctx.resolve(msg.beta, "beta")
        reads += [ga, be]
        g, b = ga.ptr, be.ptr
    y, mean, inv = (ctx.resolve_out(getattr(msg, n), n) for n in ("y", "mean", "invstd"))
    ctx.run(reply, COMPUTE, tuple(reads), (y, mean, inv), ctx.library("cudnn").norm_forward,
            msg.x.dtype, rows, per_row, affine, msg.eps, reads[0].ptr, g, b, y.ptr, mean.ptr,
            inv.ptr)


def _norm_backward(ctx: Any, msg: Any, reply: Any) -> None:
    rows, per_row, affine = _norm_geometry(msg)
    reads = [ctx.resolve(getattr(msg, n), n) for n in ("x", "dy", "mean", "invstd")]
    writes = [ctx.resolve_out(msg.dx, "dx")]
    g = dg = db = 0
    if msg.gamma is not None:
        ga = ctx.resolve(msg.gamma, "gamma")
        reads.append(ga)
        dga, dbe = ctx.resolve_out(msg.dgamma, "dgamma"), ctx.resolve_out(msg.dbeta, "dbeta")
        writes += [dga, dbe]
        g, dg, db = ga.ptr, dga.ptr, dbe.ptr
    x, dy, mean, inv = reads[:4]
    ctx.run(reply, COMPUTE, tuple(reads), tuple(writes), ctx.library("cudnn").norm_backward,
            msg.x.dtype, rows, per_row, affine, msg.eps, x.ptr, dy.ptr, g, mean.ptr, inv.ptr,
            writes[0].ptr, dg, db)


for _t in (LayerNorm, GroupNorm):
    handles(_t)(_norm_forward)
for _t in (LayerNormBackward, GroupNormBackward):
    handles(_t)(_norm_backward)


@handles(IndexCheck)
def _index_check(ctx: Any, msg: IndexCheck, reply: Any) -> None:
    """Read the flag back into a scratch slot on the compute stream; at completion a set flag
    fails the reply, and the verdict of ``y`` (declared written) fails its readers."""
    flag = ctx.resolve(msg.flag, "flag")
    y = ctx.resolve_out(msg.y, "y")
    scratch = ctx.scratch
    slot = scratch.acquire()
    copy_back = ctx.backend.copy_dtoh

    def launch(stream: Any) -> None:
        copy_back(stream, slot.host, flag.ptr, 4)

    def finish(value: Any, failure: BaseException | None) -> Any:
        try:
            if failure is not None:
                return None
            held = int(np.asarray(slot.view[:4]).view(np.int32)[0])
        finally:
            scratch.release(slot)
        if (held == msg.token) if msg.token else held:
            raise IndexOutOfRange(msg.text, field=msg.field)
        return value

    ctx.run(reply, COMPUTE, (flag,), (y,), launch, finish=finish)
