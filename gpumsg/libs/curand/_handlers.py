"""Handlers of the cuRAND messages (device thread).

Creating, reseeding and destroying a generator are host calls answered at once (they run in
message order, so a ``Generate`` sent right after ``CreateGenerator`` finds the generator).
``Generate`` issues through the envelope on the compute stream, writing ``out``; a repeated
``Generate`` message keeps the launcher its first call derived (the device's ``DerivedMemo``),
and one sent once finds the launcher of an earlier one with the same values (``by_value``).
Draws are never replayed as CUDA graphs: a captured draw would repeat its offset, where cuRAND
advances the generator's state on the host at each call.
"""

from __future__ import annotations

from typing import Any

from ...messages.curand import CreateGenerator, DestroyGenerator, Generate, SeedGenerator
from ...service._registry import COMPUTE, handles

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
    # the generator is looked up at every call (destroyed, or replaced by a Mersenne Twister's
    # reseed); one of another kind or dimensions is refused before anything is issued
    g = lib.generators.get(msg.generator)
    if g is None or g.kind != msg.kind or g.dimensions != msg.dimensions:
        g = lib.get(msg.generator, msg.kind, msg.dimensions)  # raises InvalidMessage
    ref = msg.out
    # a partial fill keeps the rest of the buffer: then ``out`` must hold valid contents
    out = (ctx.resolve_out if msg.n == ref.size else ctx.resolve)(ref, "out")
    ptr = out.ptr
    # a repeated message (the client sends it as the same object) keeps its launcher, and a
    # message sent once (a draw of a new shape) finds the launcher of an earlier one with the
    # same values; a launcher holds no stream position, so each launch draws the next values
    derived = ctx.derived
    ctx.run(reply, COMPUTE, (), (out,), derived.get(msg, ptr, lambda: derived.by_value(
        ("curand", msg.kind, msg.distribution, ref.dtype, ptr, msg.n, msg.mean, msg.std,
         msg.lam), lambda: lib.generate_bound(msg.kind, msg.distribution, ref.dtype, ptr,
                                              msg.n, msg.mean, msg.std, msg.lam))), g)
