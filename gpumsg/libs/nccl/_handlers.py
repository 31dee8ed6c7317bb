"""Handlers of the collective messages (device thread)."""

from __future__ import annotations

from typing import Any

from ...messages.nccl import Collective, CommAbort, CommInit, CommPoll
from ...service._registry import COMPUTE, handles


@handles(CommInit)
def _init(ctx: Any, msg: CommInit, reply: Any) -> None:
    ctx.library("nccl").init(msg.comm, msg.rank, msg.nranks, msg.unique_id)
    ctx.reply_now(reply, msg.rank)


@handles(Collective)
def _collective(ctx: Any, msg: Collective, reply: Any) -> None:
    reads, writes, ops = [], [], []
    for i, o in enumerate(msg.ops):
        s = ctx.resolve(o.send, f"ops[{i}].send") if o.send is not None else None
        r = ctx.resolve_out(o.recv, f"ops[{i}].recv") if o.recv is not None else None
        if s is not None:
            reads.append(s)
        if r is not None:
            writes.append(r)
        ops.append((o, s.ptr if s is not None else 0, r.ptr if r is not None else 0))
    nccl = ctx.library("nccl")
    ctx.run(reply, COMPUTE, tuple(reads), tuple(writes), nccl.run, msg.comm, ops)


@handles(CommAbort)
def _abort(ctx: Any, msg: CommAbort, reply: Any) -> None:
    ctx.library("nccl").abort(msg.comm, msg.destroy)
    ctx.reply_now(reply, None)


@handles(CommPoll)
def _poll(ctx: Any, msg: CommPoll, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("nccl").poll(msg.comm))
