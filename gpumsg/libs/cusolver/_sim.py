"""cuSOLVER dense on the simulator: the handle's calls in NumPy/SciPy with the same signatures and
semantics (column-major in place, the other triangle untouched unless cleaned, 1-based int64
pivots, ``info`` written to device memory as a 32-bit integer: 0 or the 1-based index of the
failing minor / zero pivot, factors written even when info is non-zero). SciPy's LAPACK
wrappers provide the reference factorizations (SciPy is needed by the simulator's solvers)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backends.sim._device import SimBackend
from ...backends.sim._numerics import finite
from ...backends.sim._views import matrix, vector
from ...dtypes import dtype_of
from ...service._plans import PlanCache
from ._handle import REAL_OF, part_spans, triangle_spans

__all__ = ["SimCusolver", "lu_nopivot", "jacobi_converged", "jacobi_sweeps"]


def _lapack(name: str, arr: np.ndarray) -> Any:
    from scipy.linalg import lapack

    return lapack.get_lapack_funcs((name,), (arr,))[0]


def lu_nopivot(a: np.ndarray) -> tuple[np.ndarray, int]:
    """LU without pivoting (right-looking, in float64/complex128 of ``a``'s kind): the packed
    factors and LAPACK's info (1-based index of the first exactly-zero pivot, or 0). After a zero
    pivot the elimination stops updating that column, as cuSOLVER leaves it."""
    lu = a.copy()
    m, n = lu.shape
    info = 0
    for k in range(min(m, n)):
        piv = lu[k, k]
        if piv == 0:
            info = info or k + 1
            continue
        lu[k + 1:, k] /= piv
        lu[k + 1:, k + 1:] -= np.outer(lu[k + 1:, k], lu[k, k + 1:])
    return lu, info


def jacobi_sweeps(h: np.ndarray, max_sweeps: int, tol: float
                  ) -> tuple[np.ndarray, np.ndarray, bool]:
    """Cyclic two-sided Jacobi on the Hermitian ``h`` for at most ``max_sweeps`` sweeps (until
    off(h) <= tol * ||h||_F): the diagonal reached (unsorted), the accumulated rotations V
    (h ~ V diag V^H) and whether it converged."""
    a = np.array(h, np.complex128)
    n = a.shape[0]
    vv = np.eye(n, dtype=np.complex128)
    target = tol * np.linalg.norm(a)

    def off() -> float:
        return float(np.sqrt(max(np.linalg.norm(a) ** 2 - np.sum(np.abs(np.diag(a)) ** 2), 0)))

    for _ in range(max_sweeps):
        if off() <= target:
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                if abs(a[p, q]) <= 1e-300:
                    continue
                _, v = np.linalg.eigh(np.array([[a[p, p], a[p, q]], [np.conj(a[p, q]), a[q, q]]]))
                j = np.eye(n, dtype=np.complex128)
                j[np.ix_([p, q], [p, q])] = v
                a = j.conj().T @ a @ j
                vv = vv @ j
    return np.real(np.diag(a)), vv, off() <= target


def jacobi_converged(h: np.ndarray, max_sweeps: int, tol: float) -> bool:
    """Whether :func:`jacobi_sweeps` converges within ``max_sweeps``: the simulator's test for
    syevj's / gesvdj's 'did not converge' info (run for small sweep limits only: O(n^3) per
    rotation pair in Python loops)."""
    return jacobi_sweeps(h, max_sweeps, tol)[2]


def potrf_one(sim: SimBackend, t: np.dtype, uplo: str, n: int, a: int, lda: int) -> int:
    """Cholesky of one column-major matrix in simulated memory; returns LAPACK's info."""
    am = matrix(sim, a, n, n, lda, t)
    if n == 0:
        return 0
    work = np.array(am, order="F")
    c, status = _lapack("potrf", work)(work, lower=uplo == "L", clean=0, overwrite_a=0)
    # only the ``uplo`` triangle is written (LAPACK leaves a failing column partly updated)
    mask = np.tril(np.ones((n, n), bool)) if uplo == "L" else np.triu(np.ones((n, n), bool))
    am[mask] = c[mask]
    return int(status)


def _nan(shape: tuple, t: np.dtype) -> np.ndarray:
    return np.full(shape, np.nan, dtype=np.result_type(t, np.float64))


class SimCusolver:
    """The simulator's cuSOLVER handle: every method enqueues the NumPy/SciPy equivalent."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self._ctx = ctx
        self.raw_handle = id(self)
        self.workspaces = PlanCache(256)
        #: (base, stride bytes, count) -> device pointer array (see handlers.pointer_array)
        self.pointer_arrays: dict[tuple, tuple[int, int]] = {}
        self.kernels = "sim"

    def _info(self, ptr: int, value: int) -> None:
        self.sim.view(ptr, 4)[...] = np.array([value], np.int32).view(np.uint8)

    def _count(self, key: tuple) -> None:
        # the same bookkeeping as the CUDA handle: one size query per shape
        if self.workspaces.get(key) is None:
            self.workspaces.put(key, (0, 0, None))

    def zero_outside(self, stream: Any, dtype: str, uplo: str, n: int, a: int,
                     lda: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            for start, count in triangle_spans(uplo, n, lda):
                if count:
                    sim.view(a + start * t.itemsize, count * t.itemsize)[...] = 0

        stream.put(run)

    def potrf(self, stream: Any, dtype: str, uplo: str, n: int, a: int, lda: int, clean: bool,
              info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("potrf", dtype, uplo, n, lda))
        if clean:
            self.zero_outside(stream, dtype, uplo, n, a, lda)

        def run() -> None:
            self._info(info, potrf_one(sim, t, uplo, n, a, lda))

        stream.put(run)

    def zero_part(self, stream: Any, dtype: str, part: str, m: int, n: int, a: int,
                  lda: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            for start, count in part_spans(part, m, n, lda):
                sim.view(a + start * t.itemsize, count * t.itemsize)[...] = 0

        stream.put(run)

    def cholesky_lower(self, stream: Any, dtype: str, n: int, src: int, out: int, ptrs: int,
                       infos: int, batch: int) -> bool:
        """The CUDA handle's kernel path, in NumPy: each matrix's lower triangle (C order) is
        factored into ``out`` as a C-ordered lower factor with zeros above the diagonal; a
        failing item's info as potrfBatched reports it."""
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            codes = []
            for i in range(batch):
                off = i * n * n * t.itemsize
                a = np.array(matrix(sim, src + off, n, n, n, t)).T  # the C-ordered matrix
                herm = np.tril(a) + np.tril(a, -1).conj().T
                work = np.asfortranarray(herm.astype(t))
                c, status = _lapack("potrf", work)(work, lower=True, clean=1, overwrite_a=0)
                if status == 0:
                    c = np.tril(c)
                # C-ordered memory of L: column-major L^T
                matrix(sim, out + off, n, n, n, t)[...] = np.asarray(c).T
                codes.append(int(status))
            sim.view(infos, 4 * batch)[...] = np.array(codes, np.int32).view(np.uint8)

        stream.put(run)
        return True

    def zero_outside_strided(self, stream: Any, dtype: str, uplo: str, n: int, a: int,
                             lda: int, stride: int, batch: int) -> None:
        item = dtype_of(dtype).itemsize
        for i in range(batch):
            self.zero_outside(stream, dtype, uplo, n, a + i * stride * item, lda)

    def potrf_batched(self, stream: Any, dtype: str, uplo: str, n: int, ptrs: int, lda: int,
                      infos: int, batch: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            addrs = sim.view(ptrs, 8 * batch).view(np.uint64).tolist()
            out = np.array([potrf_one(sim, t, uplo, n, p, lda) for p in addrs], np.int32)
            sim.view(infos, 4 * batch)[...] = out.view(np.uint8)

        if batch:
            stream.put(run)

    def potrs(self, stream: Any, dtype: str, uplo: str, n: int, nrhs: int, a: int, lda: int,
              b: int, ldb: int, info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            if n and nrhs:
                am = np.array(matrix(sim, a, n, n, lda, t), order="F")
                bm = matrix(sim, b, n, nrhs, ldb, t)
                x, _ = _lapack("potrs", am)(am, np.array(bm, order="F"), lower=uplo == "L")
                bm[...] = x
            self._info(info, 0)

        stream.put(run)

    def getrf(self, stream: Any, dtype: str, m: int, n: int, a: int, lda: int, ipiv: int,
              info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("getrf", dtype, m, n, lda))

        def run() -> None:
            am = matrix(sim, a, m, n, lda, t)
            if m == 0 or n == 0:
                self._info(info, 0)
                return
            if ipiv:
                work = np.array(am, order="F")
                lu, piv, status = _lapack("getrf", work)(work)
                vector(sim, ipiv, min(m, n), 1, np.int64)[...] = piv[:min(m, n)] + 1
            else:
                lu, status = lu_nopivot(np.array(am))
            am[...] = lu
            self._info(info, int(status))

        stream.put(run)

    def getrs(self, stream: Any, dtype: str, trans: str, n: int, nrhs: int, a: int, lda: int,
              ipiv: int, b: int, ldb: int, info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            if n and nrhs:
                am = np.array(matrix(sim, a, n, n, lda, t), order="F")
                bm = matrix(sim, b, n, nrhs, ldb, t)
                piv = (vector(sim, ipiv, n, 1, np.int64) - 1 if ipiv
                       else np.arange(n)).astype(np.int32)
                x, _ = _lapack("getrs", am)(am, piv, np.array(bm, order="F"),
                                            trans={"N": 0, "T": 1, "C": 2}[trans])
                bm[...] = x
            self._info(info, 0)

        stream.put(run)

    # -- QR ------------------------------------------------------------------------------------
    def geqrf(self, stream: Any, dtype: str, m: int, n: int, a: int, lda: int, tau: int,
              info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("geqrf", dtype, m, n, lda))

        def run() -> None:
            am = matrix(sim, a, m, n, lda, t)
            if m and n:
                work = np.array(am, order="F")
                qr, tv, _, status = _lapack("geqrf", work)(work)
                am[...] = qr
                vector(sim, tau, min(m, n), 1, t)[...] = tv[:min(m, n)]
            self._info(info, 0)

        stream.put(run)

    def orgqr(self, stream: Any, dtype: str, m: int, n: int, k: int, a: int, lda: int,
              tau: int, info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("orgqr", dtype, m, n, k, lda))

        def run() -> None:
            am = matrix(sim, a, m, n, lda, t)
            if m and n:
                work = np.array(am, order="F")
                tv = np.array(vector(sim, tau, k, 1, t))
                name = "orgqr" if t.kind == "f" else "ungqr"
                if k:
                    q, _, _ = _lapack(name, work)(work, tv)
                else:  # no reflectors: the first n columns of the identity
                    q = np.eye(m, n, dtype=t)
                am[...] = q
            self._info(info, 0)

        stream.put(run)

    def ormqr(self, stream: Any, dtype: str, side: str, trans: str, m: int, n: int, k: int,
              a: int, lda: int, tau: int, c: int, ldc: int, info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("ormqr", dtype, side, trans, m, n, k, lda, ldc))

        def run() -> None:
            cm = matrix(sim, c, m, n, ldc, t)
            rows = m if side == "L" else n
            if m and n and k:
                am = np.array(matrix(sim, a, rows, k, lda, t), order="F")
                tv = np.array(vector(sim, tau, k, 1, t))
                name = "ormqr" if t.kind == "f" else "unmqr"
                fn = _lapack(name, am)
                lwork = max(1, 64 * max(m, n))
                out, _, _ = fn(side, trans, am, tv, np.array(cm, order="F"), lwork)
                cm[...] = out
            self._info(info, 0)

        stream.put(run)

    # -- eigen ---------------------------------------------------------------------------------
    def _eigh(self, dtype: str, vectors: bool, uplo: str, n: int, a: int, lda: int, w: int,
              driver: str) -> None:
        from scipy.linalg import eigh

        t = dtype_of(dtype)
        am = matrix(self.sim, a, n, n, lda, t)
        if not n:
            return
        wv = vector(self.sim, w, n, 1, dtype_of(REAL_OF[dtype]))
        if not finite(np.tril(am) if uplo == "L" else np.triu(am)):
            # a NaN/inf in the triangle read: NaN out, as the GPU's answer (SciPy would raise)
            wv[...] = np.nan
            if vectors:
                am[...] = np.nan
            return
        vals, vecs = eigh(np.array(am), lower=uplo == "L", driver=driver)
        wv[...] = vals
        if vectors:
            am[...] = vecs
        # with vectors=False cuSOLVER leaves A destroyed; the simulator leaves it as it was

    def syevd(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
              lda: int, w: int, info: int) -> None:
        self._count(("syevd", dtype, vectors, uplo, n, lda))

        def run() -> None:
            self._eigh(dtype, vectors, uplo, n, a, lda, w, "evd")
            self._info(info, 0)

        stream.put(run)

    def _jacobi_status(self, dtype: str, h: Any, n: int, tol: float, max_sweeps: int) -> int:
        if max_sweeps >= 16 or n <= 1:
            return 0  # converges well within the limit for the matrices a test can build
        eps = float(np.finfo(dtype_of(REAL_OF[dtype])).eps)
        return 0 if jacobi_converged(h, max_sweeps, tol or eps) else n + 1

    def syevj(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
              lda: int, w: int, tol: float, max_sweeps: int, sort: bool, info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("syevj", dtype, vectors, uplo, n, lda))

        def run() -> None:
            full = _hermitian(np.array(matrix(sim, a, n, n, lda, t)), uplo)
            status = self._jacobi_status(dtype, full, n, tol, max_sweeps)
            self._eigh(dtype, vectors, uplo, n, a, lda, w, "evr")
            self._info(info, status)

        stream.put(run)

    def syevj_batched(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
                      lda: int, w: int, tol: float, max_sweeps: int, sort: bool, infos: int,
                      batch: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("syevjBatched", dtype, vectors, uplo, n, lda, batch))
        item, real = t.itemsize, dtype_of(REAL_OF[dtype]).itemsize

        def run() -> None:
            out = []
            for i in range(batch):
                ai, wi = a + i * lda * n * item, w + i * n * real
                # the library reports no sweep limit (info 0 with max_sweeps=1 on the H100,
                # values unconverged): a small limit stops the simulated sweeps likewise
                out.append(0)
                if max_sweeps >= 16 or n <= 1:
                    self._eigh(dtype, vectors, uplo, n, ai, lda, wi, "evr")
                    continue
                full = _hermitian(np.array(matrix(sim, ai, n, n, lda, t)), uplo)
                eps = float(np.finfo(dtype_of(REAL_OF[dtype])).eps)
                diag, vecs, _ = jacobi_sweeps(full, max_sweeps, tol or eps)
                order = np.argsort(diag) if sort else np.arange(n)
                vector(sim, wi, n, 1, dtype_of(REAL_OF[dtype]))[...] = diag[order]
                if vectors:
                    vecs = vecs[:, order]
                    matrix(sim, ai, n, n, lda, t)[...] = vecs if t.kind == "c" else vecs.real
            sim.view(infos, 4 * batch)[...] = np.array(out, np.int32).view(np.uint8)

        if batch:
            stream.put(run)

    def sygvd(self, stream: Any, dtype: str, itype: int, vectors: bool, uplo: str, n: int,
              a: int, lda: int, b: int, ldb: int, w: int, info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("sygvd", dtype, itype, vectors, uplo, n, lda, ldb))

        def run() -> None:
            if not n:
                self._info(info, 0)
                return
            status = potrf_one(sim, t, uplo, n, b, ldb)  # B's factor, as cuSOLVER leaves it
            if status:
                self._info(info, n + status)
                return
            from scipy.linalg import eigh

            am = matrix(sim, a, n, n, lda, t)
            bfull = _hermitian(np.array(matrix(sim, b, n, n, ldb, t)), uplo, factor=True)
            afull = _hermitian(np.array(am), uplo)
            if not finite(afull, bfull):  # NaN out, as the GPU's answer (SciPy would raise)
                vector(sim, w, n, 1, dtype_of(REAL_OF[dtype]))[...] = np.nan
                if vectors:
                    am[...] = np.nan
                self._info(info, 0)
                return
            vals, vecs = eigh(afull, bfull, type=itype)
            vector(sim, w, n, 1, dtype_of(REAL_OF[dtype]))[...] = vals
            if vectors:
                am[...] = vecs
            self._info(info, 0)

        stream.put(run)

    # -- SVD -----------------------------------------------------------------------------------
    def gesvd(self, stream: Any, dtype: str, jobu: str, jobvt: str, m: int, n: int, a: int,
              lda: int, s: int, u: int, ldu: int, vt: int, ldvt: int, info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("gesvd", dtype, jobu, jobvt, m, n, lda, ldu, ldvt))

        def run() -> None:
            p = min(m, n)
            if p:
                am = np.array(matrix(sim, a, m, n, lda, t))
                if finite(am):
                    uu, ss, vv = np.linalg.svd(am.astype(np.result_type(am, np.float64)))
                else:  # NaN out, as the GPU's answer (NumPy would raise)
                    uu, ss, vv = _nan((m, m), t), _nan((p,), t), _nan((n, n), t)
                vector(sim, s, p, 1, dtype_of(REAL_OF[dtype]))[...] = ss
                if jobu != "N":
                    cols = m if jobu == "A" else p
                    matrix(sim, u, m, cols, ldu, t)[...] = uu[:, :cols]
                if jobvt != "N":
                    rows = n if jobvt == "A" else p
                    matrix(sim, vt, rows, n, ldvt, t)[...] = vv[:rows]
            self._info(info, 0)

        stream.put(run)

    def _svd_into(self, dtype: str, vectors: bool, full: bool, m: int, n: int, a: int,
                  lda: int, s: int, u: int, ldu: int, v: int, ldv: int, tol: float,
                  max_sweeps: int) -> int:
        sim, t = self.sim, dtype_of(dtype)
        p = min(m, n)
        if not p:
            return 0
        am = np.array(matrix(sim, a, m, n, lda, t))
        if not finite(am):  # NaN out, as the GPU's answer (NumPy would raise)
            self._svd_nan(dtype, vectors, full, m, n, s, u, ldu, v, ldv)
            return 0
        wide_a = am.astype(np.result_type(am, np.float64))
        gram = wide_a.conj().T @ wide_a if m >= n else wide_a @ wide_a.conj().T
        status = 0
        if max_sweeps < 16:
            eps = float(np.finfo(dtype_of(REAL_OF[dtype])).eps)
            status = 0 if jacobi_converged(gram, max_sweeps, tol or eps) else p + 1
        uu, ss, vh = np.linalg.svd(wide_a)
        vector(sim, s, p, 1, dtype_of(REAL_OF[dtype]))[...] = ss
        if vectors:
            ucols, vcols = (m, n) if full else (p, p)
            matrix(sim, u, m, ucols, ldu, t)[...] = uu[:, :ucols]
            matrix(sim, v, n, vcols, ldv, t)[...] = vh.conj().T[:, :vcols]
        return status

    def _svd_nan(self, dtype: str, vectors: bool, full: bool, m: int, n: int, s: int, u: int,
                 ldu: int, v: int, ldv: int) -> None:
        """What the SVD of a matrix holding NaN/inf answers: NaN values (and vectors)."""
        sim, t, p = self.sim, dtype_of(dtype), min(m, n)
        vector(sim, s, p, 1, dtype_of(REAL_OF[dtype]))[...] = np.nan
        if vectors:
            ucols, vcols = (m, n) if full else (p, p)
            matrix(sim, u, m, ucols, ldu, t)[...] = np.nan
            matrix(sim, v, n, vcols, ldv, t)[...] = np.nan

    def _svd_limited(self, dtype: str, vectors: bool, m: int, n: int, a: int, lda: int, s: int,
                     u: int, ldu: int, v: int, ldv: int, tol: float, max_sweeps: int) -> None:
        """gesvdjBatched stopped after ``max_sweeps`` sweeps: Jacobi on A^H A (what one-sided
        Jacobi on A amounts to), singular values sqrt of its diagonal, descending."""
        sim, t = self.sim, dtype_of(dtype)
        am = np.array(matrix(sim, a, m, n, lda, t)).astype(np.complex128)
        if not finite(am):
            self._svd_nan(dtype, vectors, True, m, n, s, u, ldu, v, ldv)
            return
        eps = float(np.finfo(dtype_of(REAL_OF[dtype])).eps)
        diag, vv, _ = jacobi_sweeps(am.conj().T @ am, max_sweeps, tol or eps)
        order = np.argsort(diag)[::-1]
        sv = np.sqrt(np.maximum(diag[order], 0))
        p = min(m, n)
        vector(sim, s, p, 1, dtype_of(REAL_OF[dtype]))[...] = sv[:p]
        if vectors:
            vv = vv[:, order]
            uu = am @ vv[:, :p] / np.where(sv[:p] > 0, sv[:p], 1)
            full_u = np.linalg.qr(np.hstack([uu, np.eye(m)]))[0][:, :m] if m > p else uu
            cast = (lambda x: x) if t.kind == "c" else (lambda x: x.real)
            matrix(sim, u, m, m, ldu, t)[...] = cast(full_u)
            matrix(sim, v, n, n, ldv, t)[...] = cast(vv)

    def gesvdj(self, stream: Any, dtype: str, vectors: bool, econ: bool, m: int, n: int,
               a: int, lda: int, s: int, u: int, ldu: int, v: int, ldv: int, tol: float,
               max_sweeps: int, info: int) -> None:
        self._count(("gesvdj", dtype, vectors, econ, m, n, lda, ldu, ldv))

        def run() -> None:
            self._info(info, self._svd_into(dtype, vectors, not econ, m, n, a, lda, s, u, ldu,
                                            v, ldv, tol, max_sweeps))

        stream.put(run)

    def gesvdj_batched(self, stream: Any, dtype: str, vectors: bool, m: int, n: int, a: int,
                       lda: int, s: int, u: int, ldu: int, v: int, ldv: int, tol: float,
                       max_sweeps: int, infos: int, batch: int) -> None:
        self._count(("gesvdjBatched", dtype, vectors, m, n, lda, ldu, ldv, batch))
        item, real = dtype_of(dtype).itemsize, dtype_of(REAL_OF[dtype]).itemsize
        p = min(m, n)

        def run() -> None:
            # no sweep limit is reported, as for syevjBatched (see there); a small limit
            # leaves the values unconverged
            out = []
            for i in range(batch):
                ai, si = a + i * lda * n * item, s + i * p * real
                ui, vi = u + i * ldu * m * item, v + i * ldv * n * item
                if max_sweeps >= 16 or p <= 1:
                    self._svd_into(dtype, vectors, True, m, n, ai, lda, si, ui, ldu, vi, ldv,
                                   tol, 1 << 30)
                else:
                    self._svd_limited(dtype, vectors, m, n, ai, lda, si, ui, ldu, vi, ldv, tol,
                                      max_sweeps)
                out.append(0)
            self.sim.view(infos, 4 * batch)[...] = np.array(out, np.int32).view(np.uint8)

        if batch:
            stream.put(run)

    # -- any-size batched eigen / SVD, general eigenproblem -----------------------------------
    def syev_batched(self, stream: Any, dtype: str, vectors: bool, uplo: str, n: int, a: int,
                     lda: int, w: int, infos: int, batch: int) -> None:
        self._count(("syevBatched", dtype, vectors, uplo, n, lda, batch))
        item, real = dtype_of(dtype).itemsize, dtype_of(REAL_OF[dtype]).itemsize

        def run() -> None:
            for i in range(batch):
                self._eigh(dtype, vectors, uplo, n, a + i * lda * n * item, lda, w + i * n * real,
                           "evd")
            self.sim.view(infos, 4 * batch)[...] = np.zeros(batch, np.int32).view(np.uint8)

        if batch:
            stream.put(run)

    def gesvdj_lanes(self, batch: int) -> int:
        """As the CUDA handle's: the lanes a stack is spread over (the simulator runs them in
        turn on one stream, each lane's scratch U and V where the handle puts them)."""
        from . import _handle

        return max(1, min(int(_handle.GESVDJ_LANES), batch))

    def gesvdj_strided(self, stream: Any, dtype: str, vectors: bool, econ: bool, m: int, n: int,
                       a: int, lda: int, s: int, u: int, ldu: int, v: int, ldv: int,
                       u_step: int, v_step: int, tol: float, max_sweeps: int, infos: int,
                       batch: int, u_lane: int = 0, v_lane: int = 0) -> None:
        self._count(("gesvdj", dtype, vectors, econ, m, n, lda, ldu, ldv))
        item, real = dtype_of(dtype).itemsize, dtype_of(REAL_OF[dtype]).itemsize
        p = min(m, n)
        lanes = self.gesvdj_lanes(batch)

        def run() -> None:
            out = [self._svd_into(dtype, vectors, not econ, m, n, a + i * lda * n * item, lda,
                                  s + i * p * real, u + (i * u_step + i % lanes * u_lane) * item,
                                  ldu, v + (i * v_step + i % lanes * v_lane) * item, ldv, tol,
                                  max_sweeps)
                   for i in range(batch)]
            self.sim.view(infos, 4 * batch)[...] = np.array(out, np.int32).view(np.uint8)

        if batch:
            stream.put(run)

    def geev(self, stream: Any, dtype: str, n: int, a: int, lda: int, w: int, vr: int,
             ldvr: int, infos: int, batch: int) -> None:
        """LAPACK's geev (SciPy): eigenvalues (a real matrix's as its real parts then its
        imaginary parts), right eigenvectors in A's type (a real matrix's complex pairs packed
        as LAPACK and cuSOLVER pack them)."""
        sim, t = self.sim, dtype_of(dtype)
        self._count(("geev", dtype, bool(vr), n, lda, ldvr))
        per = n if t.kind == "c" else 2 * n

        def run() -> None:
            out = []
            for i in range(batch):
                am = np.array(matrix(sim, a + i * lda * n * t.itemsize, n, n, lda, t), order="F")
                wv = vector(sim, w + i * per * t.itemsize, per, 1, t)
                if not finite(am):
                    wv[...] = np.nan
                    if vr:
                        matrix(sim, vr + i * ldvr * n * t.itemsize, n, n, ldvr, t)[...] = np.nan
                    out.append(0)
                    continue
                fn = _lapack("geev", am)
                if t.kind == "c":
                    vals, _, vecs, status = fn(am, compute_vl=0, compute_vr=int(bool(vr)))
                else:
                    wr, wi, _, vecs, status = fn(am, compute_vl=0, compute_vr=int(bool(vr)))
                    vals = np.concatenate([wr, wi])
                wv[...] = vals
                if vr:
                    matrix(sim, vr + i * ldvr * n * t.itemsize, n, n, ldvr, t)[...] = vecs
                out.append(int(status))
            sim.view(infos, 4 * batch)[...] = np.array(out, np.int32).view(np.uint8)

        if batch and n:
            stream.put(run)

    # -- inverse from Cholesky, batched solves -------------------------------------------------
    def potri(self, stream: Any, dtype: str, uplo: str, n: int, a: int, lda: int,
              info: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        self._count(("potri", dtype, uplo, n, lda))

        def run() -> None:
            am = matrix(sim, a, n, n, lda, t)
            status = 0
            if n:
                work = np.array(am, order="F")
                inv, status = _lapack("potri", work)(work, lower=uplo == "L")
                tri = np.tril(np.ones((n, n), bool)) if uplo == "L" else np.triu(
                    np.ones((n, n), bool))
                if not status:
                    am[tri] = inv[tri]
            self._info(info, int(status))

        stream.put(run)

    def _ptrs(self, ptrs: int, batch: int) -> list[int]:
        return self.sim.view(ptrs, 8 * batch).view(np.uint64).tolist()

    def potrs_batched(self, stream: Any, dtype: str, uplo: str, n: int, nrhs: int, aptrs: int,
                      lda: int, bptrs: int, ldb: int, info: int, batch: int) -> None:
        def run() -> None:
            for pa, pb in zip(self._ptrs(aptrs, batch), self._ptrs(bptrs, batch)):
                self._potrs_now(dtype, uplo, n, nrhs, pa, lda, pb, ldb)
            self._info(info, 0)

        stream.put(run)

    def _potrs_now(self, dtype: str, uplo: str, n: int, nrhs: int, a: int, lda: int, b: int,
                   ldb: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        if n and nrhs:
            am = np.array(matrix(sim, a, n, n, lda, t), order="F")
            bm = matrix(sim, b, n, nrhs, ldb, t)
            x, _ = _lapack("potrs", am)(am, np.array(bm, order="F"), lower=uplo == "L")
            bm[...] = x

    def getrf_batched(self, stream: Any, dtype: str, n: int, aptrs: int, lda: int, ipiv: int,
                      infos: int, batch: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            out = []
            for i, pa in enumerate(self._ptrs(aptrs, batch)):
                am = matrix(sim, pa, n, n, lda, t)
                if ipiv:
                    work = np.array(am, order="F")
                    lu, piv, status = _lapack("getrf", work)(work)
                    vector(sim, ipiv + 4 * n * i, n, 1, np.int32)[...] = piv + 1
                else:
                    lu, status = lu_nopivot(np.array(am))
                am[...] = lu
                out.append(int(status))
            sim.view(infos, 4 * batch)[...] = np.array(out, np.int32).view(np.uint8)

        if batch and n:
            stream.put(run)

    def getrs_batched(self, stream: Any, dtype: str, trans: str, n: int, nrhs: int, aptrs: int,
                      lda: int, ipiv: int, bptrs: int, ldb: int, batch: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            for i, (pa, pb) in enumerate(zip(self._ptrs(aptrs, batch), self._ptrs(bptrs, batch))):
                am = np.array(matrix(sim, pa, n, n, lda, t), order="F")
                bm = matrix(sim, pb, n, nrhs, ldb, t)
                piv = (vector(sim, ipiv + 4 * n * i, n, 1, np.int32) - 1 if ipiv
                       else np.arange(n)).astype(np.int32)
                x, _ = _lapack("getrs", am)(am, piv, np.array(bm, order="F"),
                                            trans={"N": 0, "T": 1, "C": 2}[trans])
                bm[...] = x

        if batch and n and nrhs:
            stream.put(run)

    def close(self) -> None:
        for ptr, nbytes in self.pointer_arrays.values():
            self._ctx.memory.deallocate(ptr, nbytes, self._ctx.compute.obj)
        self.pointer_arrays.clear()


def _hermitian(a: np.ndarray, uplo: str, factor: bool = False) -> np.ndarray:
    """The full Hermitian matrix whose ``uplo`` triangle ``a`` holds; with ``factor`` the
    matrix L L^H (or U^H U) of the triangular factor stored there."""
    tri = np.tril(a) if uplo == "L" else np.triu(a)
    if factor:
        return tri @ tri.conj().T if uplo == "L" else tri.conj().T @ tri
    d = np.diag(np.real(np.diag(a)))
    return tri + tri.conj().T - d if uplo == "L" else tri + tri.conj().T - d
