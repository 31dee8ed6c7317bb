"""cuSOLVER dense messages (``dev.linalg``): LU and Cholesky factorizations and solves.

Matrices are column-major with explicit leading dimensions, as cuSOLVER takes them (the
NumPy-shaped ``dev.linalg`` methods handle C-ordered buffers). The factorizations report
numerical failure through cuSOLVER's ``info`` word, which the device thread never waits for: it
is copied back on the stream and inspected at completion, where a non-zero value fails the
future with :class:`~gpumsg.errors.SingularMatrix` or
:class:`~gpumsg.errors.NotPositiveDefinite` and marks the written buffers invalid.
"""

from __future__ import annotations

from typing import Any

from .base import (
    MAX_NBYTES,
    BufRef,
    Message,
    _bool,
    _fail,
    _int,
    _ref,
    _require_dtype,
    _set,
    message,
)
from .blas import BLAS_DTYPES, _buffers, _dims, _ld, _trans, _uplo, check_matrix

__all__ = ["Potrf", "Potrs", "Getrf", "Getrs", "PotrfBatched", "SolverCacheInfo",
           "SOLVER_DTYPES"]

#: the four LAPACK precisions
SOLVER_DTYPES = BLAS_DTYPES


@message(buffers=("a",), writes=("a",))
class Potrf(Message):
    """Cholesky factorization in place (``cusolverDnXpotrf``): A = L L^H (``uplo='L'``) or
    U^H U (``'U'``) of the Hermitian positive definite n x n matrix in A's ``uplo`` triangle.
    The other triangle is left as it was, or set to zero with ``clean=True``. Fails with
    NotPositiveDefinite(index=k) when the leading minor of order k is not positive definite."""

    a: BufRef
    n: int
    uplo: str = "L"
    lda: int | None = None
    clean: bool = False

    def __post_init__(self) -> None:
        _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "n")
        _uplo(self)
        _set(self, "clean", _bool(self, "clean", self.clean))
        check_matrix(self, "a", self.a, self.n, self.n, _ld(self, "lda", self.n), "lda")


@message(buffers=("a", "b"), writes=("b",))
class Potrs(Message):
    """Solve A X = B in place in B (n x nrhs) with A's Cholesky factor from :class:`Potrf`
    (``cusolverDnXpotrs``; same ``uplo``)."""

    a: BufRef
    b: BufRef
    n: int
    nrhs: int
    uplo: str = "L"
    lda: int | None = None
    ldb: int | None = None

    def __post_init__(self) -> None:
        _buffers(self, ("a", "b"), SOLVER_DTYPES)
        _dims(self, "n", "nrhs")
        _uplo(self)
        check_matrix(self, "a", self.a, self.n, self.n, _ld(self, "lda", self.n), "lda")
        check_matrix(self, "b", self.b, self.n, self.nrhs, _ld(self, "ldb", self.n), "ldb")
        _distinct(self, "b", "a")


def _distinct(msg: Any, out: str, other: str) -> None:
    o, r = getattr(msg, out), getattr(msg, other)
    if r is not None and r.id == o.id and r.owner == o.owner:
        raise _fail(msg, out, f"{out} must not alias {other} ({o.describe()})")


def _ipiv(msg: Any, count: int) -> None:
    if msg.ipiv is None:
        return
    ref = _ref(msg, "ipiv", msg.ipiv)
    _set(msg, "ipiv", ref)
    _require_dtype(msg, "ipiv", ref, ("i64",))
    if ref.size < count:
        raise _fail(msg, "ipiv", f"needs {count} i64 pivots, {ref.describe()} holds {ref.size}")
    _distinct(msg, "ipiv", "a")


@message(buffers=("a", "ipiv"), writes=("a", "ipiv"))
class Getrf(Message):
    """LU factorization in place (``cusolverDnXgetrf``): P A = L U of the m x n matrix A, unit
    lower L and upper U stored over A. ``ipiv`` (i64, min(m, n) entries, 1-based row
    interchanges as LAPACK) receives the pivots; with ``ipiv=None`` no pivoting is done. Fails
    with SingularMatrix(index=k) when U[k-1, k-1] is exactly zero (the factors are still
    written, as LAPACK does)."""

    a: BufRef
    m: int
    n: int
    ipiv: BufRef | None = None
    lda: int | None = None

    def __post_init__(self) -> None:
        _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n")
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")
        _ipiv(self, min(self.m, self.n))


@message(buffers=("a", "ipiv", "b"), writes=("b",))
class Getrs(Message):
    """Solve op(A) X = B in place in B (n x nrhs) with the LU factors of :class:`Getrf`
    (``cusolverDnXgetrs``); ``ipiv`` as Getrf wrote it (None: factors without pivoting);
    ``trans`` 'N', 'T' or 'C'."""

    a: BufRef
    b: BufRef
    n: int
    nrhs: int
    ipiv: BufRef | None = None
    trans: str = "N"
    lda: int | None = None
    ldb: int | None = None

    def __post_init__(self) -> None:
        _buffers(self, ("a", "b"), SOLVER_DTYPES)
        _dims(self, "n", "nrhs")
        _trans(self, "trans")
        check_matrix(self, "a", self.a, self.n, self.n, _ld(self, "lda", self.n), "lda")
        check_matrix(self, "b", self.b, self.n, self.nrhs, _ld(self, "ldb", self.n), "ldb")
        _ipiv(self, self.n)
        _distinct(self, "b", "a")


@message(buffers=("a",), writes=("a",))
class PotrfBatched(Message):
    """Cholesky of ``batch`` Hermitian positive definite n x n matrices in place
    (``cusolverDn<t>potrfBatched``): matrix i is column-major at element ``i * stride`` of A
    (``stride`` defaults to lda * n). ``clean=True`` zeroes the other triangle of each. Every
    item's info is copied back and scanned at completion: the first failing item fails the
    future with NotPositiveDefinite(index, batch_item) and the whole stack is marked invalid."""

    a: BufRef
    n: int
    batch: int
    uplo: str = "L"
    lda: int | None = None
    stride: int | None = None
    clean: bool = False

    def __post_init__(self) -> None:
        _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "n", "batch")
        _uplo(self)
        _set(self, "clean", _bool(self, "clean", self.clean))
        lda = _ld(self, "lda", self.n)
        if self.stride is None:
            _set(self, "stride", lda * self.n)
        _int(self, "stride", self.stride, hi=MAX_NBYTES)
        if self.stride < lda * self.n:
            raise _fail(self, "stride", f"must be >= lda * n = {lda * self.n} (matrices must "
                        f"not overlap), got {self.stride}")
        offset = (self.batch - 1) * self.stride if self.batch else 0
        check_matrix(self, "a", self.a, self.n, self.n, lda, "lda", offset)


@message()
class SolverCacheInfo(Message):
    """The cuSOLVER workspace-size cache of the device: hits, misses, size, capacity,
    evictions (one size query per function, dtype and shape)."""
