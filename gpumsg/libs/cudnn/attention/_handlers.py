"""Handlers of the attention messages (device thread), and the registration of attention as a
library of its own ("cudnn_attention": its graphs live beside, not inside, the convolution
handle; its client methods join ``dev.cudnn``)."""

from __future__ import annotations

from typing import Any

from ....messages.cudnn_attention import (
    AttentionBackward,
    AttentionCacheInfo,
    AttentionForward,
    attention_dims,
)
from ....service._registry import COMPUTE, handles, register_library
from ._handle import AttentionCall, AttentionHandle
from ._sim import SimAttention

__all__ = ["LIBRARY"]


def _call(kind: str, msg: Any, ptrs: dict[str, int], stats: bool) -> AttentionCall:
    b, h, hk, sq, skv, d = attention_dims(tuple(msg.q.shape), tuple(msg.k.shape))
    return AttentionCall(kind, msg.q.dtype, b, h, hk, sq, skv, d, msg.causal,
                         msg.seq_len_q is not None, msg.scale, stats, **ptrs,
                         dropout=msg.dropout, seed=msg.seed, offset=msg.offset)


def _padding(ctx: Any, msg: Any, reads: list, ptrs: dict[str, int]) -> None:
    if msg.seq_len_q is not None:
        lq, lkv = ctx.resolve(msg.seq_len_q, "seq_len_q"), ctx.resolve(msg.seq_len_kv,
                                                                       "seq_len_kv")
        reads += [lq, lkv]
        ptrs.update(seq_q=lq.ptr, seq_kv=lkv.ptr)


@handles(AttentionForward)
def _attention_forward(ctx: Any, msg: AttentionForward, reply: Any) -> None:
    lib = ctx.library("cudnn_attention")
    reads = [ctx.resolve(getattr(msg, n), n) for n in ("q", "k", "v")]
    writes = [ctx.resolve_out(msg.o, "o")]
    ptrs = {"q": reads[0].ptr, "k": reads[1].ptr, "v": reads[2].ptr, "o": writes[0].ptr}
    if msg.stats is not None:
        s = ctx.resolve_out(msg.stats, "stats")
        writes.append(s)
        ptrs["lse"] = s.ptr
    _padding(ctx, msg, reads, ptrs)
    ctx.run(reply, COMPUTE, tuple(reads), tuple(writes), lib.run,
            _call("fwd", msg, ptrs, msg.stats is not None))


@handles(AttentionBackward)
def _attention_backward(ctx: Any, msg: AttentionBackward, reply: Any) -> None:
    lib = ctx.library("cudnn_attention")
    names = ("q", "k", "v", "o", "do", "stats")
    reads = [ctx.resolve(getattr(msg, n), n) for n in names]
    writes = [ctx.resolve_out(getattr(msg, n), n) for n in ("dq", "dk", "dv")]
    ptrs = {("lse" if n == "stats" else n): r.ptr for n, r in zip(names, reads)}
    ptrs.update(dq=writes[0].ptr, dk=writes[1].ptr, dv=writes[2].ptr)
    _padding(ctx, msg, reads, ptrs)
    ctx.run(reply, COMPUTE, tuple(reads), tuple(writes), lib.run,
            _call("bwd", msg, ptrs, True))


@handles(AttentionCacheInfo)
def _attention_cache_info(ctx: Any, msg: AttentionCacheInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cudnn_attention").cache_info())


# its client methods join cuDNN's namespaces (gpumsg/libs/cudnn/_namespaces.py)
LIBRARY = register_library("cudnn_attention", cuda=AttentionHandle, sim=SimAttention)
