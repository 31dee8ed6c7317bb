"""The worker process: the same device loop as thread isolation, fed by a pipe.

Three threads: the reader unpickles batches of ``(seq, message)`` from the pipe into the
mailbox; the main thread runs :func:`~gpumsg.service.worker.serve`; the writer sends replies
(``("r", seq, ok, value)``) and notices (``("poisoned", error)``, ``("bye",)``) back in batches.
As each message starts, the worker counts it in a shared-memory word the supervisor reads after
a failure, to tell what was in flight from what was never started.
"""

from __future__ import annotations

import os
import threading
from queue import SimpleQueue
from typing import Any

import numpy as np

from .. import libs  # noqa: F401  (registers every library's handlers in this process)
from ..backends import make_backend
from ..service.context import DeviceContext
from ..service.state import DeviceState
from ..service.worker import STOP, serve
from .shm import close_quietly, open_existing

__all__ = ["worker_main", "RemoteReply", "STOP_SEQ"]

#: the sequence number of the message that asks the worker to finish and exit
STOP_SEQ = -1


class RemoteReply:
    """A reply that travels back to the client: ``set_result``/``set_exception`` queue it for
    the writer thread."""

    __slots__ = ("seq", "_out")

    def __init__(self, seq: int, out: SimpleQueue) -> None:
        self.seq = seq
        self._out = out

    def set_result(self, value: Any) -> None:
        self._out.put(("r", self.seq, True, value))

    def set_exception(self, exc: BaseException) -> None:
        self._out.put(("r", self.seq, False, exc))


def _writer(conn: Any, out: SimpleQueue) -> None:
    get = out.get
    while True:
        item = get()
        if item is None:
            return
        batch = [item]
        while not out.empty():
            nxt = out.get_nowait()
            if nxt is None:
                _send(conn, batch)
                return
            batch.append(nxt)
        _send(conn, batch)


def _send(conn: Any, batch: list) -> None:
    try:
        conn.send(batch)
    except (BrokenPipeError, EOFError, OSError):
        return  # the client is gone
    except Exception:  # noqa: BLE001 - an answer that does not pickle: say so, keep the rest
        for item in batch:
            try:
                conn.send([item])
            except (BrokenPipeError, EOFError, OSError):
                return
            except Exception as exc:  # noqa: BLE001
                conn.send([("r", item[1], False,
                            RuntimeError(f"the worker's answer could not be sent: {exc!r}"))])


def _reader(conn: Any, mailbox: SimpleQueue, out: SimpleQueue) -> None:
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            mailbox.put((STOP, None))  # the client went away: finish and exit
            return
        for seq, msg in batch:
            if seq == STOP_SEQ:
                mailbox.put((STOP, None))
                return
            mailbox.put((msg, RemoteReply(seq, out)))


def worker_main(conn: Any, config: dict[str, Any]) -> None:
    """Entry point of a spawned worker process."""
    mailbox: SimpleQueue = SimpleQueue()
    out: SimpleQueue = SimpleQueue()
    try:
        state = DeviceState(config["ordinal"], config["token"])
        state.generation = config["generation"]
        backend = make_backend(config["backend"], config["ordinal"])
        ctx = DeviceContext(backend, state, config["memory"], None,
                            config["allow_fault_injection"], queue_depth=mailbox.qsize,
                            in_worker_process=True,
                            pinned_staging_limit=config["pinned_staging_limit"])
    except BaseException as exc:  # noqa: BLE001 - reported to the supervisor
        conn.send([("failed", exc)])
        return
    counter_shm = open_existing(config["counter"])
    views = [np.frombuffer(counter_shm.buf, np.int64, 1)]
    started = [0]

    def on_dispatch(_reply: Any) -> None:
        started[0] += 1
        views[0][0] = started[0]

    ctx.on_poison = lambda err: out.put(("poisoned", err))
    conn.send([("ready", ctx.props, backend.kind)])
    writer = threading.Thread(target=_writer, args=(conn, out), name="gpumsg-worker-writer",
                              daemon=True)
    reader = threading.Thread(target=_reader, args=(conn, mailbox, out),
                              name="gpumsg-worker-reader", daemon=True)
    writer.start()
    reader.start()
    serve(ctx, mailbox, config["shutdown_timeout"], on_dispatch)
    if state.poisoned is not None:
        out.put(None)
        writer.join(5)
        os._exit(3)  # nothing more can be done in this process; the supervisor replaces it
    out.put(("bye",))
    out.put(None)
    writer.join(30)
    views.clear()  # drop the view before closing the mapping
    close_quietly(counter_shm)
