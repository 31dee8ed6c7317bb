"""Handlers of the cuDNN RNN messages (device thread). The weight and reserve buffers are checked
against the sizes cuDNN gives for the problem (``InvalidMessage`` naming the field); the calls
go through the envelope on the compute stream."""

from __future__ import annotations

from typing import Any

from ....errors import InvalidMessage
from ....messages.cudnn_rnn import (
    RnnBackwardData,
    RnnBackwardWeights,
    RnnCacheInfo,
    RnnDropoutInit,
    RnnForward,
    RnnSpaceInfo,
    RnnWeightInfo,
)
from ....service._registry import COMPUTE, handles
from ._handle import RnnCall

__all__: list[str] = []

LIBRARY = "cudnn_rnn"


def _dims(msg: Any, seq: Any) -> tuple[int, int]:
    """(T, B) of a sequence buffer's shape."""
    return (seq.shape[1], seq.shape[0]) if msg.batch_first else (seq.shape[0], seq.shape[1])


def _check(lib: Any, msg: Any, w_field: str, t: int, b: int) -> int:
    """The reserve bytes of the problem, after checking the weight and reserve buffers."""
    need_w = lib.weight_bytes(msg.spec)
    w = getattr(msg, w_field)
    if w.nbytes < need_w:
        raise InvalidMessage(f"{type(msg).__name__}.{w_field}: {w.describe()} holds {w.nbytes} "
                             f"bytes; this network's weight space needs {need_w}",
                             field=w_field)
    if msg.reserve is None:
        return 0
    need = lib.space_info(msg.spec, msg.batch_first, t, b, msg.seq_lengths)["reserve_bytes"]
    if msg.reserve.nbytes < need:
        raise InvalidMessage(f"{type(msg).__name__}.reserve: {msg.reserve.describe()} holds "
                             f"{msg.reserve.nbytes} bytes; this training call needs {need}",
                             field="reserve")
    return need


def _check_states(lib: Any, msg: Any, field: str) -> int:
    """The dropout-states bytes of the device, after checking ``msg.<field>`` holds them."""
    need = lib.dropout_states_bytes()
    ref = getattr(msg, field)
    if ref.nbytes < need:
        raise InvalidMessage(f"{type(msg).__name__}.{field}: {ref.describe()} holds "
                             f"{ref.nbytes} bytes; dropout states need {need} on this device",
                             field=field)
    return need


def _opt(ctx: Any, msg: Any, field: str, out: bool) -> Any:
    ref = getattr(msg, field)
    if ref is None:
        return None
    return ctx.resolve_out(ref, field) if out else ctx.resolve(ref, field)


@handles(RnnForward)
def _forward(ctx: Any, msg: RnnForward, reply: Any) -> None:
    lib = ctx.library(LIBRARY)
    t, b = _dims(msg, msg.x)
    reserve_bytes = _check(lib, msg, "w", t, b)
    states_bytes = _check_states(lib, msg, "dropout_states") if msg.dropout_states else 0
    x, w = ctx.resolve(msg.x, "x"), ctx.resolve(msg.w, "w")
    y = ctx.resolve_out(msg.y, "y")
    ins = {f: _opt(ctx, msg, f, False) for f in ("hx", "cx")}
    outs = {f: _opt(ctx, msg, f, True) for f in ("hy", "cy", "reserve")}
    # the states are read and advanced
    states = _opt(ctx, msg, "dropout_states", False)
    ptr = {f: (a.ptr if a is not None else 0) for f, a in {**ins, **outs}.items()}
    call = RnnCall("fwd", msg.spec, msg.batch_first, t, b, msg.seq_lengths, w.ptr, w.ref.nbytes,
                   x=x.ptr, y=y.ptr, hx=ptr["hx"], cx=ptr["cx"], hy=ptr["hy"], cy=ptr["cy"],
                   reserve=ptr["reserve"], reserve_bytes=reserve_bytes,
                   states=states.ptr if states is not None else 0, states_bytes=states_bytes)
    reads = (x, w, *(a for a in ins.values() if a is not None))
    writes = (y, *(a for a in (*outs.values(), states) if a is not None))
    ctx.run(reply, COMPUTE, reads, writes, lib.run, call)


@handles(RnnBackwardData)
def _backward_data(ctx: Any, msg: RnnBackwardData, reply: Any) -> None:
    lib = ctx.library(LIBRARY)
    t, b = _dims(msg, msg.dx)
    reserve_bytes = _check(lib, msg, "w", t, b)
    y, dy, w = (ctx.resolve(getattr(msg, f), f) for f in ("y", "dy", "w"))
    reserve = ctx.resolve(msg.reserve, "reserve")  # read, then updated for the weights pass
    dx = ctx.resolve_out(msg.dx, "dx")
    ins = {f: _opt(ctx, msg, f, False) for f in ("hx", "cx", "dhy", "dcy")}
    outs = {f: _opt(ctx, msg, f, True) for f in ("dhx", "dcx")}
    ptr = {f: (a.ptr if a is not None else 0) for f, a in {**ins, **outs}.items()}
    call = RnnCall("bwd_data", msg.spec, msg.batch_first, t, b, msg.seq_lengths, w.ptr,
                   w.ref.nbytes, y=y.ptr, dy=dy.ptr, dx=dx.ptr, hx=ptr["hx"], cx=ptr["cx"],
                   dhy=ptr["dhy"], dcy=ptr["dcy"], dhx=ptr["dhx"], dcx=ptr["dcx"],
                   reserve=reserve.ptr, reserve_bytes=reserve_bytes)
    reads = (y, dy, w, *(a for a in ins.values() if a is not None))
    writes = (dx, reserve, *(a for a in outs.values() if a is not None))
    ctx.run(reply, COMPUTE, reads, writes, lib.run, call)


@handles(RnnBackwardWeights)
def _backward_weights(ctx: Any, msg: RnnBackwardWeights, reply: Any) -> None:
    lib = ctx.library(LIBRARY)
    t, b = _dims(msg, msg.x)
    reserve_bytes = _check(lib, msg, "dw", t, b)
    x, y, reserve = (ctx.resolve(getattr(msg, f), f) for f in ("x", "y", "reserve"))
    hx = _opt(ctx, msg, "hx", False)
    # accumulating reads dw's old contents; otherwise dw is only written
    dw = ctx.resolve(msg.dw, "dw") if msg.accumulate else ctx.resolve_out(msg.dw, "dw")
    call = RnnCall("bwd_weights", msg.spec, msg.batch_first, t, b, msg.seq_lengths, dw.ptr,
                   dw.ref.nbytes, x=x.ptr, y=y.ptr, hx=hx.ptr if hx is not None else 0,
                   reserve=reserve.ptr, reserve_bytes=reserve_bytes, accumulate=msg.accumulate)
    reads = (x, y, reserve, *((hx,) if hx is not None else ()))
    ctx.run(reply, COMPUTE, reads, (dw,), lib.run, call)


@handles(RnnDropoutInit)
def _dropout_init(ctx: Any, msg: RnnDropoutInit, reply: Any) -> None:
    lib = ctx.library(LIBRARY)
    nbytes = _check_states(lib, msg, "states")
    states = ctx.resolve_out(msg.states, "states")
    ctx.run(reply, COMPUTE, (), (states,), lib.init_dropout, states.ptr, nbytes, msg.seed)


@handles(RnnWeightInfo)
def _weight_info(ctx: Any, msg: RnnWeightInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library(LIBRARY).weight_info(msg.spec))


@handles(RnnSpaceInfo)
def _space_info(ctx: Any, msg: RnnSpaceInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library(LIBRARY).space_info(
        msg.spec, msg.batch_first, msg.seq_len, msg.batch, msg.seq_lengths))


@handles(RnnCacheInfo)
def _cache_info(ctx: Any, msg: RnnCacheInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library(LIBRARY).cache_info())
