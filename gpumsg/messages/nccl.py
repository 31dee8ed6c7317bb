"""Messages of the collectives (NCCL on cuda, a rendezvous on the simulator).

A collective over a group is one :class:`Collective` message per member device: each names the
communicator (``comm``, an id the group chose), this device's ``rank`` and a batch of
:class:`CollOp` (one op, or several from ``comm.group()``, issued inside one NCCL group call).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidMessage
from ._base import (
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
           "REDUCTIONS", "COLLECTIVE_DTYPES", "check_batch"]

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


#: the fields on which every rank's k-th collective (send/recv aside) must agree with rank 0's
_AGREE = ("kind", "count", "dtype", "op", "root", "scale")


def _matters(name: str, o: Any) -> bool:
    """Whether field ``name`` takes part in collective ``o`` (the others keep their defaults
    and are never read)."""
    if name == "op":
        return o.kind in ("all_reduce", "reduce", "reduce_scatter")
    if name == "scale":
        return o.kind in ("all_reduce", "reduce", "reduce_scatter") and o.op == "premul_sum"
    if name == "root":
        return o.kind in ("broadcast", "reduce")
    return True


def check_batch(ops: Sequence[Sequence[Any]], pairs: bool = True) -> None:
    """Refuse, with :class:`~gpumsg.errors.InvalidMessage`, a batch whose ranks disagree.

    ``ops[r]`` is rank r's :class:`CollOp` list in issue order (what rank r's
    :class:`Collective` carries). A :class:`Collective` message checks its own rank's buffers
    against its ops; this checks what no single message can see. NCCL matches the collectives
    of a batch by their order and trusts each rank's count and dtype: a rank that disagrees
    reduces the wrong elements or reads and writes outside its buffers, and NCCL does not
    notice. So the k-th collective (any kind but send/recv) of every rank must equal rank 0's
    k-th in kind, count, dtype, op, root and scale. With ``pairs`` (a whole batch, as issued),
    the j-th send from rank p to rank q must meet the j-th recv on q from p with the same count
    and dtype, and no send or recv may lack its partner (it would wait for ever). The error's
    ``field`` is the disagreeing op's field (``ops[i].count``); its text names the rank and
    what was expected."""
    colls = [[(i, o) for i, o in enumerate(rank_ops) if o.kind not in ("send", "recv")]
             for rank_ops in ops]
    for r in range(1, len(ops)):
        if len(colls[r]) != len(colls[0]):
            raise InvalidMessage(
                f"Collective.ops: rank {r} issues {len(colls[r])} collective(s) in this batch, "
                f"rank 0 issues {len(colls[0])}: every rank must issue the same ones, in the "
                "same order", field="ops")
        for (i, o), (i0, o0) in zip(colls[r], colls[0]):
            if (o.kind, o.count, o.dtype, o.op, o.root, o.scale) == \
                    (o0.kind, o0.count, o0.dtype, o0.op, o0.root, o0.scale):
                continue  # the common case, without the field by field look below
            for name in _AGREE:
                if not _matters(name, o0):
                    continue
                got, want = getattr(o, name), getattr(o0, name)
                if got != want:
                    raise InvalidMessage(
                        f"Collective.ops[{i}].{name}: rank {r} has {got!r} where rank 0's "
                        f"ops[{i0}] ({o0.kind}) has {want!r}: every rank's {o0.kind} must use "
                        f"the same {name}", field=f"ops[{i}].{name}")
    if not pairs:
        return
    # point to point: NCCL matches the j-th send from p to q with the j-th recv on q from p
    sends: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    recvs: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    for r, rank_ops in enumerate(ops):
        for i, o in enumerate(rank_ops):
            if o.kind == "send":
                sends.setdefault((r, o.peer), []).append((i, o))
            elif o.kind == "recv":
                recvs.setdefault((o.peer, r), []).append((i, o))
    for (p, q) in sorted(set(sends) | set(recvs)):
        out, into = sends.get((p, q), []), recvs.get((p, q), [])
        for (i, s), (j, v) in zip(out, into):
            for name in ("count", "dtype"):
                if getattr(v, name) != getattr(s, name):
                    raise InvalidMessage(
                        f"Collective.ops[{j}].{name}: rank {q} receives {name} "
                        f"{getattr(v, name)!r} from rank {p}, whose matching send (its "
                        f"ops[{i}]) has {getattr(s, name)!r}: a send and its recv must agree",
                        field=f"ops[{j}].{name}")
        if len(out) != len(into):
            r, side, other = (p, "send(s) to", "recv(s) from") if len(out) > len(into) \
                else (q, "recv(s) from", "send(s) to")
            peer = q if r == p else p
            raise InvalidMessage(
                f"Collective.ops: rank {r} posts {max(len(out), len(into))} {side} rank "
                f"{peer}, which posts {min(len(out), len(into))} matching {other} rank {r} in "
                "this batch: pair every send with its recv inside one group", field="ops")


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
