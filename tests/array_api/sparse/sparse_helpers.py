"""Random sparse inputs of the sparse-array tests, with what makes formats hard: entries in
random order, repeated positions (COO), empty rows and columns; and the float64 references."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tests.tolerance import assert_rel

#: the value types sparse matrices hold
DTYPES = ["float32", "float64", "complex64", "complex128"]


def wide(dtype: str) -> type:
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def values(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    """``n`` random values of ``dtype``, none of them zero."""
    out = rng.standard_normal(n) + np.where(rng.random(n) < 0.5, -0.5, 0.5)
    if np.dtype(dtype).kind == "c":
        out = out + 1j * (rng.standard_normal(n) + 0.25)
    return out.astype(dtype)


def entries(rng: np.random.Generator, m: int, n: int, nnz: int, dtype: str,
            repeats: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, rows, cols) of ``nnz`` entries in random order; rows and columns drawn from a
    subset that leaves some of each empty; with ``repeats`` about a fifth of the entries repeat
    an earlier position."""
    rows_ok = rng.choice(m, size=max(1, (2 * m) // 3), replace=False)
    cols_ok = rng.choice(n, size=max(1, (2 * n) // 3), replace=False)
    r = rng.choice(rows_ok, size=nnz)
    c = rng.choice(cols_ok, size=nnz)
    if repeats and nnz > 4:
        k = nnz // 5
        src = rng.integers(0, nnz - k, size=k)
        r[nnz - k:], c[nnz - k:] = r[src], c[src]
    order = rng.permutation(nnz)
    return values(rng, nnz, dtype), r[order].astype(np.int64), c[order].astype(np.int64)


def reference(vals: np.ndarray, rows: np.ndarray, cols: np.ndarray, shape: tuple,
              dtype: str) -> sp.csr_matrix:
    """The float64 (complex128) CSR matrix of the entries, repeats summed."""
    return sp.coo_matrix((vals.astype(wide(dtype)), (rows, cols)), shape=shape).tocsr()


def scipy_matrix(rng: np.random.Generator, m: int, n: int, density: float,
                 dtype: str) -> sp.csr_matrix:
    """A canonical SciPy CSR matrix of ``dtype`` with random non-zero values."""
    a = sp.random(m, n, density=density, format="csr", random_state=rng)
    a.data = values(rng, a.nnz, dtype)
    return a.astype(dtype)


def check(got, ref, dtype: str, n: int = 1, what: str = "", cond: float = 1.0) -> None:
    """``got`` (a gpumsg array) matches the float64 reference to ``dtype``'s precision for a
    sum of ``n`` terms (of condition number ``cond``)."""
    ref = ref.toarray() if sp.issparse(ref) else np.asarray(ref)
    assert_rel(np.asarray(got), ref, dtype, n=max(n, 1), c=8.0, cond=cond, what=what)


def dense_of(matrix) -> np.ndarray:
    """A sparse matrix of the namespace read back through its own arrays (no todense)."""
    return matrix.get().toarray()
