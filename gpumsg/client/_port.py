"""The :class:`Port`: what a library's client (``gpumsg/libs/*/client.py``) uses to talk to its
device. A Device makes one at construction (``dev.port``); library namespaces reach the device's
protocol only through it, never through the Device's private methods, so the Device may change
how it posts without touching a library.

Every method runs on the caller's thread (the thread calling the library method), never on a
device thread, and is safe to call from many threads at once, like the Device's own methods.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

__all__ = ["Port"]


class Port:
    """The device protocol of library clients. ``device`` is the public :class:`Device`
    (its ``alloc``, ``to_device``, ``copy_to_host``, ... remain the way to make buffers).

    Contract shared by the sending methods: the message is checked on the calling thread (a
    gpumsg message of the public protocol, an open device, references of this device and of its
    current generation, what a graph being recorded refuses) and raises a typed error
    (:class:`~gpumsg.errors.InvalidMessage`, :class:`~gpumsg.errors.GpuRefStale`,
    :class:`~gpumsg.errors.DeviceClosed`) before anything is posted; a message posted is
    answered exactly once through the future returned."""

    def __init__(self, device: Any, *, check_open: Any, send: Any, send_writing: Any,
                 send_new: Any, mint: Any, send_memo: Any, state: Any, submit: Any) -> None:
        # The device hands its implementations over at construction (late binding: this module
        # imports nothing of the Device's). They are stored as plain attributes so that a
        # library call pays no extra Python frame on its way to the mailbox; the methods of
        # the same names below document them.
        self.device = device
        self.check_open = check_open  # type: ignore[method-assign]
        self.send = send  # type: ignore[method-assign]
        self.send_writing = send_writing  # type: ignore[method-assign]
        self.send_new = send_new  # type: ignore[method-assign]
        self.mint = mint  # type: ignore[method-assign]
        self.send_memo = send_memo  # type: ignore[method-assign]
        self._state = state
        self._submit = submit

    # The documented contract of the attributes bound in __init__. Only reached on a Port made
    # without them (never by Device); kept as methods so that help(Port) states the contract.
    def check_open(self) -> None:
        """Raise the device's refusal (:class:`~gpumsg.errors.DeviceClosed`, a poisoned
        context's error, ...) when it accepts no more messages; else nothing."""
        raise NotImplementedError

    def send(self, msg: Any) -> Future:
        """Post ``msg``; the future resolves to its reply. The same as ``Device.send``."""
        raise NotImplementedError

    def send_writing(self, msg: Any, buffer: Any) -> Future:
        """Post ``msg``, which writes ``buffer`` (a GpuBuffer or its future); the future (a
        BufferFuture) resolves to the buffer once ``msg`` has completed, or fails with its
        error."""
        raise NotImplementedError

    def send_new(self, ref: Any, msg: Any) -> Future:
        """Allocate the buffer ``ref`` names (from :meth:`mint`, not sent before) and post
        ``msg``, which writes it; the BufferFuture resolves to the new buffer once ``msg`` has
        completed. ``msg`` is screened first: nothing is allocated for a message refused."""
        raise NotImplementedError

    def mint(self, shape: Any, dtype: Any, order: str) -> Any:
        """A fresh :class:`~gpumsg.messages._base.BufRef` of this device and generation for a
        buffer of ``shape``, ``dtype`` and ``order`` ('C' or 'F'), not allocated yet (pass it to
        :meth:`send_new`). Raises InvalidMessage for a bad shape/dtype/order and OutOfMemory
        for more bytes than the device has."""
        raise NotImplementedError

    def send_memo(self, entry: list, writing: Any = None) -> Future:
        """:meth:`send` (or :meth:`send_writing` with ``writing``) of the message kept in
        ``entry``, an entry ``[message, stamp]`` of a
        :class:`~gpumsg.messages._memo.MessageMemo`: a message already screened at the device's
        current generation goes straight to the mailbox, else it is screened again."""
        raise NotImplementedError

    # -- identity and finalizers ------------------------------------------------------------
    @property
    def token(self) -> int:
        """The device's owner token: the ``owner`` of every reference it minted."""
        return self._state.token

    @property
    def generation(self) -> int:
        """The device's current generation (a process-isolated device's restart bumps it)."""
        return self._state.generation

    def refusal(self) -> BaseException | None:
        """The error a call would raise now, or None while the device accepts messages."""
        state = self._state
        return None if state.accepting else state.refusal

    def post_unanswered(self, msg: Any, generation: int) -> None:
        """Post ``msg`` with no reply, only if the device accepts messages and is still at
        ``generation``; else drop it. Takes no lock and raises nothing: for finalizers
        (a dropped generator, sparse matrix, ...), which may run inside another post."""
        state = self._state
        if state.accepting and state.generation == generation:
            self._submit(msg, None)
