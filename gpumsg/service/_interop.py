"""Device-thread side of DLPack: ordering a consumer after gpumsg's uses of a buffer
(``ExportSync``) and adopting external memory as a buffer (``Adopt``). The client side is
``client/dlpack.py`` (which also orders gpumsg after a consumer that deletes its tensor).

Nothing here waits on the GPU. A CUDA consumer's stream is ordered with events: the fence event
of each gpumsg stream that used the buffer (recorded lazily, as the envelope does) and one
``cuStreamWaitEvent`` per such stream on the consumer's stream. A host consumer (the
simulator's kDLCPU export) is answered by the completion path once those uses completed.

Adopted memory belongs to its producer: an :class:`ImportedAllocation` is never given to the
memory resource. Freeing it orders the compute stream after its uses and, once the compute
stream has completed them, calls the release the client registered (which calls the DLPack
deleter, letting the producer's tensor go).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from ..errors import GpuRefStale, InvalidMessage
from ..messages.interop import HOST_CONSUMER, NO_SYNC, Adopt, ExportSync
from ._context import DeviceAllocation, DeviceContext
from ._executor import runs_inline
from ._registry import COMPUTE, handles

__all__ = ["ImportedAllocation", "register_release", "run_release", "PER_THREAD_STREAM"]

_log = logging.getLogger("gpumsg")
#: CU_STREAM_PER_THREAD: the calling thread's default stream, so the client waits on it itself
PER_THREAD_STREAM = 2
_release_ids = itertools.count(1)
_releases: dict[int, Callable[[], None]] = {}
_releases_lock = threading.Lock()


def register_release(fn: Callable[[], None]) -> int:
    """Keep ``fn`` (which gives adopted memory back to its producer) under a token an
    :class:`~gpumsg.messages.interop.Adopt` message can carry as plain data."""
    token = next(_release_ids)
    with _releases_lock:
        _releases[token] = fn
    return token


def run_release(token: int) -> None:
    """Call and forget the release registered under ``token`` (once; later calls do nothing)."""
    with _releases_lock:
        fn = _releases.pop(token, None)
    if fn is not None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - a producer's deleter failing must not stop the device
            _log.exception("DLPack release %d failed", token)


class _Release:
    """A completion entry's reply that runs a release once the stream reached it."""

    __slots__ = ("token",)

    def __init__(self, token: int) -> None:
        self.token = token

    def set_result(self, _value: Any) -> None:
        run_release(self.token)

    def set_exception(self, _exc: BaseException) -> None:
        # the context failed: the GPU will not touch the memory again, the producer may have it
        run_release(self.token)


class ImportedAllocation(DeviceAllocation):
    """Memory adopted from a DLPack producer. ``readonly`` refuses every write (the envelope
    checks it); freeing it releases the producer instead of the memory resource."""

    __slots__ = ("readonly", "token", "host_ptr")
    external = True

    def __init__(self, ref: Any, ptr: int, readonly: bool, token: int, host_ptr: int) -> None:
        super().__init__(ref, ptr)
        self.readonly = readonly
        self.token = token
        self.host_ptr = host_ptr

    def release(self, ctx: DeviceContext) -> None:
        """Free: the compute stream already waits for every use (``order_after_uses``); the
        producer gets its memory back when the compute stream has run that far."""
        if ctx.backend.kind == "sim":
            ctx.backend.forget_external(ctx.compute.obj, self.ptr)
        ctx.complete(_Release(self.token), COMPUTE)

    def drop(self, ctx: DeviceContext) -> None:
        """At shutdown, after every stream was synchronized."""
        if ctx.backend.kind == "sim":
            ctx.backend.forget_external(None, self.ptr)
        run_release(self.token)


def _foreign_stream(ctx: DeviceContext, handle: int) -> Any:
    """The backend stream object for a consumer's raw CUstream handle. A handle other than
    the legacy default stream's (1) is the address of the driver's stream object, which the
    driver dereferences: an address where this process maps no memory is refused here (it
    would end the process); one where it maps other memory cannot be told apart (as in every
    DLPack producer, the consumer must pass a live stream of this context)."""
    if ctx.backend.kind != "cuda":
        raise InvalidMessage("stream: the simulator's DLPack peers are on the host (kDLCPU): "
                             "there is no consumer stream to order", field="stream")
    if handle != LEGACY_STREAM and not _mapped(handle):
        raise InvalidMessage(f"stream: {handle:#x} is not a CUstream of this process (no "
                             "memory is mapped at that address); pass the consumer's stream "
                             "handle, 1 for the legacy default stream or 2 for the per-thread "
                             "one", field="stream")
    from cuda.bindings import driver

    return driver.CUstream(handle)


#: CU_STREAM_LEGACY: the legacy default stream's handle
LEGACY_STREAM = 1
#: [the descriptor of /proc/self/mem, or -1 where it cannot be opened: nothing is checked]
_MEM: list[int] = []


def _mapped(address: int) -> bool:
    """Whether this process maps readable memory at ``address``: a read of one byte through
    ``/proc/self/mem`` fails (EIO) where it does not. True where that file cannot be opened."""
    if not _MEM:
        try:
            _MEM.append(os.open("/proc/self/mem", os.O_RDONLY))
        except OSError:
            _MEM.append(-1)
    if _MEM[0] < 0:
        return True
    try:
        return len(os.pread(_MEM[0], 1, address)) == 1
    except (OSError, OverflowError, ValueError):
        return False


def _uses(a: DeviceAllocation) -> list[tuple[int, int]]:
    """(stream, sequence number) of the last use of ``a`` per stream: its last write and the
    reads since."""
    last: dict[int, int] = {}
    if a.write_stream >= 0 and a.write_seq > 0:
        last[a.write_stream] = a.write_seq
    for s, seq in a.reads.items():
        if seq > last.get(s, 0):
            last[s] = seq
    return list(last.items())


class _Countdown:
    __slots__ = ("n", "reply", "value", "lock")

    def __init__(self, n: int, reply: Any, value: Any) -> None:
        self.n, self.reply, self.value = n, reply, value
        self.lock = threading.Lock()

    def set_result(self, _v: Any) -> None:
        with self.lock:
            self.n -= 1
            last = self.n == 0
        if last and self.reply is not None:
            self.reply.set_result(self.value)

    def set_exception(self, exc: BaseException) -> None:
        with self.lock:
            first = self.n > 0
            self.n = 0
        if first and self.reply is not None:
            self.reply.set_exception(exc)


@handles(ExportSync)
def _export_sync(ctx: DeviceContext, msg: ExportSync, reply: Any) -> None:
    a = ctx.resolve(msg.buffer, "buffer")
    host, keep = 0, None
    if ctx.backend.kind == "sim":
        keep = ctx.backend.view(a.ptr, a.ref.nbytes)  # the bytes, kept alive by the consumer
        host = keep.ctypes.data
    uses = _uses(a)
    stream = msg.stream
    if stream == NO_SYNC or not uses:
        ctx.reply_now(reply, (a.ptr, host, keep))
    elif stream == ctx.compute.raw:  # __cuda_array_interface__: order gpumsg's compute stream
        compute = ctx.compute
        for s, seq in uses:
            if s != COMPUTE and compute.waited[s] < seq:
                ctx._wait(compute, s, seq)
        ctx.reply_now(reply, (a.ptr, host, keep))
    elif stream == HOST_CONSUMER:
        countdown = _Countdown(len(uses), reply, (a.ptr, host, keep))
        for s, _ in uses:
            ctx.complete(countdown, s)
    else:
        consumer = None if stream == PER_THREAD_STREAM else _foreign_stream(ctx, stream)
        events = []
        for s, seq in uses:
            src = ctx.streams[s]
            if src.fence_event is None or src.fence_seq < seq:
                ctx._record_fence(src, owned=False)
            if consumer is not None:
                ctx.backend.stream_wait_event(consumer, src.fence_event)
            else:  # the per-thread stream is the caller's: it waits on these events itself
                events.append(src.fence_event)
        ctx.reply_now(reply, (a.ptr, host, events if consumer is None else keep))



@handles(Adopt)
def _adopt(ctx: DeviceContext, msg: Adopt, reply: Any) -> None:
    ref = msg.out
    try:
        if ref.owner != ctx.token:
            raise InvalidMessage("out belongs to another device", field="out")
        if ref.generation != ctx.state.generation:
            raise GpuRefStale(f"out: {ref.describe()} is from generation {ref.generation}")
        if ref.id in ctx.buffers:
            raise InvalidMessage(f"out: {ref.describe()} is already allocated", field="out")
        ptr = msg.ptr
        if ctx.backend.kind == "sim":
            ptr = ctx.backend.adopt_external(msg.ptr, ref.nbytes)
        a = ImportedAllocation(ref, ptr, msg.readonly, msg.release, msg.ptr)
    except BaseException:
        run_release(msg.release)
        raise
    # the producer made the compute stream wait for its own work (the DLPack handshake) before
    # this message was posted: that wait counts as a write on the compute stream, so other
    # streams order after a fence recorded from now on (a fence recorded earlier would not
    # cover the producer's work)
    a.write_stream = COMPUTE
    a.write_seq = ctx.next_seq(COMPUTE)
    ctx.buffers[ref.id] = a
    ctx.reply_now(reply, ptr)


runs_inline(ExportSync, Adopt)  # they enqueue waits and answer: a caller's thread may run them
