"""The wire between a client and its worker process: frames over a Unix socket pair.

A frame is an 8-byte little-endian length and that many bytes. Client to worker, one frame per
message: an 8-byte signed sequence number, then the pickled message (``STOP_SEQ`` with a pickled
None asks the worker to finish). Worker to client, one frame per batch of answers: a pickled
list of ``(key, value)`` pairs: ``key > 0`` is the sequence number of a message answered with
``value``, ``key < 0`` the negated number of a message that failed with the exception
``value``, ``key == 0`` a notice (``("poisoned", error)``, ``("bye",)``). The first frame a
worker sends is ``("ready", props, kind)`` or ``("failed", error)``.

:class:`Sender` never blocks its caller: what the socket cannot take at once waits in a backlog
that a flusher thread (started the first time it is needed) writes in order. So neither side's
threads wait on the other's reading, and two sides that are both writing cannot deadlock.
:class:`Receiver` reads whatever has arrived in one system call and splits it into frames.
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from collections import deque
from typing import Any

__all__ = ["Sender", "Receiver", "encode", "message_frame", "split_message", "dumps", "loads"]

_LEN = struct.Struct("<Q")
_SEQ = struct.Struct("<q")
_LEN_SEQ = struct.Struct("<Qq")
#: bytes asked of the socket per read (several frames usually come together)
_RECV = 1 << 18
_DONTWAIT = socket.MSG_DONTWAIT


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, 5)


loads = pickle.loads


def encode(obj: Any) -> bytes:
    """A frame holding ``obj`` pickled."""
    data = pickle.dumps(obj, 5)
    return _LEN.pack(len(data)) + data


def message_frame(seq: int, pickled: bytes) -> bytes:
    """The frame of message number ``seq`` whose pickle is ``pickled``."""
    return _LEN_SEQ.pack(len(pickled) + 8, seq) + pickled


def split_message(frame: Any) -> tuple[int, Any]:
    """``(seq, pickled message)`` of a message frame's payload."""
    return _SEQ.unpack_from(frame)[0], frame[8:]


class Sender:
    """Writes frames to a socket in order, without blocking the caller (see the module)."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self._sock = sock
        self._name = name
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._backlog: deque[Any] = deque()
        self._flusher: threading.Thread | None = None
        self._closed = False
        self.broken: BaseException | None = None

    def send(self, data: bytes) -> None:
        """Queue ``data`` (one or more whole frames) for the socket. Raises OSError once the
        socket has failed (the peer is gone) or the sender was closed."""
        with self._lock:
            if self.broken is not None:
                raise BrokenPipeError(f"{self._name}: {self.broken}")
            if self._closed:
                raise BrokenPipeError(f"{self._name}: closed")
            if self._backlog:
                self._backlog.append(data)
                return
            try:
                n = self._sock.send(data, _DONTWAIT)
            except BlockingIOError:
                n = 0
            except OSError as exc:
                self.broken = exc
                raise
            if n < len(data):
                self._backlog.append(memoryview(data)[n:])
                if self._flusher is None:
                    self._flusher = threading.Thread(target=self._flush, daemon=True,
                                                     name=f"{self._name}-flusher")
                    self._flusher.start()
                else:
                    self._changed.notify_all()

    def _flush(self) -> None:
        """The flusher thread: writes the backlog, waiting on the socket as long as it must
        (only this thread writes while there is a backlog)."""
        backlog = self._backlog
        while True:
            with self._lock:
                while not backlog and not self._closed:
                    self._changed.wait()
                if not backlog:
                    return
                if len(backlog) > 1:  # one write for everything queued so far
                    joined = b"".join(backlog)
                    backlog.clear()
                    backlog.append(memoryview(joined))
                head = backlog[0]
            try:
                n = self._sock.send(head)
            except OSError as exc:
                with self._lock:
                    self.broken = exc
                    backlog.clear()
                    self._changed.notify_all()
                return
            with self._lock:
                if n >= len(head):
                    backlog.popleft()
                else:
                    backlog[0] = head[n:]
                if not backlog:
                    self._changed.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until everything queued has been written (or the socket failed)."""
        with self._lock:
            return self._changed.wait_for(lambda: not self._backlog, timeout)

    def close(self) -> None:
        """Send nothing more; the flusher, if any, finishes the backlog and exits."""
        with self._lock:
            self._closed = True
            self._changed.notify_all()


class Receiver:
    """Reads frames from a socket: :meth:`frames` returns every complete frame that has
    arrived, as bytes-like payloads (without their length)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._tail = bytearray()  # the start of a frame whose rest has not arrived yet
        self._need = _LEN.size  # bytes the tail must reach before another frame can be split

    def frames(self, block: bool = True) -> list[Any]:
        """The frames that have arrived; with ``block``, at least one (waiting for it).
        Raises EOFError when the peer has closed its end, OSError when the socket fails."""
        sock = self._sock
        while True:
            try:
                data = sock.recv(max(_RECV, self._need - len(self._tail)),
                                 0 if block else _DONTWAIT)
            except BlockingIOError:
                return []
            if not data:
                raise EOFError
            out = self._split(data)
            if out or not block:
                return out

    def _split(self, data: bytes) -> list[Any]:
        tail = self._tail
        if tail:
            tail += data
            if len(tail) < self._need:
                return []
            data = bytes(tail)
            tail.clear()
        view = memoryview(data)
        size = len(data)
        off = 0
        out = []
        unpack = _LEN.unpack_from
        while size - off >= 8:
            end = off + 8 + unpack(data, off)[0]
            if end > size:
                self._need = end - off
                break
            out.append(view[off + 8:end])
            off = end
        else:
            self._need = 8
        if off < size:
            tail += view[off:]
        return out
