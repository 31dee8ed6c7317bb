"""Handlers of the cuRAND messages (device thread).

Creating, reseeding and destroying a generator are host calls answered at once (they run in
message order, so a ``Generate`` sent right after ``CreateGenerator`` finds the generator).
``Generate`` issues through the envelope on the compute stream, writing ``out``.
"""

from __future__ import annotations

from typing import Any

from ...messages.rng import CreateGenerator, DestroyGenerator, Generate, SeedGenerator
from ...service.registry import COMPUTE, handles

__all__: list[str] = []


@handles(CreateGenerator)
def _create(ctx: Any, msg: CreateGenerator, reply: Any) -> None:
    ctx.library("curand").create(msg.generator, msg.kind, msg.seed, msg.offset, msg.ordering,
                                 msg.dimensions)
    ctx.reply_now(reply)


@handles(SeedGenerator)
def _seed(ctx: Any, msg: SeedGenerator, reply: Any) -> None:
    ctx.library("curand").reseed(msg.generator, msg.kind, msg.seed, msg.offset)
    ctx.reply_now(reply)


@handles(DestroyGenerator)
def _destroy(ctx: Any, msg: DestroyGenerator, reply: Any) -> None:
    ctx.library("curand").destroy(msg.generator)
    ctx.reply_now(reply)


@handles(Generate)
def _generate(ctx: Any, msg: Generate, reply: Any) -> None:
    lib = ctx.library("curand")
    lib.get(msg.generator, msg.kind, msg.dimensions)  # InvalidMessage before anything is issued
    # a partial fill keeps the rest of the buffer: then ``out`` must hold valid contents
    out = (ctx.resolve_out if msg.n == msg.out.size else ctx.resolve)(msg.out, "out")
    ctx.run(reply, COMPUTE, (), (out,), lib.generate, msg.generator, msg.distribution,
            msg.out.dtype, out.ptr, msg.n, msg.mean, msg.std, msg.lam)
