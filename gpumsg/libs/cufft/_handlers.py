"""Handlers of the cuFFT messages (device thread): look the plan up (made on a miss), then
issue the execution(s) and the optional scaling through the envelope on the compute stream.

A repeated FftExec (the client sends a repeated ``execute`` as the same message object) keeps
what it derives, per message and buffer pointers, in the device's ``DerivedMemo``
(:class:`~gpumsg.libs.cufft._handle.ExecCall`: the plan, the byte pointers, the launcher of the
call, replayed as a CUDA graph on the GPU): the handler then resolves the buffers, and the
envelope issues the kept launcher. A message sent once finds the ExecCall of an earlier one with
the same spec, pointers and arguments (:func:`~gpumsg.libs.cufft._handle.exec_call`)."""

from __future__ import annotations

from typing import Any

from ...errors import GraphCaptureError
from ...messages.cufft import FftCacheConfig, FftCacheInfo, FftExec, FftPlan, FftReplayInfo
from ...service._plans import merge_info
from ...service._registry import COMPUTE, handles
from ._handle import exec_call

__all__: list[str] = []


@handles(FftPlan)
def _plan(ctx: Any, msg: FftPlan, reply: Any) -> None:
    plan, hit = ctx.library("cufft").plan(msg.spec)
    ctx.reply_now(reply, {"workspace": plan.work_bytes, "hit": hit})


@handles(FftExec)
def _exec(ctx: Any, msg: FftExec, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    out = x if msg.spec.inplace else ctx.resolve_out(msg.out, "out")
    lib = ctx.library("cufft")
    if msg.preserve:
        _exec_on_copy(ctx, msg, reply, x, out, lib)
        return
    xp, op = x.ptr, out.ptr
    call = ctx.derived.get(msg, (xp, op), lambda: exec_call(lib, msg, xp, op, ctx.compute.obj))
    # a dev.graph() recording: the plan must exist already (making one allocates device
    # memory, which a stream capture forbids), and the graph's nodes use its memory, so it is
    # kept until the device closes. (The launcher issues the call itself while a recording is
    # on: no replay graph is made or launched inside another capture.)
    recording = ctx.capture is not None
    if recording and not lib.cached(msg.spec):
        raise GraphCaptureError("FftExec cannot be recorded with a plan that does not exist "
                                "yet: make it first (dev.cufft.plan(...).result()) and record "
                                "after", "FftExec")
    launch = call.launcher()
    if recording:
        call.plan.captured = True
    ctx.run(reply, COMPUTE, (x,), (out, x) if call.overwrites_input else (out,), launch)


def _exec_on_copy(ctx: Any, msg: FftExec, reply: Any, x: Any, out: Any, lib: Any) -> None:
    """An out-of-place C2R that leaves ``x`` as it was (``preserve``): the transform reads a
    copy of x's buffer in memory of the device's pool, allocated, copied, transformed and freed
    in the order of the compute stream. One message instead of the client's allocation, copy
    and free around the transform; the copy's address recurs (the pool hands it out again), so
    the execution still finds its plan and replay (:func:`exec_call`)."""
    if ctx.capture is not None:
        raise GraphCaptureError("FftExec with preserve cannot be recorded in a graph (its copy "
                                "is allocated at the call): record the copy and the transform "
                                "on buffers of your own", "FftExec")
    nbytes = msg.x.nbytes
    stream = ctx.compute.obj
    memory = ctx.memory
    copy = memory.allocate(nbytes, stream)
    try:
        call = exec_call(lib, msg, copy, out.ptr, stream)
        launch = call.launcher()
        copy_dtod = ctx.backend.copy_dtod
        src = x.ptr

        def run(s: Any) -> None:
            copy_dtod(s, copy, src, nbytes)
            launch(s)

        ctx.run(reply, COMPUTE, (x,), (out,), run)
    finally:
        memory.deallocate(copy, nbytes, stream)  # behind the transform, in stream order


@handles(FftCacheInfo)
def _cache_info(ctx: Any, msg: FftCacheInfo, reply: Any) -> None:
    infos = ctx.over_handles("cufft", lambda h: h.info())  # one per stream used
    ctx.reply_now(reply, merge_info(infos or [ctx.library("cufft").info()]))


@handles(FftCacheConfig)
def _cache_config(ctx: Any, msg: FftCacheConfig, reply: Any) -> None:
    ctx.library("cufft")  # the first stream's, at least
    # each handle on its own stream: an evicted plan's work area is freed behind its work
    ctx.reply_now(reply, merge_info(ctx.over_handles(
        "cufft", lambda h: h.configure(msg.capacity, msg.clear))))


@handles(FftReplayInfo)
def _replay_info(ctx: Any, msg: FftReplayInfo, reply: Any) -> None:
    infos = ctx.over_handles("cufft", lambda h: h.replay_info())  # none made here
    ctx.reply_now(reply, merge_info(infos) if infos else {"enabled": None})
