"""cuSOLVER dense messages (``dev.linalg``): LU, Cholesky, QR, symmetric / Hermitian and
generalized eigen, SVD, and their batched forms (cuBLAS for batched LU).

Matrices are column-major with explicit leading dimensions, as cuSOLVER takes them (the
NumPy-shaped ``dev.linalg`` methods handle C-ordered buffers). The factorizations report
numerical failure through cuSOLVER's ``info`` word, which the device thread never waits for: it
is copied back on the stream and inspected at completion, where a non-zero value fails the
future with :class:`~gpumsg.errors.SingularMatrix` or
:class:`~gpumsg.errors.NotPositiveDefinite` and marks the written buffers invalid.
"""

from __future__ import annotations

from typing import Any

from ._base import (
    MAX_NBYTES,
    BufRef,
    Message,
    _bool,
    _choice,
    _fail,
    _int,
    _real,
    _ref,
    _require_dtype,
    _set,
    check_extent,
    message,
)
from .cublas import BLAS_DTYPES, _buffers, _dims, _ld, _side, _trans, _uplo, check_matrix

__all__ = ["Potrf", "Potrs", "Getrf", "Getrs", "PotrfBatched", "SolverCacheInfo",
           "SOLVER_DTYPES", "Geqrf", "Orgqr", "Ormqr", "Syevd", "Syevj", "SyevjBatched", "Sygvd",
           "Gesvd", "Gesvdj", "GesvdjBatched", "Potri", "PotrsBatched", "GetrfBatched",
           "GetrsBatched", "ZeroTriangle", "CholeskyBatched", "REAL_DTYPE", "BATCHED_JACOBI_MAX",
           "SyevBatched", "GesvdjStrided", "Geev"]

#: the real dtype of eigenvalues and singular values
REAL_DTYPE = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}
#: the largest matrix order cuSOLVER's batched Jacobi solvers take (syevjBatched, gesvdjBatched)
BATCHED_JACOBI_MAX = 32

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
    check_extent(msg, "ipiv", ref, 0, ((count, 1),), f"{count} i64 pivots")
    _distinct(msg, "ipiv", "a")


@message(buffers=("a", "ipiv"), writes=("a", "ipiv"))
class Getrf(Message):
    """LU factorization in place (``cusolverDnXgetrf``): P A = L U of the m x n matrix A, unit
    lower L and upper U stored over A. ``ipiv`` (i64, min(m, n) entries, 1-based row
    interchanges as LAPACK) receives the pivots; with ``ipiv=None`` no pivoting is done. Fails
    with SingularMatrix(index=k) when U[k-1, k-1] is exactly zero (the factors are still
    written, as LAPACK does), unless ``singular_ok`` (a determinant's case)."""

    a: BufRef
    m: int
    n: int
    ipiv: BufRef | None = None
    lda: int | None = None
    singular_ok: bool = False

    def __post_init__(self) -> None:
        _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n")
        _set(self, "singular_ok", _bool(self, "singular_ok", self.singular_ok))
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


# -- shared checks of the QR / eigen / SVD / batched messages ------------------------------------


def _aux(msg: Any, field: str, dtype: str, count: int, what: str) -> None:
    """A vector field (tau, w, s) of ``dtype`` holding at least ``count`` elements."""
    ref = _ref(msg, field, getattr(msg, field))
    _set(msg, field, ref)
    _require_dtype(msg, field, ref, (dtype,))
    check_extent(msg, field, ref, 0, ((count, 1),), f"{count} elements ({what})")
    _distinct(msg, field, "a")


def _opt_matrix(msg: Any, field: str, dtype: str, rows: int, cols: int, ld_field: str,
                offset: int = 0) -> None:
    value = getattr(msg, field)
    ld = _ld(msg, ld_field, rows)
    if value is None:
        return
    ref = _ref(msg, field, value)
    _set(msg, field, ref)
    _require_dtype(msg, field, ref, (dtype,))
    check_matrix(msg, field, ref, rows, cols, ld, ld_field, offset)
    _distinct(msg, field, "a")


def _jacobi(msg: Any) -> None:
    tol = _real(msg, "tol", msg.tol)
    if tol < 0:
        raise _fail(msg, "tol", f"must be >= 0 (0: machine precision), got {tol}")
    _set(msg, "tol", tol)
    _int(msg, "max_sweeps", msg.max_sweeps, lo=1, hi=2**31 - 1)


def _stride(msg: Any, field: str, minimum: int) -> int:
    value = getattr(msg, field)
    if value is None:
        _set(msg, field, minimum)
        return minimum
    # at most MAX_NBYTES elements: the matrices' addresses (i * stride elements on) are 64-bit
    # byte offsets, which a larger stride would overflow even where one matrix uses none
    value = _int(msg, field, value, 0, MAX_NBYTES)
    if value < minimum:
        raise _fail(msg, field, f"must be >= {minimum} (matrices must not overlap), got {value}")
    return value


def _small(msg: Any, *names: str) -> None:
    for name in names:
        if getattr(msg, name) > BATCHED_JACOBI_MAX:
            raise _fail(msg, name, f"cuSOLVER's batched Jacobi solvers take matrices of order "
                        f"<= {BATCHED_JACOBI_MAX}, got {getattr(msg, name)}")


def _span_of(batch: int, stride: int) -> int:
    return (batch - 1) * stride if batch else 0


# -- QR ------------------------------------------------------------------------------------------


@message(buffers=("a", "tau"), writes=("a", "tau"))
class Geqrf(Message):
    """QR factorization in place (``cusolverDnXgeqrf``): A = Q R of the m x n matrix, R in the
    upper triangle, Q as min(m, n) Householder reflectors below the diagonal with their scalars
    in ``tau`` (same dtype, min(m, n) elements)."""

    a: BufRef
    tau: BufRef
    m: int
    n: int
    lda: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n")
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")
        _aux(self, "tau", dtype, min(self.m, self.n), "min(m, n) reflector scalars")


@message(buffers=("a", "tau"), writes=("a",))
class Orgqr(Message):
    """The m x n matrix Q with orthonormal columns from the first k reflectors of
    :class:`Geqrf`, in place in A (``cusolverDn<t>orgqr`` / ``ungqr``); m >= n >= k."""

    a: BufRef
    tau: BufRef
    m: int
    n: int
    k: int
    lda: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n", "k")
        if self.n > self.m:
            raise _fail(self, "n", f"must be <= m = {self.m}, got {self.n}")
        if self.k > self.n:
            raise _fail(self, "k", f"must be <= n = {self.n}, got {self.k}")
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")
        _aux(self, "tau", dtype, self.k, "k reflector scalars")


@message(buffers=("a", "tau", "c"), writes=("c",))
class Ormqr(Message):
    """C = op(Q) C (``side='L'``) or C op(Q) (``'R'``) in place for the m x n matrix C, Q the
    product of the k reflectors of :class:`Geqrf` stored in A (m x k for 'L', n x k for 'R')
    (``cusolverDn<t>ormqr`` / ``unmqr``); ``trans`` 'N' or 'T' (real), 'N' or 'C'
    (complex)."""

    a: BufRef
    tau: BufRef
    c: BufRef
    m: int
    n: int
    k: int
    side: str = "L"
    trans: str = "N"
    lda: int | None = None
    ldc: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a", "c"), SOLVER_DTYPES)
        _dims(self, "m", "n", "k")
        _side(self)
        _trans(self, "trans")
        allowed = ("N", "T") if dtype in ("f32", "f64") else ("N", "C")
        _choice(self, "trans", self.trans, allowed)
        rows = self.m if self.side == "L" else self.n
        if self.k > rows:
            raise _fail(self, "k", f"must be <= {rows} (the order of Q), got {self.k}")
        check_matrix(self, "a", self.a, rows, self.k, _ld(self, "lda", rows), "lda")
        check_matrix(self, "c", self.c, self.m, self.n, _ld(self, "ldc", self.m), "ldc")
        _aux(self, "tau", dtype, self.k, "k reflector scalars")
        _distinct(self, "c", "a")
        _distinct(self, "c", "tau")


# -- eigen ---------------------------------------------------------------------------------------


def _eig_common(msg: Any) -> str:
    dtype = _buffers(msg, ("a",), SOLVER_DTYPES)
    _dims(msg, "n")
    _uplo(msg)
    _set(msg, "vectors", _bool(msg, "vectors", msg.vectors))
    check_matrix(msg, "a", msg.a, msg.n, msg.n, _ld(msg, "lda", msg.n), "lda")
    _aux(msg, "w", REAL_DTYPE[dtype], msg.n, "n eigenvalues")
    return dtype


@message(buffers=("a", "w"), writes=("a", "w"))
class Syevd(Message):
    """Eigenvalues (ascending, into real ``w``) and, with ``vectors``, orthonormal eigenvectors
    (over A, column j for w[j]) of the symmetric / Hermitian matrix in A's ``uplo`` triangle,
    divide and conquer (``cusolverDnXsyevd``). Without vectors A's contents are destroyed.
    Fails with DidNotConverge(index=k) when k off-diagonal elements did not converge."""

    a: BufRef
    w: BufRef
    n: int
    uplo: str = "L"
    vectors: bool = True
    lda: int | None = None

    def __post_init__(self) -> None:
        _eig_common(self)


@message(buffers=("a", "w"), writes=("a", "w"))
class Syevj(Message):
    """:class:`Syevd` by the Jacobi method (``cusolverDn<t>syevj`` / ``heevj``): ``tol`` (0:
    machine precision), ``max_sweeps``, ``sort`` (ascending; else the order is the
    library's). Fails with DidNotConverge(index=n+1) when ``max_sweeps`` were not enough."""

    a: BufRef
    w: BufRef
    n: int
    uplo: str = "L"
    vectors: bool = True
    lda: int | None = None
    tol: float = 0.0
    max_sweeps: int = 100
    sort: bool = True

    def __post_init__(self) -> None:
        _eig_common(self)
        _jacobi(self)
        _set(self, "sort", _bool(self, "sort", self.sort))


@message(buffers=("a", "w"), writes=("a", "w"))
class SyevjBatched(Message):
    """:class:`Syevj` of ``batch`` matrices of order n <= 32 (``cusolverDn<t>syevjBatched``):
    matrix i at element ``i * lda * n`` of A, its eigenvalues at ``i * n`` of ``w``. Every
    item's info is scanned at completion: the first failing item fails the future with
    DidNotConverge(index, batch_item)."""

    a: BufRef
    w: BufRef
    n: int
    batch: int
    uplo: str = "L"
    vectors: bool = True
    lda: int | None = None
    tol: float = 0.0
    max_sweeps: int = 100
    sort: bool = True

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "n", "batch")
        _small(self, "n")
        _uplo(self)
        _set(self, "vectors", _bool(self, "vectors", self.vectors))
        _set(self, "sort", _bool(self, "sort", self.sort))
        _jacobi(self)
        lda = _ld(self, "lda", self.n)
        check_matrix(self, "a", self.a, self.n, self.n, lda, "lda",
                     _span_of(self.batch, lda * self.n))
        _aux(self, "w", REAL_DTYPE[dtype], self.n * self.batch, "n eigenvalues per matrix")


@message(buffers=("a", "b", "w"), writes=("a", "b", "w"))
class Sygvd(Message):
    """Generalized symmetric-definite eigenproblem (``cusolverDn<t>sygvd`` / ``hegvd``):
    ``itype`` 1: A x = l B x, 2: A B x = l x, 3: B A x = l x, with A symmetric / Hermitian and
    B positive definite (their ``uplo`` triangles). Eigenvalues ascending into ``w``,
    eigenvectors over A (with ``vectors``), B's Cholesky factor over B's triangle. Fails with
    NotPositiveDefinite(index=k) when B's leading minor of order k is not positive definite,
    DidNotConverge otherwise."""

    a: BufRef
    b: BufRef
    w: BufRef
    n: int
    itype: int = 1
    uplo: str = "L"
    vectors: bool = True
    lda: int | None = None
    ldb: int | None = None

    def __post_init__(self) -> None:
        _eig_common(self)
        _choice(self, "itype", self.itype, (1, 2, 3))
        _buffers(self, ("a", "b"), SOLVER_DTYPES)
        check_matrix(self, "b", self.b, self.n, self.n, _ld(self, "ldb", self.n), "ldb")
        _distinct(self, "b", "a")
        _distinct(self, "w", "b")


# -- SVD -----------------------------------------------------------------------------------------


@message(buffers=("a", "s", "u", "vt"), writes=("a", "s", "u", "vt"))
class Gesvd(Message):
    """Singular value decomposition A = U S V^H of the m x n matrix, m >= n
    (``cusolverDnXgesvd``): singular values descending into real ``s`` (n), ``jobu`` 'A' (all m
    columns of U), 'S' (the first n) or 'N' (none, ``u`` may be None); ``jobvt`` likewise for
    the rows of V^H (n x n). A's contents are destroyed. Fails with DidNotConverge(index=k)
    when k superdiagonals did not converge."""

    a: BufRef
    s: BufRef
    m: int
    n: int
    u: BufRef | None = None
    vt: BufRef | None = None
    jobu: str = "A"
    jobvt: str = "A"
    lda: int | None = None
    ldu: int | None = None
    ldvt: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n")
        if self.m < self.n:
            raise _fail(self, "m", f"cuSOLVER's gesvd needs m >= n (got m={self.m}, "
                        f"n={self.n}): factor the transpose")
        _choice(self, "jobu", self.jobu, ("A", "S", "N"))
        _choice(self, "jobvt", self.jobvt, ("A", "S", "N"))
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")
        _aux(self, "s", REAL_DTYPE[dtype], self.n, "n singular values")
        ucols = {"A": self.m, "S": self.n, "N": 0}[self.jobu]
        vrows = {"A": self.n, "S": self.n, "N": 0}[self.jobvt]
        for field, job, rows, cols, ld in (("u", self.jobu, self.m, ucols, "ldu"),
                                           ("vt", self.jobvt, vrows, self.n, "ldvt")):
            if job != "N" and getattr(self, field) is None:
                raise _fail(self, field, f"job{field[0]}={job!r} needs a buffer")
            _opt_matrix(self, field, dtype, max(rows, 1) if job != "N" else 1,
                        cols if job != "N" else 0, ld)
            if job == "N":
                _set(self, field, None)


@message(buffers=("a", "s", "u", "v"), writes=("a", "s", "u", "v"))
class Gesvdj(Message):
    """SVD A = U S V^H of the m x n matrix by the Jacobi method (``cusolverDn<t>gesvdj``; any
    m, n): singular values descending into real ``s`` (min(m, n)), U (m x m, or m x min(m, n)
    with ``econ``) and V itself, not V^H (n x n, or n x min(m, n)). With ``vectors=False``
    ``u`` and ``v`` may be None (the device passes scratch matrices: cuSOLVER needs valid ones
    even then). A's contents are destroyed. Fails with DidNotConverge(index=min(m, n)+1) when
    ``max_sweeps`` were not enough."""

    a: BufRef
    s: BufRef
    m: int
    n: int
    u: BufRef | None = None
    v: BufRef | None = None
    vectors: bool = True
    econ: bool = False
    lda: int | None = None
    ldu: int | None = None
    ldv: int | None = None
    tol: float = 0.0
    max_sweeps: int = 100

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n")
        _set(self, "vectors", _bool(self, "vectors", self.vectors))
        _set(self, "econ", _bool(self, "econ", self.econ))
        _jacobi(self)
        p = min(self.m, self.n)
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")
        _aux(self, "s", REAL_DTYPE[dtype], p, "min(m, n) singular values")
        ucols, vcols = (p, p) if self.econ else (self.m, self.n)
        if self.vectors:
            for field in ("u", "v"):
                if getattr(self, field) is None:
                    raise _fail(self, field, "vectors=True needs a buffer")
        _opt_matrix(self, "u", dtype, self.m, ucols, "ldu")
        _opt_matrix(self, "v", dtype, self.n, vcols, "ldv")
        if self.u is not None and self.v is not None:
            _distinct(self, "v", "u")


@message(buffers=("a", "s", "u", "v"), writes=("a", "s", "u", "v"))
class GesvdjBatched(Message):
    """:class:`Gesvdj` of ``batch`` m x n matrices, m, n <= 32
    (``cusolverDn<t>gesvdjBatched``), full U (m x m) and V (n x n): item i at element
    ``i * lda * n`` of A, ``i * ldu * m`` of U, ``i * ldv * n`` of V and ``i * min(m, n)`` of
    ``s``. Every item's info is scanned at completion: DidNotConverge(index, batch_item)."""

    a: BufRef
    s: BufRef
    m: int
    n: int
    batch: int
    u: BufRef | None = None
    v: BufRef | None = None
    vectors: bool = True
    lda: int | None = None
    ldu: int | None = None
    ldv: int | None = None
    tol: float = 0.0
    max_sweeps: int = 100

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n", "batch")
        _small(self, "m", "n")
        _set(self, "vectors", _bool(self, "vectors", self.vectors))
        _jacobi(self)
        lda = _ld(self, "lda", self.m)
        check_matrix(self, "a", self.a, self.m, self.n, lda, "lda",
                     _span_of(self.batch, lda * self.n))
        _aux(self, "s", REAL_DTYPE[dtype], min(self.m, self.n) * self.batch,
             "min(m, n) singular values per matrix")
        if self.vectors:
            for field in ("u", "v"):
                if getattr(self, field) is None:
                    raise _fail(self, field, "vectors=True needs a buffer")
        ldu, ldv = _ld(self, "ldu", self.m), _ld(self, "ldv", self.n)
        _opt_matrix(self, "u", dtype, self.m, self.m, "ldu", _span_of(self.batch, ldu * self.m))
        _opt_matrix(self, "v", dtype, self.n, self.n, "ldv", _span_of(self.batch, ldv * self.n))
        if self.u is not None and self.v is not None:
            _distinct(self, "v", "u")


# -- inverse from Cholesky, batched solves -------------------------------------------------------


@message(buffers=("a",), writes=("a",))
class Potri(Message):
    """The inverse of a Hermitian positive definite matrix from its Cholesky factor
    (:class:`Potrf`, same ``uplo``) in place over that triangle (``cusolverDn<t>potri``); the
    other triangle is left as it was. Fails with SingularMatrix(index=k) when the factor's
    diagonal element k is zero."""

    a: BufRef
    n: int
    uplo: str = "L"
    lda: int | None = None

    def __post_init__(self) -> None:
        _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "n")
        _uplo(self)
        check_matrix(self, "a", self.a, self.n, self.n, _ld(self, "lda", self.n), "lda")


def _batched_pair(msg: Any, rows_b: int) -> None:
    """A (n x n, ``stride_a`` apart) and B (rows_b x nrhs, ``stride_b`` apart)."""
    lda, ldb = _ld(msg, "lda", msg.n), _ld(msg, "ldb", rows_b)
    sa = _stride(msg, "stride_a", lda * msg.n)
    sb = _stride(msg, "stride_b", ldb * msg.nrhs)
    check_matrix(msg, "a", msg.a, msg.n, msg.n, lda, "lda", _span_of(msg.batch, sa))
    check_matrix(msg, "b", msg.b, rows_b, msg.nrhs, ldb, "ldb", _span_of(msg.batch, sb))
    _distinct(msg, "b", "a")


@message(buffers=("a", "b"), writes=("b",))
class PotrsBatched(Message):
    """Solve A_i x_i = b_i for ``batch`` systems in place in B with the Cholesky factors of
    :class:`PotrfBatched` (``cusolverDn<t>potrsBatched``; cuSOLVER takes one right-hand side,
    ``nrhs=1``). Matrix i at element ``i * stride_a`` of A, right-hand side i at
    ``i * stride_b`` of B."""

    a: BufRef
    b: BufRef
    n: int
    batch: int
    nrhs: int = 1
    uplo: str = "L"
    lda: int | None = None
    ldb: int | None = None
    stride_a: int | None = None
    stride_b: int | None = None

    def __post_init__(self) -> None:
        _buffers(self, ("a", "b"), SOLVER_DTYPES)
        _dims(self, "n", "batch", "nrhs")
        if self.nrhs != 1:
            raise _fail(self, "nrhs", f"cuSOLVER's potrsBatched takes nrhs=1, got {self.nrhs}")
        _uplo(self)
        _batched_pair(self, self.n)


def _ipiv32(msg: Any, count: int) -> None:
    if msg.ipiv is None:
        return
    ref = _ref(msg, "ipiv", msg.ipiv)
    _set(msg, "ipiv", ref)
    _require_dtype(msg, "ipiv", ref, ("i32",))
    check_extent(msg, "ipiv", ref, 0, ((count, 1),), f"{count} i32 pivots (n per matrix)")
    _distinct(msg, "ipiv", "a")


@message(buffers=("a", "ipiv"), writes=("a", "ipiv"))
class GetrfBatched(Message):
    """LU of ``batch`` n x n matrices in place (cuBLAS ``<t>getrfBatched``): matrix i at
    element ``i * stride`` of A; ``ipiv`` (i32, n per matrix, 1-based as LAPACK) receives the
    pivots, None factors without pivoting. Every item's info is scanned at completion: the first
    failing item fails the future with SingularMatrix(index, batch_item). With
    ``singular_ok=True`` an exactly zero pivot is no error (the factors are written as LAPACK
    writes them, a zero on U's diagonal): what a determinant needs."""

    a: BufRef
    n: int
    batch: int
    ipiv: BufRef | None = None
    lda: int | None = None
    stride: int | None = None
    singular_ok: bool = False

    def __post_init__(self) -> None:
        _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "n", "batch")
        _set(self, "singular_ok", _bool(self, "singular_ok", self.singular_ok))
        lda = _ld(self, "lda", self.n)
        stride = _stride(self, "stride", lda * self.n)
        check_matrix(self, "a", self.a, self.n, self.n, lda, "lda", _span_of(self.batch, stride))
        _ipiv32(self, self.n * self.batch)


@message(buffers=("a", "ipiv", "b"), writes=("b",))
class GetrsBatched(Message):
    """Solve op(A_i) X_i = B_i for ``batch`` systems in place in B (cuBLAS
    ``<t>getrsBatched``) with the factors and pivots of :class:`GetrfBatched`; ``trans`` 'N',
    'T' or 'C'."""

    a: BufRef
    b: BufRef
    n: int
    nrhs: int
    batch: int
    ipiv: BufRef | None = None
    trans: str = "N"
    lda: int | None = None
    ldb: int | None = None
    stride_a: int | None = None
    stride_b: int | None = None

    def __post_init__(self) -> None:
        _buffers(self, ("a", "b"), SOLVER_DTYPES)
        _dims(self, "n", "nrhs", "batch")
        _trans(self, "trans")
        _batched_pair(self, self.n)
        _ipiv32(self, self.n * self.batch)


@message(buffers=("a",), writes=("a",))
class ZeroTriangle(Message):
    """Set the strictly lower (``part='L'``: i > j) or strictly upper (``'U'``: i < j) part of
    the column-major m x n matrix A to zero (what NumPy's R and triangular factors hold there).
    One memset per column: meant for the NumPy-shaped wrappers, not for hot loops."""

    a: BufRef
    m: int
    n: int
    part: str = "L"
    lda: int | None = None

    def __post_init__(self) -> None:
        _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n")
        _choice(self, "part", self.part, ("L", "U"))
        check_matrix(self, "a", self.a, self.m, self.n, _ld(self, "lda", self.m), "lda")


@message(buffers=("a", "out"), writes=("out",))
class CholeskyBatched(Message):
    """NumPy's batched ``linalg.cholesky`` in one message: ``batch`` C-ordered n x n Hermitian
    positive definite matrices, tightly packed in A (only their lower triangles read), factored
    into ``out`` as C-ordered lower factors L (A = L L^H) with zeros above the diagonal; A is
    left as it was. cuSOLVER potrfBatched underneath. The first failing item fails the future
    with NotPositiveDefinite(index, batch_item); ``failed_items`` lists them all."""

    a: BufRef
    out: BufRef
    n: int
    batch: int

    def __post_init__(self) -> None:
        _buffers(self, ("a", "out"), SOLVER_DTYPES)
        _dims(self, "n", "batch")
        for field in ("a", "out"):
            ref = getattr(self, field)
            check_extent(self, field, ref, 0, ((self.n * self.n, 1), (self.batch, self.n * self.n)),
                         f"{self.batch} matrices of {self.n}x{self.n}")
        _distinct(self, "out", "a")


# -- any-size batched eigen / SVD, general eigenproblem -------------------------------------------

@message(buffers=("a", "w"), writes=("a", "w"))
class SyevBatched(Message):
    """:class:`Syevd` of ``batch`` matrices of any order n, matrix i at element ``i * lda * n``
    of A (eigenvectors over it with ``vectors``), its ascending eigenvalues at ``i * n`` of
    ``w``: ``cusolverDnXsyevBatched`` where the library has it (cuSOLVER 11.7, CUDA 12.6 update
    2, and later; chunks of at most 65,535 matrices, the most one call takes), one
    ``cusolverDnXsyevd`` per matrix otherwise. Every item's info is scanned at completion:
    DidNotConverge(index, batch_item)."""

    a: BufRef
    w: BufRef
    n: int
    batch: int
    uplo: str = "L"
    vectors: bool = True
    lda: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "n", "batch")
        _uplo(self)
        _set(self, "vectors", _bool(self, "vectors", self.vectors))
        lda = _ld(self, "lda", self.n)
        check_matrix(self, "a", self.a, self.n, self.n, lda, "lda",
                     _span_of(self.batch, lda * self.n))
        _aux(self, "w", REAL_DTYPE[dtype], self.n * self.batch, "n eigenvalues per matrix")


@message(buffers=("a", "s", "u", "v"), writes=("a", "s", "u", "v"))
class GesvdjStrided(Message):
    """:class:`Gesvdj` of each of ``batch`` m x n matrices of any size (cuSOLVER's batched
    Jacobi stops at 32 x 32): one ``cusolverDn<t>gesvdj`` per matrix, issued back to back on
    the stream. Item i at element ``i * lda * n`` of A, ``i * min(m, n)`` of ``s``,
    ``i * ldu * ucols`` of U and ``i * ldv * vcols`` of V (ucols, vcols: m, n, or min(m, n)
    with ``econ``); V itself, not V^H. A's contents are destroyed. Every item's info is scanned
    at completion: DidNotConverge(index, batch_item)."""

    a: BufRef
    s: BufRef
    m: int
    n: int
    batch: int
    u: BufRef | None = None
    v: BufRef | None = None
    vectors: bool = True
    econ: bool = False
    lda: int | None = None
    ldu: int | None = None
    ldv: int | None = None
    tol: float = 0.0
    max_sweeps: int = 100

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "m", "n", "batch")
        _set(self, "vectors", _bool(self, "vectors", self.vectors))
        _set(self, "econ", _bool(self, "econ", self.econ))
        _jacobi(self)
        p = min(self.m, self.n)
        lda = _ld(self, "lda", self.m)
        check_matrix(self, "a", self.a, self.m, self.n, lda, "lda",
                     _span_of(self.batch, lda * self.n))
        _aux(self, "s", REAL_DTYPE[dtype], p * self.batch, "min(m, n) singular values per matrix")
        if self.vectors:
            for field in ("u", "v"):
                if getattr(self, field) is None:
                    raise _fail(self, field, "vectors=True needs a buffer")
        ucols, vcols = (p, p) if self.econ else (self.m, self.n)
        ldu, ldv = _ld(self, "ldu", self.m), _ld(self, "ldv", self.n)
        _opt_matrix(self, "u", dtype, self.m, ucols, "ldu", _span_of(self.batch, ldu * ucols))
        _opt_matrix(self, "v", dtype, self.n, vcols, "ldv", _span_of(self.batch, ldv * vcols))
        if self.u is not None and self.v is not None:
            _distinct(self, "v", "u")


@message(buffers=("a", "w", "vr"), writes=("a", "w", "vr"))
class Geev(Message):
    """Eigenvalues and right eigenvectors of ``batch`` general n x n matrices
    (``cusolverDnXgeev``, one call per matrix; no left eigenvectors), as LAPACK's geev: matrix i
    at element ``i * lda * n`` of A (destroyed); its eigenvalues at ``i * n`` of ``w`` for a
    complex A (w of A's dtype), or, for a real A, 2n real values at ``i * 2n`` of ``w`` (A's
    dtype): the n real parts, then the n imaginary parts (a complex pair appears as both
    conjugates, the positive imaginary part first). When ``vr`` is given, the eigenvectors at
    ``i * ldvr * n`` of ``vr`` (A's dtype; unit norm, the largest component real); for a real
    A in LAPACK's packed form: the pair w[j], w[j+1] = conj(w[j]) has the eigenvectors
    vr[:, j] +- i vr[:, j+1]. Fails with DidNotConverge(index, batch_item) when the QR
    algorithm did not converge."""

    a: BufRef
    w: BufRef
    n: int
    batch: int = 1
    vr: BufRef | None = None
    lda: int | None = None
    ldvr: int | None = None

    def __post_init__(self) -> None:
        dtype = _buffers(self, ("a",), SOLVER_DTYPES)
        _dims(self, "n", "batch")
        lda = _ld(self, "lda", self.n)
        check_matrix(self, "a", self.a, self.n, self.n, lda, "lda",
                     _span_of(self.batch, lda * self.n))
        per = self.n if dtype in ("c64", "c128") else 2 * self.n
        _aux(self, "w", dtype, per * self.batch,
             "n eigenvalues per matrix" if per == self.n else
             "2n per matrix: the real parts, then the imaginary parts")
        ldvr = _ld(self, "ldvr", self.n)
        _opt_matrix(self, "vr", dtype, self.n, self.n, "ldvr", _span_of(self.batch, ldvr * self.n))
        if self.vr is not None:
            _distinct(self, "vr", "w")
