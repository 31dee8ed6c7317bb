"""The simulator's collectives across processes: a rendezvous server in the client process.

When a simulated communicator has a process-isolated member, the group gives it a unique id
made here (:func:`unique_id`): ``MAGIC``, the port and the key of this process's rendezvous
server (started on first use, a daemon thread on 127.0.0.1 speaking
:mod:`multiprocessing.connection` with that key). Each member's batch is then a kernel on its
simulated stream that reads its inputs, sends them to the server (one connection per request),
waits for every rank's arrival there and writes its outputs. ``abort`` wakes the ranks waiting
on a communicator; a rank waits at most ``SIM_TIMEOUT`` seconds. So a communicator survives a
member's restart exactly as it does on NCCL: aborted, then rebuilt with a new id.
"""

from __future__ import annotations

import os
import struct
import threading
from multiprocessing.connection import Client, Listener
from typing import Any

from ._semantics import compute

__all__ = ["MAGIC", "unique_id", "parse", "arrive", "abort"]

MAGIC = b"GPUMSG-SIMNET\0"
_HEAD = struct.Struct("<H16s")

_server: _Server | None = None
_server_lock = threading.Lock()


class _Room:
    """One communicator's rendezvous on the server."""

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.cond = threading.Condition()
        self.aborted = False
        self.arrived: dict[int, dict[int, list]] = {}
        self.results: dict[int, dict[int, Any]] = {}


class _Server:
    def __init__(self) -> None:
        self.key = os.urandom(16)
        self.listener = Listener(("127.0.0.1", 0), backlog=64, authkey=self.key)
        self.port = self.listener.address[1]
        self.rooms: dict[int, _Room] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="gpumsg-simnet").start()

    def _accept(self) -> None:
        while True:
            try:
                conn = self.listener.accept()
            except Exception:  # noqa: BLE001 - a peer that failed authentication, or shutdown
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="gpumsg-simnet-conn").start()

    def _room(self, comm: int, nranks: int) -> _Room:
        with self.lock:
            room = self.rooms.get(comm)
            if room is None:
                room = self.rooms[comm] = _Room(nranks)
            return room

    def _serve(self, conn: Any) -> None:
        try:
            with conn:
                request = conn.recv()
                if request[0] == "abort":
                    room = self._room(request[1], 0)
                    with room.cond:
                        room.aborted = True
                        room.cond.notify_all()
                    conn.send(("ok", None))
                else:
                    conn.send(self._arrive(*request[1:]))
        except (EOFError, OSError):
            pass

    def _arrive(self, comm: int, nranks: int, seq: int, rank: int, inputs: list,
                timeout: float) -> tuple[str, Any]:
        room = self._room(comm, nranks)
        with room.cond:
            if room.aborted:
                return ("aborted", None)
            slot = room.arrived.setdefault(seq, {})
            slot[rank] = inputs
            if len(slot) == nranks:
                del room.arrived[seq]
                try:
                    room.results[seq] = {r: ("ok", v) for r, v in compute(slot, nranks).items()}
                except Exception as exc:  # noqa: BLE001 - every rank hears of it
                    room.results[seq] = {r: ("error", repr(exc)) for r in slot}
                room.cond.notify_all()
            else:
                room.cond.wait_for(lambda: seq in room.results or room.aborted, timeout)
            results = room.results.get(seq)
            if results is None:
                room.aborted = True
                room.cond.notify_all()
                return ("aborted", None)
            out = results.pop(rank)
            if not results:
                del room.results[seq]
            return out


def unique_id() -> bytes:
    """A 128-byte id naming this process's rendezvous server (started on first use)."""
    global _server
    with _server_lock:
        if _server is None:
            _server = _Server()
        server = _server
    head = MAGIC + _HEAD.pack(server.port, server.key)
    return head + os.urandom(128 - len(head))


def parse(uid: bytes) -> tuple[tuple[str, int], bytes] | None:
    """The server's address and key from a unique id made by :func:`unique_id`, else None."""
    if not uid.startswith(MAGIC):
        return None
    port, key = _HEAD.unpack_from(uid, len(MAGIC))
    return ("127.0.0.1", port), key


def arrive(server: tuple[tuple[str, int], bytes], comm: int, nranks: int, seq: int, rank: int,
           inputs: list, timeout: float) -> tuple[str, Any]:
    """Send this rank's inputs of batch ``seq``; returns ("ok", outputs), ("aborted", None) or
    ("error", text), once every rank arrived or the communicator was aborted."""
    address, key = server
    with Client(address, authkey=key) as conn:
        conn.send(("arrive", comm, nranks, seq, rank, inputs, timeout))
        return conn.recv()


def abort(server: tuple[tuple[str, int], bytes], comm: int) -> None:
    """Wake every rank waiting on communicator ``comm`` (best effort)."""
    address, key = server
    try:
        with Client(address, authkey=key) as conn:
            conn.send(("abort", comm))
            conn.recv()
    except (OSError, EOFError):
        pass
