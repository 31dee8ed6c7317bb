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

__all__ = ["SimNccl", "SimComm", "SIM_TIMEOUT", "COMMS"]

#: seconds a simulated rank waits for its peers before it gives up on the batch
SIM_TIMEOUT = 120.0

_LOCK = threading.Lock()
#: communicator id -> SimComm
COMMS: dict[int, SimComm] = {}


def _work(dtype: str) -> np.dtype:
    return np.dtype(np.float64) if dtype in ("f16", "bf16", "f32", "f64") else np.dtype(object)


class SimComm:
    """The shared state of one simulated communicator."""

    def __init__(self, nranks: int) -> None:
        self.nranks = nranks
        self.cond = threading.Condition()
        self.aborted = False
        self.async_error = 0
        self.arrived: dict[int, dict[int, tuple[Any, list]]] = {}
        self.done: set[int] = set()

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
                finally:
                    self.done.add(seq)
                    del self.arrived[seq]
                    self.cond.notify_all()
                return
            self.cond.wait_for(lambda: seq in self.done or self.aborted, SIM_TIMEOUT)
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


def _reduce(parts: list[np.ndarray], o: Any) -> np.ndarray:
    w = _work(o.dtype)
    xs = [p.astype(w) for p in parts]
    if o.op in ("sum", "avg", "premul_sum"):
        if o.op == "premul_sum":
            xs = [x * o.scale for x in xs]
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        if o.op == "avg":
            n = len(xs)  # integers: truncated towards zero, as C division
            out = out / n if w.kind == "f" else np.array(
                [abs(v) // n * (1 if v >= 0 else -1) for v in out], dtype=object)
        return out
    if o.op == "prod":
        out = xs[0]
        for x in xs[1:]:
            out = out * x
        return out
    return (np.maximum if o.op == "max" else np.minimum).reduce(np.stack(xs), axis=0)


def _compute(slot: dict[int, tuple[Any, list]], n: int) -> None:
    colls = {r: [x for x in ops if x[0].kind not in ("send", "recv")] for r, (_, ops) in
             slot.items()}
    results: list[tuple[Any, int, np.ndarray, str]] = []
    for i in range(len(colls[0])):
        o = colls[0][i][0]
        c = o.count
        ins = {r: (slot[r][0], colls[r][i]) for r in range(n)}
        if o.kind == "all_reduce":
            red = _reduce([_read(s, x[1], c, o.dtype) for s, x in ins.values()], o)
            results += [(s, x[2], red, o.dtype) for s, x in ins.values()]
        elif o.kind == "reduce":
            red = _reduce([_read(s, x[1], c, o.dtype) for s, x in ins.values()], o)
            s, x = ins[o.root]
            results.append((s, x[2], red, o.dtype))
        elif o.kind == "broadcast":
            s, x = ins[o.root]
            val = _read(s, x[1], c, o.dtype)
            results += [(s2, x2[2], val, o.dtype) for s2, x2 in ins.values()]
        elif o.kind == "all_gather":
            val = np.concatenate([_read(s, x[1], c, o.dtype) for s, x in
                                  (ins[r] for r in range(n))])
            results += [(s, x[2], val, o.dtype) for s, x in ins.values()]
        else:  # reduce_scatter
            red = _reduce([_read(s, x[1], c * n, o.dtype) for s, x in
                           (ins[r] for r in range(n))], o)
            results += [(s, x[2], red[r * c:(r + 1) * c], o.dtype) for r, (s, x) in ins.items()]
    # point to point: the k-th send from p to r meets the k-th recv on r from p
    sends: dict[tuple[int, int], list] = {}
    for r, (sim, ops) in slot.items():
        for o, sp, _ in ops:
            if o.kind == "send":
                sends.setdefault((r, o.peer), []).append(_read(sim, sp, o.count, o.dtype))
    for r, (sim, ops) in slot.items():
        for o, _, rp in ops:
            if o.kind == "recv":
                queue = sends.get((o.peer, r))
                if not queue:
                    raise RuntimeError(f"rank {r} receives from {o.peer}, which sends nothing")
                results.append((sim, rp, queue.pop(0)[:o.count], o.dtype))
    for sim, ptr, val, dtype in results:
        _write(sim, ptr, val, dtype)


class SimNccl:
    """The simulator's counterpart of :class:`~gpumsg.libs.nccl.handle.NcclHandle`."""

    def __init__(self, ctx: Any = None) -> None:
        self.sim = ctx.backend if ctx is not None else None
        self.comms: dict[int, SimComm] = {}
        self.seq: dict[int, int] = {}
        self.ranks: dict[int, int] = {}
        self.raw_handle = 0

    def init(self, comm: int, rank: int, nranks: int, uid: bytes) -> None:
        with _LOCK:
            shared = COMMS.get(comm)
            if shared is None:
                shared = COMMS[comm] = SimComm(nranks)
        self.comms[comm] = shared
        self.seq[comm] = 0
        self.ranks[comm] = rank

    def run(self, stream: Any, comm: int, ops: list[tuple[Any, int, int]]) -> None:
        shared = self.comms.get(comm)
        if shared is None:
            from ...errors import LibraryError

            raise LibraryError("nccl", 5, "ncclInvalidUsage", f"communicator {comm} (not "
                               "initialized on this device)")
        seq = self.seq[comm] = self.seq[comm] + 1
        rank = self.ranks[comm]
        sim = self.sim
        stream.put(lambda: shared.arrive(seq, rank, sim, ops))

    def poll(self, comm: int) -> int:
        shared = self.comms.get(comm)
        return 0 if shared is None else shared.async_error

    def abort(self, comm: int, destroy: bool = False) -> None:
        shared = self.comms.pop(comm, None)
        if shared is not None:
            shared.abort()
            with _LOCK:
                COMMS.pop(comm, None)

    def close(self) -> None:
        for comm in list(self.comms):
            self.abort(comm)
