"""cuBLAS on the simulator: NumPy versions of the handle's calls with the same signatures and
semantics (column-major, leading dimensions, strides, alpha and beta, outputs unread when beta is
0, 1-based iamax/iamin written to device memory, TF32 input rounding). Each call enqueues its work
on the simulated stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.cuda._replays import direct_bound
from ...backends.sim._device import SimBackend
from ...backends.sim._numerics import solve_triangular
from ...backends.sim._views import matrix, vector
from ...dtypes import dtype_of
from .._workspace import optional_workspace, release_workspace
from ._bindings import WORKSPACE_BYTES

__all__ = ["SimCublas", "gemm", "op", "tf32", "blend"]


def op(mat: np.ndarray, trans: str) -> np.ndarray:
    if trans == "N":
        return mat
    return mat.T.conj() if trans == "C" else mat.T


def triangle(mat: np.ndarray, uplo: str, diag: str = "N") -> np.ndarray:
    out = np.tril(mat) if uplo == "L" else np.triu(mat)
    if diag == "U":
        np.fill_diagonal(out, 1)
    return out


def symmetric(mat: np.ndarray, uplo: str) -> np.ndarray:
    low = np.tril(mat) if uplo == "L" else np.triu(mat).T
    return low + np.tril(low, -1).T


def tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (10 mantissa bits), as the tensor cores do."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def blend(alpha: Any, prod: np.ndarray, beta: Any, old: np.ndarray) -> np.ndarray:
    """alpha * prod + beta * old. With beta == 0 ``old`` is not read at all, as in cuBLAS: NaN
    or garbage in an output that is only written must not leak into it."""
    return alpha * prod if beta == 0 else alpha * prod + beta * old


def _work_dtype(dtype: str) -> np.dtype:
    """The type arithmetic happens in: fp32 for the 16-bit and 8-bit floats."""
    return np.dtype(np.float32) if dtype in ("f16", "bf16", "e4m3", "e5m2") else dtype_of(dtype)


def gemm(sim: SimBackend, dtype: str, compute: str, transa: str, transb: str, m: int, n: int,
         k: int, alpha: Any, a: int, lda: int, b: int, ldb: int, beta: Any, c: int,
         ldc: int) -> None:
    """C = alpha op(A) op(B) + beta C in ``dtype``'s arithmetic."""
    store = dtype_of(dtype)
    work = _work_dtype(dtype)
    cm = matrix(sim, c, m, n, ldc, store)
    if m == 0 or n == 0:
        return
    if k == 0:
        prod = np.zeros((m, n), work)
    else:
        a_shape = (m, k) if transa == "N" else (k, m)
        b_shape = (k, n) if transb == "N" else (n, k)
        am = op(matrix(sim, a, *a_shape, lda, store).astype(work), transa)
        bm = op(matrix(sim, b, *b_shape, ldb, store).astype(work), transb)
        if compute == "tf32":
            if work.kind == "c":
                am = tf32(am.real) + 1j * tf32(am.imag)
                bm = tf32(bm.real) + 1j * tf32(bm.imag)
            else:
                am, bm = tf32(am), tf32(bm)
        prod = am @ bm
    out = blend(alpha, prod, beta, cm.astype(work))
    cm[...] = out.astype(store)


class SimCublas:
    """The simulator's cuBLAS handle: every method enqueues the NumPy equivalent."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        # the workspace the CUDA handle takes (and degrades) from the same memory resource:
        # budgets and Stats count the same on both backends
        self._ctx = ctx
        self._ws, self._ws_bytes = optional_workspace(ctx, "cublas", WORKSPACE_BYTES)

    # each public method: (stream, dtype, ...) like the CUDA handle
    def gemm(self, stream: Any, *args: Any) -> None:
        stream.put(lambda: gemm(self.sim, *args))

    def _sgemm_now(self, stream: Any, transa: str, transb: str, m: int, n: int, k: int,
                   alpha: float, a: int, lda: int, b: int, ldb: int, beta: float, c: int,
                   ldc: int) -> None:
        self.gemm(stream, "f32", "default", transa, transb, m, n, k, alpha, a, lda, b, ldb, beta,
                  c, ldc)

    def _gemm_strided_now(self, stream: Any, dtype: str, compute: str, transa: str,
                          transb: str, m: int, n: int, k: int, alpha: Any, a: int, lda: int,
                          sa: int, b: int, ldb: int, sb: int, beta: Any, c: int, ldc: int,
                          sc: int, batch: int) -> None:
        item = dtype_of(dtype).itemsize

        def run() -> None:
            for i in range(batch):
                gemm(self.sim, dtype, compute, transa, transb, m, n, k, alpha, a + i * sa * item,
                     lda, b + i * sb * item, ldb, beta, c + i * sc * item, ldc)

        stream.put(run)

    # a repeated message's launcher, as the CUDA handle binds it (nothing to replay here)
    def sgemm_bound(self, stream: Any, *args: Any) -> Callable[[Any], None]:
        return direct_bound("sgemm", self._sgemm_now, stream, *args)

    def gemm_strided_bound(self, stream: Any, *args: Any) -> Callable[[Any], None]:
        return direct_bound("gemm_strided", self._gemm_strided_now, stream, *args)

    def gemm_batched(self, stream: Any, dtype: str, compute: str, transa: str, transb: str,
                     m: int, n: int, k: int, alpha: Any, a_ptrs: int, lda: int, b_ptrs: int,
                     ldb: int, beta: Any, c_ptrs: int, ldc: int, batch: int) -> None:
        sim = self.sim

        def run() -> None:
            pa, pb, pc = (sim.view(p, 8 * batch).view(np.uint64).tolist()
                          for p in (a_ptrs, b_ptrs, c_ptrs))
            for i in range(batch):
                gemm(sim, dtype, compute, transa, transb, m, n, k, alpha, pa[i], lda, pb[i], ldb,
                     beta, pc[i], ldc)

        stream.put(run)

    # -- level 1
    def axpy(self, stream: Any, dtype: str, n: int, alpha: Any, x: int, incx: int, y: int,
             incy: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        stream.put(lambda: vector(sim, y, n, incy, t).__iadd__(
            (alpha * vector(sim, x, n, incx, t)).astype(t)))

    def scal(self, stream: Any, dtype: str, n: int, alpha: Any, x: int, incx: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            v = vector(sim, x, n, incx, t)
            v[...] = (alpha * v).astype(t)

        stream.put(run)

    def _result(self, stream: Any, ptr: int, dtype: str, compute: Any) -> None:
        sim = self.sim

        def run() -> None:
            value = np.asarray(compute(), dtype=dtype)
            sim.view(ptr, value.itemsize)[...] = value.reshape(1).view(np.uint8)

        stream.put(run)

    def dot(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int, incy: int,
            conjugate: bool, result: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def compute() -> Any:
            xv = vector(sim, x, n, incx, t)
            return np.sum((xv.conj() if conjugate else xv) * vector(sim, y, n, incy, t))

        self._result(stream, result, t.str, compute)

    def nrm2(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        real = np.float32 if dtype in ("f32", "c64") else np.float64
        self._result(stream, result, np.dtype(real).str,
                     lambda: np.sqrt(np.sum(np.abs(vector(sim, x, n, incx, t)) ** 2)))

    def asum(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        real = np.float32 if dtype in ("f32", "c64") else np.float64

        def compute() -> Any:
            v = vector(sim, x, n, incx, t)
            return np.sum(np.abs(v.real) + np.abs(v.imag))

        self._result(stream, result, np.dtype(real).str, compute)

    def _iam(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int,
             pick: Any) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def compute() -> Any:
            v = vector(sim, x, n, incx, t)
            return int(pick(np.abs(v.real) + np.abs(v.imag))) + 1 if n else 0

        self._result(stream, result, "<i4", compute)

    def iamax(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        self._iam(stream, dtype, n, x, incx, result, np.argmax)

    def iamin(self, stream: Any, dtype: str, n: int, x: int, incx: int, result: int) -> None:
        self._iam(stream, dtype, n, x, incx, result, np.argmin)

    def copy(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int,
             incy: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        stream.put(lambda: np.copyto(vector(sim, y, n, incy, t), vector(sim, x, n, incx, t)))

    def swap(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int,
             incy: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            xv, yv = vector(sim, x, n, incx, t), vector(sim, y, n, incy, t)
            tmp = xv.copy()
            xv[...] = yv
            yv[...] = tmp

        stream.put(run)

    def rot(self, stream: Any, dtype: str, n: int, x: int, incx: int, y: int, incy: int,
            c: float, s: Any) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            xv, yv = vector(sim, x, n, incx, t), vector(sim, y, n, incy, t)
            x0, y0 = xv.copy(), yv.copy()
            xv[...] = (c * x0 + s * y0).astype(t)
            yv[...] = (c * y0 - np.conj(s) * x0).astype(t)

        stream.put(run)

    # -- level 2
    def gemv(self, stream: Any, dtype: str, trans: str, m: int, n: int, alpha: Any, a: int,
             lda: int, x: int, incx: int, beta: Any, y: int, incy: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        xn, yn = (n, m) if trans == "N" else (m, n)

        def run() -> None:
            yv = vector(sim, y, yn, incy, t)
            prod = op(matrix(sim, a, m, n, lda, t), trans) @ vector(sim, x, xn, incx, t)
            yv[...] = blend(alpha, prod, beta, yv).astype(t)

        stream.put(run)

    def ger(self, stream: Any, dtype: str, m: int, n: int, alpha: Any, x: int, incx: int,
            y: int, incy: int, a: int, lda: int, conjugate: bool) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            yv = vector(sim, y, n, incy, t)
            am = matrix(sim, a, m, n, lda, t)
            am += (alpha * np.outer(vector(sim, x, m, incx, t),
                                    yv.conj() if conjugate else yv)).astype(t)

        stream.put(run)

    def symv(self, stream: Any, dtype: str, uplo: str, n: int, alpha: Any, a: int, lda: int,
             x: int, incx: int, beta: Any, y: int, incy: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            yv = vector(sim, y, n, incy, t)
            prod = symmetric(matrix(sim, a, n, n, lda, t), uplo) @ vector(sim, x, n, incx, t)
            yv[...] = blend(alpha, prod, beta, yv).astype(t)

        stream.put(run)

    def trsv(self, stream: Any, dtype: str, uplo: str, trans: str, diag: str, n: int, a: int,
             lda: int, x: int, incx: int) -> None:
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            if n == 0:
                return
            xv = vector(sim, x, n, incx, t)
            tri = op(triangle(matrix(sim, a, n, n, lda, t), uplo, diag), trans)
            # substitution, not np.linalg.solve: a zero pivot gives inf/NaN as cuBLAS does
            xv[...] = solve_triangular(tri, xv, (uplo == "L") == (trans == "N")).astype(t)

        stream.put(run)

    # -- level 3
    def geam(self, stream: Any, dtype: str, transa: str, transb: str, m: int, n: int,
             alpha: Any, a: int, lda: int, beta: Any, b: int, ldb: int, c: int,
             ldc: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        ar, ac = (m, n) if transa == "N" else (n, m)
        br, bc = (m, n) if transb == "N" else (n, m)

        def run() -> None:
            out = alpha * op(matrix(sim, a, ar, ac, lda, t), transa)
            if beta != 0:
                out = out + beta * op(matrix(sim, b, br, bc, ldb, t), transb)
            matrix(sim, c, m, n, ldc, t)[...] = out.astype(t)

        stream.put(run)

    def syrk(self, stream: Any, dtype: str, uplo: str, trans: str, n: int, k: int, alpha: Any,
             a: int, lda: int, beta: Any, c: int, ldc: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        ar, ac = (n, k) if trans == "N" else (k, n)

        def run() -> None:
            am = op(matrix(sim, a, ar, ac, lda, t), trans)
            cm = matrix(sim, c, n, n, ldc, t)
            full = blend(alpha, am @ am.T, beta, cm)
            mask = np.tri(n, dtype=bool) if uplo == "L" else np.tri(n, dtype=bool).T
            cm[mask] = full.astype(t)[mask]

        stream.put(run)

    def symm(self, stream: Any, dtype: str, side: str, uplo: str, m: int, n: int, alpha: Any,
             a: int, lda: int, b: int, ldb: int, beta: Any, c: int, ldc: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        ka = m if side == "L" else n

        def run() -> None:
            sa = symmetric(matrix(sim, a, ka, ka, lda, t), uplo)
            bm = matrix(sim, b, m, n, ldb, t)
            cm = matrix(sim, c, m, n, ldc, t)
            prod = sa @ bm if side == "L" else bm @ sa
            cm[...] = blend(alpha, prod, beta, cm).astype(t)

        stream.put(run)

    def trmm(self, stream: Any, dtype: str, side: str, uplo: str, trans: str, diag: str, m: int,
             n: int, alpha: Any, a: int, lda: int, b: int, ldb: int, c: int, ldc: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        ka = m if side == "L" else n

        def run() -> None:
            ta = op(triangle(matrix(sim, a, ka, ka, lda, t), uplo, diag), trans)
            bm = matrix(sim, b, m, n, ldb, t)
            prod = ta @ bm if side == "L" else bm @ ta
            matrix(sim, c, m, n, ldc, t)[...] = (alpha * prod).astype(t)

        stream.put(run)

    def trsm(self, stream: Any, dtype: str, side: str, uplo: str, trans: str, diag: str, m: int,
             n: int, alpha: Any, a: int, lda: int, b: int, ldb: int) -> None:
        sim, t = self.sim, dtype_of(dtype)
        ka = m if side == "L" else n

        def run() -> None:
            if m == 0 or n == 0:
                return
            ta = op(triangle(matrix(sim, a, ka, ka, lda, t), uplo, diag), trans)
            bm = matrix(sim, b, m, n, ldb, t)
            rhs = alpha * bm
            lower = (uplo == "L") == (trans == "N")  # of op(A)
            x = solve_triangular(ta, rhs, lower) if side == "L" else \
                solve_triangular(ta.T, rhs.T, not lower).T
            bm[...] = x.astype(t)

        stream.put(run)

    def replay_info(self) -> dict[str, Any]:
        """The simulator issues every call as it comes: no CUDA graphs to replay."""
        return {"enabled": False}

    def close(self) -> None:
        release_workspace(self._ctx, "cublas", self._ws, self._ws_bytes)
        self._ws = self._ws_bytes = 0
