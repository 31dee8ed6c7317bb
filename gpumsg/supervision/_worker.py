"""The worker process: the same device loop as thread isolation, fed by a socket.

One thread does the work: the device thread reads the client's frames itself when its mailbox
is empty (:class:`SocketMailbox`), and writes the answers of a batch itself, as one frame, when
the batch ends (:class:`Outbox`); answers completed on a watcher thread are written from there.
Writing never blocks (:class:`~gpumsg.supervision._wire.Sender`). So a round trip crosses no
thread inside the worker. Before the device thread blocks on an empty socket with nothing in
flight, it keeps looking for a frame for a moment (:func:`configured_spin`): a caller doing round
trips posts again within that time, and a thread that is still running takes the frame without
being woken. As each message starts, the worker counts it in a shared-memory word
the supervisor reads after a failure, to tell what was in flight from what was never started.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from queue import Empty
from typing import Any

import numpy as np

from .. import libs  # noqa: F401  (registers every library's handlers in this process)
from ..backends import make_backend
from ..config import setting
from ..service._context import SETTLE_SECONDS, DeviceContext
from ..service._state import DeviceState
from ..service._worker import STOP, serve
from ._shm import close_quietly, open_existing
from ._wire import Receiver, Sender, encode, encode_replies, immutable, loads, split_message

__all__ = ["worker_main", "take_environment", "RemoteReply", "SocketMailbox", "Outbox",
           "STOP_SEQ", "configured_spin", "configured_settle", "SPIN_SECONDS",
           "WORKER_SETTLE_SECONDS"]

#: the sequence number of the message that asks the worker to finish and exit
STOP_SEQ = -1
#: decoded messages kept by their pickle (a message sent again is not unpickled again)
_DECODED_MAX = 512
_DECODED_BYTES = 1024

_get_ident = threading.get_ident

#: how long the worker's device thread, idle, keeps looking for the next frame before it blocks
#: on the socket: longer than a caller's turn between two round trips (the reply's way back,
#: the caller's wake-up, its next post: 60-120 µs on the H100's host)
SPIN_SECONDS = 250e-6
#: fewer cores than this: no spin (a spinning worker would take a core the client needs)
_SPIN_MIN_CORES = 4


#: how long the worker's device thread, about to block, keeps waiting for running work itself
#: before it hands it to a completion thread (thread isolation: 150 µs,
#: :data:`~gpumsg.service._context.SETTLE_SECONDS`). Blocked for longer than a few hundred µs,
#: a thread of the H100's host takes ~100 µs to wake (its virtual CPU has gone idle): after a
#: 64 MiB copy (1.2 ms) the next message waited that long for the device thread. In a worker
#: process waiting costs no caller the GIL, only a core (docs/performance.md)
WORKER_SETTLE_SECONDS = 3e-3


def _configured_us(name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` (microseconds; ``0`` or ``off``: 0);
    unset, ``default`` on a machine of at least four cores, else 0. Anything else raises
    ValueError naming it."""
    value = (setting(name) or "").strip().lower()
    if not value:
        return default if (os.cpu_count() or 1) >= _SPIN_MIN_CORES else 0.0
    if value == "off":
        return 0.0
    try:
        us = float(value)
    except ValueError:
        us = -1.0
    if not 0 <= us <= 1e6:
        raise ValueError(f"{name} must be 'off' or microseconds (0 to 1e6), got {value!r}")
    return us * 1e-6


def configured_spin() -> float:
    """The spin of process isolation in seconds: how long the worker's idle device thread, and
    a caller waiting for its answer (supervision/client.py), poll the socket before they block.
    From ``GPUMSG_WORKER_SPIN_US`` (microseconds; ``0`` or ``off`` turns it off); unset,
    :data:`SPIN_SECONDS` on a machine of at least four cores, else 0. Anything else raises
    ValueError naming it."""
    return _configured_us("GPUMSG_WORKER_SPIN_US", SPIN_SECONDS)


def configured_settle() -> float:
    """How long a worker's device thread waits for running work before handing it over, in
    seconds: ``GPUMSG_WORKER_SETTLE_US`` (microseconds); unset, :data:`WORKER_SETTLE_SECONDS`
    on a machine of at least four cores; ``0``, ``off`` or fewer cores: thread isolation's
    :data:`~gpumsg.service._context.SETTLE_SECONDS`. Raises ValueError as
    :func:`configured_spin`."""
    return _configured_us("GPUMSG_WORKER_SETTLE_US", WORKER_SETTLE_SECONDS) or SETTLE_SECONDS


class Outbox:
    """Answers on their way to the client. The device thread's answers wait for the end of
    its batch (:meth:`flush`, called by the mailbox), except the answer of the message being
    handled when no other message is queued behind it: that one goes at once, with whatever
    waited, so that a round trip does not wait for the loop's housekeeping after the handler.
    Any other thread's answers go at once."""

    def __init__(self, sender: Sender) -> None:
        self._sender = sender
        self._items: deque = deque()
        self._owner = _get_ident()
        #: the reply of the message being handled (set as it starts)
        self.current: Any = None
        #: the messages queued on the device thread (the mailbox's deque)
        self.queued: deque = deque()

    def put(self, item: tuple) -> None:
        self._items.append(item)
        if _get_ident() != self._owner:
            self.flush()

    def answer(self, reply: Any, item: tuple) -> None:
        """``put`` for a reply: the current message's goes at once when nothing is queued."""
        self._items.append(item)
        if (reply is self.current and not self.queued) or _get_ident() != self._owner:
            self.flush()

    def flush(self) -> None:
        items = self._items
        if not items:
            return
        batch = []
        pop = items.popleft
        try:
            while True:
                batch.append(pop())
        except IndexError:
            pass
        try:
            frame = encode_replies(batch)
        except Exception:  # noqa: BLE001 - an answer that does not pickle: say so, keep the rest
            frame = b"".join(_encode_each(batch))
        try:
            self._sender.send(frame)
        except OSError:
            pass  # the client is gone: the mailbox reads the end of the stream


def _encode_each(batch: list) -> list[bytes]:
    out = []
    for key, value in batch:
        try:
            out.append(encode_replies([(key, value)]))
        except Exception as exc:  # noqa: BLE001
            if key:
                err = RuntimeError(f"the worker's answer could not be sent: {exc!r}")
                out.append(encode_replies([(-abs(key), err)]))
    return out


class RemoteReply:
    """A reply that travels back to the client."""

    __slots__ = ("seq", "_answer")

    def __init__(self, seq: int, answer: Any) -> None:
        self.seq = seq
        self._answer = answer

    def set_result(self, value: Any) -> None:
        self._answer(self, (self.seq, value))

    def set_exception(self, exc: BaseException) -> None:
        self._answer(self, (-self.seq, exc))


class SocketMailbox:
    """The device loop's mailbox (``get``/``get_nowait``/``qsize`` as a SimpleQueue's), filled
    by the device thread itself from the client's frames. ``get`` first sends the answers of
    the batch that just ended, then waits on the socket if nothing is queued. ``qsize`` (called
    between batches, and while the loop waits a moment for completions) also sends what is
    ready and looks, without waiting, for frames that have arrived, except just after ``get``
    waited for some: everything there was then came in that read. Only the thread that made
    it reads the socket.

    ``spin`` seconds: before ``get`` blocks on the socket, it polls it for that long when
    ``idle()`` says nothing is in flight (batches at the completion watchers need the GIL
    when their events complete: no spinning then)."""

    def __init__(self, receiver: Receiver, outbox: Outbox, spin: float = 0.0,
                 idle: Any = None) -> None:
        self._rx = receiver
        self._outbox = outbox
        self._answer = outbox.answer
        self._items: deque = outbox.queued
        self._fresh = False  # get() has just read the socket
        self._ended = False  # STOP was queued (asked for, or the client went away)
        self._owner = _get_ident()
        self._decoded: dict[bytes, Any] = {}
        self.spin = spin
        self.idle = idle

    def _read(self, block: bool) -> None:
        try:
            frames = self._rx.frames(block)
        except (EOFError, OSError):
            self._end()  # the client went away: finish and exit
            return
        items = self._items
        answer = self._answer
        decoded = self._decoded
        for frame in frames:
            seq, pickled = split_message(frame)
            if seq == STOP_SEQ:
                self._end()
                return
            msg = decoded.get(pickled)
            if msg is None:
                msg = loads(pickled)
                if len(pickled) <= _DECODED_BYTES:
                    key = bytes(pickled)
                    if immutable(key):
                        if len(decoded) >= _DECODED_MAX:
                            decoded.clear()
                        decoded[key] = msg
            items.append((msg, RemoteReply(seq, answer)))

    def _end(self) -> None:
        self._ended = True
        self._items.append((STOP, None))

    def get(self) -> tuple:
        self._outbox.flush()
        items = self._items
        if not items:
            if self.spin and (self.idle is None or self.idle()):
                self._rx.spin(self.spin)
            self._read(True)
            while not items:
                self._read(True)
            self._fresh = True
        return items.popleft()

    def get_nowait(self) -> tuple:
        try:
            return self._items.popleft()
        except IndexError:
            raise Empty from None

    def qsize(self) -> int:
        if _get_ident() == self._owner:
            self._outbox.flush()
            if self._fresh:
                self._fresh = False
            elif not self._items and not self._ended and self._rx.ready():
                self._read(False)
        return len(self._items)


def take_environment(environ: dict[str, str]) -> None:
    """Make this process's environment ``environ`` (the client's when it started the worker).
    A worker forked by the fork server inherits the server's, as it was when the server
    started; this runs before anything here reads the environment (cuInit reads
    ``CUDA_VISIBLE_DEVICES``, the libraries their own variables)."""
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)


def worker_main(sock: Any, config: dict[str, Any]) -> None:
    """Entry point of a worker process (forked by the fork server, or spawned). Its first
    frame says ``("ready", props, kind, stamps)`` (``stamps``: ``time.monotonic()`` on entry,
    with the backend made and with the device context made; the clock is the system's, so the
    supervisor can compare it with its own) or ``("failed", exception)``."""
    entered = time.monotonic()
    take_environment(config["environ"])
    sender = Sender(sock, "gpumsg-worker")
    outbox = Outbox(sender)
    mailbox = SocketMailbox(Receiver(sock), outbox, config.get("spin", 0.0))
    try:
        state = DeviceState(config["ordinal"], config["token"])
        state.generation = config["generation"]
        backend = make_backend(config["backend"], config["ordinal"])
        made_backend = time.monotonic()
        ctx = DeviceContext(backend, state, config["memory"], None,
                            config["allow_fault_injection"], queue_depth=mailbox.qsize,
                            in_worker_process=True,
                            pinned_staging_limit=config["pinned_staging_limit"])
    except BaseException as exc:  # noqa: BLE001 - reported to the supervisor
        try:
            sender.send(encode(("failed", exc)))
        except Exception:  # noqa: BLE001 - an error that does not pickle
            sender.send(encode(("failed", RuntimeError(repr(exc)))))
        sender.drain(30)
        return
    ctx.settle_seconds = config.get("settle", SETTLE_SECONDS)
    mailbox.idle = lambda: ctx.in_flight() == 0
    counter_shm = open_existing(config["counter"])
    views = [np.frombuffer(counter_shm.buf, np.int64, 1)]
    started = [0]

    def on_dispatch(reply: Any) -> None:
        outbox.current = reply
        started[0] += 1
        views[0][0] = started[0]

    ctx.on_poison = lambda err: outbox.put((0, ("poisoned", err)))
    ctx.on_library_opened = lambda name: outbox.put((0, ("opened", name)))
    stamps = (entered, made_backend, time.monotonic())
    sender.send(encode(("ready", ctx.props, backend.kind, stamps)))
    serve(ctx, mailbox, config["shutdown_timeout"], on_dispatch)
    if state.poisoned is not None:
        outbox.flush()
        sender.drain(5)
        os._exit(3)  # nothing more can be done in this process; the supervisor replaces it
    outbox.put((0, ("bye",)))
    outbox.flush()
    sender.drain(30)
    sender.close()
    views.clear()  # drop the view before closing the mapping
    close_quietly(counter_shm)

