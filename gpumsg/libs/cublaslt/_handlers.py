"""Handlers of the cuBLASLt messages (device thread)."""

from __future__ import annotations

from typing import Any

from ...messages.cublaslt import BlasLtCacheInfo, Matmul
from ...service._plans import merge_info
from ...service._registry import COMPUTE, handles
from ._handle import LtCall

__all__: list[str] = []


@handles(Matmul)
def _matmul(ctx: Any, msg: Matmul, reply: Any) -> None:
    ep = msg.epilogue
    bias_out = ep in ("drelu_bgrad", "dgelu_bgrad", "bgrada", "bgradb")
    aux_out = ep in ("relu_aux", "relu_aux_bias", "gelu_aux", "gelu_aux_bias")
    reads = [ctx.resolve(msg.a, "a"), ctx.resolve(msg.b, "b")]
    writes = [ctx.resolve_out(msg.d, "d")]
    c = ctx.resolve(msg.c, "c") if msg.c is not None and msg.beta != 0 else None
    if c is not None:
        reads.append(c)
    bias = aux = None
    if msg.bias is not None:
        bias = ctx.resolve_out(msg.bias, "bias") if bias_out else ctx.resolve(msg.bias, "bias")
        (writes if bias_out else reads).append(bias)
    if msg.aux is not None:
        aux = ctx.resolve_out(msg.aux, "aux") if aux_out else ctx.resolve(msg.aux, "aux")
        (writes if aux_out else reads).append(aux)
    scales = []
    for name in ("scale_a", "scale_b", "scale_c", "scale_d"):
        ref = getattr(msg, name)
        if ref is None:
            scales.append(0)
        else:
            alloc = ctx.resolve(ref, name)
            reads.append(alloc)
            scales.append(alloc.ptr)
    d = writes[0]
    call = LtCall(msg.a.dtype, msg.b.dtype, msg.c_dtype, msg.d.dtype, msg.compute, msg.transa,
                  msg.transb, msg.m, msg.n, msg.k, msg.lda, msg.ldb, msg.ldc, msg.ldd, ep,
                  msg.bias.dtype if msg.bias is not None else None,
                  msg.aux_ld if msg.aux is not None else None, msg.alpha, msg.beta,
                  reads[0].ptr, reads[1].ptr, c.ptr if c is not None else 0, d.ptr,
                  bias.ptr if bias is not None else 0, aux.ptr if aux is not None else 0,
                  tuple(scales))  # type: ignore[arg-type]
    ctx.run(reply, COMPUTE, tuple(reads), tuple(writes), ctx.library("cublaslt").matmul, call)


@handles(BlasLtCacheInfo)
def _cache_info(ctx: Any, msg: BlasLtCacheInfo, reply: Any) -> None:
    infos = ctx.over_handles("cublaslt", lambda h: h.cache_info())  # one per stream used
    ctx.reply_now(reply, merge_info(infos or [ctx.library("cublaslt").cache_info()]))
