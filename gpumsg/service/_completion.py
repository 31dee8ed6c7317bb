"""Completion: answering finished work, on the device thread when it is already done, else on a
watcher thread.

At the end of each batch the device thread records one event per stream with new work. It keeps
those batches itself and, between batches, asks each stream's oldest event whether it has
completed (``cuEventQuery``, about 1 µs): a completed batch is answered there and then, with no
thread handover. Before it would block on an empty mailbox it keeps asking for a short while
(:data:`~gpumsg.service._context.SETTLE_SECONDS`, leaving as soon as a message arrives); what is
still running after that goes to the stream's :class:`CompletionWatcher`, a thread that waits
on the event (``cuEventSynchronize`` releases the GIL) and answers the batch. So the device
thread never waits on work that other messages queue behind, and a stream's batches are
answered in issue order: once a stream has a batch at its watcher, its later batches follow it
there until the watcher has caught up.

A completion entry is ``(reply, value, finish, op)``: ``finish``, when given, runs as
``finish(value, None)`` and returns the value to answer with, or as ``finish(None, error)`` to
clean up when the work failed. ``op`` is the traced :class:`~gpumsg.service._trace.OpRecord` or
None.
"""

from __future__ import annotations

import threading
import time
from queue import Empty, SimpleQueue
from typing import Any

from ..errors import CudaError, GpuError
from ._backpressure import exempt_this_thread

__all__ = ["CompletionWatcher", "Entry", "answer_entries", "fail_entries"]

Entry = tuple  # (reply, value, finish, op)


def answer_entries(entries: list[Entry], trace: Any) -> None:
    """Answer a completed batch's entries, in order."""
    for reply, value, finish, op in entries:
        if op is not None:
            trace.before_complete(op)
        if finish is not None:
            try:
                value = finish(value, None)
            except BaseException as exc:  # noqa: BLE001 - the op's own failure
                if reply is not None:
                    reply.set_exception(exc)
                continue
        if reply is not None:
            reply.set_result(value)
        if op is not None:
            op.t_complete = time.perf_counter_ns()
            trace.after_complete(op, (op.t_complete - op.t_enqueue) * 1e-9)


class CompletionWatcher:
    """Answers the batches of one stream that the device thread handed over, in order."""

    def __init__(self, ctx: Any, slot: Any) -> None:
        self._ctx = ctx
        self._slot = slot
        self._queue: SimpleQueue = SimpleQueue()
        self.completed = 0  # entries answered here
        self.batches = 0  # batches answered here (the device thread counts those it handed)
        self._lock = threading.Lock()
        self._current: list[Entry] | None = None  # the batch whose event is being waited on
        self._abandoned: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"gpumsg-{ctx.props.ordinal}-{slot.name}-completion")
        self._thread.start()

    def submit(self, event: Any, entries: list[Entry], seq: int) -> None:
        """Answer ``entries`` when ``event`` (covering the stream's operations up to ``seq``)
        has completed."""
        self._queue.put((event, entries, seq))

    def stop(self) -> None:
        """Finish what was submitted, then exit."""
        self._queue.put(None)

    def join(self, timeout: float | None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        exempt_this_thread()  # done-callbacks run here; their posts must not wait on the mailbox
        ctx = self._ctx
        backend = ctx.backend
        trace = ctx.trace
        try:
            backend.make_current()
        except GpuError:
            pass  # a poisoned context: the first event wait reports it
        spare = self._slot.spare_events
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            event, entries, seq = item
            with self._lock:
                if self._abandoned is not None:
                    fail_entries(entries, self._abandoned)
                    continue
                self._current = entries
            error: GpuError | None = None
            try:
                backend.event_synchronize(event)
            except CudaError as exc:
                error = ctx.on_async_error(exc, entries)
            with self._lock:
                mine, self._current = self._current is not None, None
            if not mine:  # abandon() failed the batch meanwhile
                continue
            # counted before answering: a waiter the answer wakes reads the count at once
            self.completed += len(entries)
            self.batches += 1
            if error is None:
                if seq > self._slot.done_seq:
                    self._slot.done_seq = seq
                answer_entries(entries, trace)
            else:
                fail_entries(entries, error)
            spare.append(event)
            # drop the group before blocking again (its replies keep buffers alive)
            item = entries = None  # type: ignore[assignment]


    def abandon(self, error: BaseException) -> None:
        """Shutdown gave up waiting (a hung kernel): fail the batch being waited on and every
        batch queued behind it with ``error``, so that no caller waits for ever. If the wait
        ever returns, nothing more is answered."""
        with self._lock:
            self._abandoned = error
            current, self._current = self._current, None
        if current:
            fail_entries(current, error)
        while True:
            try:
                item = self._queue.get_nowait()
            except Empty:
                break
            if item is not None:
                fail_entries(item[1], error)
        self._queue.put(None)  # the stop request drained above


def fail_entries(entries: list[Entry], error: BaseException) -> None:
    """Fail every entry with ``error``, letting each one's ``finish`` clean up."""
    for reply, _value, finish, op in entries:
        if finish is not None:
            try:
                finish(None, error)
            except BaseException:  # noqa: BLE001 - cleanup must not stop the others
                pass
        if op is not None:
            op.error = error
        if reply is not None:
            reply.set_exception(error)
