"""``dev.cusolver``: the cuSOLVER messages as methods returning futures; ``dev.linalg``: NumPy's
``cholesky``, ``solve``, ``inv``, ``det``, ``slogdet``, ``qr``, ``eigh``, ``svd``, ``lstsq``, the
first four and ``eigh``/``svd`` also on (batch, n, n) stacks as NumPy takes them (caller's
thread). Functions of several outputs return a future of a tuple of GpuBuffers.

The raw methods (``potrf``, ``potrs``, ``getrf``, ``getrs``) take column-major matrices with
explicit leading dimensions, as cuSOLVER does. The NumPy-shaped methods take C-ordered buffers
like NumPy and return new C-ordered buffers; they never modify their inputs. Layout: a C-ordered
matrix read column-major is its transpose (for a Hermitian one, its conjugate). Which fill
mode the Hermitian factorizations run is a module constant (:data:`CHOLESKY_FILL`,
:data:`EIGH_FILL`): cuSOLVER's two modes differ in speed (potrf 'U' took 2.2-2.4x the time of
'L' at 4096^2), so ``cholesky`` and ``inv(assume_a='pos')`` transpose A into column-major
with cuBLAS ``geam`` and factor its lower triangle with 'L'. ``solve`` factors A^T and solves
with ``trans='T'``; a 2-D right-hand side is transposed into column-major with cuBLAS ``geam``
and back. Numerical failure (SingularMatrix, NotPositiveDefinite) arrives on the returned
future.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import InvalidMessage, SingularMatrix
from ...messages import cusolver as msgs
from ...messages._base import BufRef, check_choice, checked_flag
from ...messages.cublas import Geam
from ...messages.device import CopyDevice
from .._answers import EighResult, QRResult, SVDResult, tuple_after
from .._numpy_order import any_order
from ..cublas._order import refuse_c_order
from ..nvrtc._elementwise import launch_new

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["Cusolver", "Linalg", "CHOLESKY_FILL", "EIGH_FILL"]

#: the fill mode of ``Linalg.cholesky`` and ``Linalg.inv(assume_a='pos')``: 'L' transposes A
#: into column-major (one geam) and factors A itself with uplo 'L'; 'U' factors the C-ordered
#: memory as it is (A^T = conj(A), its upper triangle A's lower one) with uplo 'U', one pass
#: less. On the H200 at 4096^2, potrf 'U' took 4.69 / 5.34 ms (f32 / f64) against 'L''s 1.94 /
#: 2.45 ms: a geam costs far less than the difference
CHOLESKY_FILL = "L"
#: the fill mode of ``Linalg.eigh`` (syevd, syevj, sygvd) of one matrix: 'flip' runs the other
#: triangle on the C-ordered memory (a plain copy in, a conjugate-transposing geam out), 'same'
#: transposes A into column-major and runs the caller's triangle (a geam in, a transposing geam
#: out): the same passes, for whichever of syevd's modes proves faster
EIGH_FILL = "flip"


def _ref(x: Any) -> Any:
    return getattr(x, "ref", x)


def _new(dev: Any, shape: tuple[int, ...], dtype: str, order: str, write: Any) -> Any:
    """A new buffer allocated by the message that first writes it: ``write(ref)`` builds that
    message from the new buffer's reference; one message instead of an allocation and a write.
    The future resolves to the buffer once it is written (or fails with the write's error)."""
    port = dev.port
    ref = port.mint(shape, dtype, order)
    return port.send_new(ref, write(ref))


def _transposed(a: Any, rows: int, cols: int, lda: int, ldc: int) -> Any:
    """The message that writes, column-major into a new buffer (ld ``ldc``), the transpose of
    the column-major ``rows`` x ``cols`` matrix stored at ``a`` (ld ``lda``): cuBLAS geam."""
    return lambda ref: Geam(a, a, ref, cols, rows, 1.0, 0.0, "T", "N", lda, max(cols, 1), ldc)


def _ndim(x: Any) -> int:
    """The number of dimensions of a buffer (0 for anything else: the checks say why)."""
    shape = getattr(_ref(x), "shape", ())
    # a class (a dtype such as np.complex64) has a "shape" descriptor, not a tuple
    return len(shape) if isinstance(shape, tuple) else 0


def _after_all(*futures: Future) -> Future:
    """A future that fails with the first failure among ``futures`` (in order), else answers
    the last one's result, once all are done."""
    out: Future = Future()
    left = [len(futures)]

    def one_done(_f: Future) -> None:
        left[0] -= 1
        if left[0]:
            return
        for f in futures:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
                return
        out.set_result(futures[-1].result())

    for f in futures:
        f.add_done_callback(one_done)
    return out


class Cusolver:
    """Raw cuSOLVER (``dev.cusolver``): LAPACK-named calls on column-major matrices with
    explicit sizes and leading dimensions. A C-ordered 2-D buffer (more than one row and
    column) is refused naming its order rather than read as its transpose: allocate
    ``order="F"``, or pass flat storage."""

    #: whether C-ordered matrices are refused (False: the NumPy-level calls' own instance,
    #: which hands C-ordered buffers over on purpose, as the transposes they are)
    _checked = True

    def __init__(self, device: Device) -> None:
        self._dev = device

    def _column_major(self, call: str, **buffers: Any) -> None:
        if self._checked:
            refuse_c_order(call, **buffers)

    def potrf(self, a: Any, n: int, uplo: str = "L", lda: int | None = None,
              clean: bool = False) -> Future:
        """Cholesky in place (see :class:`~gpumsg.messages.cusolver.Potrf`)."""
        self._column_major("potrf", a=a)
        return self._dev.send(msgs.Potrf(a, n, uplo, lda, clean))

    def potrs(self, a: Any, b: Any, n: int, nrhs: int, uplo: str = "L", lda: int | None = None,
              ldb: int | None = None) -> Future:
        self._column_major("potrs", a=a, b=b)
        return self._dev.send(msgs.Potrs(a, b, n, nrhs, uplo, lda, ldb))

    def getrf(self, a: Any, m: int, n: int, ipiv: Any = None, lda: int | None = None,
              singular_ok: bool = False) -> Future:
        """LU in place; ``ipiv`` (i64) receives 1-based pivots, None factors without pivoting;
        ``singular_ok``: an exactly zero pivot is no error."""
        self._column_major("getrf", a=a)
        return self._dev.send(msgs.Getrf(a, m, n, ipiv, lda, singular_ok))

    def getrs(self, a: Any, b: Any, n: int, nrhs: int, ipiv: Any = None, trans: str = "N",
              lda: int | None = None, ldb: int | None = None) -> Future:
        self._column_major("getrs", a=a, b=b)
        return self._dev.send(msgs.Getrs(a, b, n, nrhs, ipiv, trans, lda, ldb))

    def potrf_batched(self, a: Any, n: int, batch: int, uplo: str = "L",
                      lda: int | None = None, stride: int | None = None,
                      clean: bool = False) -> Future:
        """Cholesky of ``batch`` matrices ``stride`` elements apart, in place (see
        :class:`~gpumsg.messages.cusolver.PotrfBatched`)."""
        return self._dev.send(msgs.PotrfBatched(a, n, batch, uplo, lda, stride, clean))

    def geqrf(self, a: Any, tau: Any, m: int, n: int, lda: int | None = None) -> Future:
        """QR in place, reflectors below the diagonal (see :class:`~.solver.Geqrf`)."""
        self._column_major("geqrf", a=a)
        return self._dev.send(msgs.Geqrf(a, tau, m, n, lda))

    def orgqr(self, a: Any, tau: Any, m: int, n: int, k: int, lda: int | None = None) -> Future:
        self._column_major("orgqr", a=a)
        return self._dev.send(msgs.Orgqr(a, tau, m, n, k, lda))

    def ormqr(self, a: Any, tau: Any, c: Any, m: int, n: int, k: int, side: str = "L",
              trans: str = "N", lda: int | None = None, ldc: int | None = None) -> Future:
        self._column_major("ormqr", a=a, c=c)
        return self._dev.send(msgs.Ormqr(a, tau, c, m, n, k, side, trans, lda, ldc))

    def syevd(self, a: Any, w: Any, n: int, uplo: str = "L", vectors: bool = True,
              lda: int | None = None) -> Future:
        self._column_major("syevd", a=a)
        return self._dev.send(msgs.Syevd(a, w, n, uplo, vectors, lda))

    def syevj(self, a: Any, w: Any, n: int, uplo: str = "L", vectors: bool = True,
              lda: int | None = None, tol: float = 0.0, max_sweeps: int = 100,
              sort: bool = True) -> Future:
        self._column_major("syevj", a=a)
        return self._dev.send(msgs.Syevj(a, w, n, uplo, vectors, lda, tol, max_sweeps, sort))

    def syevj_batched(self, a: Any, w: Any, n: int, batch: int, uplo: str = "L",
                      vectors: bool = True, lda: int | None = None, tol: float = 0.0,
                      max_sweeps: int = 100, sort: bool = True) -> Future:
        return self._dev.send(msgs.SyevjBatched(a, w, n, batch, uplo, vectors, lda, tol,
                                                max_sweeps, sort))

    def sygvd(self, a: Any, b: Any, w: Any, n: int, itype: int = 1, uplo: str = "L",
              vectors: bool = True, lda: int | None = None, ldb: int | None = None) -> Future:
        self._column_major("sygvd", a=a, b=b)
        return self._dev.send(msgs.Sygvd(a, b, w, n, itype, uplo, vectors, lda, ldb))

    def gesvd(self, a: Any, s: Any, m: int, n: int, u: Any = None, vt: Any = None,
              jobu: str = "A", jobvt: str = "A", lda: int | None = None,
              ldu: int | None = None, ldvt: int | None = None) -> Future:
        self._column_major("gesvd", a=a, u=u, vt=vt)
        return self._dev.send(msgs.Gesvd(a, s, m, n, u, vt, jobu, jobvt, lda, ldu, ldvt))

    def gesvdj(self, a: Any, s: Any, m: int, n: int, u: Any = None, v: Any = None,
               vectors: bool = True, econ: bool = False, lda: int | None = None,
               ldu: int | None = None, ldv: int | None = None, tol: float = 0.0,
               max_sweeps: int = 100) -> Future:
        self._column_major("gesvdj", a=a, u=u, v=v)
        return self._dev.send(msgs.Gesvdj(a, s, m, n, u, v, vectors, econ, lda, ldu, ldv, tol,
                                          max_sweeps))

    def gesvdj_batched(self, a: Any, s: Any, m: int, n: int, batch: int, u: Any = None,
                       v: Any = None, vectors: bool = True, lda: int | None = None,
                       ldu: int | None = None, ldv: int | None = None, tol: float = 0.0,
                       max_sweeps: int = 100) -> Future:
        return self._dev.send(msgs.GesvdjBatched(a, s, m, n, batch, u, v, vectors, lda, ldu,
                                                 ldv, tol, max_sweeps))

    def potri(self, a: Any, n: int, uplo: str = "L", lda: int | None = None) -> Future:
        self._column_major("potri", a=a)
        return self._dev.send(msgs.Potri(a, n, uplo, lda))

    def potrs_batched(self, a: Any, b: Any, n: int, batch: int, nrhs: int = 1,
                      uplo: str = "L", lda: int | None = None, ldb: int | None = None,
                      stride_a: int | None = None, stride_b: int | None = None) -> Future:
        return self._dev.send(msgs.PotrsBatched(a, b, n, batch, nrhs, uplo, lda, ldb, stride_a,
                                                stride_b))

    def getrf_batched(self, a: Any, n: int, batch: int, ipiv: Any = None,
                      lda: int | None = None, stride: int | None = None,
                      singular_ok: bool = False) -> Future:
        return self._dev.send(msgs.GetrfBatched(a, n, batch, ipiv, lda, stride, singular_ok))

    def getrs_batched(self, a: Any, b: Any, n: int, nrhs: int, batch: int, ipiv: Any = None,
                      trans: str = "N", lda: int | None = None, ldb: int | None = None,
                      stride_a: int | None = None, stride_b: int | None = None) -> Future:
        return self._dev.send(msgs.GetrsBatched(a, b, n, nrhs, batch, ipiv, trans, lda, ldb,
                                                stride_a, stride_b))

    def syev_batched(self, a: Any, w: Any, n: int, batch: int, uplo: str = "L",
                     vectors: bool = True, lda: int | None = None) -> Future:
        """Eigen of ``batch`` symmetric / Hermitian matrices of any order (see
        :class:`~gpumsg.messages.cusolver.SyevBatched`)."""
        return self._dev.send(msgs.SyevBatched(a, w, n, batch, uplo, vectors, lda))

    def gesvdj_strided(self, a: Any, s: Any, m: int, n: int, batch: int, u: Any = None,
                       v: Any = None, vectors: bool = True, econ: bool = False,
                       lda: int | None = None, ldu: int | None = None, ldv: int | None = None,
                       tol: float = 0.0, max_sweeps: int = 100) -> Future:
        """SVD of ``batch`` matrices of any size, one gesvdj each (see
        :class:`~gpumsg.messages.cusolver.GesvdjStrided`)."""
        return self._dev.send(msgs.GesvdjStrided(a, s, m, n, batch, u, v, vectors, econ, lda,
                                                 ldu, ldv, tol, max_sweeps))

    def geev(self, a: Any, w: Any, n: int, vr: Any = None, batch: int = 1,
             lda: int | None = None, ldvr: int | None = None) -> Future:
        """Eigenvalues and right eigenvectors of general matrices, LAPACK's geev (see
        :class:`~gpumsg.messages.cusolver.Geev`)."""
        self._column_major("geev", a=a, vr=vr)
        return self._dev.send(msgs.Geev(a, w, n, batch, vr, lda, ldvr))

    def zero_triangle(self, a: Any, m: int, n: int, part: str = "L",
                      lda: int | None = None) -> Future:
        self._column_major("zero_triangle", a=a)
        return self._dev.send(msgs.ZeroTriangle(a, m, n, part, lda))

    def cache_info(self) -> Future:
        """Resolves to the workspace-size cache counters (hits, misses, size, ...)."""
        return self._dev.send(msgs.SolverCacheInfo())


@any_order
class Linalg:
    """NumPy's ``linalg`` on one device (``dev.linalg``; ``matmul`` joins from cuBLAS): buffers
    of either order in (an F-ordered one is copied to C order first, so order never changes the
    answer, as in NumPy), new C-ordered buffers out; a 3-D input is a stack of matrices, as in
    NumPy."""

    def __init__(self, device: Device) -> None:
        self._dev = device
        #: the raw calls the NumPy-level ones are made of (stateless: one of its own)
        self._raw = Cusolver(device)
        self._raw._checked = False  # its buffers are C-ordered on purpose

    def _square(self, a: Any, field: str = "a") -> Any:
        r = _ref(a)
        if not isinstance(r, BufRef):
            raise InvalidMessage(f"{field}: expected a GpuBuffer or its future", field=field)
        if len(r.shape) != 2 or r.shape[0] != r.shape[1]:
            raise InvalidMessage(f"{field}: expected a square 2-D matrix, got shape {r.shape}",
                                 field=field)
        if r.order != "C":
            raise InvalidMessage(f"{field}: takes C-ordered buffers like NumPy ({r.describe()} "
                                 "is F-ordered; use the raw methods for column-major data)",
                                 field=field)
        if r.dtype not in msgs.SOLVER_DTYPES:
            raise InvalidMessage(f"{field}: dtype {r.dtype} is not one of "
                                 f"{msgs.SOLVER_DTYPES}", field=field)
        return r

    def _matrix(self, a: Any, field: str = "a") -> Any:
        r = _ref(a)
        if not isinstance(r, BufRef):
            raise InvalidMessage(f"{field}: expected a GpuBuffer or its future", field=field)
        if len(r.shape) != 2:
            raise InvalidMessage(f"{field}: expected a 2-D matrix, got shape {r.shape}",
                                 field=field)
        if r.order != "C" or r.dtype not in msgs.SOLVER_DTYPES:
            raise InvalidMessage(f"{field}: expected a C-ordered buffer of "
                                 f"{msgs.SOLVER_DTYPES}, got {r.describe()}", field=field)
        return r

    def _to_cols(self, a: Any, m: int, n: int, dtype: str, cols: int | None = None) -> Any:
        """A new column-major m x max(n, cols) buffer (ld m) whose first n columns hold the
        C-ordered (m, n) matrix ``a`` (cuBLAS geam transposes the memory)."""
        shape = (m, max(n, cols or 0))
        if not m or not n:
            return self._dev.alloc(shape, dtype, order="F")
        return _new(self._dev, shape, dtype, "F", _transposed(a, n, m, n, m))

    def _to_rows(self, work: Any, rows: int, cols: int, ld: int, dtype: str) -> tuple:
        """The column-major rows x cols matrix at ``work`` (ld) as a new C-ordered buffer."""
        if not rows or not cols:
            return self._dev.alloc((rows, cols), dtype, order="C"), self._dev.synchronize()
        out = _new(self._dev, (rows, cols), dtype, "C", _transposed(work, rows, cols, ld, cols))
        return out, out

    def qr(self, a: Any, mode: str = "reduced") -> Future:
        """NumPy's ``linalg.qr`` of the C-ordered (m, n) matrix ``a`` (geqrf + orgqr; a, k =
        min(m, n)): ``mode='reduced'`` resolves to a QRResult (Q (m, k), R (k, n)),
        ``'complete'`` to (Q (m, m), R (m, n)), ``'r'`` to R (k, n) alone; new C-ordered
        buffers, R with exact zeros below the diagonal. Q has orthonormal columns; the signs are
        LAPACK's, as NumPy's."""
        check_choice(mode, "mode", ("reduced", "complete", "r"))
        dev = self._dev
        dev.port.check_open()
        r = self._matrix(a)
        m, n = r.shape
        k = min(m, n)
        dt = r.dtype
        complete = mode == "complete"
        work = self._to_cols(a, m, n, dt, m if complete else None)
        tau = dev.alloc((max(k, 1),), dt)
        steps = [self._raw.geqrf(work, tau, m, n)]
        rrows = m if complete else k
        rout, _ = self._to_rows(work, rrows, n, max(m, 1), dt)
        # R's part below the diagonal (C order) is the strictly upper part of the column-major
        # n x rrows matrix in its memory
        steps.append(self._raw.zero_triangle(rout, n, rrows, "U", lda=max(n, 1)))
        if mode == "r":
            work.buffer.free()
            tau.buffer.free()
            return dev.buffer_after(_after_all(*steps), rout)
        qcols = m if complete else k
        if m and qcols:
            steps.append(self._raw.orgqr(work, tau, m, qcols, k, lda=m))
        qout, done = self._to_rows(work, m, qcols, max(m, 1), dt)
        steps.append(done)
        work.buffer.free()
        tau.buffer.free()
        return tuple_after(_after_all(*steps), QRResult, qout, rout)

    def eigh(self, a: Any, uplo: str = "L", method: str = "syevd", b: Any = None,
             tol: float = 0.0, max_sweeps: int = 100) -> Future:
        """NumPy's ``linalg.eigh`` of the Hermitian C-ordered (n, n) matrix ``a``, reading its
        ``uplo`` triangle (NumPy's ``UPLO``): resolves to an EighResult (eigenvalues w,
        eigenvectors v), eigenvalues ascending (real dtype, (n,)) and orthonormal eigenvectors
        as the columns of v (C-ordered (n, n)).
        ``method``: 'syevd' (divide and conquer, cusolverDnXsyevd) or 'syevj' (Jacobi, with
        ``tol`` and ``max_sweeps``). With ``b`` (Hermitian positive definite, same shape and
        dtype, its ``uplo`` triangle read): the generalized problem A v = w B v (sygvd; SciPy's
        ``eigh(a, b)``), v normalized so that v^H B v = I. Fails with DidNotConverge, or
        NotPositiveDefinite when B is not."""
        if _ndim(a) == 3:  # a stack, as NumPy takes it: batched (Jacobi up to 32)
            if b is not None or method != "syevd":
                raise InvalidMessage("a: a stack of matrices takes neither b nor method "
                                     "(batched Jacobi)", field="a")
            return self._eigh_batched(a, uplo, tol, max_sweeps)
        check_choice(method, "method", ("syevd", "syevj"))
        check_choice(uplo, "uplo", ("L", "U"))
        dev = self._dev
        dev.port.check_open()
        r = self._square(a)
        n, dt = r.shape[0], r.dtype
        check_choice(EIGH_FILL, "EIGH_FILL", ("flip", "same"))
        same = EIGH_FILL == "same"
        # 'flip': the column-major view of the memory is A^T = conj(A): the same eigenvalues,
        # conjugated eigenvectors, the other triangle. 'same': A itself, column-major
        flip = uplo if same else ("U" if uplo == "L" else "L")
        work = self._hermitian_cols(a, n, dt, same)
        w = dev.alloc((n,), msgs.REAL_DTYPE[dt])
        bwork = None
        if b is not None:
            rb = self._square(b, "b")
            if rb.shape != r.shape or rb.dtype != dt:
                raise InvalidMessage(f"b: expected {r.shape} {dt}, got {rb.describe()}",
                                     field="b")
            bwork = self._hermitian_cols(b, n, dt, same)
            step = self._raw.sygvd(work, bwork, w, n, 1, flip)
        elif method == "syevd":
            step = self._raw.syevd(work, w, n, flip)
        else:
            step = self._raw.syevj(work, w, n, flip, tol=tol, max_sweeps=max_sweeps)
        v = dev.alloc((n, n), dt, order="C")
        steps = [step]
        if n:  # C-ordered V's memory is V^T ('flip': = (conj V')^T = V'^H)
            steps.append(dev.cublas.raw.geam(work, work, v, n, n,
                                             transa="T" if same else _herm(dt), lda=n, ldb=n))
        work.buffer.free()
        if bwork is not None:
            bwork.buffer.free()
        return tuple_after(_after_all(*steps), EighResult, w, v)

    def _hermitian_cols(self, a: Any, n: int, dt: str, same: bool) -> Any:
        """A new column-major n x n buffer holding A itself (``same``: a transposing geam) or
        the C-ordered memory as it is (its column-major reading A^T = conj(A))."""
        if same:
            return self._to_cols(a, n, n, dt)
        work = self._dev.alloc((n, n), dt, order="F")
        self._dev.copy_bytes(work, a)
        return work

    def svd(self, a: Any, full_matrices: bool = True, compute_uv: bool = True,
            method: str = "gesvdj", tol: float = 0.0, max_sweeps: int = 100) -> Any:
        """NumPy's ``linalg.svd`` of the C-ordered (m, n) matrix ``a`` (k = min(m, n)):
        resolves to an SVDResult (U, S, Vh) with u (m, m) or (m, k), s real (k,) descending,
        vh (n, n) or (k, n), C-ordered, A = u diag(s) vh; with ``compute_uv=False`` a future of
        s alone. ``method``: 'gesvdj' (Jacobi, ``tol``/``max_sweeps``) or 'gesvd' (QR iteration,
        cusolverDnXgesvd). Fails with DidNotConverge."""
        if _ndim(a) == 3:  # a stack, as NumPy takes it: batched (Jacobi up to 32)
            if method != "gesvdj":
                raise InvalidMessage("method: a stack of matrices is decomposed by batched "
                                     "Jacobi ('gesvdj')", field="method")
            return self._svd_batched(a, full_matrices, compute_uv, tol, max_sweeps)
        check_choice(method, "method", ("gesvdj", "gesvd"))
        checked_flag(full_matrices, "full_matrices")
        checked_flag(compute_uv, "compute_uv")
        dev = self._dev
        dev.port.check_open()
        r = self._matrix(a)
        m, n = r.shape
        k, dt = min(m, n), r.dtype
        s = dev.alloc((k,), msgs.REAL_DTYPE[dt])
        ucols, vrows = (m, n) if full_matrices else (k, k)
        u = dev.alloc((m, ucols), dt, order="C") if compute_uv else None
        vh = dev.alloc((vrows, n), dt, order="C") if compute_uv else None
        steps: list[Future] = []
        temps: list[Any] = []
        if method == "gesvdj" or m <= n:
            # the memory is B = A^T (n x m) = conj(V) S U^T: U_B = conj(V) is vh's memory,
            # V_B = conj(U) (gesvdj) gives u by a conjugate transpose, VT_B = U^T (gesvd) is
            # u's memory
            work = dev.alloc((n, m), dt, order="F")
            dev.copy_bytes(work, a)
            temps.append(work)
            if method == "gesvd":
                job = ("A" if full_matrices else "S") if compute_uv else "N"
                steps.append(self._raw.gesvd(work, s, n, m, vh, u, job, job, ldu=max(n, 1),
                                             ldvt=max(ucols if full_matrices else k, 1)))
            elif not compute_uv:
                steps.append(self._raw.gesvdj(work, s, n, m, vectors=False, econ=not full_matrices,
                                              tol=tol, max_sweeps=max_sweeps))
            else:
                vb = dev.alloc((m, ucols), dt, order="F")
                temps.append(vb)
                steps.append(self._raw.gesvdj(work, s, n, m, vh, vb, econ=not full_matrices,
                                              ldu=max(n, 1), ldv=max(m, 1), tol=tol,
                                              max_sweeps=max_sweeps))
                if m and ucols:
                    steps.append(dev.cublas.raw.geam(vb, vb, u, ucols, m, transa=_herm(dt),
                                                 lda=max(m, 1), ldb=max(ucols, 1)))
        else:  # gesvd needs rows >= columns: factor A itself (m > n), column-major
            work = self._to_cols(a, m, n, dt)
            temps.append(work)
            job = ("A" if full_matrices else "S") if compute_uv else "N"
            if compute_uv:
                uc = dev.alloc((m, ucols), dt, order="F")
                vc = dev.alloc((n, n), dt, order="F")
                temps += [uc, vc]
                steps.append(self._raw.gesvd(work, s, m, n, uc, vc, job, job))
                steps.append(dev.cublas.raw.geam(uc, uc, u, ucols, m, transa="T", lda=max(m, 1),
                                             ldb=max(ucols, 1)))
                steps.append(dev.cublas.raw.geam(vc, vc, vh, n, n, transa="T", lda=max(n, 1),
                                             ldb=max(n, 1)))
            else:
                steps.append(self._raw.gesvd(work, s, m, n, None, None, "N", "N"))
        for t in temps:
            t.buffer.free()
        done = _after_all(*steps) if steps else dev.synchronize()
        if not compute_uv:
            return dev.buffer_after(done, s)
        return tuple_after(done, SVDResult, u, s, vh)

    def _inv_pos(self, a: Any, r: Any) -> Any:
        dev = self._dev
        n, dt = r.shape[0], r.dtype
        check_choice(CHOLESKY_FILL, "CHOLESKY_FILL", ("L", "U"))
        work = dev.alloc((n, n), dt, order="C")
        if CHOLESKY_FILL == "U":
            # the memory is M = A^T = conj(A): its upper triangle is A's lower one, and M^-1 =
            # conj(A^-1) = (A^-1)^T is the C-ordered memory of A^-1 itself
            dev.copy_bytes(work, a)
            uplo, other = "U", "L"
        else:
            # the conjugate transpose of the memory, M^H = conj(A), column-major: its lower
            # triangle is A's lower one conjugated, and its inverse conj(A^-1) is again the
            # C-ordered memory of A^-1 (see CHOLESKY_FILL)
            if n:
                dev.cublas.raw.geam(a, a, work, n, n, transa=_herm(dt), lda=n, ldb=n)
            uplo, other = "L", "U"
        steps = [self._raw.potrf(work, n, uplo), self._raw.potri(work, n, uplo)]
        out = dev.alloc((n, n), dt, order="C")
        if n:
            steps.append(self._raw.zero_triangle(work, n, n, other, lda=n))
            steps.append(dev.cublas.raw.geam(work, work, out, n, n, 1.0, 1.0, "N", _herm(dt), lda=n,
                                         ldb=n))
            steps.append(dev.cublas.scal(out, 0.5, n, n + 1))  # the diagonal was added twice
        work.buffer.free()
        return dev.buffer_after(_after_all(*steps), out)

    def slogdet(self, a: Any) -> Future:
        """NumPy's ``linalg.slogdet`` of the C-ordered (n, n) matrix ``a``: resolves to
        (sign, logabsdet) as Python numbers (sign complex for complex dtypes), from the LU
        factors (getrf; the diagonal and the pivots are copied back and reduced on the host at
        completion, in float64). A singular matrix gives (0, -inf), as NumPy."""
        dev = self._dev
        dev.port.check_open()
        r = self._square(a)
        n, dt = r.shape[0], r.dtype
        out: Future = Future()
        if n == 0:
            out.set_result((1.0, 0.0))
            return out
        lu = dev.alloc((n, n), dt, order="C")
        ipiv = dev.alloc((n,), np.int64)
        dev.copy_bytes(lu, a)
        factored = self._raw.getrf(lu, n, n, ipiv)
        diag = dev.alloc((n,), dt)
        dev.cublas.copy(lu, diag, n, n + 1, 1)
        d_host, p_host = dev.copy_to_host(diag), dev.copy_to_host(ipiv)
        for x in (lu, ipiv, diag):
            x.buffer.free()
        complex_ = dt in ("c64", "c128")

        def done(_f: Future) -> None:
            try:
                exc = factored.exception()
                if isinstance(exc, SingularMatrix):
                    out.set_result((0j if complex_ else 0.0, float("-inf")))
                    return
                if exc is not None:
                    raise exc
                d = np.asarray(d_host.result()).astype(np.complex128 if complex_ else np.float64)
                swaps = int(np.count_nonzero(np.asarray(p_host.result()) != np.arange(1, n + 1)))
                mag = np.abs(d)
                sign = np.prod(d / mag) * (-1.0) ** swaps
                out.set_result((complex(sign) if complex_ else float(sign),
                                float(np.sum(np.log(mag)))))
            except BaseException as e:  # noqa: BLE001 (relayed to the caller's future)
                out.set_exception(e)

        _after_all(factored, d_host, p_host).add_done_callback(done)
        return out

    def det(self, a: Any) -> Future:
        """NumPy's ``linalg.det``: resolves to sign * exp(logabsdet) of :meth:`slogdet` (0 for a
        singular matrix)."""
        sl = self.slogdet(a)
        out: Future = Future()

        def done(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
                return
            sign, logabs = f.result()
            out.set_result(sign * float(np.exp(logabs)))

        sl.add_done_callback(done)
        return out

    def lstsq(self, a: Any, b: Any) -> Any:
        """Least squares x minimizing ||A x - b|| for the full-rank C-ordered (m, n) matrix
        ``a`` with m >= n (NumPy's ``linalg.lstsq(a, b)[0]``), ``b`` of shape (m,) or (m, k):
        QR (geqrf), Q^H b (ormqr), then the triangular solve R x = (Q^H b)[:n] (cuBLAS trsm).
        Returns a new C-ordered buffer of shape (n,) or (n, k). Rank is not checked: a
        rank-deficient A gives non-finite values."""
        dev = self._dev
        dev.port.check_open()
        r = self._matrix(a)
        m, n = r.shape
        dt = r.dtype
        if m < n:
            raise InvalidMessage(f"a: lstsq takes m >= n (full column rank), got {r.shape}",
                                 field="a")
        rb = _ref(b)
        if not isinstance(rb, BufRef) or rb.dtype != dt or len(rb.shape) not in (1, 2) \
                or rb.shape[0] != m or (len(rb.shape) == 2 and rb.order != "C"):
            raise InvalidMessage(f"b: expected a C-ordered ({m},) or ({m}, k) buffer of {dt}, "
                                 f"got {getattr(rb, 'shape', type(rb).__name__)}", field="b")
        k = rb.shape[1] if len(rb.shape) == 2 else 1
        work = self._to_cols(a, m, n, dt)
        tau = dev.alloc((max(n, 1),), dt)
        steps = [self._raw.geqrf(work, tau, m, n)]
        if len(rb.shape) == 1:
            bw = dev.alloc((m,), dt)
            dev.copy_bytes(bw, b)
        else:
            bw = self._to_cols(b, m, k, dt)
        if m and n and k:
            steps.append(self._raw.ormqr(work, tau, bw, m, k, n, "L", _herm(dt), lda=m, ldc=m))
            steps.append(dev.cublas.raw.trsm(work, bw, n, k, 1.0, "L", "U", "N", "N", lda=m, ldb=m))
        if len(rb.shape) == 1:
            out = dev.alloc((n,), dt)
            if n:
                steps.append(dev.cublas.copy(bw, out, n))
        else:
            out, done = self._to_rows(bw, n, k, max(m, 1), dt)
            steps.append(done)
        for x in (work, tau, bw):
            x.buffer.free()
        return dev.buffer_after(_after_all(*steps), out)

    # -- batched, NumPy-shaped (C-ordered stacks) ----------------------------------------------
    def _stack(self, x: Any, field: str, square: bool = True) -> Any:
        r = _ref(x)
        if not isinstance(r, BufRef) or len(r.shape) != 3 or (square and r.shape[1] != r.shape[2]):
            raise InvalidMessage(f"{field}: expected a (batch, n, n) GpuBuffer, got "
                                 f"{getattr(r, 'shape', type(r).__name__)}", field=field)
        if r.order != "C" or r.dtype not in msgs.SOLVER_DTYPES:
            raise InvalidMessage(f"{field}: expected a C-ordered buffer of "
                                 f"{msgs.SOLVER_DTYPES}, got {r.describe()}", field=field)
        return r

    def _transpose_batched(self, src: Any, dst: Any, rows: int, cols: int, ld: int,
                           batch: int, stride_src: int, stride_dst: int, dt: str,
                           conj: bool) -> Future:
        """dst_i (cols x rows, ld cols) = src_i^T (or ^H) for the column-major rows x cols
        src_i (ld): a strided batched GEMM against a shared identity (no batched geam)."""
        dev = self._dev
        eye = _identity(dev, cols, dt)
        done = dev.cublas.raw.gemm_strided_batched(
            eye, src, dst, cols, rows, cols, batch, 0, stride_src, stride_dst,
            transb="C" if conj and dt in ("c64", "c128") else "T", lda=cols, ldb=ld, ldc=cols)
        eye.buffer.free()
        return done

    def _eigh_batched(self, stack: Any, uplo: str = "L", tol: float = 0.0,
                     max_sweeps: int = 100) -> Future:
        """``eigh`` of each matrix of a C-ordered (batch, n, n) Hermitian stack, by batched
        Jacobi (syevjBatched) up to n = 32, cusolverDnXsyevBatched beyond (``tol`` and
        ``max_sweeps`` are Jacobi's): resolves to (w (batch, n) ascending, v (batch, n, n)).
        The first item that did not converge fails the future with DidNotConverge
        (``batch_item``, ``failed_items``)."""
        check_choice(uplo, "uplo", ("L", "U"))
        dev = self._dev
        dev.port.check_open()
        r = self._stack(stack, "a")
        batch, n, dt = r.shape[0], r.shape[1], r.dtype
        work = dev.alloc(r.shape, dt, order="C")
        dev.copy_bytes(work, stack)
        w = dev.alloc((batch, n), msgs.REAL_DTYPE[dt], order="C")
        flip = "U" if uplo == "L" else "L"
        if n > msgs.BATCHED_JACOBI_MAX:
            steps = [self._raw.syev_batched(work, w, n, batch, flip)]
        else:
            steps = [self._raw.syevj_batched(work, w, n, batch, flip, tol=tol,
                                             max_sweeps=max_sweeps)]
        v = dev.alloc(r.shape, dt, order="C")
        if batch and n:  # as eigh: each C-ordered V's memory is V'^H
            steps.append(self._transpose_batched(work, v, n, n, n, batch, n * n, n * n, dt,
                                                 True))
        work.buffer.free()
        return tuple_after(_after_all(*steps), EighResult, w, v)

    def _svd_batched(self, stack: Any, full_matrices: bool = True,
                    compute_uv: bool = True, tol: float = 0.0, max_sweeps: int = 100) -> Any:
        """``svd`` of each matrix of a C-ordered (batch, m, n) stack by Jacobi: gesvdjBatched up
        to 32 x 32, one gesvdj per matrix in one message beyond: resolves to (u, s, vh) stacks
        ((batch, m, m|k), (batch, k), (batch, n|k, n)), or a future of s alone with
        ``compute_uv=False``. DidNotConverge names the first failing item."""
        checked_flag(full_matrices, "full_matrices")
        checked_flag(compute_uv, "compute_uv")
        dev = self._dev
        dev.port.check_open()
        r = self._stack(stack, "a", square=False)
        batch, m, n = r.shape
        k, dt = min(m, n), r.dtype
        jacobi = (self._raw.gesvdj_batched if max(m, n) <= msgs.BATCHED_JACOBI_MAX
                  else self._raw.gesvdj_strided)  # the same arguments, full U and V
        work = dev.alloc(r.shape, dt, order="C")
        dev.copy_bytes(work, stack)
        s = dev.alloc((batch, k), msgs.REAL_DTYPE[dt], order="C")
        # each item's memory is B = A^T (n x m): U_B = conj(V) (n x n), V_B = conj(U) (m x m)
        if not compute_uv:
            done = jacobi(work, s, n, m, batch, vectors=False, tol=tol, max_sweeps=max_sweeps)
            work.buffer.free()
            return dev.buffer_after(done, s)
        ub = dev.alloc((batch, n, n), dt, order="C")
        vb = dev.alloc((batch, m, m), dt, order="C")
        steps = [jacobi(work, s, n, m, batch, ub, vb, tol=tol, max_sweeps=max_sweeps)]
        ucols, vrows = (m, n) if full_matrices else (k, k)
        u = dev.alloc((batch, m, ucols), dt, order="C")
        vh = dev.alloc((batch, vrows, n), dt, order="C")
        if batch and k:
            # u's memory: (V_B[:, :ucols])^H; vh's memory: U_B[:, :vrows] (a copy: conj twice)
            steps.append(self._transpose_batched(vb, u, m, ucols, m, batch, m * m, ucols * m,
                                                 dt, True))
            eye = _identity(dev, n, dt)
            steps.append(dev.cublas.raw.gemm_strided_batched(eye, ub, vh, n, vrows, n, batch, 0,
                                                       n * n, n * vrows, lda=n, ldb=n, ldc=n))
            eye.buffer.free()
        for x in (work, ub, vb):
            x.buffer.free()
        return tuple_after(_after_all(*steps), SVDResult, u, s, vh)

    def _solve_batched(self, a: Any, b: Any, pivot: bool = True) -> Any:
        """:meth:`solve` for each system of a C-ordered (batch, n, n) stack ``a`` and
        right-hand sides ``b`` of shape (batch, n) or (batch, n, k): cuBLAS getrfBatched +
        getrsBatched (with or without pivoting). Returns a new C-ordered buffer of b's shape;
        the first singular item fails the future with SingularMatrix (``batch_item``,
        ``failed_items``)."""
        checked_flag(pivot, "pivot")
        dev = self._dev
        dev.port.check_open()
        ra = self._stack(a, "a")
        batch, n, dt = ra.shape[0], ra.shape[1], ra.dtype
        rb = _ref(b)
        if not isinstance(rb, BufRef) or rb.dtype != dt or len(rb.shape) not in (2, 3) \
                or rb.shape[:2] != (batch, n) or rb.order != "C":
            raise InvalidMessage(f"b: expected a C-ordered ({batch}, {n}) or ({batch}, {n}, k) "
                                 f"buffer of {dt}, got {getattr(rb, 'shape', type(rb).__name__)}",
                                 field="b")
        k = rb.shape[2] if len(rb.shape) == 3 else 1
        lu = dev.alloc(ra.shape, dt, order="C")
        dev.copy_bytes(lu, a)
        ipiv = dev.alloc((max(batch * n, 1),), np.int32) if pivot else None
        steps = [self._raw.getrf_batched(lu, n, batch, ipiv)]  # LU of each A^T
        out = dev.alloc(rb.shape, dt, order="C")
        if len(rb.shape) == 2:
            dev.copy_bytes(out, b)
            steps.append(self._raw.getrs_batched(lu, out, n, 1, batch, ipiv, "T"))
        elif batch and n and k:
            cols = dev.alloc((batch, k, n), dt, order="C")  # each: column-major n x k
            self._transpose_batched(b, cols, k, n, k, batch, n * k, n * k, dt, False)
            steps.append(self._raw.getrs_batched(lu, cols, n, k, batch, ipiv, "T"))
            steps.append(self._transpose_batched(cols, out, n, k, n, batch, n * k, n * k, dt,
                                                 False))
            cols.buffer.free()
        lu.buffer.free()
        if ipiv is not None:
            ipiv.buffer.free()
        return dev.buffer_after(_after_all(*steps), out)

    def cholesky(self, a: Any) -> Any:
        """NumPy's ``linalg.cholesky``: the lower factor L (A = L L^H) of the Hermitian positive
        definite C-ordered matrix ``a`` (only its lower triangle is read), as a new C-ordered
        buffer with zeros above the diagonal. Fails with NotPositiveDefinite."""
        if _ndim(a) == 3:  # a stack, as NumPy takes it
            return self._cholesky_batched(a)
        dev = self._dev
        dev.port.check_open()
        r = self._square(a)
        n = r.shape[0]
        check_choice(CHOLESKY_FILL, "CHOLESKY_FILL", ("L", "U"))
        if CHOLESKY_FILL == "U":
            # the memory is M = A^T = conj(A); M = U^H U gives A = U^T conj(U): L = U^T, whose
            # C-ordered memory is U itself (the strict lower part zeroed before the call)
            out = dev.alloc((n, n), r.dtype, order="C")
            dev.copy_bytes(out, a)
            return dev.buffer_after(self._raw.potrf(out, n, uplo="U", clean=True), out)
        # A itself column-major (a transposing geam), its lower triangle factored with uplo
        # 'L', and L transposed back into C order (see CHOLESKY_FILL)
        work = self._to_cols(a, n, n, r.dtype)
        factored = self._raw.potrf(work, n, uplo="L", clean=True)
        out, done = self._to_rows(work, n, n, max(n, 1), r.dtype)
        work.buffer.free()
        return dev.buffer_after(_after_all(factored, done), out)

    def _cholesky_batched(self, stack: Any) -> Any:
        """``numpy.linalg.cholesky`` of a C-ordered (batch, n, n) stack of Hermitian positive
        definite matrices (cuSOLVER potrfBatched): a new C-ordered stack of lower factors with
        zeros above the diagonal. The first failing item fails the future with
        NotPositiveDefinite (``batch_item``; ``failed_items`` lists them all)."""
        dev = self._dev
        dev.port.check_open()
        r = _ref(stack)
        if not isinstance(r, BufRef) or len(r.shape) != 3 or r.shape[1] != r.shape[2]:
            raise InvalidMessage("a: expected a (batch, n, n) GpuBuffer, got "
                                 f"{getattr(r, 'shape', type(r).__name__)}", field="a")
        if r.order != "C" or r.dtype not in msgs.SOLVER_DTYPES:
            raise InvalidMessage(f"a: expected a C-ordered buffer of {msgs.SOLVER_DTYPES}, "
                                 f"got {r.describe()}", field="a")
        batch, n = r.shape[0], r.shape[1]
        out = dev.alloc(r.shape, r.dtype, order="C")
        return dev.send_writing(msgs.CholeskyBatched(stack, out, n, batch), out)

    def solve(self, a: Any, b: Any, pivot: bool = True) -> Any:
        """NumPy's ``linalg.solve`` for one system: x with A x = b, ``b`` of shape (n,) or
        (n, k), C-ordered like ``a``; LU with partial pivoting (getrf + getrs), or without
        (``pivot=False``: only for matrices that need none, such as diagonally dominant ones).
        Returns a new C-ordered buffer of b's shape; fails with SingularMatrix."""
        if _ndim(a) == 3:  # a stack of systems, as NumPy takes it
            return self._solve_batched(a, b, pivot)
        checked_flag(pivot, "pivot")
        dev = self._dev
        dev.port.check_open()
        ra = self._square(a)
        rb = _ref(b)
        n = ra.shape[0]
        if not isinstance(rb, BufRef):
            raise InvalidMessage("b: expected a GpuBuffer or its future", field="b")
        if rb.dtype != ra.dtype:
            raise InvalidMessage(f"b: dtype {rb.dtype} does not match a's {ra.dtype}", field="b")
        if len(rb.shape) not in (1, 2) or rb.shape[0] != n:
            raise InvalidMessage(f"b: expected shape ({n},) or ({n}, k), got {rb.shape}",
                                 field="b")
        if len(rb.shape) == 2 and rb.order != "C":
            raise InvalidMessage(f"b: takes C-ordered buffers like NumPy ({rb.describe()})",
                                 field="b")
        # each work buffer is allocated by the message that first writes it, and freed when
        # dropped here (by the executor at its next turn where no message can still name it)
        if not n:
            return dev.alloc(rb.shape, ra.dtype, order="C")
        lu = _new(dev, (n, n), ra.dtype, "C", lambda ref: CopyDevice(ref, a))
        if pivot:  # LU of A^T (the column-major view); the pivots' buffer made by getrf
            factored = _new(dev, (n,), "i64", "C",
                            lambda ref: msgs.Getrf(lu, n, n, ref))
            ipiv = factored
        else:
            factored, ipiv = self._raw.getrf(lu, n, n, None), None
        if len(rb.shape) == 1:
            out = _new(dev, (n,), ra.dtype, "C", lambda ref: CopyDevice(ref, b))
            solved = self._raw.getrs(lu, out, n, 1, ipiv, trans="T")
        else:
            k = rb.shape[1]
            if not k:
                return dev.alloc(rb.shape, ra.dtype, order="C")
            # b's memory is the column-major k x n matrix B^T: transposed into n x k, solved
            # there, transposed back into C order
            cols = _new(dev, (n, k), ra.dtype, "F", _transposed(b, k, n, k, n))
            self._raw.getrs(lu, cols, n, k, ipiv, trans="T")
            out = _new(dev, (n, k), ra.dtype, "C", _transposed(cols, n, k, n, k))
            solved = out
        return dev.buffer_after(_after_all(factored, solved), out)

    def inv(self, a: Any, assume_a: str = "gen") -> Any:
        """NumPy's ``linalg.inv`` of the C-ordered (n, n) matrix ``a``, as a new C-ordered
        buffer. ``assume_a='gen'``: solve(a, I) by LU (the identity made on the device); fails with
        SingularMatrix. ``'pos'``: ``a`` Hermitian positive definite, its lower triangle read
        (as :meth:`cholesky`): potrf + potri, the other triangle filled by a conjugate
        transpose (geam) and the diagonal halved back (scal); fails with
        NotPositiveDefinite."""
        check_choice(assume_a, "assume_a", ("gen", "pos"))
        r = self._square(a)
        if assume_a == "pos":
            return self._inv_pos(a, r)
        return self.solve(a, _identity(self._dev, r.shape[0], r.dtype))


def _herm(dtype: str) -> str:
    return "C" if dtype in ("c64", "c128") else "T"


def _identity(dev: Any, n: int, dt: str) -> Any:
    """A new n x n identity of solver dtype ``dt`` (the same memory in either order), made on
    the device by one kernel: nothing of its size is built on the host or copied."""
    if not n:
        return dev.alloc((n, n), dt, order="C")
    return launch_new(dev, f"gm_identity_{dt}", n * n, (n, n), dt,
                      lambda ref: ((ref, n * n, n), (), (ref,)))
