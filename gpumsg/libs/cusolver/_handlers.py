"""Handlers of the cuSOLVER messages (device thread).

``info`` never blocks the device thread: each call writes cuSOLVER's device ``info`` word into a
scratch slot, copies it to that slot's pinned half on the same stream, and a ``finish`` callback
reads it on the completion thread. A positive info fails the future with the typed error and marks
the buffers the call wrote invalid (readers issued after that fail with DependencyFailed),
unless a later operation has rewritten them meanwhile. A negative info (an argument cuSOLVER
rejected) fails it with LibraryError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...dtypes import dtype_of
from ...errors import (
    DidNotConverge,
    LibraryError,
    LinAlgError,
    NotPositiveDefinite,
    SingularMatrix,
)
from ...messages.cusolver import (
    CholeskyBatched,
    Geev,
    Geqrf,
    Gesvd,
    Gesvdj,
    GesvdjBatched,
    GesvdjStrided,
    Getrf,
    GetrfBatched,
    Getrs,
    GetrsBatched,
    Orgqr,
    Ormqr,
    Potrf,
    PotrfBatched,
    Potri,
    Potrs,
    PotrsBatched,
    SolverCacheInfo,
    SyevBatched,
    Syevd,
    Syevj,
    SyevjBatched,
    Sygvd,
    ZeroTriangle,
)
from ...service._plans import merge_info
from ...service._registry import COMPUTE, handles

__all__ = ["issue_with_info", "issue_batched", "pointer_array", "POINTER_ARRAYS"]

#: how many device pointer arrays (one per (base, stride, count)) a handle keeps
POINTER_ARRAYS = 64

#: info -> (error type, index, text)
Classify = Callable[[int], tuple[type[LinAlgError], int, str]]


def _npd(info: int) -> tuple[type[LinAlgError], int, str]:
    return NotPositiveDefinite, info, f"the leading minor of order {info} is not positive definite"


def _singular(info: int) -> tuple[type[LinAlgError], int, str]:
    return (SingularMatrix, info,
            f"U[{info - 1}, {info - 1}] is exactly zero, the matrix is singular")


def _unconverged(what: str) -> Classify:
    def classify(info: int) -> tuple[type[LinAlgError], int, str]:
        return DidNotConverge, info, f"{what} did not converge (info={info})"
    return classify


def _mark(written: list, exc: BaseException) -> None:
    for alloc, stream, seq in written:
        # only if nothing rewrote it since: a later writer's contents are not ours to fail
        if alloc.write_stream == stream and alloc.write_seq == seq:
            alloc.failed = exc


def issue_with_info(ctx: Any, reply: Any, reads: tuple, writes: tuple, call: Any,
                    function: str, error: type[LinAlgError] | None,
                    classify: Classify | None = None) -> None:
    """Issue ``call(stream, info_ptr)`` through the envelope and check ``info`` at completion
    (``classify`` maps a positive info to the error, else ``error`` with the LU / Cholesky
    wording)."""
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
        if info < 0 or (error is None and classify is None):
            raise LibraryError("cusolver", info, f"parameter {-info} rejected (info={info})",
                               function)
        if classify is not None:
            cls, index, text = classify(info)
            exc = cls(f"{function}: {text}", index=index, function=function)
        else:
            assert error is not None
            exc = error(_describe(error, info, function), index=info, function=function)
        _mark(written, exc)
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
    if msg.singular_ok:  # info is written (a word of scratch) but no error
        info = ctx.memory.allocate(4, ctx.compute.obj)
        try:
            ctx.run(reply, COMPUTE, (a,), writes, lambda s: lib.getrf(
                s, msg.a.dtype, msg.m, msg.n, a.ptr, msg.lda,
                ipiv.ptr if ipiv is not None else 0, info))
        finally:
            ctx.memory.deallocate(info, 4, ctx.compute.obj)
        return
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
    lib = ctx.library("cusolver")  # the first stream's, at least
    infos = ctx.over_handles("cusolver", lambda h: h.workspaces.info())
    ctx.reply_now(reply, {**merge_info(infos), "kernels": lib.kernels,
                          "tiled_kernels": getattr(lib, "tiled", "sim")})


def pointer_array(ctx: Any, lib: Any, base: int, stride: int, count: int) -> int:
    """A device array of ``count`` pointers ``base + i * stride`` (bytes), as the batched APIs
    take them. Built once per (base, stride, count) and kept by the handle (bounded, oldest
    evicted): the array depends only on those numbers, so it stays right whatever buffer lives
    at ``base`` later. A new one is packed into a pinned staging block and copied on the compute
    stream, ahead of the call that reads it; the block is given back when that copy is done."""
    cache = lib.pointer_arrays
    key = (base, stride, count)
    hit = cache.get(key)
    if hit is not None:
        cache[key] = cache.pop(key)  # most recently used last
        return hit[0]
    nbytes = 8 * count
    ptrs = (np.uint64(base) + np.uint64(stride) * np.arange(count, dtype=np.uint64))
    block = ctx.pinned.allocate(nbytes, staging=True)
    block.bytes[:nbytes] = ptrs.view(np.uint8)
    stream = ctx.compute.obj
    dev = ctx.memory.allocate(nbytes, stream)
    try:
        ctx.backend.copy_htod(stream, dev, block.ptr, nbytes)
    except BaseException:
        ctx.memory.deallocate(dev, nbytes, stream)
        ctx.pinned.release(block)
        raise
    ctx.complete(None, COMPUTE, finish=lambda v, f: ctx.pinned.release(block))
    cache[key] = (dev, nbytes)
    while len(cache) > POINTER_ARRAYS:
        old = next(iter(cache))
        ptr, size = cache.pop(old)
        ctx.memory.deallocate(ptr, size, stream)  # stream-ordered: after the calls using it
    return dev


def issue_batched(ctx: Any, reply: Any, reads: tuple, writes: tuple, call: Any,
                  function: str, batch: int, classify: Classify) -> None:
    """Issue ``call(stream, infos_ptr)`` (``infos``: int32[batch] on the device) through the
    envelope; the info array is copied back on the stream and scanned at completion: the first
    failing item fails the future with ``classify``'s error, ``batch_item`` its index and
    ``failed_items`` all of them, and the written buffers are marked invalid."""
    pinned, memory = ctx.pinned, ctx.memory
    info_block = pinned.allocate(4 * batch)
    info_dev = memory.allocate(4 * batch, ctx.compute.obj)
    copy_back = ctx.backend.copy_dtoh
    written: list[tuple[Any, int, int]] = []

    def launch(stream: Any) -> None:
        call(stream, info_dev)
        copy_back(stream, info_block.ptr, info_dev, 4 * batch)

    def finish(value: Any, failure: BaseException | None) -> Any:
        try:
            if failure is not None:
                return None
            infos = np.frombuffer(info_block.bytes[:4 * batch], np.int32).copy()
        finally:
            pinned.release(info_block)
        bad = np.flatnonzero(infos)
        if not bad.size:
            return value
        first = int(bad[0])
        info = int(infos[first])
        if info < 0:
            raise LibraryError("cusolver", info, f"parameter {-info} rejected (info={info})",
                               function)
        cls, index, text = classify(info)
        exc = cls(f"{function}: matrix {first} of {batch}: {text} ({bad.size} item(s) failed)",
                  index=index, batch_item=first, function=function)
        exc.failed_items = bad.tolist()
        _mark(written, exc)
        raise exc

    try:
        ctx.run(reply, COMPUTE, reads, writes, launch, finish=finish)
        written.extend((a, a.write_stream, a.write_seq) for a in writes)
    finally:
        memory.deallocate(info_dev, 4 * batch, ctx.compute.obj)


def _letter(dtype: str) -> str:
    return {"f32": "S", "f64": "D", "c64": "C", "c128": "Z"}[dtype]


@handles(PotrfBatched)
def _potrf_batched(ctx: Any, msg: PotrfBatched, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    batch, dtype = msg.batch, msg.a.dtype
    if batch == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    item = dtype_of(dtype).itemsize
    ptrs = pointer_array(ctx, lib, a.ptr, item * msg.stride, batch)

    def call(stream: Any, infos: int) -> None:
        lib.potrf_batched(stream, dtype, msg.uplo, msg.n, ptrs, msg.lda, infos, batch)
        if msg.clean:
            # after the factorization: on the H100 run, zeroing before it left the other
            # triangle non-zero (the batched kernel for small n appears to write it)
            lib.zero_outside_strided(stream, dtype, msg.uplo, msg.n, a.ptr, msg.lda, msg.stride,
                                     batch)

    issue_batched(ctx, reply, (a,), (a,), call, f"cusolverDn{_letter(dtype)}potrfBatched",
                  batch, _npd)


@handles(PotrsBatched)
def _potrs_batched(ctx: Any, msg: PotrsBatched, reply: Any) -> None:
    a, b = ctx.resolve(msg.a, "a"), ctx.resolve(msg.b, "b")
    if msg.batch == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    item = dtype_of(msg.a.dtype).itemsize
    pa = pointer_array(ctx, lib, a.ptr, item * msg.stride_a, msg.batch)
    pb = pointer_array(ctx, lib, b.ptr, item * msg.stride_b, msg.batch)
    issue_with_info(ctx, reply, (a, b), (b,), lambda s, info: lib.potrs_batched(
        s, msg.a.dtype, msg.uplo, msg.n, msg.nrhs, pa, msg.lda, pb, msg.ldb, info, msg.batch),
        f"cusolverDn{_letter(msg.a.dtype)}potrsBatched", None)


@handles(GetrfBatched)
def _getrf_batched(ctx: Any, msg: GetrfBatched, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    ipiv = ctx.resolve_out(msg.ipiv, "ipiv") if msg.ipiv is not None else None
    if msg.batch == 0 or msg.n == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    ptrs = pointer_array(ctx, lib, a.ptr, dtype_of(msg.a.dtype).itemsize * msg.stride, msg.batch)
    writes = (a,) if ipiv is None else (a, ipiv)
    if msg.singular_ok:  # the infos are written (cuBLAS needs them) but not an error
        nbytes = 4 * msg.batch
        infos = ctx.memory.allocate(nbytes, ctx.compute.obj)
        try:
            ctx.run(reply, COMPUTE, (a,), writes, lambda s: lib.getrf_batched(
                s, msg.a.dtype, msg.n, ptrs, msg.lda, ipiv.ptr if ipiv is not None else 0,
                infos, msg.batch))
        finally:
            ctx.memory.deallocate(infos, nbytes, ctx.compute.obj)
        return
    issue_batched(ctx, reply, (a,), writes, lambda s, infos: lib.getrf_batched(
        s, msg.a.dtype, msg.n, ptrs, msg.lda, ipiv.ptr if ipiv is not None else 0, infos,
        msg.batch), f"cublas{_letter(msg.a.dtype)}getrfBatched", msg.batch, _singular)


@handles(GetrsBatched)
def _getrs_batched(ctx: Any, msg: GetrsBatched, reply: Any) -> None:
    a, b = ctx.resolve(msg.a, "a"), ctx.resolve(msg.b, "b")
    ipiv = ctx.resolve(msg.ipiv, "ipiv") if msg.ipiv is not None else None
    if msg.batch == 0 or msg.n == 0 or msg.nrhs == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    item = dtype_of(msg.a.dtype).itemsize
    pa = pointer_array(ctx, lib, a.ptr, item * msg.stride_a, msg.batch)
    pb = pointer_array(ctx, lib, b.ptr, item * msg.stride_b, msg.batch)
    reads = (a, b) if ipiv is None else (a, ipiv, b)
    ctx.run(reply, COMPUTE, reads, (b,), lambda s: lib.getrs_batched(
        s, msg.a.dtype, msg.trans, msg.n, msg.nrhs, pa, msg.lda,
        ipiv.ptr if ipiv is not None else 0, pb, msg.ldb, msg.batch))


# -- QR ------------------------------------------------------------------------------------------


@handles(Geqrf)
def _geqrf(ctx: Any, msg: Geqrf, reply: Any) -> None:
    a, tau = ctx.resolve(msg.a, "a"), ctx.resolve_out(msg.tau, "tau")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a,), (a, tau), lambda s, info: lib.geqrf(
        s, msg.a.dtype, msg.m, msg.n, a.ptr, msg.lda, tau.ptr, info), "cusolverDnXgeqrf", None)


@handles(Orgqr)
def _orgqr(ctx: Any, msg: Orgqr, reply: Any) -> None:
    a, tau = ctx.resolve(msg.a, "a"), ctx.resolve(msg.tau, "tau")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a, tau), (a,), lambda s, info: lib.orgqr(
        s, msg.a.dtype, msg.m, msg.n, msg.k, a.ptr, msg.lda, tau.ptr, info),
        f"cusolverDn{_letter(msg.a.dtype)}orgqr", None)


@handles(Ormqr)
def _ormqr(ctx: Any, msg: Ormqr, reply: Any) -> None:
    a, tau, c = ctx.resolve(msg.a, "a"), ctx.resolve(msg.tau, "tau"), ctx.resolve(msg.c, "c")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a, tau, c), (c,), lambda s, info: lib.ormqr(
        s, msg.a.dtype, msg.side, msg.trans, msg.m, msg.n, msg.k, a.ptr, msg.lda, tau.ptr,
        c.ptr, msg.ldc, info), f"cusolverDn{_letter(msg.a.dtype)}ormqr", None)


# -- eigen ---------------------------------------------------------------------------------------


@handles(Syevd)
def _syevd(ctx: Any, msg: Syevd, reply: Any) -> None:
    a, w = ctx.resolve(msg.a, "a"), ctx.resolve_out(msg.w, "w")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a,), (a, w), lambda s, info: lib.syevd(
        s, msg.a.dtype, msg.vectors, msg.uplo, msg.n, a.ptr, msg.lda, w.ptr, info),
        "cusolverDnXsyevd", None, _unconverged("off-diagonal elements of the tridiagonal form"))


@handles(Syevj)
def _syevj(ctx: Any, msg: Syevj, reply: Any) -> None:
    a, w = ctx.resolve(msg.a, "a"), ctx.resolve_out(msg.w, "w")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a,), (a, w), lambda s, info: lib.syevj(
        s, msg.a.dtype, msg.vectors, msg.uplo, msg.n, a.ptr, msg.lda, w.ptr, msg.tol,
        msg.max_sweeps, msg.sort, info), f"cusolverDn{_letter(msg.a.dtype)}syevj", None,
        _unconverged(f"Jacobi within max_sweeps={msg.max_sweeps}, tol={msg.tol or 'eps'}"))


@handles(SyevjBatched)
def _syevj_batched(ctx: Any, msg: SyevjBatched, reply: Any) -> None:
    a, w = ctx.resolve(msg.a, "a"), ctx.resolve_out(msg.w, "w")
    if msg.batch == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    issue_batched(ctx, reply, (a,), (a, w), lambda s, infos: lib.syevj_batched(
        s, msg.a.dtype, msg.vectors, msg.uplo, msg.n, a.ptr, msg.lda, w.ptr, msg.tol,
        msg.max_sweeps, msg.sort, infos, msg.batch),
        f"cusolverDn{_letter(msg.a.dtype)}syevjBatched", msg.batch,
        _unconverged(f"Jacobi within max_sweeps={msg.max_sweeps}, tol={msg.tol or 'eps'}"))


@handles(Sygvd)
def _sygvd(ctx: Any, msg: Sygvd, reply: Any) -> None:
    a, b, w = ctx.resolve(msg.a, "a"), ctx.resolve(msg.b, "b"), ctx.resolve_out(msg.w, "w")
    lib = ctx.library("cusolver")
    n = msg.n

    def classify(info: int) -> tuple[type[LinAlgError], int, str]:
        if info > n:
            return (NotPositiveDefinite, info - n, f"B's leading minor of order {info - n} is "
                    "not positive definite")
        return DidNotConverge, info, f"{info} off-diagonal elements did not converge"

    issue_with_info(ctx, reply, (a, b), (a, b, w), lambda s, info: lib.sygvd(
        s, msg.a.dtype, msg.itype, msg.vectors, msg.uplo, n, a.ptr, msg.lda, b.ptr, msg.ldb,
        w.ptr, info), f"cusolverDn{_letter(msg.a.dtype)}sygvd", None, classify)


# -- SVD -----------------------------------------------------------------------------------------


def _outs(ctx: Any, msg: Any, *fields: str) -> list[Any]:
    return [ctx.resolve_out(getattr(msg, f), f) if getattr(msg, f) is not None else None
            for f in fields]


def _ptr(alloc: Any) -> int:
    return alloc.ptr if alloc is not None else 0


@handles(Gesvd)
def _gesvd(ctx: Any, msg: Gesvd, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    s_, u, vt = _outs(ctx, msg, "s", "u", "vt")
    writes = tuple(x for x in (a, s_, u, vt) if x is not None)
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a,), writes, lambda s, info: lib.gesvd(
        s, msg.a.dtype, msg.jobu, msg.jobvt, msg.m, msg.n, a.ptr, msg.lda, s_.ptr, _ptr(u),
        msg.ldu, _ptr(vt), msg.ldvt, info), "cusolverDnXgesvd", None,
        _unconverged("superdiagonals of the bidiagonal form"))


def _scratch_matrix(ctx: Any, nbytes: int) -> tuple[int, int]:
    nbytes = max(nbytes, 16)
    return ctx.memory.allocate(nbytes, ctx.compute.obj), nbytes


@handles(Gesvdj)
def _gesvdj(ctx: Any, msg: Gesvdj, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    s_, u, v = _outs(ctx, msg, "s", "u", "v")
    writes = tuple(x for x in (a, s_, u, v) if x is not None)
    lib = ctx.library("cusolver")
    p = min(msg.m, msg.n)
    item = dtype_of(msg.a.dtype).itemsize
    ucols, vcols = (p, p) if msg.econ else (msg.m, msg.n)
    # cuSOLVER reads U and V even without vectors (a null or undersized one faults): pass
    # scratch matrices of the full shape there
    temps = []
    uptr, vptr = _ptr(u), _ptr(v)
    if u is None:
        uptr, nb = _scratch_matrix(ctx, item * msg.ldu * max(ucols, 1))
        temps.append((uptr, nb))
    if v is None:
        vptr, nb = _scratch_matrix(ctx, item * msg.ldv * max(vcols, 1))
        temps.append((vptr, nb))
    try:
        issue_with_info(ctx, reply, (a,), writes, lambda s, info: lib.gesvdj(
            s, msg.a.dtype, msg.vectors, msg.econ, msg.m, msg.n, a.ptr, msg.lda, s_.ptr, uptr,
            msg.ldu, vptr, msg.ldv, msg.tol, msg.max_sweeps, info),
            f"cusolverDn{_letter(msg.a.dtype)}gesvdj", None,
            _unconverged(f"Jacobi within max_sweeps={msg.max_sweeps}, tol={msg.tol or 'eps'}"))
    finally:
        for ptr, nb in temps:
            ctx.memory.deallocate(ptr, nb, ctx.compute.obj)


@handles(GesvdjBatched)
def _gesvdj_batched(ctx: Any, msg: GesvdjBatched, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    s_, u, v = _outs(ctx, msg, "s", "u", "v")
    if msg.batch == 0:
        ctx.complete(reply, COMPUTE)
        return
    writes = tuple(x for x in (a, s_, u, v) if x is not None)
    lib = ctx.library("cusolver")
    item = dtype_of(msg.a.dtype).itemsize
    temps = []
    uptr, vptr = _ptr(u), _ptr(v)
    if u is None:
        uptr, nb = _scratch_matrix(ctx, item * msg.ldu * msg.m * msg.batch)
        temps.append((uptr, nb))
    if v is None:
        vptr, nb = _scratch_matrix(ctx, item * msg.ldv * msg.n * msg.batch)
        temps.append((vptr, nb))
    try:
        issue_batched(ctx, reply, (a,), writes, lambda s, infos: lib.gesvdj_batched(
            s, msg.a.dtype, msg.vectors, msg.m, msg.n, a.ptr, msg.lda, s_.ptr, uptr, msg.ldu,
            vptr, msg.ldv, msg.tol, msg.max_sweeps, infos, msg.batch),
            f"cusolverDn{_letter(msg.a.dtype)}gesvdjBatched", msg.batch,
            _unconverged(f"Jacobi within max_sweeps={msg.max_sweeps}, tol={msg.tol or 'eps'}"))
    finally:
        for ptr, nb in temps:
            ctx.memory.deallocate(ptr, nb, ctx.compute.obj)


@handles(Potri)
def _potri(ctx: Any, msg: Potri, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    lib = ctx.library("cusolver")
    issue_with_info(ctx, reply, (a,), (a,), lambda s, info: lib.potri(
        s, msg.a.dtype, msg.uplo, msg.n, a.ptr, msg.lda, info),
        f"cusolverDn{_letter(msg.a.dtype)}potri", None,
        lambda info: (SingularMatrix, info, f"the factor's diagonal element {info} is zero"))



@handles(ZeroTriangle)
def _zero_triangle(ctx: Any, msg: ZeroTriangle, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    lib = ctx.library("cusolver")
    ctx.run(reply, COMPUTE, (a,), (a,), lambda s: lib.zero_part(
        s, msg.a.dtype, msg.part, msg.m, msg.n, a.ptr, msg.lda))


@handles(CholeskyBatched)
def _cholesky_batched(ctx: Any, msg: CholeskyBatched, reply: Any) -> None:
    a, out = ctx.resolve(msg.a, "a"), ctx.resolve_out(msg.out, "out")
    batch, n, dtype = msg.batch, msg.n, msg.a.dtype
    if batch == 0 or n == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    item = dtype_of(dtype).itemsize
    nbytes = n * n * batch * item
    ptrs = pointer_array(ctx, lib, out.ptr, item * n * n, batch)

    def call(stream: Any, infos: int) -> None:
        if lib.cholesky_lower(stream, dtype, n, a.ptr, out.ptr, ptrs, infos, batch):
            return
        # without the kernels: a copy, potrfBatched on the upper triangles of the column-major
        # view (NumPy's lower ones), then the other triangle zeroed with memsets
        ctx.backend.copy_dtod(stream, out.ptr, a.ptr, nbytes)
        lib.potrf_batched(stream, dtype, "U", n, ptrs, n, infos, batch)
        lib.zero_outside_strided(stream, dtype, "U", n, out.ptr, n, n * n, batch)

    issue_batched(ctx, reply, (a,), (out,), call, f"cusolverDn{_letter(dtype)}potrfBatched",
                  batch, _npd)


# -- any-size batched eigen / SVD, general eigenproblem ---------------------------------------


@handles(SyevBatched)
def _syev_batched(ctx: Any, msg: SyevBatched, reply: Any) -> None:
    a, w = ctx.resolve(msg.a, "a"), ctx.resolve_out(msg.w, "w")
    if msg.batch == 0 or msg.n == 0:
        ctx.complete(reply, COMPUTE)
        return
    lib = ctx.library("cusolver")
    issue_batched(ctx, reply, (a,), (a, w), lambda s, infos: lib.syev_batched(
        s, msg.a.dtype, msg.vectors, msg.uplo, msg.n, a.ptr, msg.lda, w.ptr, infos, msg.batch),
        "cusolverDnXsyevBatched", msg.batch,
        _unconverged("off-diagonal elements of the tridiagonal form"))


@handles(GesvdjStrided)
def _gesvdj_strided(ctx: Any, msg: GesvdjStrided, reply: Any) -> None:
    a = ctx.resolve(msg.a, "a")
    s_, u, v = _outs(ctx, msg, "s", "u", "v")
    p = min(msg.m, msg.n)
    if msg.batch == 0 or p == 0:
        ctx.complete(reply, COMPUTE)
        return
    writes = tuple(x for x in (a, s_, u, v) if x is not None)
    lib = ctx.library("cusolver")
    item = dtype_of(msg.a.dtype).itemsize
    ucols, vcols = (p, p) if msg.econ else (msg.m, msg.n)
    # without vectors cuSOLVER still reads U and V: one scratch matrix each per stream the
    # items run on (shared by that stream's items, which run one after the other)
    temps = []
    uptr, vptr = _ptr(u), _ptr(v)
    ustep, vstep = msg.ldu * ucols, msg.ldv * vcols
    ulane = vlane = 0
    lanes = lib.gesvdj_lanes(msg.batch)
    if u is None:
        ulane, ustep = msg.ldu * ucols, 0
        uptr, nb = _scratch_matrix(ctx, item * ulane * lanes)
        temps.append((uptr, nb))
    if v is None:
        vlane, vstep = msg.ldv * vcols, 0
        vptr, nb = _scratch_matrix(ctx, item * vlane * lanes)
        temps.append((vptr, nb))
    try:
        issue_batched(ctx, reply, (a,), writes, lambda s, infos: lib.gesvdj_strided(
            s, msg.a.dtype, msg.vectors, msg.econ, msg.m, msg.n, a.ptr, msg.lda, s_.ptr, uptr,
            msg.ldu, vptr, msg.ldv, ustep, vstep, msg.tol, msg.max_sweeps, infos, msg.batch,
            ulane, vlane),
            f"cusolverDn{_letter(msg.a.dtype)}gesvdj", msg.batch,
            _unconverged(f"Jacobi within max_sweeps={msg.max_sweeps}, tol={msg.tol or 'eps'}"))
    finally:
        for ptr, nb in temps:
            ctx.memory.deallocate(ptr, nb, ctx.compute.obj)


@handles(Geev)
def _geev(ctx: Any, msg: Geev, reply: Any) -> None:
    a, w = ctx.resolve(msg.a, "a"), ctx.resolve_out(msg.w, "w")
    vr = ctx.resolve_out(msg.vr, "vr") if msg.vr is not None else None
    if msg.batch == 0 or msg.n == 0:
        ctx.complete(reply, COMPUTE)
        return
    writes = tuple(x for x in (a, w, vr) if x is not None)
    lib = ctx.library("cusolver")
    issue_batched(ctx, reply, (a,), writes, lambda s, infos: lib.geev(
        s, msg.a.dtype, msg.n, a.ptr, msg.lda, w.ptr, _ptr(vr), msg.ldvr, infos, msg.batch),
        "cusolverDnXgeev", msg.batch, _unconverged("the QR algorithm"))
