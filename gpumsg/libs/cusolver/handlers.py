"""Handlers of the cuSOLVER messages (device thread).

``info`` never blocks the device thread: each call writes cuSOLVER's device ``info`` word into a
scratch slot, copies it to that slot's pinned half on the same stream, and a ``finish`` callback
reads it on the completion thread. A positive info fails the future with the typed error and marks
the buffers the call wrote invalid (readers issued after that fail with DependencyFailed),
unless a later operation has rewritten them meanwhile. A negative info (an argument cuSOLVER
rejected) fails it with LibraryError.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import dtype_of
from ...errors import LibraryError, LinAlgError, NotPositiveDefinite, SingularMatrix
from ...messages.solver import Getrf, Getrs, Potrf, PotrfBatched, Potrs, SolverCacheInfo
from ...service.registry import COMPUTE, handles

__all__ = ["issue_with_info"]


def issue_with_info(ctx: Any, reply: Any, reads: tuple, writes: tuple, call: Any,
                    function: str, error: type[LinAlgError] | None) -> None:
    """Issue ``call(stream, info_ptr)`` through the envelope and check ``info`` at completion."""
    scratch = ctx.scratch
    slot = scratch.acquire()
    copy_back = ctx.backend.copy_dtoh
    written: list[tuple[Any, int, int]] = []

    def launch(stream: Any) -> None:
        call(stream, slot.dev)
        copy_back(stream, slot.host, slot.dev, 4)

    def finish(value: Any, failure: BaseException | None) -> Any:
        try:
            if failure is not None:
                return None
            info = int(slot.view[:4].view(np.int32)[0])
        finally:
            scratch.release(slot)
        if info == 0:
            return value
        if info < 0 or error is None:
            raise LibraryError("cusolver", info, f"parameter {-info} rejected (info={info})",
                               function)
        exc = error(_describe(error, info, function), index=info, function=function)
        for alloc, stream, seq in written:
            # only if nothing rewrote it since: a later writer's contents are not ours to fail
            if alloc.write_stream == stream and alloc.write_seq == seq:
                alloc.failed = exc
        raise exc

    ctx.run(reply, COMPUTE, reads, writes, launch, finish=finish)
    written.extend((a, a.write_stream, a.write_seq) for a in writes)


def _describe(error: type[LinAlgError], info: int, function: str) -> str:
    if error is NotPositiveDefinite:
        return (f"{function}: the leading minor of order {info} is not positive definite "
                f"(info={info})")
    return f"{function}: U[{info - 1}, {info - 1}] is exactly zero, the matrix is singular"


@handles(Potrf)
def _potrf(ctx: Any, msg: Potrf, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a,), (a,), lambda s, info: lib.potrf(
        s, msg.a.dtype, msg.uplo, msg.n, a.ptr, msg.lda, msg.clean, info),
        "cusolverDnXpotrf", NotPositiveDefinite)


@handles(Potrs)
def _potrs(ctx: Any, msg: Potrs, reply: Any) -> None:
    a, b = ctx.resolve(msg.a, "a"), ctx.resolve(msg.b, "b")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a, b), (b,), lambda s, info: lib.potrs(
        s, msg.a.dtype, msg.uplo, msg.n, msg.nrhs, a.ptr, msg.lda, b.ptr, msg.ldb, info),
        "cusolverDnXpotrs", None)


@handles(Getrf)
def _getrf(ctx: Any, msg: Getrf, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    ipiv = ctx.resolve_out(msg.ipiv, "ipiv") if msg.ipiv is not None else None
    writes = (a,) if ipiv is None else (a, ipiv)
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a,), writes, lambda s, info: lib.getrf(
        s, msg.a.dtype, msg.m, msg.n, a.ptr, msg.lda, ipiv.ptr if ipiv is not None else 0,
        info), "cusolverDnXgetrf", SingularMatrix)


@handles(Getrs)
def _getrs(ctx: Any, msg: Getrs, reply: Any) -> None:
    a, b = ctx.resolve(msg.a, "a"), ctx.resolve(msg.b, "b")
    ipiv = ctx.resolve(msg.ipiv, "ipiv") if msg.ipiv is not None else None
    reads = (a, b) if ipiv is None else (a, ipiv, b)
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, reads, (b,), lambda s, info: lib.getrs(
        s, msg.a.dtype, msg.trans, msg.n, msg.nrhs, a.ptr, msg.lda,
        ipiv.ptr if ipiv is not None else 0, b.ptr, msg.ldb, info), "cusolverDnXgetrs", None)


@handles(SolverCacheInfo)
def _cache_info(ctx: Any, msg: SolverCacheInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cusolver").workspaces.info())


@handles(PotrfBatched)
def _potrf_batched(ctx: Any, msg: PotrfBatched, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    batch, dtype = msg.batch, msg.a.dtype
    if batch == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    backend, memory, pinned = ctx.backend, ctx.memory, ctx.pinned
    # the pointer array: packed here, copied to device memory on the compute stream just before
    # the call; the info array: one int32 per item, copied back whole and scanned at completion
    item = dtype_of(dtype).itemsize
    ptrs = (a.ptr + item * msg.stride * np.arange(batch, dtype=np.uint64)).astype(np.uint64)
    ptr_block = pinned.allocate(ptrs.nbytes, staging=True)
    ptr_block.bytes[:ptrs.nbytes] = ptrs.view(np.uint8)
    info_block = pinned.allocate(4 * batch)
    ptr_dev = memory.allocate(ptrs.nbytes, ctx.compute.obj)
    info_dev = memory.allocate(4 * batch, ctx.compute.obj)
    written: list[tuple[Any, int, int]] = []
    function = f"cusolverDn{'SDCZ'['f32 f64 c64 c128'.split().index(dtype)]}potrfBatched"

    def launch(stream: Any) -> None:
        backend.copy_htod(stream, ptr_dev, ptr_block.ptr, ptrs.nbytes)
        lib.potrf_batched(stream, dtype, msg.uplo, msg.n, ptr_dev, msg.lda, info_dev, batch)
        if msg.clean:
            # after the factorization: on the H100 run, zeroing before it left the other
            # triangle non-zero (the batched kernel for small n appears to write it)
            lib.zero_outside_strided(stream, dtype, msg.uplo, msg.n, a.ptr, msg.lda, msg.stride,
                                     batch)
        backend.copy_dtoh(stream, info_block.ptr, info_dev, 4 * batch)

    def finish(value: Any, failure: BaseException | None) -> Any:
        try:
            if failure is not None:
                return None
            infos = np.frombuffer(info_block.bytes[:4 * batch], np.int32)
            bad = np.flatnonzero(infos)
            first = int(bad[0]) if bad.size else -1
            info = int(infos[first]) if bad.size else 0
        finally:
            pinned.release(ptr_block)
            pinned.release(info_block)
        if first < 0:
            return value
        if info < 0:
            raise LibraryError("cusolver", info, f"parameter {-info} rejected (info={info})",
                               function)
        exc = NotPositiveDefinite(
            f"{function}: matrix {first} of {batch}: the leading minor of order {info} is not "
            f"positive definite ({bad.size} item(s) failed)", index=info, batch_item=first,
            function=function)
        exc.failed_items = bad.tolist()
        for alloc, stream, seq in written:
            if alloc.write_stream == stream and alloc.write_seq == seq:
                alloc.failed = exc
        raise exc

    try:
        ctx.run(reply, COMPUTE, (a,), (a,), launch, finish=finish)
        written.append((a, a.write_stream, a.write_seq))
    finally:
        memory.deallocate(ptr_dev, ptrs.nbytes, ctx.compute.obj)
        memory.deallocate(info_dev, 4 * batch, ctx.compute.obj)
