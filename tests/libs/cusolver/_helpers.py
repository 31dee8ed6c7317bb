"""Random matrices of the cuSOLVER tests (general, symmetric positive definite, Hermitian,
rectangular) in every dtype, and reading results back."""

from __future__ import annotations

import numpy as np

import gpumsg
from tests.libs.harness import wide


def rand(rng, shape, dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape)
    if dtype in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(gpumsg.as_dtype(dtype))


def spd(rng, n: int, dtype: str) -> np.ndarray:
    """A random Hermitian positive definite matrix with condition number O(10)."""
    m = wide(rand(rng, (n, n), dtype))
    return (m @ m.conj().T / n + np.eye(n)).astype(gpumsg.as_dtype(dtype))


def general(rng, n: int, dtype: str) -> np.ndarray:
    """A random well-conditioned general matrix (diagonally shifted so LU without pivoting is
    stable too)."""
    return (wide(rand(rng, (n, n), dtype)) + 2 * np.sqrt(n) * np.eye(n)).astype(
        gpumsg.as_dtype(dtype))


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


def rect(rng, m: int, n: int, dtype: str) -> np.ndarray:
    """A random well-conditioned m x n matrix."""
    return rand(rng, (m, n), dtype)


def results(fut) -> tuple:
    return tuple(np.asarray(x) for x in fut)


def hermitian(rng, n: int, dtype: str) -> np.ndarray:
    m = wide(rand(rng, (n, n), dtype))
    return ((m + m.conj().T) / 2).astype(gpumsg.as_dtype(dtype))


def msgs_real(dtype: str) -> str:
    return {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}[dtype]
