"""NumPy implementations of the CUDA library calls, with the same signatures and the same
semantics as the CUDA handles in :mod:`gpumsg.libs` (column-major, leading dimensions, alpha and
beta, C unread when beta is 0). Each call enqueues its work on the simulated stream."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .device import SimBackend

__all__ = ["SimCublas", "SIM_LIBRARIES", "matrix"]


def matrix(sim: SimBackend, ptr: int, rows: int, cols: int, ld: int, dtype: Any) -> np.ndarray:
    """A writable view of the column-major ``rows`` x ``cols`` matrix at ``ptr`` with leading
    dimension ``ld`` (elements). Out-of-bounds ranges raise an illegal-address fault."""
    dtype = np.dtype(dtype)
    if rows == 0 or cols == 0:
        return np.empty((rows, cols), dtype)
    span = (ld * (cols - 1) + rows) * dtype.itemsize
    flat = sim.view(ptr, span).view(dtype)
    return as_strided(flat, shape=(rows, cols), strides=(dtype.itemsize, ld * dtype.itemsize))


def op(mat: np.ndarray, trans: str) -> np.ndarray:
    if trans == "N":
        return mat
    return mat.T.conj() if trans == "C" else mat.T


def gemm(sim: SimBackend, dtype: Any, transa: str, transb: str, m: int, n: int, k: int,
         alpha: Any, a: int, lda: int, b: int, ldb: int, beta: Any, c: int, ldc: int) -> None:
    """C = alpha op(A) op(B) + beta C, computed in ``dtype`` like the library does."""
    cm = matrix(sim, c, m, n, ldc, dtype)
    if m == 0 or n == 0:
        return
    a_shape = (m, k) if transa == "N" else (k, m)
    b_shape = (k, n) if transb == "N" else (n, k)
    if k == 0:
        prod = np.zeros((m, n), dtype)
    else:
        am = op(matrix(sim, a, *a_shape, lda, dtype), transa)
        bm = op(matrix(sim, b, *b_shape, ldb, dtype), transb)
        prod = am @ bm
    if beta == 0:
        cm[...] = alpha * prod
    else:
        cm[...] = alpha * prod + beta * cm


class SimCublas:
    """The simulator's cuBLAS handle."""

    def __init__(self, sim: SimBackend) -> None:
        self.sim = sim
        self.raw_handle = id(self)

    def sgemm(self, stream: Any, transa: str, transb: str, m: int, n: int, k: int,
              alpha: float, a: int, lda: int, b: int, ldb: int, beta: float, c: int,
              ldc: int) -> None:
        alpha32, beta32 = np.float32(alpha), np.float32(beta)
        stream.put(lambda: gemm(self.sim, np.float32, transa, transb, m, n, k, alpha32, a, lda,
                                b, ldb, beta32, c, ldc))

    def close(self) -> None:
        pass


SIM_LIBRARIES = {
    "cublas": SimCublas,
}
