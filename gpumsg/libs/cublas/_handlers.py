"""Handlers of the cuBLAS messages (device thread): resolve the buffers, then issue through the
envelope (:meth:`~gpumsg.service._context.DeviceContext.run`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backends.cuda._replays import direct_bound
from ...messages.cublas import (
    Asum,
    Axpy,
    BlasReplayInfo,
    Copy,
    Dot,
    Geam,
    Gemm,
    GemmBatched,
    GemmStridedBatched,
    Gemv,
    Ger,
    Iamax,
    Iamin,
    Nrm2,
    Rot,
    Scal,
    Sgemm,
    Swap,
    Symm,
    Symv,
    Syrk,
    Trmm,
    Trsm,
    Trsv,
)
from ...service._plans import merge_info
from ...service._registry import COMPUTE, handles

__all__ = ["GEMM_ENGINE", "AUTO_LT_FLOPS"]


#: which library runs Gemm/Sgemm: "lt" (cuBLASLt, cached plan), "gemmex" (cublasGemmEx) or
#: "auto" (Gemm: Lt below AUTO_LT_FLOPS multiply-adds, GemmEx above; Sgemm: cublasSgemm_v2)
GEMM_ENGINE = "auto"
AUTO_LT_FLOPS = 1 << 24


def _gemm(ctx: Any, msg: Any, reply: Any, dtype: str, compute: str) -> None:
    """Sgemm and Gemm."""
    a = ctx.resolve(msg.a, "a")
    b = ctx.resolve(msg.b, "b")
    c = ctx.resolve(msg.c, "c") if msg.beta != 0 else ctx.resolve_out(msg.c, "c")
    reads = (a, b) if msg.beta == 0 else (a, b, c)
    engine = GEMM_ENGINE
    if engine == "auto":
        engine = "lt" if msg.m * msg.n * msg.k < AUTO_LT_FLOPS else "gemmex"
    if engine == "lt":  # small: host-bound, so its launcher is kept (per message, by value)
        ctx.run(reply, COMPUTE, reads, (c,), ctx.derived.get(
            msg, (a.ptr, b.ptr, c.ptr), lambda: _lt_gemm(ctx, msg, dtype, compute, a, b, c)))
        return
    ctx.run(reply, COMPUTE, reads, (c,), ctx.library("cublas").gemm, dtype, compute,
            msg.transa, msg.transb, msg.m, msg.n, msg.k, msg.alpha, a.ptr, msg.lda, b.ptr,
            msg.ldb, msg.beta, c.ptr, msg.ldc)


def _lt_gemm(ctx: Any, msg: Any, dtype: str, compute: str, a: Any, b: Any, c: Any) -> Any:
    """The cuBLASLt launcher of a small GEMM, found by value where an earlier message (a
    ``matmul`` into a new output at an address the pool hands out again) made it."""
    args = (dtype, compute, msg.transa, msg.transb, msg.m, msg.n, msg.k, msg.alpha, a.ptr,
            msg.lda, b.ptr, msg.ldb, msg.beta, c.ptr, msg.ldc)
    lt = ctx.library("cublaslt")
    return ctx.derived.by_value(("lt gemm", *args),
                                lambda: lt.gemm_bound(ctx.compute.obj, *args))


@handles(Sgemm)
def _sgemm(ctx: Any, msg: Sgemm, reply: Any) -> None:
    if GEMM_ENGINE != "auto":
        _gemm(ctx, msg, reply, "f32", "default")
        return
    # cublasSgemm_v2 at every size: the call torch makes for an fp32 mm, and the one with the
    # least to set up per call (this handler is the hot path of small GEMMs)
    resolve = ctx.resolve
    a = resolve(msg.a, "a")
    b = resolve(msg.b, "b")
    beta = msg.beta
    if beta == 0:
        c = ctx.resolve_out(msg.c, "c")
        reads: tuple = (a, b)
    else:
        c = resolve(msg.c, "c")
        reads = (a, b, c)
    # a repeated message (the client sends it as the same object) keeps its launcher
    ctx.run(reply, COMPUTE, reads, (c,), ctx.derived.get(
        msg, (a.ptr, b.ptr, c.ptr), lambda: ctx.library("cublas").sgemm_bound(
            ctx.compute.obj, msg.transa, msg.transb, msg.m, msg.n, msg.k, msg.alpha, a.ptr,
            msg.lda, b.ptr, msg.ldb, beta, c.ptr, msg.ldc)))


@handles(Gemm)
def _gemm_handler(ctx: Any, msg: Gemm, reply: Any) -> None:
    _gemm(ctx, msg, reply, msg.a.dtype, msg.compute)


@handles(GemmStridedBatched)
def _gemm_strided(ctx: Any, msg: GemmStridedBatched, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    b = ctx.resolve(msg.b, "b")
    c = ctx.resolve(msg.c, "c") if msg.beta != 0 else ctx.resolve_out(msg.c, "c")
    # a repeated message (the client sends it as the same object) keeps its launcher
    ctx.run(reply, COMPUTE, (a, b) if msg.beta == 0 else (a, b, c), (c,), ctx.derived.get(
        msg, (a.ptr, b.ptr, c.ptr), lambda: ctx.library("cublas").gemm_strided_bound(
            ctx.compute.obj, msg.a.dtype, msg.compute, msg.transa, msg.transb, msg.m, msg.n,
            msg.k, msg.alpha, a.ptr, msg.lda, msg.stride_a, b.ptr, msg.ldb, msg.stride_b,
            msg.beta, c.ptr, msg.ldc, msg.stride_c, msg.batch)))


@handles(GemmBatched)
def _gemm_batched(ctx: Any, msg: GemmBatched, reply: Any) -> None:
    a = [ctx.resolve(r, "a") for r in msg.a]
    b = [ctx.resolve(r, "b") for r in msg.b]
    c = [ctx.resolve(r, "c") if msg.beta != 0 else ctx.resolve_out(r, "c") for r in msg.c]
    batch = len(a)
    # the pointer arrays: packed here, copied to device memory on the compute stream just before
    # the GEMM, freed (stream-ordered) right after it
    ptrs = np.array([x.ptr for x in a + b + c], dtype=np.uint64)
    nbytes = ptrs.nbytes
    block = ctx.pinned.allocate(nbytes, staging=True)
    block.bytes[:nbytes] = ptrs.view(np.uint8)
    dev = ctx.memory.allocate(nbytes, ctx.compute.obj)
    blas = ctx.library("cublas")
    backend = ctx.backend

    def launch(stream: Any) -> None:
        backend.copy_htod(stream, dev, block.ptr, nbytes)
        blas.gemm_batched(stream, msg.a[0].dtype, msg.compute, msg.transa, msg.transb, msg.m,
                          msg.n, msg.k, msg.alpha, dev, msg.lda, dev + 8 * batch, msg.ldb,
                          msg.beta, dev + 16 * batch, msg.ldc, batch)

    def release(value: Any, error: BaseException | None) -> Any:
        ctx.pinned.release(block)
        return value

    try:
        ctx.run(reply, COMPUTE, tuple(a + b + (c if msg.beta != 0 else [])), tuple(c), launch,
                finish=release)
    finally:
        ctx.memory.deallocate(dev, nbytes, ctx.compute.obj)


# -- level 1, 2 and 3


def _operands(ctx: Any, msg: Any, reads: tuple[str, ...], writes: tuple[str, ...]
              ) -> tuple[dict[str, Any], tuple, tuple]:
    """Resolve the message's buffers: ``reads`` must hold valid contents, pure outputs need
    only be allocated. Returns (allocations by field, reads, writes) for :meth:`ctx.run`."""
    allocs = {name: ctx.resolve(getattr(msg, name), name) for name in reads}
    for name in writes:
        if name not in allocs:
            allocs[name] = ctx.resolve_out(getattr(msg, name), name)
    return allocs, tuple(allocs[n] for n in reads), tuple(allocs[n] for n in writes)


def _reads_with(msg: Any, out: str, inputs: tuple[str, ...]) -> tuple[str, ...]:
    """With beta 0 the output is not read."""
    return inputs if msg.beta == 0 else inputs + (out,)


# Level 1 and 2: each handler resolves its buffers (inputs first, in the order of the fields;
# a pure output with resolve_out) and issues the launcher that its message keeps in the
# device's DerivedMemo (service/derived.py), by the buffers' pointers: the client sends a
# repeated call as the same message object, so the function, its arguments and the replay key
# are worked out once per message (``_level``), not per call.


def _level(ctx: Any, method: str, *args: Any) -> Any:
    """The launcher of the level-1/2 call ``method`` with ``args`` (the handle method's
    arguments after the stream) on the compute stream: the CUDA handle's ``level_bound``
    (bound ctypes arguments, replayed when repeated), or the handle's method called as it is
    (the simulator's handle)."""
    blas = ctx.library("cublas")
    stream = ctx.compute.obj
    bound = getattr(blas, "level_bound", None)
    if bound is None:
        return direct_bound(method, getattr(blas, method), stream, *args)
    return bound(method, stream, *args)


@handles(Axpy)
def _axpy(ctx: Any, msg: Axpy, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = ctx.resolve(msg.y, "y")
    ctx.run(reply, COMPUTE, (x, y), (y,), ctx.derived.get(msg, (x.ptr, y.ptr), lambda: _level(
        ctx, "axpy", msg.x.dtype, msg.n, msg.alpha, x.ptr, msg.incx, y.ptr, msg.incy)))


@handles(Scal)
def _scal(ctx: Any, msg: Scal, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    ctx.run(reply, COMPUTE, (x,), (x,), ctx.derived.get(msg, x.ptr, lambda: _level(
        ctx, "scal", msg.x.dtype, msg.n, msg.alpha, x.ptr, msg.incx)))


@handles(Copy)
def _copy(ctx: Any, msg: Copy, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = ctx.resolve_out(msg.y, "y")
    ctx.run(reply, COMPUTE, (x,), (y,), ctx.derived.get(msg, (x.ptr, y.ptr), lambda: _level(
        ctx, "copy", msg.x.dtype, msg.n, x.ptr, msg.incx, y.ptr, msg.incy)))


@handles(Swap)
def _swap(ctx: Any, msg: Swap, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = ctx.resolve(msg.y, "y")
    ctx.run(reply, COMPUTE, (x, y), (x, y), ctx.derived.get(msg, (x.ptr, y.ptr), lambda: _level(
        ctx, "swap", msg.x.dtype, msg.n, x.ptr, msg.incx, y.ptr, msg.incy)))


@handles(Rot)
def _rot(ctx: Any, msg: Rot, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = ctx.resolve(msg.y, "y")
    ctx.run(reply, COMPUTE, (x, y), (x, y), ctx.derived.get(msg, (x.ptr, y.ptr), lambda: _level(
        ctx, "rot", msg.x.dtype, msg.n, x.ptr, msg.incx, y.ptr, msg.incy, msg.c, msg.s)))


#: result dtype of the reductions, by operand dtype
_DOT_RESULT = {"f32": "f4", "f64": "f8", "c64": "c8", "c128": "c16"}
_NORM_RESULT = {"f32": "f4", "f64": "f8", "c64": "f4", "c128": "f8"}


def _reduction(ctx: Any, msg: Any, reply: Any, method: str, result_dtype: str,
               convert: Any = float, extra: tuple = ()) -> None:
    """Run a reduction into a device slot, copy the slot back on the same stream, and answer
    with the value when the stream gets there: the device thread never waits for it."""
    x = ctx.resolve(msg.x, "x")
    y_ref = getattr(msg, "y", None)
    if y_ref is None:
        reads: tuple = (x,)
        args: tuple = (msg.n, x.ptr, msg.incx, *extra)
    else:
        y = ctx.resolve(y_ref, "y")
        reads = (x, y)
        args = (msg.n, x.ptr, msg.incx, y.ptr, msg.incy, *extra)
    scratch = ctx.scratch
    slot = scratch.acquire()
    blas = ctx.library("cublas")
    fn = getattr(blas, method)
    copy_back = ctx.backend.copy_dtoh
    dtype = msg.x.dtype
    dev, host = slot.dev, slot.host

    def launch(stream: Any, *_key: Any) -> None:
        fn(stream, dtype, *args, dev)
        copy_back(stream, host, dev, 16)

    replays = getattr(blas, "reduction_replays", None)
    if replays is not None:
        # the reduction and its copy back, repeated into the same slot (a caller waiting for
        # each result gets the slot it gave back), are replayed as one CUDA graph
        def issue(stream: Any) -> None:
            replays.call(method, launch, stream, dtype, *args, dev, host)
    else:
        issue = launch
    finish = scratch.reader(slot, result_dtype, convert)
    try:
        ctx.run(reply, COMPUTE, reads, (), issue, finish=finish)
    except BaseException as exc:
        finish(None, exc)  # gives the slot back (once, whether or not the envelope did)
        raise


def _scalar_of(value: Any) -> Any:
    return value  # a Python float or complex already (numpy .item())


def _zero_based(value: int) -> int:
    return int(value) - 1


@handles(Dot)
def _dot(ctx: Any, msg: Dot, reply: Any) -> None:
    _reduction(ctx, msg, reply, "dot", _DOT_RESULT[msg.x.dtype], _scalar_of, (msg.conjugate,))


@handles(Nrm2)
def _nrm2(ctx: Any, msg: Nrm2, reply: Any) -> None:
    _reduction(ctx, msg, reply, "nrm2", _NORM_RESULT[msg.x.dtype])


@handles(Asum)
def _asum(ctx: Any, msg: Asum, reply: Any) -> None:
    _reduction(ctx, msg, reply, "asum", _NORM_RESULT[msg.x.dtype])


@handles(Iamax)
def _iamax(ctx: Any, msg: Iamax, reply: Any) -> None:
    _reduction(ctx, msg, reply, "iamax", "i4", _zero_based)


@handles(Iamin)
def _iamin(ctx: Any, msg: Iamin, reply: Any) -> None:
    _reduction(ctx, msg, reply, "iamin", "i4", _zero_based)


def _matrix_vector(ctx: Any, msg: Any) -> tuple[Any, Any, Any, tuple]:
    """A, x and y of gemv/symv, and what the call reads: y too when beta is not 0 (with beta
    0, y is only written, so it need only be allocated)."""
    a = ctx.resolve(msg.a, "a")
    x = ctx.resolve(msg.x, "x")
    if msg.beta == 0:
        return a, x, ctx.resolve_out(msg.y, "y"), (a, x)
    y = ctx.resolve(msg.y, "y")
    return a, x, y, (a, x, y)


@handles(Gemv)
def _gemv(ctx: Any, msg: Gemv, reply: Any) -> None:
    a, x, y, reads = _matrix_vector(ctx, msg)
    ctx.run(reply, COMPUTE, reads, (y,), ctx.derived.get(
        msg, (a.ptr, x.ptr, y.ptr), lambda: _level(
            ctx, "gemv", msg.a.dtype, msg.trans, msg.m, msg.n, msg.alpha, a.ptr, msg.lda, x.ptr,
            msg.incx, msg.beta, y.ptr, msg.incy)))


@handles(Ger)
def _ger(ctx: Any, msg: Ger, reply: Any) -> None:
    x = ctx.resolve(msg.x, "x")
    y = ctx.resolve(msg.y, "y")
    a = ctx.resolve(msg.a, "a")
    ctx.run(reply, COMPUTE, (x, y, a), (a,), ctx.derived.get(
        msg, (x.ptr, y.ptr, a.ptr), lambda: _level(
            ctx, "ger", msg.a.dtype, msg.m, msg.n, msg.alpha, x.ptr, msg.incx, y.ptr, msg.incy,
            a.ptr, msg.lda, msg.conjugate)))


@handles(Symv)
def _symv(ctx: Any, msg: Symv, reply: Any) -> None:
    a, x, y, reads = _matrix_vector(ctx, msg)
    ctx.run(reply, COMPUTE, reads, (y,), ctx.derived.get(
        msg, (a.ptr, x.ptr, y.ptr), lambda: _level(
            ctx, "symv", msg.a.dtype, msg.uplo, msg.n, msg.alpha, a.ptr, msg.lda, x.ptr,
            msg.incx, msg.beta, y.ptr, msg.incy)))


@handles(Trsv)
def _trsv(ctx: Any, msg: Trsv, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    x = ctx.resolve(msg.x, "x")
    ctx.run(reply, COMPUTE, (a, x), (x,), ctx.derived.get(msg, (a.ptr, x.ptr), lambda: _level(
        ctx, "trsv", msg.a.dtype, msg.uplo, msg.trans, msg.diag, msg.n, a.ptr, msg.lda, x.ptr,
        msg.incx)))


@handles(Geam)
def _geam(ctx: Any, msg: Geam, reply: Any) -> None:
    # B is read only when beta is not 0 (cuBLAS still takes its pointer)
    p, r, w = _operands(ctx, msg, ("a", "b") if msg.beta != 0 else ("a",), ("c",))
    b = p["b"] if "b" in p else ctx.resolve_out(msg.b, "b")
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").geam, msg.a.dtype, msg.transa,
            msg.transb, msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, msg.beta, b.ptr, msg.ldb,
            p["c"].ptr, msg.ldc)


@handles(Syrk)
def _syrk(ctx: Any, msg: Syrk, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, _reads_with(msg, "c", ("a",)), ("c",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").syrk, msg.a.dtype, msg.uplo, msg.trans,
            msg.n, msg.k, msg.alpha, p["a"].ptr, msg.lda, msg.beta, p["c"].ptr, msg.ldc)


@handles(Symm)
def _symm(ctx: Any, msg: Symm, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, _reads_with(msg, "c", ("a", "b")), ("c",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").symm, msg.a.dtype, msg.side, msg.uplo,
            msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, p["b"].ptr, msg.ldb, msg.beta,
            p["c"].ptr, msg.ldc)


@handles(Trmm)
def _trmm(ctx: Any, msg: Trmm, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("a", "b"), ("c",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").trmm, msg.a.dtype, msg.side, msg.uplo,
            msg.trans, msg.diag, msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, p["b"].ptr,
            msg.ldb, p["c"].ptr, msg.ldc)


@handles(Trsm)
def _trsm(ctx: Any, msg: Trsm, reply: Any) -> None:
    p, r, w = _operands(ctx, msg, ("a", "b"), ("b",))
    ctx.run(reply, COMPUTE, r, w, ctx.library("cublas").trsm, msg.a.dtype, msg.side, msg.uplo,
            msg.trans, msg.diag, msg.m, msg.n, msg.alpha, p["a"].ptr, msg.lda, p["b"].ptr,
            msg.ldb)


@handles(BlasReplayInfo)
def _replay_info(ctx: Any, msg: BlasReplayInfo, reply: Any) -> None:
    info = {}
    for name in ("cublas", "cublaslt"):
        infos = ctx.over_handles(name, lambda h: h.replay_info())  # none made here
        info[name] = merge_info(infos) if infos else {"enabled": None}
    ctx.reply_now(reply, info)
