"""The wire between a client and its worker process: frames over a Unix socket pair.

A frame is an 8-byte little-endian length and that many bytes. Client to worker, one frame per
message: an 8-byte signed sequence number, then the pickled message (``STOP_SEQ`` with a pickled
None asks the worker to finish). Worker to client, batches of answers as ``(key, value)``
pairs: ``key > 0`` is the sequence number of a message answered with ``value``, ``key < 0``
the negated number of a message that failed with the exception ``value``, ``key == 0`` a
notice (``("poisoned", error)``, ``("opened", library)``, ``("bye",)``). :func:`encode_replies`
writes most answers without pickling: those answered with None as one frame of sequence
numbers, those answered with a 64-bit unsigned int (an allocation's address) as one frame of
pairs, those answered with a :class:`~gpumsg.service._stats.DeviceLoad` (``Stats``) as one
frame of packed records (pickling a named tuple of fifteen fields and unpickling it took
3.7 + 2.7 µs, packing and unpacking 0.9 + 1.0), the rest as one pickled list (an 8-byte tag
starts each). The first frame a worker sends is ``("ready", props, kind, stamps)`` or
``("failed", error)``, pickled.

:class:`Sender` never blocks its caller: what the socket cannot take at once waits in a backlog
that a flusher thread (started the first time it is needed) writes in order. So neither side's
threads wait on the other's reading, and two sides that are both writing cannot deadlock.
:class:`Receiver` reads whatever has arrived in one system call and splits it into frames.
"""

from __future__ import annotations

import ctypes
import errno
import pickle
import select
import socket
import struct
import threading
import time
from array import array
from collections import deque
from typing import Any

from ..memory._adaptors import MemoryStatistics
from ..service._stats import DeviceLoad

_perf_counter = time.perf_counter

__all__ = ["Sender", "Receiver", "encode", "message_frame", "split_message", "dumps", "loads",
           "encode_replies", "decode_replies", "immutable"]

_LEN = struct.Struct("<Q")
_SEQ = struct.Struct("<q")
_LEN_SEQ = struct.Struct("<Qq")
#: bytes asked of the socket per read (several frames usually come together)
_RECV = 1 << 18
_DONTWAIT = socket.MSG_DONTWAIT
_NONES = b"gm-none\0"  # tags of the answer frames
_INTS = b"gm-ints\0"
_PICKLED = b"gm-pckl\0"
_LOADS = b"gm-load\0"
#: a DeviceLoad's record: key, its 13 integers (budget -1 for None), the 7 of its memory
#: statistics (all -1 for None), the lengths of its two strings (name, backend) and the count
#: of its per-stream placements, which follow (the strings, then the counts as int64)
_LOAD = struct.Struct("<q13q7q3H")
_NO_MEMORY = (-1,) * 7
_new_tuple = tuple.__new__
_U64 = 1 << 64


def _libc_send() -> Any:
    """libc's ``send`` called with the GIL held (``ctypes.PyDLL``), or None. A non-blocking
    send does not wait, so it need not let other threads run; ``socket.send`` always does, and
    then a client thread that posts messages back to back hands the GIL to its reader thread
    and back at every message."""
    try:
        fn = ctypes.PyDLL(None, use_errno=True).send
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_ssize_t
    return fn


_send_held = _libc_send()
_SEND_FLAGS = socket.MSG_DONTWAIT | getattr(socket, "MSG_NOSIGNAL", 0)
_get_errno = ctypes.get_errno


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, 5)


loads = pickle.loads


def encode(obj: Any) -> bytes:
    """A frame holding ``obj`` pickled."""
    data = pickle.dumps(obj, 5)
    return _LEN.pack(len(data)) + data


#: bytes of a pickle (after its header) that may stand for a mutable object: an empty
#: list, dict or set, a bytearray, or a NumPy array (its module named)
_MUTABLE = (b"]", b"}", b"\x8f", b"\x96", b"numpy")


def immutable(pickled: bytes) -> bool:
    """Whether a message's pickle surely holds nothing mutable, so that the pickle may stand
    for the message (and the message for the pickle) when it is sent again. A byte that only
    looks like a list's opcode merely costs the caching."""
    body = pickled[11:] if pickled[2:3] == b"\x95" else pickled[2:]  # after PROTO [FRAME]
    return not any(mark in body for mark in _MUTABLE)


def _pack_load(key: int, v: DeviceLoad) -> bytes | None:
    """The record of answer ``key`` with ``v``, or None if a field does not fit one (a load
    naming library workspaces goes pickled)."""
    if v.workspaces:
        return None
    try:
        name, backend = v.name.encode(), v.backend.encode()
        major, minor = v.compute_capability
        budget, memory = v.budget_bytes, v.memory
        return _LOAD.pack(key, v.ordinal, major, minor, v.generation, v.free_bytes,
                          v.total_bytes, v.pool_reserved_bytes, v.pool_used_bytes,
                          -1 if budget is None else budget, v.pinned_reserved_bytes,
                          v.queue_depth, v.ops_in_flight, v.ops_completed,
                          *(_NO_MEMORY if memory is None else memory), len(name),
                          len(backend), len(v.streams)) + name + backend + (
            struct.pack(f"<{len(v.streams)}q", *v.streams) if v.streams else b"")
    except (struct.error, TypeError, ValueError, AttributeError):
        return None


def _unpack_loads(frame: Any) -> list:
    out = []
    size = _LOAD.size
    end = len(frame)
    off = 8
    while off < end:
        f = _LOAD.unpack_from(frame, off)
        off += size
        name = str(frame[off:off + f[21]], "utf-8")
        off += f[21]
        backend = str(frame[off:off + f[22]], "utf-8")
        off += f[22]
        streams = struct.unpack_from(f"<{f[23]}q", frame, off) if f[23] else ()
        off += 8 * f[23]
        memory = None if f[14] == -1 else _new_tuple(MemoryStatistics, f[14:21])
        out.append((f[0], _new_tuple(DeviceLoad, (
            name, f[1], backend, (f[2], f[3]), f[4], f[5], f[6], f[7], f[8],
            None if f[9] == -1 else f[9], f[10], f[11], f[12], f[13], memory, (), streams))))
    return out


def encode_replies(batch: list) -> bytes:
    """The frames of a batch of ``(key, value)`` answers (see the module)."""
    nones: list[int] = []
    ints: list[int] = []
    loads: list[bytes] = []
    rest = []
    for item in batch:
        key, value = item
        if key > 0:
            if value is None:
                nones.append(key)
                continue
            if type(value) is int and 0 <= value < _U64:
                ints.append(key)
                ints.append(value)
                continue
            if type(value) is DeviceLoad:
                record = _pack_load(key, value)
                if record is not None:
                    loads.append(record)
                    continue
        elif key < 0:  # an error that would not unpickle there is named instead
            try:
                pickle.loads(pickle.dumps(value, 5))
            except Exception as exc:  # noqa: BLE001
                item = (key, RuntimeError(f"{value!r} (could not be sent from the worker: "
                                          f"{exc!r})"))
        rest.append(item)
    out = []
    if nones:
        body = _NONES + array("q", nones).tobytes()
        out.append(_LEN.pack(len(body)) + body)
    if ints:
        body = _INTS + array("Q", ints).tobytes()
        out.append(_LEN.pack(len(body)) + body)
    if loads:
        body = _LOADS + b"".join(loads)
        out.append(_LEN.pack(len(body)) + body)
    if rest:
        body = _PICKLED + pickle.dumps(rest, 5)
        out.append(_LEN.pack(len(body)) + body)
    return out[0] if len(out) == 1 else b"".join(out)


def decode_replies(frame: Any) -> list:
    """The ``(key, value)`` answers of one frame written by :func:`encode_replies`."""
    tag = frame[:8]
    if tag == _NONES:
        keys = array("q")
        keys.frombytes(frame[8:])
        return [(key, None) for key in keys]
    if tag == _INTS:
        words = array("Q")
        words.frombytes(frame[8:])
        return list(zip(words[::2], words[1::2]))
    if tag == _PICKLED:
        return pickle.loads(frame[8:])
    if tag == _LOADS:
        return _unpack_loads(frame)
    raise ValueError("not a frame of answers")


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
        self._fd = sock.fileno()
        self._name = name
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._backlog: deque[Any] = deque()
        self._flusher: threading.Thread | None = None
        self._closed = False
        self.broken: BaseException | None = None
        #: the numbers given to :meth:`send`, in the order their frames went to the socket
        self.sent: list[int] = []

    def send(self, data: bytes, seq: int | None = None) -> None:
        """Queue ``data`` (one or more whole frames) for the socket, and note ``seq`` in
        :attr:`sent` (in the same order). Raises OSError once the socket has failed (the peer
        is gone) or the sender was closed."""
        with self._lock:
            if seq is not None:
                self.sent.append(seq)
            if self.broken is not None:
                raise BrokenPipeError(f"{self._name}: {self.broken}")
            if self._closed:
                raise BrokenPipeError(f"{self._name}: closed")
            if self._backlog:
                self._backlog.append(data)
                return
            try:
                n = self._send_now(data)
            except OSError:
                if seq is not None:
                    self.sent.pop()
                raise
            if n < len(data):
                self._backlog.append(memoryview(data)[n:])
                if self._flusher is None:
                    self._flusher = threading.Thread(target=self._flush, daemon=True,
                                                     name=f"{self._name}-flusher")
                    self._flusher.start()
                else:
                    self._changed.notify_all()

    def _send_now(self, data: bytes) -> int:
        """Bytes of ``data`` the socket took at once (the caller holds the lock)."""
        if _send_held is not None and type(data) is bytes:
            while True:
                n = _send_held(self._fd, data, len(data), _SEND_FLAGS)
                if n >= 0:
                    return n
                err = _get_errno()
                if err in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return 0
                if err != errno.EINTR:
                    self.broken = OSError(err, f"send: {errno.errorcode.get(err, err)}")
                    raise self.broken
        try:
            return self._sock.send(data, _DONTWAIT)
        except BlockingIOError:
            return 0
        except OSError as exc:
            self.broken = exc
            raise

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
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    def ready(self) -> bool:
        """Whether a read would not wait (bytes have arrived, or the end of the stream): a
        ``poll`` with no timeout, cheaper than a read that fails."""
        return bool(self._poll.poll(0))

    def spin(self, seconds: float) -> bool:
        """Poll without waiting until a read would not wait (True) or ``seconds`` have passed
        (False). Each poll is a system call in which the process's other threads may take the
        GIL; a thread that spins instead of sleeping is not woken (10-40 µs on the VMs we
        measure) when the bytes arrive soon."""
        ready = self._poll.poll
        deadline = _perf_counter() + seconds
        while not ready(0):
            if _perf_counter() > deadline:
                return False
        return True

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) until a read would not wait; True
        if it would not. One thread at a time (a poll object refuses a second)."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000 + 0.999))
        return bool(self._poll.poll(ms))

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
