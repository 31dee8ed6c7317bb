"""Messages of the collectives (NCCL on cuda, a rendezvous on the simulator).

A collective over a group is one :class:`Collective` message per member device: each names the
communicator (``comm``, an id the group chose), this device's ``rank`` and a batch of
:class:`CollOp` (one op, or several from ``comm.group()``, issued inside one NCCL group call).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .base import (
    BufRef,
    Message,
    _bool,
    _choice,
    _fail,
    _int,
    _ref,
    check_extent,
    fast_init,
    message,
)

__all__ = ["CollOp", "Collective", "CommInit", "CommAbort", "CommPoll", "COLLECTIVES",
           "REDUCTIONS", "COLLECTIVE_DTYPES"]

COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "send",
               "recv")
REDUCTIONS = ("sum", "prod", "max", "min", "avg", "premul_sum")
#: every NCCL dtype; fp8 (e4m3, e5m2) needs NCCL >= 2.19 on GPUs (refused with LibraryError)
COLLECTIVE_DTYPES = ("i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16",
                     "e4m3", "e5m2")


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class CollOp:
    """One operation of a batch. ``count`` is elements per rank: the reduced / broadcast length,
    the part each rank contributes to all_gather, the part each rank receives of reduce_scatter.
    ``send`` is None for recv; ``recv`` None for send (and for non-root ranks of reduce it may be
    None). ``peer`` is the other rank of send/recv, ``root`` the root of broadcast/reduce,
    ``scale`` the pre-multiplier of premul_sum."""

    kind: str
    send: BufRef | None
    recv: BufRef | None
    count: int
    dtype: str
    op: str = "sum"
    root: int = 0
    peer: int = -1
    scale: float = 1.0


def _check_op(msg: Any, i: int, o: Any, nranks: int, rank: int) -> None:
    f = f"ops[{i}]"
    if not isinstance(o, CollOp):
        raise _fail(msg, f, "must be a CollOp")
    _choice(msg, f + ".kind", o.kind, COLLECTIVES)
    _choice(msg, f + ".dtype", o.dtype, COLLECTIVE_DTYPES)
    _choice(msg, f + ".op", o.op, REDUCTIONS)
    _int(msg, f + ".count", o.count, lo=1)
    if o.kind in ("broadcast", "reduce"):
        _int(msg, f + ".root", o.root, hi=nranks - 1)
    if o.kind in ("send", "recv"):
        _int(msg, f + ".peer", o.peer, hi=nranks - 1)
        if o.peer == rank:
            raise _fail(msg, f + ".peer", "must differ from this rank")
    n_in = {"all_gather": o.count, "reduce_scatter": o.count * nranks}.get(o.kind, o.count)
    n_out = {"all_gather": o.count * nranks}.get(o.kind, o.count)
    need_send = o.kind != "recv" and not (o.kind == "broadcast" and rank != o.root)
    need_recv = o.kind != "send" and not (o.kind == "reduce" and rank != o.root)
    for name, ref, n, need in (("send", o.send, n_in, need_send),
                               ("recv", o.recv, n_out, need_recv)):
        if ref is None:
            if need:
                raise _fail(msg, f"{f}.{name}", "a buffer is required here")
            continue
        if ref.dtype != o.dtype:
            raise _fail(msg, f"{f}.{name}", f"has dtype {ref.dtype}, the op is {o.dtype}")
        check_extent(msg, f"{f}.{name}", ref, 0, ((n, 1),), f"{n} elements")


@message()
class Collective(Message):
    """Issue ``ops`` on communicator ``comm`` as rank ``rank`` of ``nranks`` (one NCCL group
    call), on the compute stream, after the buffers' earlier uses."""

    comm: int
    rank: int
    nranks: int
    ops: tuple

    def __post_init__(self) -> None:
        _int(self, "comm", self.comm)
        _int(self, "nranks", self.nranks, lo=1)
        _int(self, "rank", self.rank, hi=self.nranks - 1)
        # an empty batch is allowed: ranks outside a send/recv pair still take part, so every
        # member sees the same sequence of batches (the simulator's rendezvous counts on it)
        if not isinstance(self.ops, tuple):
            raise _fail(self, "ops", "must be a tuple of CollOp")
        for i, o in enumerate(self.ops):
            _check_op(self, i, o, self.nranks, self.rank)

    def refs(self) -> list[BufRef]:
        out = []
        for o in self.ops:
            out += [r for r in (o.send, o.recv) if r is not None]
        return out

    def written(self) -> list[BufRef]:
        return [o.recv for o in self.ops if o.recv is not None]


def coll_op(kind: str, send: Any, recv: Any, count: int, dtype: str, **kw: Any) -> CollOp:
    """A CollOp from client buffers (GpuBuffer, its future or BufRef; None where unused)."""
    return CollOp(kind, None if send is None else _ref(None, "send", send),
                  None if recv is None else _ref(None, "recv", recv), count, dtype, **kw)


@message()
class CommInit(Message):
    """Join communicator ``comm`` as ``rank`` of ``nranks`` (cuda: ncclCommInitRank with the
    128-byte ``unique_id``; it returns once every rank has joined)."""

    comm: int
    rank: int
    nranks: int
    unique_id: bytes

    def __post_init__(self) -> None:
        _int(self, "comm", self.comm)
        _int(self, "nranks", self.nranks, lo=1)
        _int(self, "rank", self.rank, hi=self.nranks - 1)
        if not isinstance(self.unique_id, bytes) or len(self.unique_id) != 128:
            raise _fail(self, "unique_id", "must be the 128 bytes of an ncclUniqueId")


@message()
class CommAbort(Message):
    """Abort (ncclCommAbort) and forget this device's member of communicator ``comm``; pending
    and future collectives on it fail or are dropped. Unknown ids are ignored."""

    comm: int
    destroy: bool = False

    def __post_init__(self) -> None:
        _int(self, "comm", self.comm)
        _bool(self, "destroy", self.destroy)


@message()
class CommPoll(Message):
    """Answer this device's asynchronous error of communicator ``comm`` (0 = none), without
    waiting on the GPU (ncclCommGetAsyncError)."""

    comm: int

    def __post_init__(self) -> None:
        _int(self, "comm", self.comm)
