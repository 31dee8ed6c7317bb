"""Handlers of the cuSPARSE messages (device thread).

Every operation runs on the compute stream through the envelope, reading the matrix's three
buffers (so it is ordered after whatever wrote them on any stream). The two-phase operations
(SpGEMM, dense -> CSR) never wait on the GPU here: the first message issues the size-finding
phase and its reply, the number of entries, is read at completion (SpGEMM: from the result's
descriptor, which cuSPARSE fills in its compute phase; dense -> CSR: the last row offset, copied
to a pinned scratch slot on the stream). The client then allocates the output and sends the
second message, which fills it.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable
from typing import Any

import numpy as np

from ...messages.cusparse import (
    SDDMM,
    CompressRows,
    DenseToSparseFinish,
    DenseToSparseStart,
    ExpandRows,
    SparseCacheInfo,
    SparseConvert,
    SparseCreate,
    SparseDestroy,
    SparseRef,
    SparseReplayInfo,
    SparseToDense,
    SpGEMMDrop,
    SpGEMMFinish,
    SpGEMMStart,
    SpMM,
    SpMV,
    SpSM,
    SpSolveQR,
    SpSV,
)
from ...service._registry import COMPUTE, handles

__all__: list[str] = []


def _read(ctx: Any, ref: SparseRef, field: str) -> tuple[Any, Any, Any]:
    r = ctx.resolve
    return r(ref.ptr, field), r(ref.idx, field), r(ref.val, field)


def _out(ctx: Any, ref: SparseRef, field: str) -> tuple[Any, Any, Any]:
    r = ctx.resolve_out
    return r(ref.ptr, field), r(ref.idx, field), r(ref.val, field)


@handles(SparseCreate)
def _create(ctx: Any, msg: SparseCreate, reply: Any) -> None:
    p, i, v = _out(ctx, msg.a, "a")
    ctx.library("cusparse").create(msg.a, p.ptr, i.ptr, v.ptr)
    ctx.reply_now(reply)


@handles(SparseDestroy)
def _destroy(ctx: Any, msg: SparseDestroy, reply: Any) -> None:
    ctx.library("cusparse").destroy(msg.a.id)
    ctx.reply_now(reply)


def _product(ctx: Any, msg: Any, reply: Any, dense: str, out: str,
             bind: Callable[[Any, Any], Any], key: Callable[[Any, Any], tuple]) -> None:
    """SpMV or SpMM: ``msg.a`` times the dense field ``dense`` into ``out`` (read too when
    beta != 0). A repeated message (the client sends it as the same object) keeps its
    launcher, ``bind(dense_alloc, out_alloc)`` (the handle's ``spmv_bound``/``spmm_bound``):
    the dense descriptors, workspace, scalars and call are derived once; the matrix is named
    by id, its record looked up again whenever the handle changed. A message sent once (a new
    output each time, as ``A @ x`` makes) finds the launcher of an earlier one with the same
    values, ``key(dense_alloc, out_alloc)``: the matrix, the operation, the scalars and the
    pointers and shapes (the pool hands an output's address out again)."""
    a = msg.a
    resolve = ctx.resolve
    p, i, v = resolve(a.ptr, "a"), resolve(a.idx, "a"), resolve(a.val, "a")
    d = resolve(getattr(msg, dense), dense)
    if msg.beta != 0:
        o = resolve(getattr(msg, out), out)
        reads: tuple = (p, i, v, d, o)
    else:
        o = ctx.resolve_out(getattr(msg, out), out)
        reads = (p, i, v, d)
    derived = ctx.derived
    ctx.run(reply, COMPUTE, reads, (o,), derived.get(msg, (d.ptr, o.ptr), lambda: (
        derived.by_value(key(d, o), lambda: bind(d, o)))))


def _scalars(msg: Any) -> bytes:
    """alpha and beta as a key (marshal tells -0.0 from 0.0, which a dict key does not)."""
    return marshal.dumps((msg.alpha, msg.beta), 2)


@handles(SpMV)
def _spmv(ctx: Any, msg: SpMV, reply: Any) -> None:
    _product(ctx, msg, reply, "x", "y", lambda x, y: ctx.library("cusparse").spmv_bound(
        ctx.compute.obj, msg.a.id, msg.op, msg.alpha, x.ptr, msg.beta, y.ptr, msg.x.size,
        msg.y.size), lambda x, y: ("cusparse spmv", msg.a.id, msg.op, _scalars(msg), x.ptr,
                                   msg.x.size, y.ptr, msg.y.size))


@handles(SpMM)
def _spmm(ctx: Any, msg: SpMM, reply: Any) -> None:
    _product(ctx, msg, reply, "b", "c", lambda b, c: ctx.library("cusparse").spmm_bound(
        ctx.compute.obj, msg.a.id, msg.op, msg.alpha, b.ptr, msg.b.shape, msg.beta, c.ptr,
        msg.c.shape), lambda b, c: ("cusparse spmm", msg.a.id, msg.op, _scalars(msg), b.ptr,
                                    msg.b.shape, c.ptr, msg.c.shape))


@handles(SpGEMMStart)
def _spgemm_start(ctx: Any, msg: SpGEMMStart, reply: Any) -> None:
    reads = _read(ctx, msg.a, "a") + _read(ctx, msg.b, "b")
    lib = ctx.library("cusparse")
    plan = msg.plan

    def finish(value: Any, failure: BaseException | None) -> Any:
        return None if failure is not None else lib.plan_nnz(plan)

    ctx.run(reply, COMPUTE, reads, (), lib.spgemm_start, plan, msg.a.id, msg.b.id, msg.alpha,
            finish=finish)
    lib.plans[plan]["reads"] = reads


@handles(SpGEMMFinish)
def _spgemm_finish(ctx: Any, msg: SpGEMMFinish, reply: Any) -> None:
    lib = ctx.library("cusparse")
    state = lib.plans.get(msg.plan)
    reads = tuple(state.get("reads", ())) if state is not None else ()
    p, i, v = _out(ctx, msg.c, "c")
    ctx.run(reply, COMPUTE, reads, (p, i, v), lib.spgemm_finish, msg.plan, p.ptr, i.ptr, v.ptr)


@handles(SpGEMMDrop)
def _drop(ctx: Any, msg: SpGEMMDrop, reply: Any) -> None:
    ctx.library("cusparse").drop(msg.plan)
    ctx.reply_now(reply)


@handles(SpSV)
def _spsv(ctx: Any, msg: SpSV, reply: Any) -> None:
    a = msg.a
    p, i, v = _read(ctx, a, "a")
    x = ctx.resolve(msg.x, "x")
    y = ctx.resolve_out(msg.y, "y")
    ctx.run(reply, COMPUTE, (p, i, v, x), (y,), ctx.library("cusparse").spsv, a.id, msg.op,
            msg.uplo, msg.diag, msg.alpha, x.ptr, y.ptr, a.shape[0])


@handles(SpSM)
def _spsm(ctx: Any, msg: SpSM, reply: Any) -> None:
    a = msg.a
    p, i, v = _read(ctx, a, "a")
    b = ctx.resolve(msg.b, "b")
    c = ctx.resolve_out(msg.c, "c")
    ctx.run(reply, COMPUTE, (p, i, v, b), (c,), ctx.library("cusparse").spsm, a.id, msg.op,
            msg.uplo, msg.diag, msg.alpha, b.ptr, c.ptr, msg.b.shape)


@handles(SDDMM)
def _sddmm(ctx: Any, msg: SDDMM, reply: Any) -> None:
    c = msg.c
    a, b = ctx.resolve(msg.a, "a"), ctx.resolve(msg.b, "b")
    beta = msg.beta
    p, i = ctx.resolve(c.ptr, "c"), ctx.resolve(c.idx, "c")
    v = ctx.resolve(c.val, "c") if beta != 0 else ctx.resolve_out(c.val, "c")
    reads = (a, b, p, i, v) if beta != 0 else (a, b, p, i)
    ctx.run(reply, COMPUTE, reads, (v,), ctx.library("cusparse").sddmm, c.id, msg.opa,
            msg.opb, msg.alpha, a.ptr, msg.a.shape, b.ptr, msg.b.shape, beta)


@handles(SparseToDense)
def _to_dense(ctx: Any, msg: SparseToDense, reply: Any) -> None:
    reads = _read(ctx, msg.a, "a")
    out = ctx.resolve_out(msg.out, "out")
    ctx.run(reply, COMPUTE, reads, (out,), ctx.library("cusparse").to_dense, msg.a.id, out.ptr)


@handles(DenseToSparseStart)
def _dense_start(ctx: Any, msg: DenseToSparseStart, reply: Any) -> None:
    dense = ctx.resolve(msg.dense, "dense")
    ptr = ctx.resolve_out(msg.ptr, "ptr")
    lib = ctx.library("cusparse")
    rows, cols = msg.dense.shape
    item = msg.ptr.itemsize
    itype = np.int32 if item == 4 else np.int64
    scratch = ctx.scratch
    slot = scratch.acquire()
    copy_back = ctx.backend.copy_dtoh
    plan = msg.plan

    def launch(stream: Any) -> None:
        lib.dense_start(stream, plan, dense.ptr, rows, cols, msg.dense.dtype, ptr.ptr,
                        msg.ptr.dtype)
        copy_back(stream, slot.host, ptr.ptr + rows * item, item)

    def finish(value: Any, failure: BaseException | None) -> Any:
        try:
            return None if failure is not None else int(slot.view[:item].view(itype)[0])
        finally:
            scratch.release(slot)

    ctx.run(reply, COMPUTE, (dense,), (ptr,), launch, finish=finish)
    lib.plans[plan]["reads"] = (dense,)


@handles(DenseToSparseFinish)
def _dense_finish(ctx: Any, msg: DenseToSparseFinish, reply: Any) -> None:
    lib = ctx.library("cusparse")
    state = lib.plans.get(msg.plan)
    reads = tuple(state.get("reads", ())) if state is not None else ()
    out = msg.out
    p = ctx.resolve(out.ptr, "out")
    i, v = ctx.resolve_out(out.idx, "out"), ctx.resolve_out(out.val, "out")
    ctx.run(reply, COMPUTE, reads + (p,), (i, v), lib.dense_finish, msg.plan, p.ptr, i.ptr,
            v.ptr)


@handles(SparseConvert)
def _convert(ctx: Any, msg: SparseConvert, reply: Any) -> None:
    src = _read(ctx, msg.a, "a")
    p, i, v = _out(ctx, msg.out, "out")
    ctx.run(reply, COMPUTE, src, (p, i, v), ctx.library("cusparse").convert, msg.a.id,
            tuple(s.ptr for s in src), p.ptr, i.ptr, v.ptr)


@handles(SparseCacheInfo)
def _cache_info(ctx: Any, msg: SparseCacheInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cusparse").sizes.info())


@handles(SparseReplayInfo)
def _replay_info(ctx: Any, msg: SparseReplayInfo, reply: Any) -> None:
    ctx.reply_now(reply, ctx.library("cusparse").replay_info())


@handles(CompressRows)
def _compress_rows(ctx: Any, msg: CompressRows, reply: Any) -> None:
    rows = ctx.resolve(msg.rows, "rows")
    ptr = ctx.resolve_out(msg.ptr, "ptr")
    ctx.run(reply, COMPUTE, (rows,), (ptr,), ctx.library("cusparse").compress_rows, rows.ptr,
            msg.nnz, msg.m, ptr.ptr)


@handles(ExpandRows)
def _expand_rows(ctx: Any, msg: ExpandRows, reply: Any) -> None:
    ptr = ctx.resolve(msg.ptr, "ptr")
    rows = ctx.resolve_out(msg.rows, "rows")
    ctx.run(reply, COMPUTE, (ptr,), (rows,), ctx.library("cusparse").expand_rows, ptr.ptr,
            msg.nnz, msg.m, rows.ptr)


@handles(SpSolveQR)
def _spsolve_qr(ctx: Any, msg: SpSolveQR, reply: Any) -> None:
    src = _read(ctx, msg.a, "a")
    b = ctx.resolve(msg.b, "b")
    x = ctx.resolve_out(msg.x, "x")
    found = [-1]

    def finish(value: Any, failure: BaseException | None) -> Any:
        return None if failure is not None else found[0]

    ctx.run(reply, COMPUTE, src + (b,), (x,), ctx.library("cusparse").spsolve_qr, msg.a.id,
            tuple(s.ptr for s in src), b.ptr, x.ptr, msg.tol, found, finish=finish)
