"""Operands shared by the cuBLAS tests: random column-major data and the float64 view of an
operand under its transpose flag."""

from __future__ import annotations

import numpy as np

import gpumsg
from tests.libs.harness import random_scalars

scalars = random_scalars


def rand(rng, shape, dtype: str) -> np.ndarray:
    """Random data of ``dtype`` in column-major order."""
    if dtype in ("c64", "c128"):
        x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    else:
        x = rng.standard_normal(shape)
    return np.asfortranarray(x.astype(gpumsg.as_dtype(dtype)))


def opnd(x: np.ndarray, trans: str) -> np.ndarray:
    x = x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)
    return x if trans == "N" else (x.T.conj() if trans == "C" else x.T)
