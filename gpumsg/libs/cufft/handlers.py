"""Handlers of the cuFFT messages (device thread): look the plan up (made on a miss), then
issue the execution(s) and the optional scaling through the envelope on the compute stream."""

from __future__ import annotations

from typing import Any

from ...errors import GraphCaptureError
from ...messages.fft import FftCacheConfig, FftCacheInfo, FftExec, FftPlan
from ...service.registry import COMPUTE, handles

__all__: list[str] = []


@handles(FftPlan)
def _plan(ctx: Any, msg: FftPlan, reply: Any) -> None:
    plan, hit = ctx.library("cufft").plan(msg.spec)
    ctx.reply_now(reply, {"workspace": plan.work_bytes, "hit": hit})


@handles(FftExec)
def _exec(ctx: Any, msg: FftExec, reply: Any) -> None:
    spec = msg.spec
    x = ctx.resolve(msg.x, "x")
    out = x if spec.inplace else ctx.resolve_out(msg.out, "out")
    lib = ctx.library("cufft")
    capture = ctx.capture is not None
    if capture and not lib.cached(spec):
        # making a plan allocates device memory, which a stream capture forbids
        raise GraphCaptureError("FftExec cannot be recorded with a plan that does not exist "
                                "yet: make it first (dev.fft.plan(...).result()) and record "
                                "after", "FftExec")
    plan, _ = lib.plan(spec)
    if capture:
        plan.captured = True  # the graph's nodes use its memory: kept until the device closes
    direction = -1 if msg.direction == "forward" else 1
    writes = (out, x) if spec.kind == "c2r" and not spec.inplace else (out,)
    xp = x.ptr + msg.x_offset * plan.in_item
    op = out.ptr + msg.out_offset * plan.out_item
    xs, os_ = msg.x_step * plan.in_item, msg.out_step * plan.out_item
    if msg.scale == 1.0:
        ctx.run(reply, COMPUTE, (x,), writes, lib.execute, plan, direction, xp, op, msg.repeat,
                xs, os_)
        return
    execute, scale, repeat, factor = lib.execute, lib.scale, msg.repeat, msg.scale
    ref = msg.out

    def launch(stream: Any) -> None:
        execute(stream, plan, direction, xp, op, repeat, xs, os_)
        scale(stream, ref.dtype, out.ptr, ref.size, factor)

    ctx.run(reply, COMPUTE, (x,), writes, launch)


@handles(FftCacheInfo)
def _cache_info(ctx: Any, msg: FftCacheInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cufft").info())


@handles(FftCacheConfig)
def _cache_config(ctx: Any, msg: FftCacheConfig, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cufft").configure(msg.capacity, msg.clear))
