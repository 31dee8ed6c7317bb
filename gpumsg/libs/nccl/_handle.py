"""NCCL on one device (device thread): the device's member of each communicator, by the id the
group gave it. ``ncclCommInitRank`` runs on the device thread (it returns once every rank has
joined: the group posts the init of every member together, one per device thread, so each thread
blocks only in its own call). Collectives are enqueued on the compute stream inside one
``ncclGroupStart/End``: by the device thread for its own member (:meth:`NcclHandle.run`), or by
a caller holding every member's executor turn, which enqueues each member's operations inside
one group call of its own (:meth:`~NcclHandle.group_start`, :meth:`~NcclHandle.enqueue` per
member, :meth:`~NcclHandle.group_end`: NCCL lets one thread drive several devices' communicators
in a group call). Neither waits on the GPU."""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from ...dtypes import dtype_of
from ...errors import LibraryError
from .._loader import LoadedLibrary, c_void_p, load
from ._bindings import DTYPE, IN_PROGRESS, REDOP, RESULT_NAMES, UniqueId

__all__ = ["NcclHandle", "unique_id", "FP8_VERSION"]

#: ncclGetVersion code of the first NCCL with ncclFloat8e4m3 / ncclFloat8e5m2 (2.19.0)
FP8_VERSION = 21900

# NVLink multicast (NVLS) stays off on the lent machines: set before NCCL is loaded
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def _error(lib: LoadedLibrary, status: int, function: str) -> LibraryError:
    return LibraryError("nccl", status, RESULT_NAMES.get(status, str(status)), function)


def unique_id() -> bytes:
    """A fresh ncclUniqueId (128 bytes) from any thread."""
    lib = load("nccl")
    uid = UniqueId()
    st = lib.ncclGetUniqueId(ctypes.byref(uid))
    if st != 0:
        raise _error(lib, st, "ncclGetUniqueId")
    # all 128 bytes: ``uid.internal`` (a c_char array) would stop at the first NUL byte
    return ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid))


class NcclHandle:
    """This device's communicators (``comm id -> ncclComm_t``)."""

    def __init__(self, ctx: Any = None) -> None:
        self.lib = load("nccl")
        v = ctypes.c_int()
        self.version = v.value if self.lib.ncclGetVersion(ctypes.byref(v)) == 0 else 0
        self.comms: dict[int, c_void_p] = {}
        self.raw_handle = 0

    def _check(self, status: int, function: str) -> None:
        if status != 0 and status != IN_PROGRESS:
            raise _error(self.lib, status, function)

    def init(self, comm: int, rank: int, nranks: int, uid: bytes) -> None:
        """Join communicator ``comm`` (blocks until every rank joined)."""
        self.abort(comm)
        h = c_void_p()
        st = UniqueId()
        ctypes.memmove(ctypes.addressof(st), uid, ctypes.sizeof(st))
        self._check(self.lib.ncclCommInitRank(ctypes.byref(h), nranks, st, rank),
                    "ncclCommInitRank")
        self.comms[comm] = h

    def has(self, comm: int) -> bool:
        """Whether this device is a member of communicator ``comm`` (joined, not aborted)."""
        return comm in self.comms

    def group_start(self) -> None:
        """ncclGroupStart on the calling thread (group calls nest per thread)."""
        self._check(self.lib.ncclGroupStart(), "ncclGroupStart")

    def group_end(self) -> None:
        """ncclGroupEnd on the calling thread: the outermost one launches every operation
        enqueued since its ncclGroupStart, on every device they were enqueued for (NCCL
        makes each communicator's device current itself)."""
        self._check(self.lib.ncclGroupEnd(), "ncclGroupEnd")

    def enqueue(self, stream: Any, comm: int, ops: list[tuple[Any, int, int]],
                made: list[int]) -> None:
        """Enqueue ``ops`` ((CollOp, send ptr, recv ptr)) for ``stream`` inside the group
        call open on this thread; the premul_sum operators it creates are appended to
        ``made`` (:meth:`release` them after the group call ended)."""
        h = self.comms.get(comm)
        if h is None:
            raise _error(self.lib, 5, f"communicator {comm} (not initialized on this device)")
        lib = self.lib
        if self.version < FP8_VERSION and any(o.dtype in ("e4m3", "e5m2") for o, _, _ in ops):
            raise _error(lib, 4, f"fp8 collectives need NCCL >= 2.19 (this is {self.version})")
        s = c_void_p(int(stream))
        for o, sp, rp in ops:
            dt = DTYPE[o.dtype]
            if o.op == "premul_sum":
                red = ctypes.c_int()
                scalar = np.array([o.scale], dtype_of(o.dtype)).tobytes()
                buf = ctypes.create_string_buffer(scalar)
                self._check(lib.ncclRedOpCreatePreMulSum(ctypes.byref(red), buf, dt, 1, h),
                            "ncclRedOpCreatePreMulSum")
                op = red.value
                made.append(op)
            else:
                op = REDOP[o.op]
            k = o.kind
            if k == "all_reduce":
                st = lib.ncclAllReduce(sp, rp, o.count, dt, op, h, s)
            elif k == "broadcast":
                st = lib.ncclBroadcast(sp or rp, rp, o.count, dt, o.root, h, s)
            elif k == "reduce":
                st = lib.ncclReduce(sp, rp or None, o.count, dt, op, o.root, h, s)
            elif k == "all_gather":
                st = lib.ncclAllGather(sp, rp, o.count, dt, h, s)
            elif k == "reduce_scatter":
                st = lib.ncclReduceScatter(sp, rp, o.count, dt, op, h, s)
            elif k == "send":
                st = lib.ncclSend(sp, o.count, dt, o.peer, h, s)
            else:
                st = lib.ncclRecv(rp, o.count, dt, o.peer, h, s)
            self._check(st, "nccl" + k)

    def release(self, comm: int, made: list[int]) -> None:
        """Destroy the premul_sum operators :meth:`enqueue` created (after the group call)."""
        h = self.comms.get(comm)
        if h is not None:
            for op in made:
                self.lib.ncclRedOpDestroy(op, h)

    def run(self, stream: Any, comm: int, ops: list[tuple[Any, int, int]]) -> None:
        """Enqueue ``ops`` ((CollOp, send ptr, recv ptr)) on ``stream`` as one group call."""
        made: list[int] = []
        self.group_start()
        try:
            self.enqueue(stream, comm, ops, made)
        finally:
            try:
                self.group_end()
            finally:
                self.release(comm, made)

    def poll(self, comm: int) -> int:
        """The communicator's asynchronous error (0: none; unknown ids: 0)."""
        h = self.comms.get(comm)
        if h is None:
            return 0
        err = ctypes.c_int()
        self._check(self.lib.ncclCommGetAsyncError(h, ctypes.byref(err)),
                    "ncclCommGetAsyncError")
        return 0 if err.value == IN_PROGRESS else err.value

    def abort(self, comm: int, destroy: bool = False) -> None:
        """Abort (or, with ``destroy``, cleanly destroy) and forget communicator ``comm``."""
        h = self.comms.pop(comm, None)
        if h is not None:
            fn = self.lib.ncclCommDestroy if destroy else self.lib.ncclCommAbort
            fn(h)

    def close(self) -> None:
        for comm in list(self.comms):
            self.abort(comm)
