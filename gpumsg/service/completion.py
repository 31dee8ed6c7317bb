"""Completion: observing finished work off the device thread.

Each stream has a :class:`CompletionWatcher`: a thread that waits, in issue order, on the events
the device thread records at the end of each batch, then answers that batch's futures. The wait
(``cuEventSynchronize``) releases the GIL, so the device thread keeps issuing meanwhile.

A completion entry is ``(reply, value, finish, op)``: ``finish``, when given, runs here as
``finish(value, None)`` and returns the value to answer with, or as ``finish(None, error)`` to
clean up when the work failed. ``op`` is the traced :class:`~gpumsg.service.trace.OpRecord` or
None.
"""

from __future__ import annotations

import threading
import time
from queue import SimpleQueue
from typing import Any

from ..errors import CudaError, GpuError

__all__ = ["CompletionWatcher", "Entry"]

Entry = tuple  # (reply, value, finish, op)


class CompletionWatcher:
    """Answers one stream's completed operations, in order."""

    def __init__(self, ctx: Any, slot: Any) -> None:
        self._ctx = ctx
        self._slot = slot
        self._queue: SimpleQueue = SimpleQueue()
        self.completed = 0
        self._thread = threading.Thread(
            target=self._run, daemon=True,
            name=f"gpumsg-{ctx.props.ordinal}-{slot.name}-completion")
        self._thread.start()

    def submit(self, event: Any, entries: list[Entry]) -> None:
        self._queue.put((event, entries))

    def stop(self) -> None:
        """Finish what was submitted, then exit."""
        self._queue.put(None)

    def join(self, timeout: float | None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
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
            event, entries = item
            error: GpuError | None = None
            try:
                backend.event_synchronize(event)
            except CudaError as exc:
                error = ctx.on_async_error(exc, entries)
            if error is None:
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
            else:
                fail_entries(entries, error)
            spare.append(event)
            self.completed += len(entries)
            # drop the group before blocking again (its replies keep buffers alive)
            item = entries = reply = value = finish = op = None  # type: ignore[assignment]


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
