"""The Ray actor that owns one gpumsg device (runs in the actor's process).

Calls arrive as ``call(call_id, name, args, kwargs)``: ``name`` is a public method of
:class:`~gpumsg.client._device.Device` or of one of its namespaces (``"cublas.gemm"``); arguments
hold :class:`~gpumsg.ray._client.Handle` values where the caller passed remote buffers, resolved
here to this actor's :class:`~gpumsg.client._buffers.GpuBuffer` objects. The actor is a threaded
actor (``max_concurrency`` threads, :data:`THREADS` by default): a call posts its message(s) in
the caller's order, then waits for the gpumsg future on its own thread, so many calls are in
flight at once and their order on the device is the caller's. A threaded actor, not an asyncio
one: Ray's event loop added about 0.2 ms to a round trip (a remote ``stats`` 1.04-1.07 ms
through an asyncio actor, 0.73-0.80 through this one, 0.69-0.73 with the request and reply
carried as bytes; a plain method returning 0: 0.51-0.55; 2-core CPU machine, simulated device,
2026-11-28).

Buffers the device returns are registered under the key the caller minted for the call
(``(call_id, k)`` for the k-th buffer of the result), before the call waits, so that a later
call may name them while the first is still running. Every actor life (``incarnation``, a fresh
random token per ``__init__``) starts with an empty table: after a Ray restart, old handles miss
and fail with :class:`~gpumsg.errors.GpuRefStale`.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..errors import GpuRefStale, InvalidMessage
from ._handles import Handle, is_handle, pack, unpack

__all__ = ["DeviceActor", "FORBIDDEN"]

#: how long a call waits for an earlier one that never arrives (lost when the actor restarted)
GAP_SECONDS = 2.0
#: the actor's threads (Ray's ``max_concurrency``): calls waiting for the device at once; a
#: call past them (a ``stats`` query among them) waits in Ray's queue until one returns. 64
#: and 16 threads ran pipelined ``stats`` calls at 363-444 and 293-419 µs each, paired runs on
#: a 2-core CPU machine (simulated device): within the runs' spread
THREADS = 64
#: Device attributes a remote caller may not reach (lifecycle, local-only objects)
FORBIDDEN = frozenset({"close", "graph", "send", "buffer_after", "alloc_pinned", "from_dlpack",
                       "compile", "load_module", "launch"})


class DeviceActor:
    """One gpumsg device in a Ray actor. Construct through :func:`gpumsg.ray.open_devices`."""

    def __init__(self, ordinal: int, backend: str, options: dict[str, Any]) -> None:
        from ..client import open_device

        self.incarnation = uuid.uuid4().hex
        self.dev = open_device(ordinal, backend=backend, **options)
        self.bufs: dict[tuple, Any] = {}
        self.keys: dict[int, tuple] = {}  # id(GpuBuffer) -> key
        # the buffer table and the turns, shared by the actor's threads
        self._lock = threading.RLock()
        # per client: the sequence number whose turn it is, and the calls waiting for theirs
        # (each on its own condition: waking every waiting thread at each turn made a
        # pipelined burst wake its threads quadratically often)
        self._next: dict[str, int] = {}
        self._waiting: dict[str, dict[int, threading.Condition]] = {}

    # -- ordering: Ray does not promise to start a threaded actor's calls in submission order,
    # so each call carries (client, n, floor): n counts the client's calls to this actor and
    # floor is the oldest of them still unanswered. Call n posts its messages only after call
    # n - 1 posted its own (a gap left by calls lost in a restart is skipped after GAP_SECONDS).
    def _turn(self, seq: tuple) -> None:
        """Wait (holding ``self._lock``, which the wait lets go) until it is call ``seq``'s
        turn."""
        client, n, floor = seq
        nxt = self._next.get(client)
        if nxt is None or nxt < floor:
            nxt = self._next[client] = floor
        if n <= nxt:
            return
        turn = threading.Condition(self._lock)
        self._waiting.setdefault(client, {})[n] = turn
        deadline = time.monotonic() + GAP_SECONDS
        try:
            while self._next.get(client, 0) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                turn.wait(left)
        finally:
            self._waiting[client].pop(n, None)

    def _turn_done(self, seq: tuple) -> None:
        client, n, _ = seq
        nxt = max(self._next.get(client, 0), n + 1)
        self._next[client] = nxt
        waiter = self._waiting.get(client, {}).get(nxt)
        if waiter is not None:
            waiter.notify()

    # -- plumbing
    def info(self) -> tuple[str, dict[str, Any]]:
        d = self.dev
        return self.incarnation, {"name": d.name, "backend": d.backend, "ordinal": d.ordinal,
                                  "pid": os.getpid(),
                                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    def _buffer(self, h: Handle) -> Any:
        if h.incarnation is not None and h.incarnation != self.incarnation:
            raise GpuRefStale(f"remote buffer {h.key} belongs to an earlier life of this actor "
                              "(it was restarted): its memory is gone")
        buf = self.bufs.get(h.key)
        if buf is None:
            raise GpuRefStale(f"remote buffer {h.key} is not on this actor: freed, or made "
                              "before the actor restarted")
        return buf

    def _unwrap(self, value: Any) -> Any:
        if is_handle(value):
            return self._buffer(value)
        if type(value) in (list, tuple):
            return type(value)(self._unwrap(v) for v in value)
        if type(value) is dict:
            return {k: self._unwrap(v) for k, v in value.items()}
        return value

    def _register(self, buf: Any, key: tuple) -> Handle:
        from ..client._buffers import BufferFuture

        if isinstance(buf, BufferFuture):
            buf = buf.buffer
        known = self.keys.get(id(buf))
        if known is not None and self.bufs.get(known) is buf:
            key = known
        else:
            self.bufs[key] = buf
            self.keys[id(buf)] = key
        return Handle(key, self.incarnation, buf.shape, buf.dtype.str, buf.order)

    def _wrap(self, value: Any, call_id: int, counter: list[int]) -> Any:
        from ..client._buffers import BufferFuture, GpuBuffer

        if isinstance(value, (GpuBuffer, BufferFuture)):
            counter[0] += 1
            return self._register(value, (call_id, counter[0] - 1))
        if type(value) in (list, tuple):
            return type(value)(self._wrap(v, call_id, counter) for v in value)
        if type(value) is dict:
            return {k: self._wrap(v, call_id, counter) for k, v in value.items()}
        return value

    def _target(self, name: str) -> Any:
        parts = name.split(".")
        if not parts or any(not p or p.startswith("_") for p in parts) or parts[0] in FORBIDDEN:
            raise InvalidMessage(f"{name!r} is not a remote Device method", field="name")
        obj: Any = self.dev
        for p in parts:
            obj = getattr(obj, p, None)
            if obj is None:
                raise InvalidMessage(f"the device has no method {name!r}", field="name")
        if not callable(obj):
            raise InvalidMessage(f"{name!r} is not a method", field="name")
        return obj

    # -- the calls
    def call(self, request: Any) -> Any:
        """``request`` is ``(seq, name, args, kwargs)``, one argument (each argument of a Ray
        call is serialized apart: four cost about 0.15 ms more than one), packed
        (:func:`~gpumsg.ray._handles.pack`). Run ``dev.<name>(*args, **kwargs)`` in the
        caller's order (``seq``, see _turn); answer ``(incarnation, result)``, packed, once its
        future resolved (buffers in the result become handles keyed ``((client, n), k)``)."""
        seq, name, args, kwargs = unpack(request)
        with self._lock:
            self._turn(seq)
            try:
                call_id = (seq[0], seq[1])
                fn = self._target(name)
                args, kwargs = self._unwrap(args), self._unwrap(kwargs)
                freeing = [a for a in args if name == "free"]
                out = fn(*args, **kwargs)
                counter = [0]
                if hasattr(out, "buffer") and isinstance(out, Future):  # a BufferFuture
                    self._wrap(out, call_id, counter)
                    counter[0] = 0
                for b in freeing:
                    self._forget(b)
            finally:
                self._turn_done(seq)
        if isinstance(out, Future):
            out = out.result()  # on this call's thread, the lock let go
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            out = out.copy()
        with self._lock:
            reply = self.incarnation, self._wrap(out, call_id, counter)
        return pack(reply)

    def _forget(self, buf: Any) -> None:
        key = self.keys.pop(id(buf), None)
        if key is not None:
            self.bufs.pop(key, None)

    def release(self, seq: tuple, keys: list[tuple]) -> None:
        """Drop buffers the caller no longer references (their Free follows), in order."""
        with self._lock:
            self._turn(seq)
            self._turn_done(seq)
            for key in keys:
                buf = self.bufs.pop(key, None)
                if buf is not None:
                    self.keys.pop(id(buf), None)

    # -- NCCL across actors
    def nccl_unique_id(self) -> bytes:
        """A fresh 128-byte ncclUniqueId (random bytes on the simulator)."""
        if self.dev.backend == "cuda":
            from ..libs.nccl._handle import unique_id

            return unique_id()
        return os.urandom(128)

    def comm_init(self, comm: int, rank: int, nranks: int, uid: bytes) -> str:
        from ..messages.nccl import CommInit

        self.dev.send(CommInit(comm, rank, nranks, uid)).result()
        return self.incarnation

    def collective(self, comm: int, rank: int, nranks: int, ops: list[tuple]) -> str:
        """``ops``: ``(kind, send, recv, count, dtype, extra)`` with handles for buffers."""
        from ..messages.nccl import Collective, coll_op

        built = []
        with self._lock:
            for kind, send, recv, count, dtype, extra in ops:
                s = None if send is None else self._buffer(send)
                r = None if recv is None else self._buffer(recv)
                built.append(coll_op(kind, s, r, count, dtype, **extra))
        self.dev.send(Collective(comm, rank, nranks, tuple(built))).result()
        return self.incarnation

    def comm_abort(self, comm: int, destroy: bool = False) -> None:
        from ..messages.nccl import CommAbort

        self.dev.send(CommAbort(comm, destroy))

    def close(self) -> None:
        with self._lock:
            self.bufs.clear()
            self.keys.clear()
        self.dev.close()
