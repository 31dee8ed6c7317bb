"""Explicit streams: ``dev.stream()``, a compute stream of the caller's own.

A device places independent messages on the streams of its pool by itself
(``service/_placement.py``). A :class:`Stream` is for code that wants to say where work runs,
as ``torch.cuda.Stream`` and ``cupy.cuda.Stream`` users do: inside ``with s:`` every message the
thread sends to the stream's device runs on ``s``. Ordering needs nothing from the caller: a
message on ``s`` that reads or writes a buffer that work on another stream uses still waits for
that work (read-after-write, write-after-read, write-after-write), as everywhere.

The stream is made on the device thread when the object is made (``OpenStream``, posted before
anything sent on it) and given back when it is closed or dropped (``CloseStream``): its slot
then serves a later stream of the same priority, so streams made in a loop do not pile up.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from concurrent.futures import Future
from typing import Any

from ..errors import InvalidMessage
from ..messages.device import CloseStream, OnStream, OpenStream, SynchronizeStream

__all__ = ["Stream"]

_ids = itertools.count(1)
_local = threading.local()  # .pins: {id(device): [stream ids entered on this thread]}
_pin_lock = threading.Lock()


class Stream:
    """A compute stream of the device's own for the caller (see the module). ``priority``
    follows CUDA: lower numbers are scheduled first, 0 is the default, values outside the
    device's range (an H100's is 0 to -5) are clamped. Use it as a context manager; one
    stream may be entered on several threads, and streams nest (the innermost wins)."""

    def __init__(self, device: Any, priority: int = 0) -> None:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidMessage(f"stream: priority: expected an int, got "
                                 f"{type(priority).__name__}", field="priority")
        self.device = device
        self.priority = priority
        self.id = next(_ids)
        self._opened = device.send(OpenStream(self.id, priority))
        self._close = weakref.finalize(self, _close, weakref.ref(device), self.id,
                                       device.generation)

    def __repr__(self) -> str:
        return f"<gpumsg.Stream {self.id} of device {self.device.ordinal}, " \
               f"priority {self.priority}>"

    def __enter__(self) -> Stream:
        if not self._close.alive:
            raise InvalidMessage(f"stream {self.id} is closed", field="stream")
        pins = getattr(_local, "pins", None)
        if pins is None:
            pins = _local.pins = {}
        pins.setdefault(id(self.device), []).append(self.id)
        _pin(self.device, 1)
        return self

    def __exit__(self, *exc: Any) -> None:
        stack = _local.pins[id(self.device)]
        stack.pop()
        if not stack:
            del _local.pins[id(self.device)]
        _pin(self.device, -1)

    def synchronize(self) -> Future:
        """Resolves once everything sent on this stream before has completed."""
        return self.device.send(SynchronizeStream(self.id))

    def wait(self, timeout: float | None = None) -> None:
        """Block until everything sent on this stream before has completed."""
        self.synchronize().result(timeout)

    def close(self) -> None:
        """Give the stream back (work sent on it still runs); idempotent."""
        self._close()

    @property
    def closed(self) -> bool:
        return not self._close.alive


def _close(device_ref: Any, sid: int, generation: int) -> None:
    device = device_ref()
    if device is not None:  # a finalizer: posts without a lock, raises nothing
        device.port.post_unanswered(CloseStream(sid), generation)


def _pin(device: Any, step: int) -> None:
    """Count the ``with stream:`` blocks open on ``device``; while any is, its posts go
    through :func:`post_pinned`."""
    with _pin_lock:
        device._pins += step
        if device._pins == 1 and step == 1:
            device._post = lambda msg, reply: post_pinned(device, msg, reply)
        elif device._pins == 0:
            device._post = device._post_unpinned


def post_pinned(device: Any, msg: Any, reply: Any) -> None:
    """A post while stream blocks are open: the message goes as ``OnStream`` if this thread
    is inside one for ``device`` (a message a graph records stays as it is)."""
    pins = getattr(_local, "pins", None)
    stack = pins.get(id(device)) if pins else None
    if not stack:
        device._post_unpinned(msg, reply)
        return
    recorder = device._recorder
    if recorder is not None and recorder.take(msg, reply):
        return
    device._post_direct(OnStream(stack[-1], msg), reply)
