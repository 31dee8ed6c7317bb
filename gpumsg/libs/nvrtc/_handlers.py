"""Module loads and kernel launches (device thread)."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidMessage
from ...messages._base import BufRef
from ...messages.nvrtc import Launch, LoadModule, pointer_params
from ...service._registry import COMPUTE, handles

__all__: list[str] = []


@handles(LoadModule)
def _load_module(ctx: Any, msg: LoadModule, reply: Any) -> None:
    ctx.library("nvrtc").load(msg.key, msg.image, msg.kind, msg.symbols)
    ctx.reply_now(reply, None)


class _LaunchPlan:
    """What a Launch message needs at every launch, derived once per message: its function,
    its distinct buffers (reference, field name, read or only written), which of them the
    launch reads and writes, and the launcher bound to the buffers' last pointers."""

    __slots__ = ("fn", "buffers", "reads", "writes", "ptrs", "launcher")

    def __init__(self, ctx: Any, msg: Launch) -> None:
        k = msg.kernel
        if k.owner != ctx.token:
            raise InvalidMessage(f"kernel: {k.name!r} was compiled for another device",
                                 field="kernel")
        self.fn = ctx.library("nvrtc").function(k.module, k.symbol)
        read_ids = {r.id for r in msg.reads}
        index: dict[int, int] = {}
        buffers: list[tuple[BufRef, str, bool]] = []
        for i, a in enumerate(msg.args):
            if type(a) is BufRef and a.id not in index:
                index[a.id] = len(buffers)
                buffers.append((a, f"args[{i}]", a.id in read_ids))
        self.buffers = tuple(buffers)
        self.reads = tuple(index[r.id] for r in msg.reads)
        self.writes = tuple(index[r.id] for r in msg.writes)
        self.ptrs: tuple | None = None
        self.launcher: Any = None

    def bind(self, ctx: Any, msg: Launch, allocs: list[Any], ptrs: tuple) -> Any:
        """The launcher for these pointers (a buffer's pointer is fixed for its life, so this
        runs once per message unless a buffer was rebuilt)."""
        by_id = {ref.id: alloc for (ref, _, _), alloc in zip(self.buffers, allocs)}
        values = [by_id[a.id].ptr if type(a) is BufRef else a for a in msg.args]
        refs = [a if type(a) is BufRef else None for a in msg.args]
        self.launcher = ctx.library("nvrtc").bound(self.fn, msg.grid, msg.block, msg.shared,
                                                   msg.kernel.params, values, refs)
        self.ptrs = ptrs
        return self.launcher


def _launch_once(ctx: Any, msg: Launch, reply: Any) -> None:
    """A launch never sent again (``AllocThen``'s: its output is new): what ``_LaunchPlan``
    derives, derived inline and not kept, and launched without a launcher
    (``launch``: the arguments written into the kept block of their kinds). Only the pointer
    parameters are looked at (the others are numbers, passed as they are)."""
    k = msg.kernel
    if k.owner != ctx.token:
        raise InvalidMessage(f"kernel: {k.name!r} was compiled for another device",
                             field="kernel")
    lib = ctx.library("nvrtc")
    fn = lib.function(k.module, k.symbol)
    args = msg.args
    values = list(args)
    # the common case: every buffer allocated and sound, one dict lookup each
    found = ctx.buffers.get
    for i, _ in pointer_params(k.params):
        alloc = found(args[i].id)
        if alloc is None or alloc.failed is not None:
            allocs = _resolved(ctx, msg, values)  # the slow path says what is wrong
            break
        values[i] = alloc.ptr
    else:
        allocs = found
    # ``args`` as the references: a BufRef at each pointer parameter (the simulator views it)
    ctx.run(reply, COMPUTE, tuple([allocs(r.id) for r in msg.reads]),
            tuple([allocs(r.id) for r in msg.writes]), lib.launch, fn, msg.grid, msg.block,
            msg.shared, k.params, values, args)
    if msg.scratch:
        _keep_scratch(ctx, msg)


def _keep_scratch(ctx: Any, msg: Launch) -> None:
    """A launch's scratch carries no verdict of its inputs: the envelope gave every buffer
    the launch writes its verdict, but a scratch buffer's contents do not depend on them, and
    a verdict failing later would fail every launch that uses the scratch after."""
    found = ctx.buffers.get
    for ref in msg.scratch:
        alloc = found(ref.id)
        if alloc is not None:
            alloc.verdict = None


def _resolved(ctx: Any, msg: Launch, values: list[Any]) -> Any:
    """Resolve each pointer argument as a read (a buffer the launch reads) or a write, raising
    what ``resolve``/``resolve_out`` raise; write the pointers into ``values``. The lookup of
    the resolved allocations by buffer id."""
    resolve, resolve_out = ctx.resolve, ctx.resolve_out
    read_ids = {r.id for r in msg.reads}
    by_id: dict[int, Any] = {}
    args = msg.args
    for i, field in pointer_params(msg.kernel.params):
        a = args[i]
        alloc = by_id.get(a.id)
        if alloc is None:
            alloc = by_id[a.id] = resolve(a, field) if a.id in read_ids else \
                resolve_out(a, field)
        values[i] = alloc.ptr
    return by_id.get


@handles(Launch)
def _launch(ctx: Any, msg: Launch, reply: Any) -> None:
    if ctx.derived.once:
        _launch_once(ctx, msg, reply)
        return
    # a repeated launch (the client sends it as the same message object) keeps its plan
    plan = ctx.derived.get(msg, None, lambda: _LaunchPlan(ctx, msg))
    resolve, resolve_out = ctx.resolve, ctx.resolve_out
    allocs = [resolve(ref, field) if reading else resolve_out(ref, field)
              for ref, field, reading in plan.buffers]
    ptrs = tuple([a.ptr for a in allocs])
    launcher = plan.launcher if ptrs == plan.ptrs else plan.bind(ctx, msg, allocs, ptrs)
    ctx.run(reply, COMPUTE, tuple([allocs[i] for i in plan.reads]),
            tuple([allocs[i] for i in plan.writes]), launcher)
    if msg.scratch:
        _keep_scratch(ctx, msg)
