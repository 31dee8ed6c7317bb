"""Random sparse matrices of the cuSPARSE tests (several densities, a fifth of the rows empty,
never a stored zero), their upload in each format and index width, and reading results
back."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import gpumsg

INDEX = ("i32", "i64")


FORMATS = ("csr", "csc", "coo", "bsr")


DENSITIES = (0.03, 0.3)


def values(rng, n: int, dtype: str) -> np.ndarray:
    x = rng.standard_normal(n) + 0.1
    if dtype in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(n)
    x[x == 0] = 1.0
    return x.astype(gpumsg.as_dtype(dtype))


def rand_sparse(rng, m: int, n: int, density: float, dtype: str) -> sp.csr_matrix:
    """Random m x n CSR with about ``density`` of its entries stored (never zero) and about a
    fifth of its rows empty (the first row always)."""
    mask = rng.random((m, n)) < density
    mask[rng.random(m) < 0.2] = False
    mask[0] = False
    dense = np.zeros((m, n), gpumsg.as_dtype(dtype))
    dense[mask] = values(rng, int(mask.sum()), dtype)
    return sp.csr_matrix(dense)


def upload(dev, a: sp.spmatrix, fmt: str, index: str, block: int = 3):
    if fmt == "bsr":
        return dev.cusparse.bsr(a, block, index_dtype=index)
    return getattr(dev.cusparse, fmt)(a, index_dtype=index)


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


def opm(a, op: str):
    return a if op == "N" else a.T if op == "T" else a.conj().T


def triangular(rng, n: int, dtype: str, uplo: str) -> sp.csr_matrix:
    """A well-conditioned sparse triangular-ish matrix: random sparse plus a strong diagonal
    (both triangles stored; the solve reads one)."""
    a = rand_sparse(rng, n, n, 0.1, dtype).toarray()
    a = a + np.diag(np.full(n, 4.0)).astype(a.dtype)
    return sp.csr_matrix(a)
