"""The device thread: one OS thread per device drains its mailbox and dispatches each message.

The mailbox holds ``(message, reply)`` pairs; it is FIFO and the device thread is its only
consumer, so a message may use a buffer that an earlier message creates without waiting for it.
Messages are taken in batches (everything waiting, up to ``MAX_BATCH``); at the end of a batch
each stream gets one completion event for all the batch's work on it. Between batches the device
thread answers the batches whose events have completed; before it blocks on an empty mailbox it
waits a little for the last ones (:meth:`DeviceContext.settle`), and hands what still runs to the
completion threads (see :mod:`gpumsg.service._completion`).
"""

from __future__ import annotations

import threading
import traceback
from queue import Empty, SimpleQueue
from typing import Any

from ..config import setting
from ..errors import CudaError, GpuError, InvalidMessage
from . import _handlers as _device_handlers  # noqa: F401  (registers the device messages)
from ._backpressure import Backpressure, configured, exempt_this_thread
from ._context import DeviceContext
from ._registry import HANDLERS

__all__ = ["DeviceWorker", "serve", "STOP", "MAX_BATCH"]

MAX_BATCH = 64
STOP = object()  # the message that ends the loop (queued by close)


def _fail(reply: Any, error: BaseException) -> None:
    if reply is not None:
        reply.set_exception(error)


def _drop_locals(error: BaseException) -> None:
    """Clear the local variables of the finished frames in ``error``'s traceback (and its
    causes'). A failure outlives its message (a buffer's ``failed``, a future's exception), and
    a handler's frame holds the message's reply, which can hold the very buffer that failed:
    kept through the traceback, that buffer was never dropped, so never freed. The traceback's
    lines stay."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)  # the running frame (this loop) is skipped
        error = error.__cause__ or error.__context__  # type: ignore[assignment]


def serve(ctx: DeviceContext, mailbox: SimpleQueue, shutdown_timeout: float | None,
          on_dispatch: Any = None, backpressure: Backpressure | None = None,
          dropped: list | None = None) -> None:
    """Run the device loop until :data:`STOP` arrives, then shut the context down.

    ``on_dispatch(reply)`` is called as each message starts (a worker process counts them for
    its supervisor). In a worker process the loop ends as soon as the context is poisoned: the
    supervisor replays, on a new worker, what was not started. ``backpressure`` (thread
    isolation) is relieved between batches: callers paused on a full mailbox are woken once
    the device thread has taken most of it. ``dropped`` (thread isolation) collects the
    references of buffers that died on this thread unnamed (:meth:`DeviceWorker.drop`): they
    are freed at the end of each turn, without a message."""
    dispatch = HANDLERS  # filled at import time: the device messages and every library
    get, get_nowait, qsize = mailbox.get, mailbox.get_nowait, mailbox.qsize
    state = ctx.state
    stop = False
    while not stop:
        # odd while blocked for the next batch, even while handling one: with an empty mailbox
        # and nothing in flight an unchanged odd value means that every message posted before
        # has been handled and its work completed (client/dlpack.py exports without a message
        # then). Between get() returning and the increment no other thread runs, whatever the
        # switch interval: this thread has just taken the GIL, and the two statements neither
        # call Python code nor allocate a tracked object (no garbage collection), so the
        # interpreter reaches no point where it would hand the GIL over. A free-threaded build
        # would need a lock here.
        ctx.epoch += 1
        item = get()
        ctx.epoch += 1
        if dropped:  # died since the last turn's end (on this thread, answering late)
            _free_dropped(ctx, dropped)
        batch = [item]
        n = qsize()
        if n:
            for _ in range(min(n, MAX_BATCH - 1)):
                batch.append(get_nowait())
        for msg, reply in batch:
            if msg is STOP:
                stop = True
                continue
            if state.poisoned is not None:
                if ctx.in_worker_process:
                    return
                _fail(reply, state.poisoned)
                continue
            if on_dispatch is not None:
                on_dispatch(reply)
            handler = dispatch.get(type(msg))
            if handler is None:
                _fail(reply, InvalidMessage(f"the device has no handler for "
                                            f"{type(msg).__name__}"))
                continue
            ctx.current = msg
            try:
                handler(ctx, msg, reply)
            except CudaError as exc:
                _drop_locals(exc)
                if exc.sticky:
                    error = ctx.poison(exc, f"raised by {type(msg).__name__}")
                    ctx.fail_pending(error)
                    _fail(reply, error)
                else:
                    ctx.mark_outputs_failed(msg, exc)
                    _fail(reply, exc)
            except Exception as exc:  # GpuError, or a bug in a handler: fail only this message
                _drop_locals(exc)
                ctx.mark_outputs_failed(msg, exc)
                _fail(reply, exc)
        # drop this batch's references before blocking again: a reply that stayed referenced
        # here would keep its buffer alive (and its Free unsent) until the next message came
        batch = item = msg = reply = None  # type: ignore[assignment]
        ctx.current = None
        if state.poisoned is not None:
            ctx.fail_pending(state.poisoned)
            if ctx.in_worker_process:
                return
            continue
        try:
            ctx.flush()
            ctx.poll()
            if backpressure is not None:
                backpressure.relieve()  # after this batch's records, before any wait below
            if qsize():
                ctx.reap()  # answer what has completed, then on to the next batch
            else:
                ctx.settle(qsize)  # about to block: answer what completes soon, hand the rest
        except CudaError as exc:
            if exc.sticky:
                ctx.fail_pending(ctx.poison(exc, "observed between batches"))
        if dropped:  # buffers that died in this turn (replies answered, the batch let go)
            _free_dropped(ctx, dropped)
    ctx.shutdown(shutdown_timeout)


def _free_dropped(ctx: DeviceContext, dropped: list) -> None:
    """Free the buffers in ``dropped`` (emptied). Each died on the device thread with no
    message but its producer ever naming it, and that producer was handled (its reply held
    the buffer until answered): nothing left in the mailbox can use it."""
    free = _device_handlers.free_buffer
    while dropped:
        ref = dropped.pop()
        if ctx.state.poisoned is not None:
            continue
        try:
            free(ctx, ref)
        except CudaError as exc:
            if exc.sticky:
                ctx.fail_pending(ctx.poison(exc, "raised freeing a dropped buffer"))
        except GpuError:  # noqa: S110 - as a Free nobody waits for: nothing to answer
            pass


class DeviceWorker:
    """Thread isolation: the device loop on a daemon thread of the calling process."""

    def __init__(self, backend: Any, state: Any, memory: Any, trace: Any = None,
                 allow_fault_injection: bool = False, shutdown_timeout: float | None = 60.0,
                 pinned_staging_limit: int = 256 << 20) -> None:
        self.mailbox: SimpleQueue = SimpleQueue()
        #: callers pause on a full mailbox (service/backpressure.py says why)
        self.backpressure = Backpressure(self.mailbox.qsize, *configured())
        self.state = state
        self.ctx: DeviceContext | None = None
        self._startup_error: BaseException | None = None
        self._ready = threading.Event()
        self._late_lock = threading.Lock()
        self._finished = False  # the loop ended and drained the mailbox
        #: buffers that died on the device thread, never named by a message but their
        #: producer's; the loop frees them (see drop)
        self.dropped: list = []
        self._thread = threading.Thread(
            target=self._run, name=f"gpumsg-device-{backend.ordinal}", daemon=True,
            args=(backend, memory, trace, allow_fault_injection, shutdown_timeout,
                  pinned_staging_limit))
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def _run(self, backend: Any, memory: Any, trace: Any, allow_fault_injection: bool,
             shutdown_timeout: float | None, pinned_staging_limit: int) -> None:
        exempt_this_thread()  # its own done-callbacks' posts must not wait for itself
        try:
            self.ctx = DeviceContext(backend, self.state, memory, trace, allow_fault_injection,
                                     queue_depth=self.mailbox.qsize,
                                     pinned_staging_limit=pinned_staging_limit)
        except BaseException as exc:  # noqa: BLE001 - reported to the opener
            self._startup_error = exc if isinstance(exc, (GpuError, Exception)) else \
                RuntimeError(repr(exc))
            self._ready.set()
            return
        self._ready.set()
        try:
            profile_to = setting("GPUMSG_PROFILE")
            if profile_to:  # a cProfile of the device thread, for performance work
                import cProfile

                prof = cProfile.Profile()
                prof.runcall(serve, self.ctx, self.mailbox, shutdown_timeout,
                             backpressure=self.backpressure, dropped=self.dropped)
                prof.dump_stats(f"{profile_to}.device{backend.ordinal}")
            else:
                serve(self.ctx, self.mailbox, shutdown_timeout, backpressure=self.backpressure,
                      dropped=self.dropped)
        finally:
            self.backpressure.release()  # nothing will relieve a pause any more
            with self._late_lock:
                self._drain()
                self._finished = True

    def _drain(self) -> None:
        """Fail what is left in the mailbox after the loop ended (posts that raced close)."""
        get = self.mailbox.get_nowait
        while True:
            try:
                msg, reply = get()
            except Empty:
                return
            if reply is not None and msg is not STOP:
                _fail(reply, self.state.refusal)

    def late_post(self) -> None:
        """A post found the device refusing work just after putting its message: it may lie
        behind STOP. If the loop has already drained the mailbox, drain it here; otherwise the
        loop's own drain, when it ends, answers it."""
        with self._late_lock:
            if self._finished:
                self._drain()

    @property
    def props(self) -> Any:
        return self.ctx.props  # type: ignore[union-attr]

    @property
    def pinned(self) -> Any:
        """The device's page-locked host pool (the client stages copies through it)."""
        return self.ctx.pinned  # type: ignore[union-attr]

    def submit(self, msg: Any, reply: Any) -> None:
        self.mailbox.put((msg, reply))

    def drop(self, ref: Any) -> bool:
        """A buffer's last reference went (its finalizer); whether it is freed here, without
        a ``Free`` message: only on the device thread itself (a reply answered, a batch let
        go), and only for a buffer no message but its producer names (``named`` false on the
        client), which the caller has checked. Elsewhere the caller posts ``Free``."""
        if threading.get_ident() != self._thread.ident:
            return False
        self.dropped.append(ref)
        return True

    def stop(self) -> None:
        self.mailbox.put((STOP, None))

    def join(self, timeout: float | None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def alive(self) -> bool:
        return self._thread.is_alive()
