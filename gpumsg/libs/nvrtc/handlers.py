"""Module loads and kernel launches (device thread)."""

from __future__ import annotations

from typing import Any

from ...errors import InvalidMessage
from ...messages.base import BufRef
from ...messages.nvrtc import Launch, LoadModule
from ...service.registry import COMPUTE, handles

__all__: list[str] = []


@handles(LoadModule)
def _load_module(ctx: Any, msg: LoadModule, reply: Any) -> None:
    ctx.library("nvrtc").load(msg.key, msg.image, msg.kind, msg.symbols)
    ctx.reply_now(reply, None)


@handles(Launch)
def _launch(ctx: Any, msg: Launch, reply: Any) -> None:
    k = msg.kernel
    if k.owner != ctx.token:
        raise InvalidMessage(f"kernel: {k.name!r} was compiled for another device",
                             field="kernel")
    lib = ctx.library("nvrtc")
    fn = lib.function(k.module, k.symbol)
    read_ids = {r.id for r in msg.reads}
    allocs: dict[int, Any] = {}
    values: list[Any] = []
    refs: list[Any] = []
    for i, a in enumerate(msg.args):
        if type(a) is BufRef:
            alloc = allocs.get(a.id)
            if alloc is None:
                field = f"args[{i}]"
                alloc = allocs[a.id] = (ctx.resolve(a, field) if a.id in read_ids
                                        else ctx.resolve_out(a, field))
            values.append(alloc.ptr)
            refs.append(a)
        else:
            values.append(a)
            refs.append(None)
    reads = tuple(allocs[r.id] for r in msg.reads)
    writes = tuple(allocs[r.id] for r in msg.writes)
    ctx.run(reply, COMPUTE, reads, writes, lib.launch, fn, msg.grid, msg.block, msg.shared,
            k.params, values, refs)
