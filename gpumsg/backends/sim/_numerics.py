"""Numerics of the simulated libraries that must fail as the GPU's do: with inf/NaN in the
output, never with an exception (which would break the simulated context for good).

cuBLAS's trsv/trsm and cuSPARSE's SpSV/SpSM divide by the diagonal without checking it: a zero
pivot gives inf or NaN in the solution and no error. NumPy's and SciPy's solvers raise instead,
so the simulator substitutes here itself, in float64 (complex128 for complex data), with IEEE
arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["solve_triangular", "solve_triangular_csr", "finite"]


def _wide(*arrays: Any) -> np.dtype:
    return np.result_type(*arrays, np.float64)


def solve_triangular(a: Any, b: Any, lower: bool) -> np.ndarray:
    """X with ``a @ X = b`` for the dense triangular ``a`` (only its ``lower`` or upper
    triangle and diagonal are read), by substitution: a zero or NaN pivot propagates inf/NaN
    as on the GPU. ``b`` is a vector or a matrix of right-hand sides."""
    a = np.asarray(a)
    b = np.asarray(b)
    dt = _wide(a, b)
    a = a.astype(dt)
    x = b.astype(dt, copy=True)
    vec = x.ndim == 1
    if vec:
        x = x[:, None]
    n = a.shape[0]
    with np.errstate(all="ignore"):
        for i in (range(n) if lower else range(n - 1, -1, -1)):
            done = slice(0, i) if lower else slice(i + 1, n)
            x[i] = (x[i] - a[i, done] @ x[done]) / a[i, i]
    return x[:, 0] if vec else x


def solve_triangular_csr(a: Any, b: Any, lower: bool) -> np.ndarray:
    """:func:`solve_triangular` for a SciPy CSR matrix ``a`` already cut to its triangle (a
    missing diagonal entry is a zero pivot: inf/NaN, as cuSPARSE's structural zero)."""
    b = np.asarray(b)
    dt = _wide(a.data, b)
    x = b.astype(dt, copy=True)
    vec = x.ndim == 1
    if vec:
        x = x[:, None]
    n = a.shape[0]
    indptr, indices, data = a.indptr, a.indices, a.data.astype(dt)
    with np.errstate(all="ignore"):
        for i in (range(n) if lower else range(n - 1, -1, -1)):
            cols = indices[indptr[i]:indptr[i + 1]]
            vals = data[indptr[i]:indptr[i + 1]]
            on = cols == i
            pivot = vals[on].sum() if on.any() else dt.type(0)
            off = ~on
            x[i] = (x[i] - vals[off] @ x[cols[off]]) / pivot
    return x[:, 0] if vec else x


def finite(*arrays: Any) -> bool:
    """Whether every value of ``arrays`` is finite (NaN/inf inputs make LAPACK-style drivers
    raise on the host, where the GPU's answer NaN)."""
    return all(bool(np.isfinite(np.asarray(x)).all()) for x in arrays)
