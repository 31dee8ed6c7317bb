"""cuSOLVER dense on the simulator: the handle's calls in NumPy/SciPy with the same signatures and
semantics (column-major in place, the other triangle untouched unless cleaned, 1-based int64
pivots, ``info`` written to device memory as a 32-bit integer: 0 or the 1-based index of the
failing minor / zero pivot, factors written even when info is non-zero). SciPy's LAPACK
wrappers provide the reference factorizations (SciPy is needed by the simulator's solvers)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backends.sim.device import SimBackend
from ...backends.sim.views import matrix, vector
from ...dtypes import dtype_of
from ...service.plans import PlanCache
from .handle import triangle_spans

__all__ = ["SimCusolver", "lu_nopivot"]


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


class SimCusolver:
    """The simulator's cuSOLVER handle: every method enqueues the NumPy/SciPy equivalent."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.workspaces = PlanCache(256)

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

    def close(self) -> None:
        pass
