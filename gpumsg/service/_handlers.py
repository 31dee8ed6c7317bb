"""Handlers of the device messages (memory, copies, fills, introspection, fault injection)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import (
    FaultInjectionDisabled,
    GpuError,
    GpuRefStale,
    InvalidMessage,
    OutOfBudget,
    OutOfMemory,
)
from ..memory._resource import AsyncPoolResource
from ..messages import cublas, curand, cusolver, cusparse
from ..messages._base import HostRef, Message
from ..messages.device import (
    Alloc,
    AllocPinned,
    AllocThen,
    CloseStream,
    CopyDevice,
    CopyFromHost,
    CopyToHost,
    Free,
    FreePinned,
    InjectFault,
    Memset,
    OnStream,
    OpenLibraries,
    OpenStream,
    SnapshotChildren,
    SnapshotContext,
    SnapshotStream,
    Stats,
    Synchronize,
    SynchronizeStream,
    TrimMemory,
    WatchGeneration,
)
from ._context import DeviceAllocation, DeviceContext
from ._executor import runs_inline
from ._graph import keeps_alive  # also registers the graph messages
from ._placement import EXPLICIT, Placement
from ._registry import COMPUTE, D2H, H2D, HANDLERS, STREAM_INDEX, handles, placed

__all__: list[str] = []


class _Countdown:
    """A reply that answers ``reply`` once it has been answered ``n`` times (one per stream),
    running ``finish`` first; the first failure fails ``reply``."""

    __slots__ = ("n", "reply", "finish", "lock", "done")

    def __init__(self, n: int, reply: Any, finish: Callable[[], None] | None = None) -> None:
        self.n = n
        self.reply = reply
        self.finish = finish
        self.lock = threading.Lock()
        self.done = False

    def set_result(self, _value: Any) -> None:
        with self.lock:
            self.n -= 1
            if self.n or self.done:
                return
            self.done = True
        if self.finish is not None:
            self.finish()
        if self.reply is not None:
            self.reply.set_result(None)

    def set_exception(self, exc: BaseException) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
        if self.finish is not None:
            self.finish()
        if self.reply is not None:
            self.reply.set_exception(exc)


def _after_streams(ctx: DeviceContext, reply: Any, streams: tuple[int, ...],
                   finish: Callable[[], None] | None = None) -> None:
    """Answer ``reply`` (after running ``finish``) once the work already on every one of
    ``streams`` has completed."""
    countdown = _Countdown(len(streams), reply, finish)
    for s in streams:
        ctx.complete(countdown, s)


def _check_mine(ctx: DeviceContext, owner: int, what: str) -> None:
    if owner != ctx.token:
        raise InvalidMessage(f"{what} belongs to another device", field=what)


@handles(Alloc)
def _alloc(ctx: DeviceContext, msg: Alloc, reply: Any) -> None:
    ptr = _allocate(ctx, msg.out)
    if reply is not None:
        reply.set_result(ptr)


@handles(AllocThen)
def _alloc_then(ctx: DeviceContext, msg: AllocThen, reply: Any) -> None:
    reply.set_pointer(_allocate(ctx, msg.out))  # the client's BufferFuture (thread isolation)
    then = msg.then
    handler = HANDLERS.get(type(then))
    if handler is None:
        raise InvalidMessage(f"then: the device has no handler for {type(then).__name__}",
                             field="then")
    ctx.current = then  # what a trace names
    derived = ctx.derived
    derived.once = True  # ``then`` is never sent again: nothing of it is kept by identity
    try:
        handler(ctx, then, reply)
    finally:
        derived.once = False


def _allocate(ctx: DeviceContext, ref: Any) -> int:
    """Allocate the buffer ``ref`` names; its device pointer. A failure is kept where the
    buffer's dependants will find it (they fail naming this cause), then raised."""
    if ref.owner != ctx.token:  # _check_mine, inlined on the path of every allocation
        _check_mine(ctx, ref.owner, "out")
    if ref.generation != ctx.state.generation:
        raise GpuRefStale(f"out: {ref.describe()} is from generation {ref.generation}")
    if ref.id in ctx.buffers:
        raise InvalidMessage(f"out: {ref.describe()} is already allocated", field="out")
    alloc = DeviceAllocation(ref, 0)
    try:
        try:
            alloc.ptr = ctx.memory.allocate(ref.nbytes, ctx.compute.obj)
        except (OutOfBudget, OutOfMemory):
            # buffers nobody holds may still wait for their producer's answer (a reply keeps
            # its buffer until answered, and a caller's turn answers lazily): answer them,
            # free them, and ask once more
            if ctx.reclaim is None or not ctx.reclaim():
                raise
            alloc.ptr = ctx.memory.allocate(ref.nbytes, ctx.compute.obj)
    except GpuError as exc:
        # keep the failure where dependants will find it: they fail naming this cause
        alloc.failed = exc
        alloc.alloc_failed = True
        ctx.buffers[ref.id] = alloc
        raise
    # the allocation is a point in the compute stream: other streams order after it
    alloc.write_stream = ctx.compute.index
    alloc.write_seq = ctx.next_seq(COMPUTE)
    ctx.buffers[ref.id] = alloc
    return alloc.ptr


@handles(Free)
def _free(ctx: DeviceContext, msg: Free, reply: Any) -> None:
    ref = msg.buffer
    _check_mine(ctx, ref.owner, "buffer")
    free_buffer(ctx, ref)
    ctx.reply_now(reply, None)


def free_buffer(ctx: DeviceContext, ref: Any) -> None:
    """Release the buffer ``ref`` names, stream-ordered behind its recorded uses (nothing if
    it is not allocated, or of another generation). ``Free`` does this, and the device loop
    for the buffers dropped on the device thread (service/worker.py)."""
    alloc = ctx.buffers.get(ref.id)
    if alloc is not None and ref.generation == ctx.state.generation:
        del ctx.buffers[ref.id]
        if alloc.ptr and not keeps_alive(ctx, alloc):  # a graph may still replay it
            if alloc.external:  # adopted (DLPack): back to its producer, see service/interop
                ctx.order_after_uses(COMPUTE, alloc)
                alloc.release(ctx)  # type: ignore[attr-defined]
                return
            # on a stream where the buffer is still in use (no event), after every other
            # stream's uses
            placement = ctx.placement
            slot = placement.follow(alloc) if placement is not None else None
            if slot is None:
                slot = ctx.compute
            ctx.order_after_uses(slot.index, alloc)
            ctx.memory.deallocate(alloc.ptr, ref.nbytes, slot.obj)


@handles(CopyFromHost)
def _copy_from_host(ctx: DeviceContext, msg: CopyFromHost, reply: Any) -> None:
    src = msg.src
    if not isinstance(src, HostRef):
        raise InvalidMessage("src: NumPy arrays are staged into host blocks by the client; the "
                             "device takes a HostRef", field="src")
    dst = ctx.resolve_out(msg.dst, "dst")
    host = ctx.host_ptr(src, src.nbytes, "src")
    ctx.run(reply, H2D, (), (dst,), ctx.backend.copy_htod, dst.ptr + msg.dst_offset, host,
            src.nbytes)


@handles(CopyToHost)
def _copy_to_host(ctx: DeviceContext, msg: CopyToHost, reply: Any) -> None:
    if msg.dst is None:
        raise InvalidMessage("dst: the client stages copies without a host destination; the "
                             "device takes a HostRef", field="dst")
    src = ctx.resolve(msg.src, "src")
    host = ctx.host_ptr(msg.dst, msg.nbytes, "dst")
    ctx.run(reply, D2H, (src,), (), ctx.backend.copy_dtoh, host, src.ptr + msg.src_offset,
            msg.nbytes)


@handles(CopyDevice)
def _copy_device(ctx: DeviceContext, msg: CopyDevice, reply: Any) -> None:
    src = ctx.resolve(msg.src, "src")
    dst = ctx.resolve_out(msg.dst, "dst")
    if not msg.nbytes:  # nothing to issue, nor to capture
        ctx.run(reply, COMPUTE, (src,), (dst,), _nothing)
        return
    # a repeated copy (the client sends it as the same message) keeps its launcher, replayed
    # as a CUDA graph (DeviceContext.driver_bound)
    ctx.run(reply, COMPUTE, (src,), (dst,), ctx.derived.get(
        msg, (dst.ptr, src.ptr), lambda: ctx.driver_bound()(
            "copy", ctx.backend.copy_dtod, ctx.compute.obj, dst.ptr + msg.dst_offset,
            src.ptr + msg.src_offset, msg.nbytes)))


@handles(Memset)
def _memset(ctx: DeviceContext, msg: Memset, reply: Any) -> None:
    # issued as it is: a fill replayed as a graph measured 0.4-0.9 µs more of the device
    # thread than cuMemsetD8Async itself (H100), unlike a copy
    dst = ctx.resolve_out(msg.dst, "dst")
    ctx.run(reply, COMPUTE, (), (dst,), ctx.backend.memset, dst.ptr + msg.offset, msg.value,
            msg.nbytes // msg.width, msg.width)


def _nothing(stream: Any) -> None:
    """An operation with no bytes: ordered and answered like any other, nothing issued."""


@handles(Synchronize)
def _synchronize(ctx: DeviceContext, msg: Synchronize, reply: Any) -> None:
    _after_streams(ctx, reply, (*ctx.compute_indices(), H2D, D2H))


def _placement(ctx: DeviceContext) -> Placement:
    """The device's placement (made for explicit streams where the pool has one stream)."""
    if ctx.placement is None:
        ctx.placement = Placement(ctx, False)
    return ctx.placement


@handles(OpenStream)
def _open_stream(ctx: DeviceContext, msg: OpenStream, reply: Any) -> None:
    placement = _placement(ctx)
    if msg.stream in placement.explicit:
        raise InvalidMessage(f"stream: stream {msg.stream} is already open", field="stream")
    least, greatest = ctx.backend.stream_priority_range()
    priority = min(max(msg.priority, greatest), least)
    spare = ctx.__dict__.setdefault("spare_streams", [])
    slot = next((s for s in spare if s.priority == priority), None)
    if slot is not None:  # a closed stream's slot (its ordering state carries over)
        spare.remove(slot)
    else:
        slot = ctx.add_stream(f"stream.{msg.stream}", priority)
        slot.compute = EXPLICIT
    placement.explicit[msg.stream] = slot
    ctx.reply_now(reply, None)


@handles(CloseStream)
def _close_stream(ctx: DeviceContext, msg: CloseStream, reply: Any) -> None:
    placement = ctx.placement
    slot = None if placement is None else placement.explicit.pop(msg.stream, None)
    if slot is not None:
        ctx.__dict__.setdefault("spare_streams", []).append(slot)
    ctx.reply_now(reply, None)


@handles(OnStream)
def _on_stream(ctx: DeviceContext, msg: OnStream, reply: Any) -> None:
    # the loop placed this message on the explicit stream (service/_placement.py)
    then = msg.then
    handler = HANDLERS.get(type(then))
    if handler is None:
        raise InvalidMessage(f"then: the device has no handler for {type(then).__name__}",
                             field="then")
    ctx.current = then  # what a trace names
    handler(ctx, then, reply)


@handles(SynchronizeStream)
def _synchronize_stream(ctx: DeviceContext, msg: SynchronizeStream, reply: Any) -> None:
    placement = ctx.placement
    slot = None if placement is None else placement.explicit.get(msg.stream)
    if slot is None:
        raise InvalidMessage(f"stream: no stream {msg.stream} on this device (closed, or "
                             "opened on another device)", field="stream")
    ctx.complete(reply, slot.index)


@handles(Stats)
def _stats(ctx: DeviceContext, msg: Stats, reply: Any) -> None:
    ctx.reply_now(reply, ctx.load())


@handles(SnapshotContext)
def _snapshot_context(ctx: DeviceContext, msg: SnapshotContext, reply: Any) -> None:
    ctx.reply_now(reply, ctx.backend.context_handle())


@handles(SnapshotStream)
def _snapshot_stream(ctx: DeviceContext, msg: SnapshotStream, reply: Any) -> None:
    ctx.reply_now(reply, ctx.streams[STREAM_INDEX[msg.stream]].raw)


@handles(SnapshotChildren)
def _snapshot_children(ctx: DeviceContext, msg: SnapshotChildren, reply: Any) -> None:
    out: dict[str, int] = {"context": ctx.backend.context_handle()}
    for slot in ctx.streams:
        out[f"stream.{slot.name}"] = slot.raw
    for r in ctx.memory.stack():
        if isinstance(r, AsyncPoolResource):
            out["mempool"] = r.raw_handle()
    for name, lib in ctx.libraries.items():
        out[name] = lib.raw_handle
    ctx.reply_now(reply, out)


@handles(OpenLibraries)
def _open_libraries(ctx: DeviceContext, msg: OpenLibraries, reply: Any) -> None:
    for name in msg.names:
        ctx.library(name)
    ctx.reply_now(reply, tuple(ctx.libraries))


@handles(WatchGeneration)
def _watch_generation(ctx: DeviceContext, msg: WatchGeneration, reply: Any) -> None:
    if reply is not None:
        ctx.state.watch(msg.after, reply)


@handles(AllocPinned)
def _alloc_pinned(ctx: DeviceContext, msg: AllocPinned, reply: Any) -> None:
    ctx.reply_now(reply, ctx.pinned.allocate(msg.nbytes, msg.staging).id)


@handles(FreePinned)
def _free_pinned(ctx: DeviceContext, msg: FreePinned, reply: Any) -> None:
    # copies already sent may still read or write the block: answer behind them
    _after_streams(ctx, reply, (H2D, D2H))


@handles(TrimMemory)
def _trim(ctx: DeviceContext, msg: TrimMemory, reply: Any) -> None:
    ctx.memory.trim()
    ctx.pinned.trim()
    ctx.forget_driver_view()
    ctx.reply_now(reply, ctx.memory.usage().reserved)


@handles(InjectFault)
def _inject_fault(ctx: DeviceContext, msg: InjectFault, reply: Any) -> None:
    if not ctx.allow_fault_injection:
        raise FaultInjectionDisabled(
            "InjectFault refused: open the device with allow_fault_injection=True")
    stream = STREAM_INDEX[msg.stream]
    if msg.kind == "oom":
        ctx.backend.inject_oom(msg.count)
        ctx.reply_now(reply, None)
    elif msg.kind == "illegal_address":
        ctx.run(reply, stream, (), (), ctx.backend.inject_illegal_address)
    elif msg.kind == "hang":
        ctx.run(reply, stream, (), (), ctx.backend.inject_hang, msg.seconds)
    elif msg.kind == "stall":
        time.sleep(msg.seconds)  # on purpose: the device thread is stuck
        ctx.reply_now(reply, None)
    else:  # exit
        if not ctx.in_worker_process:
            raise InvalidMessage("kind: 'exit' ends the worker process and needs "
                                 "isolation='process'", field="kind")
        os._exit(17)


# what a caller that finds the device idle may run on its own thread (service/executor.py):
# all but InjectFault, whose stall stands for a stuck device thread
runs_inline(Alloc, AllocThen, Free, CopyFromHost, CopyToHost, CopyDevice, Memset, Synchronize,
            Stats, SnapshotContext, SnapshotStream, SnapshotChildren, OpenLibraries,
            WatchGeneration, AllocPinned, FreePinned, TrimMemory, OpenStream, CloseStream,
            SynchronizeStream)
# what may run on any compute stream of the pool (service/_placement.py): a Free chooses its
# stream itself; AllocThen and OnStream are placed by the message they carry
placed(Alloc, AllocThen, OnStream, CopyDevice, Memset)


def _messages_of(*modules: Any) -> list[type]:
    return [v for m in modules for v in vars(m).values()
            if isinstance(v, type) and issubclass(v, Message) and v.__module__ == m.__name__]


# besides the capturable ones, every message of these libraries: their handlers enqueue work
# (with checks at completion: reductions, info words, counts) and never wait for another
# thread. Peer copies and NCCL, whose handlers meet another device's, are not among them.
runs_inline(*_messages_of(cublas, curand, cusolver, cusparse))
