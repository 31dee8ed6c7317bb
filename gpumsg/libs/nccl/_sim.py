"""Collectives on the simulator: NumPy semantics of NCCL over the simulated devices of one
process. Each communicator is a shared :class:`SimComm` keyed by its id; every rank's batch is a
kernel on its device's simulated stream that arrives at the rendezvous of that batch's sequence
number; the last rank to arrive computes every rank's outputs. A rank that waits longer than
``SIM_TIMEOUT`` or sees the communicator aborted leaves without writing (the group fails the
futures with CollectiveError), so no simulated stream hangs."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ...dtypes import dtype_of
from . import _simnet as simnet
from ._semantics import compute

__all__ = ["SimNccl", "SimComm", "SIM_TIMEOUT", "COMMS"]

#: seconds a simulated rank waits for its peers before it gives up on the batch
SIM_TIMEOUT = 120.0

_LOCK = threading.Lock()
#: communicator id -> SimComm (the communicators of this process's simulated devices)
COMMS: dict[int, SimComm] = {}


class SimComm:
    """The shared state of one simulated communicator."""

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.cond = threading.Condition()
        self.aborted = False
        self.async_error = 0
        self.arrived: dict[int, dict[int, tuple[Any, list]]] = {}
        self.done: set[int] = set()
        #: batch -> [the error of its computation, ranks yet to hear of it]
        self.failed: dict[int, list] = {}

    def abort(self) -> None:
        with self.cond:
            self.aborted = True
            self.cond.notify_all()

    def arrive(self, seq: int, rank: int, sim: Any, ops: list) -> None:
        with self.cond:
            if self.aborted:
                return
            slot = self.arrived.setdefault(seq, {})
            slot[rank] = (sim, ops)
            if len(slot) == self.nranks:
                try:
                    _compute(slot, self.nranks)
                except Exception as exc:
                    # every rank's kernel fails, not only this one's: the others would report
                    # success with their outputs never written
                    if self.nranks > 1:
                        self.failed[seq] = [exc, self.nranks - 1]
                    raise
                finally:
                    self.done.add(seq)
                    del self.arrived[seq]
                    self.cond.notify_all()
                return
            self.cond.wait_for(lambda: seq in self.done or self.aborted, SIM_TIMEOUT)
            failed = self.failed.get(seq)
            if failed is not None:
                failed[1] -= 1
                if not failed[1]:
                    del self.failed[seq]
                raise RuntimeError(f"rank {rank}: batch {seq} failed: {failed[0]!r}")
            if seq not in self.done:
                self.aborted = True
                self.cond.notify_all()


def _read(sim: Any, ptr: int, n: int, dtype: str) -> np.ndarray:
    dt = dtype_of(dtype)
    return sim.view(ptr, n * dt.itemsize).view(dt).copy()


def _write(sim: Any, ptr: int, values: np.ndarray, dtype: str) -> None:
    dt = dtype_of(dtype)
    arr = np.asarray(values)
    if dt.kind in "iu":  # wrap around as the GPU's integer arithmetic does
        bits = dt.itemsize * 8
        out = np.array([int(v) % (1 << bits) for v in arr.ravel()],
                       dtype=np.dtype(f"u{dt.itemsize}")).view(dt)
    else:
        out = arr.astype(np.float32).astype(dt) if dt.itemsize < 4 else arr.astype(dt)
    sim.view(ptr, out.nbytes)[:] = np.ascontiguousarray(out).view(np.uint8).ravel()


def _inputs(sim: Any, ops: list, nranks: int) -> list:
    """What one rank contributes to a batch: ``(CollOp, its send data or None)`` per op."""
    out = []
    for o, sp, _ in ops:
        n = o.count * nranks if o.kind == "reduce_scatter" else o.count
        out.append((o, _read(sim, sp, n, o.dtype) if sp else None))
    return out


def _write_outputs(sim: Any, ops: list, outputs: list) -> None:
    for i, val in outputs:
        o, _, rp = ops[i]
        _write(sim, rp, val, o.dtype)


def _compute(slot: dict[int, tuple[Any, list]], n: int) -> None:
    outputs = compute({r: _inputs(sim, ops, n) for r, (sim, ops) in slot.items()}, n)
    for r, (sim, ops) in slot.items():
        _write_outputs(sim, ops, outputs[r])


class SimNccl:
    """The simulator's counterpart of :class:`~gpumsg.libs.nccl._handle.NcclHandle`. A unique id
    from :func:`gpumsg.libs.nccl._simnet.unique_id` (a group with process-isolated members)
    makes the communicator meet at the client process's rendezvous server instead of
    :data:`COMMS`."""

    def __init__(self, ctx: Any = None) -> None:
        self.sim = ctx.backend if ctx is not None else None
        self.comms: dict[int, Any] = {}  # SimComm, or the server's (address, key)
        self.seq: dict[int, int] = {}
        self.ranks: dict[int, tuple[int, int]] = {}
        self.raw_handle = 0

    def init(self, comm: int, rank: int, nranks: int, uid: bytes) -> None:
        self.abort(comm)
        server = simnet.parse(uid)
        if server is not None:
            self.comms[comm] = server
        else:
            with _LOCK:
                shared = COMMS.get(comm)
                if shared is None:
                    shared = COMMS[comm] = SimComm(nranks)
            self.comms[comm] = shared
        self.seq[comm] = 0
        self.ranks[comm] = (rank, nranks)

    def run(self, stream: Any, comm: int, ops: list[tuple[Any, int, int]]) -> None:
        shared = self.comms.get(comm)
        if shared is None:
            from ...errors import LibraryError

            raise LibraryError("nccl", 5, "ncclInvalidUsage", f"communicator {comm} (not "
                               "initialized on this device)")
        seq = self.seq[comm] = self.seq[comm] + 1
        rank, nranks = self.ranks[comm]
        sim = self.sim
        if isinstance(shared, SimComm):
            stream.put(lambda: shared.arrive(seq, rank, sim, ops))
            return

        def remote() -> None:
            status, value = simnet.arrive(shared, comm, nranks, seq, rank,
                                          _inputs(sim, ops, nranks), SIM_TIMEOUT)
            if status == "ok":
                _write_outputs(sim, ops, value)
            elif status == "error":
                raise RuntimeError(value)
            # aborted: leave without writing, as an aborted NCCL communicator

        stream.put(remote)

    def has(self, comm: int) -> bool:
        return comm in self.comms

    def group_start(self) -> None:
        """Nothing to open: each rank's batch meets its peers at the rendezvous."""

    def group_end(self) -> None:
        """Nothing to launch: :meth:`enqueue` put each rank's batch on its stream."""

    def enqueue(self, stream: Any, comm: int, ops: list[tuple[Any, int, int]],
                made: list[int]) -> None:
        """The batch of one rank inside a group call open on the issuing thread (the
        simulator's group calls do nothing: see :meth:`run`)."""
        self.run(stream, comm, ops)

    def release(self, comm: int, made: list[int]) -> None:
        """No operators to destroy."""

    def poll(self, comm: int) -> int:
        shared = self.comms.get(comm)
        return shared.async_error if isinstance(shared, SimComm) else 0

    def abort(self, comm: int, destroy: bool = False) -> None:
        shared = self.comms.pop(comm, None)
        if isinstance(shared, SimComm):
            shared.abort()
            with _LOCK:
                COMMS.pop(comm, None)
        elif shared is not None:
            # best effort, off the device thread: it never waits on the rendezvous server
            threading.Thread(target=simnet.abort, args=(shared, comm), daemon=True,
                             name="gpumsg-simnet-abort").start()

    def close(self) -> None:
        for comm in list(self.comms):
            self.abort(comm)
