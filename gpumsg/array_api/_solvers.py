"""Decompositions and solvers of the ``linalg`` extension over cuSOLVER, every one accepting
stacks ``(..., M, N)``.

A stack of matrices up to :data:`BATCHED_MAX` runs as batched calls: cuBLAS's
getrfBatched/getrsBatched for ``inv`` and ``solve``, getrfBatched and kernels over the factors
for ``det`` and ``slogdet``, potrfBatched for ``cholesky``, syevjBatched up to 32 and
cusolverDnXsyevBatched beyond for ``eigh``, gesvdjBatched up to 32 and one gesvdj per matrix in
a single message beyond for ``svd``, one Xgeev per matrix for ``eig``. Single matrices, and the
matrices of stacks of larger ones one by one, go to the raw calls on a column-major copy for
``cholesky`` (potrf with uplo 'L', the fast fill mode), ``eigh`` (syevd), ``svd`` (gesvdj),
``qr`` (geqrf, orgqr) and ``det``/``slogdet`` (getrf), whose factors are answered as
column-major views (no transpose back, as torch's), and through the device's NumPy-shaped
client for ``inv`` and ``solve``. Everything answers at once.
"""

from __future__ import annotations

import math
import threading
from collections import namedtuple
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..messages.cusolver import Getrf, GetrfBatched
from . import _dtypes as D
from ._array import Array, _copy, new_array
from ._elementwise import TABLE, apply, astype
from ._linalg import diagonal, matmul
from ._manipulation import expand_dims, reshape, stack
from ._reductions import sum as _sum

__all__ = ["cholesky", "inv", "solve", "det", "slogdet", "eigh", "eigvalsh", "eig", "eigvals",
           "qr", "svd", "svdvals", "matrix_rank", "pinv", "EigResult", "EighResult", "QRResult",
           "SlogdetResult", "SVDResult", "BATCHED_MAX", "JACOBI_MAX"]

EigResult = namedtuple("EigResult", ["eigenvalues", "eigenvectors"])
EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = namedtuple("QRResult", ["Q", "R"])
SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])

#: the largest matrix order a stack is factored with batched calls; larger matrices go one by one
#: through the single-matrix calls (the batched kernels are written for small matrices)
BATCHED_MAX = 512
#: the largest order of cuSOLVER's batched Jacobi solvers (syevjBatched, gesvdjBatched)
JACOBI_MAX = 32


def _solver(dev: Any) -> Any:
    """The device's NumPy-shaped cuSOLVER client (one matrix per call)."""
    return dev.linalg


def _raw(dev: Any) -> Any:
    """The device's raw (LAPACK-named, column-major) cuSOLVER calls."""
    return dev.cusolver


def _stack_input(x: Any, name: str, square: bool = False) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions")
    if D.kind_of(x.dtype) in "iub":  # integers and bools compute in float64, as NumPy's
        x = astype(x, D.float64)
    if x.dtype not in (D.float32, D.float64, D.complex64, D.complex128):
        raise TypeError(f"{name} takes float32/64 or complex64/128 arrays, got {x.dtype}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{name} needs square matrices, got shape {x.shape}")
    return x


def _items(x: Array) -> list[Array]:
    """Each matrix of the stack ``x`` as a C-contiguous array of its own buffer."""
    batch = x.shape[:-2]
    out = []
    for idx in np.ndindex(*batch):
        out.append(_copy(x[idx]) if idx or not x._is_whole() else x)
    return out


def _arr(fut: Any, dev: Any) -> Array:
    """An Array of a buffer future (not waited for) or of a GpuBuffer."""
    base = getattr(fut, "buffer", fut)
    return Array(fut, base.shape, D.check_dtype(base.dtype), dev)


def _restack(parts: list[Array], batch: tuple[int, ...], shape: tuple[int, ...],
             dtype: Any, dev: Any) -> Array:
    """The per-matrix results as one array of shape ``batch + shape`` (an empty stack gives an
    empty array of that shape)."""
    if not parts:
        from ._creation import empty

        return empty(batch + shape, dtype=dtype, device=dev)
    if not batch:
        return parts[0]
    return reshape(stack(parts, axis=0), batch + parts[0].shape)


def _count(batch: tuple[int, ...]) -> int:
    return math.prod(batch)


def _batched(x: Array, n: int) -> bool:
    """Whether the stack ``x`` (matrices of order ``n``) takes the batched calls."""
    return x.ndim > 2 and 0 < n <= BATCHED_MAX and _count(x.shape[:-2]) > 0


def _after(*futures: Any) -> Future:
    """A future failing with the first failure of ``futures`` (in order) once all are done,
    else answering None: a result written by several calls carries the first one's error (a
    factorization's SingularMatrix rather than its reader's DependencyFailed)."""
    out: Future = Future()
    left = [len(futures)]
    lock = threading.Lock()

    def one(_f: Any) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        for f in futures:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
                return
        out.set_result(None)

    for f in futures:
        f.add_done_callback(one)
    return out


def _fresh(x: Array) -> Array:
    """A C-contiguous copy of ``x`` in a buffer of its own (the batched calls write in place)."""
    return _copy(x)


def _colmajor_new(dev: Any, m: int, n: int, dtype: Any, batch: tuple[int, ...] = ()) -> Array:
    """An uninitialized stack of column-major m x n matrices, one after the other in a flat
    buffer: the storage the raw LAPACK-shaped calls take (they refuse a C-ordered 2-D buffer),
    seen as the matrices themselves through strides (..., 1, m)."""
    from ._array import c_strides

    count = _count(batch)
    buf = dev.alloc((max(count * m * n, 1),), D.storage_name(dtype))
    outer = tuple(st * m * n for st in c_strides(batch))
    return Array(buf, batch + (m, n), dtype, dev, strides=outer + (1, m))


def _colmajor(x: Array) -> Array:
    """``x`` (a matrix or a stack) copied into a :func:`_colmajor_new` stack: the calls'
    results written there are read through the same strides, so nothing is transposed back."""
    from ._elementwise import copy_into

    m, n = x.shape[-2:]
    dev = x.device
    out = _colmajor_new(dev, m, n, x.dtype, x.shape[:-2])
    if x.ndim == 2 and m and n and x._is_whole():
        # a C-ordered matrix of its own buffer: cuBLAS geam transposes it (tiled), reading its
        # memory as the column-major n x m matrix x^T
        out._wrote(dev.cublas.raw.geam(x.buffer, x.buffer, out.buffer, m, n, transa="T",
                                       lda=n, ldb=m, ldc=m))
    elif x.size:
        copy_into(out, x)
    return out


def _per_matrix(x: Array, one: Any, shapes: tuple, dtypes: tuple) -> tuple:
    """``one(matrix)`` (a tuple of arrays) for each matrix of the stack ``x``, stacked: the
    route of single matrices and of stacks of matrices too large for the batched calls."""
    batch = x.shape[:-2]
    results = [one(x[idx]) for idx in np.ndindex(*batch)]
    if not batch:
        return results[0]
    return tuple(_restack([r[k] for r in results], batch, shape, dt, x.device)
                 for k, (shape, dt) in enumerate(zip(shapes, dtypes)))


def _eye_stack(dtype: Any, dev: Any, shape: tuple[int, ...]) -> Array:
    from ._creation import eye
    from ._manipulation import broadcast_to

    return _fresh(broadcast_to(eye(shape[-1], dtype=dtype, device=dev), shape))


def _lu_batched(a: Array, singular_ok: bool = False) -> tuple[Array, Any, Any]:
    """cuBLAS getrfBatched of the stack ``a`` (..., n, n): the factors of each A^T (the
    column-major reading of its memory) over a copy, the future of the int32 pivots' buffer,
    and the call's future (the same: the pivots are allocated by the call's message;
    ``singular_ok``: a zero pivot is no error)."""
    n = a.shape[-1]
    count = _count(a.shape[:-2])
    port = a.device.port
    lu = _fresh(a)
    ref = port.mint((count * n,), "i32", "C")  # the pivots, allocated by getrf's message
    ipiv = port.send_new(ref, GetrfBatched(lu.buffer, n, count, ref, None, None, singular_ok))
    return lu, ipiv, ipiv


def _slogdet_from(lu: Array, piv: Array, dtype: Any) -> SlogdetResult:
    """sign and log|det| from LU factors (their diagonal: the same in either layout, and
    det A^T = det A) and the 1-based pivots (..., n): the product of U's diagonal and the
    parity of the row interchanges; an exactly zero pivot gives (0, -inf), as NumPy."""
    from ._creation import arange
    from ._elementwise import where
    from ._reductions import count_nonzero, prod

    n = lu.shape[-1]
    d = diagonal(lu)
    mag = apply(TABLE["abs"], d)
    logabs = _sum(apply(TABLE["log"], mag), axis=-1)
    unit = where(apply(TABLE["equal"], d, 0), 0, apply(TABLE["divide"], d, mag))
    moved = count_nonzero(apply(TABLE["not_equal"], piv,
                                arange(1, n + 1, dtype=piv.dtype, device=lu.device)), axis=-1)
    flip = apply(TABLE["subtract"], 1, apply(TABLE["multiply"], 2,
                                             apply(TABLE["remainder"], moved, 2)))
    sign = apply(TABLE["multiply"], prod(unit, axis=-1), astype(flip, dtype))
    return SlogdetResult(astype(sign, dtype, copy=False),
                         astype(logabs, D.real_dtype(dtype), copy=False))


def _slogdet_batched(x: Array) -> SlogdetResult:
    """slogdet of a stack through getrfBatched (a zero pivot no error), on the device."""
    batch, n = x.shape[:-2], x.shape[-1]
    lu, ipiv, done = _lu_batched(x, singular_ok=True)
    lu._wrote(done)
    piv = Array(ipiv, (_count(batch) * n,), D.int32, x.device)  # resolves once factored
    return _slogdet_from(lu, reshape(piv, batch + (n,)), x.dtype)


def _slogdet_one(x: Array) -> tuple[Array, Array]:
    """slogdet of one matrix through cusolverDnXgetrf (a zero pivot no error) on a flat copy
    of its C-ordered memory (the column-major A^T), on the device."""
    n = x.shape[-1]
    dev = x.device
    if not n:
        from ._creation import ones, zeros

        return (ones((), dtype=x.dtype, device=dev),
                zeros((), dtype=D.real_dtype(x.dtype), device=dev))
    lu = _copy(x)  # its C-ordered memory, read column-major by getrf, is A^T
    port = dev.port
    ref = port.mint((n,), "i64", "C")  # the pivots, allocated by the factorization's message
    ipiv = port.send_new(ref, Getrf(lu.buffer, n, n, ref, None, True))
    lu._wrote(ipiv)
    piv = Array(ipiv, (n,), D.int64, dev)
    return tuple(_slogdet_from(lu, piv, x.dtype))


def cholesky(x: Array, /, *, upper: bool = False) -> Array:
    """The lower factor L (x = L L^H) of each Hermitian positive definite matrix, its lower
    triangle read, zeros above the diagonal; ``upper=True``: the upper factor U (x = U^H U)
    from the upper triangle, as NumPy reads it."""
    x = _stack_input(x, "cholesky", square=True)
    if upper:
        # U = L^H for the lower factor L of x^H, whose lower triangle is x's upper one
        real = D.kind_of(x.dtype) == "f"
        low = cholesky(x.mT if real else apply(TABLE["conj"], x).mT)
        return low.mT if real else apply(TABLE["conj"], low).mT
    n = x.shape[-1]
    if _batched(x, n):  # one potrfBatched for the stack
        from ._elementwise import copy_into

        stack3 = new_array(x.device, (_count(x.shape[:-2]), n, n), x.dtype)
        copy_into(reshape(stack3, x.shape), x)
        low = reshape(_arr(_solver(x.device).cholesky(stack3.buffer), x.device), x.shape)
    else:
        low = _per_matrix(x, lambda m: (_cholesky_one(m),), (x.shape[-2:],), (x.dtype,))
        low = low[0]
    return low


def _cholesky_one(x: Array) -> Array:
    """potrf with uplo 'L' on A itself, column-major (cuSOLVER's 'U' on the C-ordered memory,
    its transpose, ran at 0.41x / 0.46x the speed at 4096^2 f32 / f64 on the H200): L, read
    through the column-major strides, zeros above the diagonal."""
    a = _colmajor(x)
    n = x.shape[-1]
    if n:
        a._wrote(_raw(x.device).potrf(a.buffer, n, "L", clean=True))
    return a


def inv(x: Array, /) -> Array:
    """The inverse of each square matrix; a singular one fails the result with SingularMatrix
    (raised where it is read)."""
    x = _stack_input(x, "inv", square=True)
    n = x.shape[-1]
    if _batched(x, n):
        # the memory holds M = A^T: with M = P L U, solving M Y = I gives Y = (A^-1)^T, whose
        # column-major memory is A^-1 in C order (no transposes)
        lu, ipiv, factored = _lu_batched(x)
        out = _eye_stack(x.dtype, x.device, x.shape)
        solved = _raw(x.device).getrs_batched(lu.buffer, out.buffer, n, n,
                                              _count(x.shape[:-2]), ipiv, "N")
        out._wrote(_after(factored, solved))
        return out
    sol = _solver(x.device)
    return _restack([_arr(sol.inv(m.buffer), x.device) for m in _items(x)], x.shape[:-2],
                    x.shape[-2:], x.dtype, x.device)


def solve(x1: Array, x2: Array, /) -> Array:
    """x with x1 @ x = x2 for each system; ``x2`` is a stack of vectors only when 1-D (NumPy 2
    and the standard), batch dimensions broadcast."""
    x1 = _stack_input(x1, "solve", square=True)
    if not isinstance(x2, Array):
        raise TypeError("solve: x2 must be an array")
    dt = D.result_type(x1, x2)
    from ._manipulation import broadcast_to

    a = astype(x1, dt, copy=False)
    b = astype(x2, dt, copy=False)
    n = a.shape[-1]
    if b.ndim == 1:
        if b.shape[0] != n:
            raise ValueError("solve: x2's length must match x1")
        batch = a.shape[:-2]
        b = broadcast_to(b, batch + (n,))
        vec = True
    else:
        if b.shape[-2] != n:
            raise ValueError("solve: x2's rows must match x1")
        from ._elementwise import broadcast_shapes

        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        b = broadcast_to(b, batch + b.shape[-2:])
        vec = False
    a = broadcast_to(a, batch + a.shape[-2:])
    if _batched(a, n):
        count = _count(batch)
        lu, ipiv, factored = _lu_batched(a)
        # each right-hand side column-major (n x k): a vector as it is, a matrix through its
        # transpose; getrs with trans 'T' solves A X = B from the factors of A^T
        rhs = _fresh(b if vec else b.mT)
        k = 1 if vec else b.shape[-1]
        solved = _raw(a.device).getrs_batched(lu.buffer, rhs.buffer, n, k, count, ipiv, "T")
        rhs._wrote(_after(factored, solved))
        return rhs if vec else rhs.mT
    sol = _solver(a.device)

    parts = []
    for idx in np.ndindex(*batch):  # the solver reads whole C-ordered buffers; others copied
        ai, bi = a[idx], b[idx]
        ai, bi = (v if v._is_whole() else _copy(v) for v in (ai, bi))
        parts.append(_arr(sol.solve(ai.buffer, bi.buffer), a.device))
    return _restack(parts, batch, (n,) if vec else b.shape[-2:], dt, a.device)


def slogdet(x: Array, /) -> SlogdetResult:
    """sign and log|det| of each square matrix (a singular one: 0, -inf), on the device."""
    x = _stack_input(x, "slogdet", square=True)
    if _batched(x, x.shape[-1]):
        return _slogdet_batched(x)
    return SlogdetResult(*_per_matrix(x, _slogdet_one, ((), ()),
                                      (x.dtype, D.real_dtype(x.dtype))))


def det(x: Array, /) -> Array:
    """The determinant of each square matrix (0 for a singular one), on the device."""
    sign, logabs = slogdet(_stack_input(x, "det", square=True))
    return apply(TABLE["multiply"], sign, astype(apply(TABLE["exp"], logabs), sign.dtype))


def eigh(x: Array, /, *, UPLO: str = "L") -> EighResult:  # noqa: N803 (NumPy's name)
    """Eigenvalues (ascending) and orthonormal eigenvectors (columns) of each Hermitian matrix,
    reading its ``UPLO`` triangle (NumPy's argument; the standard reads the lower one)."""
    x = _stack_input(x, "eigh", square=True)
    if UPLO not in ("L", "U"):
        raise ValueError(f"eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    n = x.shape[-1]
    if _batched(x, n):
        return _eigh_batched(x, UPLO, True)
    return EighResult(*_per_matrix(x, lambda m: _eigh_one(m, UPLO, True), ((n,), (n, n)),
                                   (D.real_dtype(x.dtype), x.dtype)))


def _eigh_one(x: Array, uplo: str, vectors: bool) -> tuple[Array, Array]:
    """syevd of one matrix, column-major (the caller's triangle read as it is): w and V, read
    through the column-major strides."""
    n = x.shape[-1]
    a = _colmajor(x)
    w = new_array(x.device, (n,), D.real_dtype(x.dtype))
    if n:
        done = _raw(x.device).syevd(a.buffer, w.buffer, n, uplo, vectors)
        a._wrote(done)
        w._wrote(done)
    return w, a


def _eigh_batched(x: Array, uplo: str, vectors: bool) -> EighResult:
    batch, n = x.shape[:-2], x.shape[-1]
    count = _count(batch)
    raw = _raw(x.device)
    # a C-ordered copy of the transposes: each item's memory is A itself, column-major, so the
    # library reads the triangle asked for and writes V, not conj(V)
    work = _fresh(x.mT)
    w = new_array(x.device, batch + (n,), D.real_dtype(x.dtype))
    if n <= JACOBI_MAX:
        done = raw.syevj_batched(work.buffer, w.buffer, n, count, uplo, vectors)
    else:
        done = raw.syev_batched(work.buffer, w.buffer, n, count, uplo, vectors)
    w._wrote(done)
    work._wrote(done)
    return EighResult(w, work.mT)  # the C-ordered memory of V is V^T: its transposed view


def eigvalsh(x: Array, /, *, UPLO: str = "L") -> Array:  # noqa: N803
    x = _stack_input(x, "eigvalsh", square=True)
    if UPLO not in ("L", "U"):
        raise ValueError(f"eigvalsh: UPLO must be 'L' or 'U', got {UPLO!r}")
    n = x.shape[-1]
    if _batched(x, n):
        return _eigh_batched(x, UPLO, False).eigenvalues
    return _per_matrix(x, lambda m: _eigh_one(m, UPLO, False)[:1], ((n,),),
                       (D.real_dtype(x.dtype),))[0]


def _geev(x: Array, vectors: bool) -> EigResult:
    batch, n = x.shape[:-2], x.shape[-1]
    cdt = D.complex64 if x.dtype in (D.float32, D.complex64) else D.complex128
    w = new_array(x.device, batch + (n,), cdt)
    if not n or not _count(batch):
        vr = new_array(x.device, batch + (n, n), cdt)
        return EigResult(w, vr if vectors else None)
    work = _colmajor(x)
    vr = _colmajor_new(x.device, n, n, x.dtype, batch) if vectors else None
    real = D.kind_of(x.dtype) == "f"
    # a real matrix's eigenvalues come as n real parts then n imaginary parts (LAPACK's wr, wi)
    wbuf = new_array(x.device, batch + (2, n), x.dtype) if real else w
    done = _raw(x.device).geev(work.buffer, wbuf.buffer, n,
                               vr.buffer if vr is not None else None, batch=_count(batch))
    wbuf._wrote(done)
    if real:
        w = apply(TABLE["add"], astype(wbuf[..., 0, :], cdt),
                  apply(TABLE["multiply"], astype(wbuf[..., 1, :], cdt), 1j))
    if vr is None:
        return EigResult(w, None)
    vr._wrote(done)
    if not real:
        return EigResult(w, vr)  # the columns are the eigenvectors
    from ._elementwise import where
    from ._manipulation import roll

    rows = vr.mT  # row j: LAPACK's packed column j
    wi = expand_dims(apply(TABLE["imag"], w), axis=-1)
    first = apply(TABLE["greater"], wi, 0.0)
    second = apply(TABLE["less"], wi, 0.0)
    # a pair w[j] (imag > 0), w[j+1]: v_j = r_j + i r_{j+1}, v_{j+1} = r_j - i r_{j+1}
    re = where(second, roll(rows, 1, axis=-2), rows)
    im = where(first, roll(rows, -1, axis=-2),
               where(second, apply(TABLE["negative"], rows), 0.0))
    rows = apply(TABLE["add"], astype(re, cdt), apply(TABLE["multiply"], astype(im, cdt), 1j))
    return EigResult(w, rows.mT)


def eig(x: Array, /) -> EigResult:
    """Eigenvalues and right eigenvectors (columns, unit norm) of each square matrix, through
    cuSOLVER's Xgeev (one call per matrix). Both are complex whatever the input (as torch's
    and CuPy's; NumPy answers real arrays when every eigenvalue is real); a real matrix's
    complex pairs come as conjugates, the one of positive imaginary part first, as LAPACK's."""
    return _geev(_stack_input(x, "eig", square=True), True)


def eigvals(x: Array, /) -> Array:
    """The eigenvalues of each square matrix (complex), as :func:`eig` without vectors."""
    return _geev(_stack_input(x, "eigvals", square=True), False).eigenvalues


def qr(x: Array, /, mode: str = "reduced") -> Any:
    """Q, R of each matrix (``mode``: 'reduced' or 'complete'; NumPy's 'r' answers R alone),
    through geqrf and orgqr on a column-major copy, answered at once (Q a column-major view)."""
    x = _stack_input(x, "qr")
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    m, n = x.shape[-2:]
    k = min(m, n)
    qcols, rrows = (m, m) if mode == "complete" else (k, k)
    if mode == "r":
        return _per_matrix(x, lambda a: (_qr_one(a, mode)[1],), ((k, n),), (x.dtype,))[0]
    return QRResult(*_per_matrix(x, lambda a: _qr_one(a, mode), ((m, qcols), (rrows, n)),
                                 (x.dtype, x.dtype)))


def _qr_one(x: Array, mode: str) -> tuple[Array | None, Array]:
    """geqrf on a column-major copy with room for Q's columns, R = its upper triangle (taken
    before orgqr overwrites it: the device runs them in order), then orgqr in place: Q is the
    leading columns, read through the column-major strides."""
    from ._creation import eye, triu, zeros
    from ._elementwise import copy_into

    m, n = x.shape
    k = min(m, n)
    dev = x.device
    complete = mode == "complete"
    qcols, rrows = (m, m) if complete else (k, k)
    if not k:
        q = None if mode == "r" else eye(m, qcols, dtype=x.dtype, device=dev)
        return q, zeros((rrows, n), dtype=x.dtype, device=dev)
    raw = _raw(dev)
    cols = max(n, qcols)
    work = _colmajor(x) if cols == n else _colmajor_new(dev, m, cols, x.dtype)
    if cols != n:
        copy_into(work[:, :n], x)
    tau = new_array(dev, (k,), x.dtype)
    done = raw.geqrf(work.buffer, tau.buffer, m, n)
    work._wrote(done)
    tau._wrote(done)
    r = triu(work[:rrows, :n])
    if mode == "r":
        return None, r
    work._wrote(raw.orgqr(work.buffer, tau.buffer, m, qcols, k))
    return work[:, :qcols], r


def _svd_batched(x: Array, full: bool, vectors: bool) -> Any:
    batch, (m, n) = x.shape[:-2], x.shape[-2:]
    k, count = min(m, n), _count(batch)
    raw = _raw(x.device)
    work = _fresh(x.mT)  # each item's memory: A (m x n), column-major
    s = new_array(x.device, batch + (k,), D.real_dtype(x.dtype))
    small = max(m, n) <= JACOBI_MAX
    if not vectors:
        if small:
            done = raw.gesvdj_batched(work.buffer, s.buffer, m, n, count, vectors=False)
        else:
            done = raw.gesvdj_strided(work.buffer, s.buffer, m, n, count, vectors=False)
        s._wrote(done)
        return s
    # U and V column-major per item, stored as C-ordered (cols, rows) arrays: their .mT views
    # are U and V; gesvdjBatched writes the full ones only
    ucols, vcols = (m, n) if full or small else (k, k)
    u = new_array(x.device, batch + (ucols, m), x.dtype)
    v = new_array(x.device, batch + (vcols, n), x.dtype)
    if small:
        done = raw.gesvdj_batched(work.buffer, s.buffer, m, n, count, u.buffer, v.buffer)
    else:
        done = raw.gesvdj_strided(work.buffer, s.buffer, m, n, count, u.buffer, v.buffer,
                                  econ=not full)
    for arr in (s, u, v):
        arr._wrote(done)
    uu, vt = u.mT, v  # U; V^T (its C-ordered memory)
    if not full and small:
        uu, vt = uu[..., :, :k], vt[..., :k, :]
    vh = apply(TABLE["conj"], vt) if D.kind_of(x.dtype) == "c" else vt
    return SVDResult(uu, s, vh)


def svd(x: Array, /, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False) -> Any:
    """U, S (descending), Vh with x = U diag(S) Vh for each matrix; NumPy's ``compute_uv=False``
    answers S alone, ``hermitian=True`` takes the decomposition from :func:`eigh`."""
    x = _stack_input(x, "svd")
    if hermitian:
        return _svd_hermitian(x, bool(compute_uv))
    if not compute_uv:
        return svdvals(x)
    full = bool(full_matrices)
    if _batched(x, max(x.shape[-2:])) and min(x.shape[-2:]):
        return _svd_batched(x, full, True)
    m, n = x.shape[-2:]
    k = min(m, n)
    return SVDResult(*_per_matrix(
        x, lambda a: _svd_one(a, full, True),
        ((m, m if full else k), (k,), (n if full else k, n)),
        (x.dtype, D.real_dtype(x.dtype), x.dtype)))


def _svd_one(x: Array, full: bool, vectors: bool) -> tuple:
    """gesvdj of one matrix, column-major: (U, S, Vh) read through column-major strides, or
    (S,) without vectors."""
    m, n = x.shape
    k = min(m, n)
    s = new_array(x.device, (k,), D.real_dtype(x.dtype))
    if not k:  # an empty matrix: no singular values, identity-free empty or square factors
        from ._creation import eye

        if not vectors:
            return (s,)
        return (eye(m, m if full else 0, dtype=x.dtype, device=x.device), s,
                eye(n if full else 0, n, dtype=x.dtype, device=x.device))
    a = _colmajor(x)
    raw = _raw(x.device)
    if not vectors:
        done = raw.gesvdj_strided(a.buffer, s.buffer, m, n, 1, vectors=False)
        s._wrote(done)
        return (s,)
    ucols, vcols = (m, n) if full else (k, k)
    u = _colmajor_new(x.device, m, ucols, x.dtype)
    v = _colmajor_new(x.device, n, vcols, x.dtype)
    done = raw.gesvdj_strided(a.buffer, s.buffer, m, n, 1, u.buffer, v.buffer, econ=not full)
    for arr in (s, u, v):
        arr._wrote(done)
    vh = apply(TABLE["conj"], v).mT if D.kind_of(x.dtype) == "c" else v.mT
    return u, s, vh


def svdvals(x: Array, /) -> Array:
    """The singular values of each matrix, descending."""
    x = _stack_input(x, "svdvals")
    if _batched(x, max(x.shape[-2:])) and min(x.shape[-2:]):
        return _svd_batched(x, False, False)
    return _per_matrix(x, lambda a: _svd_one(a, False, False), ((min(x.shape[-2:]),),),
                       (D.real_dtype(x.dtype),))[0]


def _svd_hermitian(x: Array, compute_uv: bool) -> Any:
    """The SVD of Hermitian matrices from their eigendecomposition (NumPy's ``hermitian=True``):
    S = |w| descending, U the eigenvectors in that order, Vh = (U sign(w))^H."""
    from ._indexing import take_along_axis
    from ._manipulation import broadcast_to
    from ._sorting import argsort

    if x.shape[-1] != x.shape[-2]:
        raise ValueError("svd: hermitian=True needs square matrices")
    if not compute_uv:
        from ._sorting import sort

        return sort(apply(TABLE["abs"], eigvalsh(x)), axis=-1, descending=True)
    w, v = eigh(x)
    order = argsort(apply(TABLE["abs"], w), axis=-1, descending=True)
    s = take_along_axis(apply(TABLE["abs"], w), order, axis=-1)
    sign = take_along_axis(apply(TABLE["sign"], w), order, axis=-1)
    u = take_along_axis(v, broadcast_to(expand_dims(order, axis=-2), v.shape), axis=-1)
    signed = apply(TABLE["multiply"], u, expand_dims(astype(sign, x.dtype), axis=-2))
    return SVDResult(u, s, apply(TABLE["conj"], signed).mT)


def _tolerance(x: Array, s: Array, rtol: Any) -> Array:
    """``rtol * max(s)`` per matrix (default rtol: max(M, N) * eps)."""
    from ._reductions import max as _max

    if rtol is None:
        rtol = max(x.shape[-2:]) * float(np.finfo(D.real_dtype(x.dtype)).eps)
    top = _max(s, axis=-1, keepdims=True) if s.shape[-1] else s
    if isinstance(rtol, Array):
        rtol = expand_dims(rtol, axis=-1)
    return apply(TABLE["multiply"], top, rtol)


def matrix_rank(x: Array, /, tol: Any = None, hermitian: bool = False, *,
                rtol: Any = None) -> Array:
    """The number of singular values of each matrix above ``rtol * max(S)`` (default rtol:
    max(M, N) * eps), or above NumPy's absolute ``tol`` when given; ``hermitian=True`` takes
    |eigenvalues| for the singular values."""
    from ._reductions import count_nonzero

    x = _stack_input(x, "matrix_rank")
    s = apply(TABLE["abs"], eigvalsh(x)) if hermitian else svdvals(x)
    if tol is not None:
        if rtol is not None:
            raise ValueError("matrix_rank: give tol or rtol, not both")
        limit = expand_dims(tol, axis=-1) if isinstance(tol, Array) else tol
        return count_nonzero(apply(TABLE["greater"], s, limit), axis=-1)
    return count_nonzero(apply(TABLE["greater"], s, _tolerance(x, s, rtol)), axis=-1)


def pinv(x: Array, /, rcond: Any = None, hermitian: bool = False, *,
         rtol: Any = None) -> Array:
    """The pseudo-inverse of each matrix, singular values below ``rtol * max(S)`` (default
    max(M, N) * eps; NumPy's ``rcond`` is the same cut-off) treated as zero; ``hermitian=True``
    from the eigendecomposition."""
    from ._elementwise import where

    x = _stack_input(x, "pinv")
    if rcond is not None:
        if rtol is not None:
            raise ValueError("pinv: give rcond or rtol, not both")
        rtol = rcond
    if hermitian:
        if x.shape[-1] != x.shape[-2]:
            raise ValueError("pinv: hermitian=True needs square matrices")
        w, v = eigh(x)
        mag = apply(TABLE["abs"], w)
        keep = apply(TABLE["greater"], mag, _tolerance(x, mag, rtol))
        inv_w = where(keep, apply(TABLE["divide"], 1.0, w), 0.0)
        scaled = apply(TABLE["multiply"], v, expand_dims(astype(inv_w, x.dtype), axis=-2))
        return matmul(scaled, apply(TABLE["conj"], v).mT)
    u, s, vh = svd(x, full_matrices=False)
    keep = apply(TABLE["greater"], s, _tolerance(x, s, rtol))
    inv_s = where(keep, apply(TABLE["divide"], 1.0, s), 0.0)
    # pinv = V diag(1/s) U^H
    v = apply(TABLE["conj"], vh).mT
    scaled = apply(TABLE["multiply"], v, expand_dims(inv_s, axis=-2))
    return matmul(scaled, apply(TABLE["conj"], u).mT)
