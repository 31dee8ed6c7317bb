"""Shared pieces of the valid calls' references (fuzz_answers.py, fuzz_rand_nn.py): random
inputs of a gpumsg dtype, reading answers back, and comparisons whose tolerances come from
tests/tolerance.py (the unit roundoff of the precision, the problem size, the condition
number)."""

from __future__ import annotations

from typing import Any

import numpy as np
import oracles

import gpumsg
from tests.tolerance import bound

WAIT_S = 20.0
_REAL = {"c64": "f32", "c128": "f64", "f32": "f32", "f64": "f64"}


def _dt(rng: np.random.Generator, names: tuple[str, ...] = ("f32", "f64", "c64", "c128")
        ) -> str:
    return str(rng.choice(names))


def _rand(rng: np.random.Generator, shape: Any, dt: str) -> np.ndarray:
    x = rng.standard_normal(shape) + 0.1
    if dt in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(shape)
    return np.asarray(x).astype(gpumsg.as_dtype(dt))


def _get(dev: Any, out: Any) -> Any:
    """A future's or buffer's contents on the host (tuples element by element)."""
    if hasattr(out, "result") and not isinstance(out, gpumsg.GpuBuffer):
        out = out.result(WAIT_S)
    if isinstance(out, tuple):
        return type(out)(*(_get(dev, o) for o in out)) if hasattr(out, "_fields") else \
            tuple(_get(dev, o) for o in out)
    if isinstance(out, gpumsg.GpuBuffer):
        return dev.copy_to_host(out).result(WAIT_S)
    return out


def _close(what: str, got: Any, ref: Any, dt: str, n: int = 1, cond: float = 1.0,
           c: float = 16.0) -> None:
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        raise oracles.Mismatch(f"{what}: shape {got.shape}, expected {ref.shape}")
    wide = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(ref) else np.float64
    g, r = got.astype(wide), ref.astype(wide)
    if not np.isfinite(g).all():
        raise oracles.Mismatch(f"{what}: non-finite values in the answer")
    den = float(np.linalg.norm(r)) or 1.0
    err = float(np.linalg.norm(g - r)) / den
    tol = bound(_REAL.get(dt, dt), n, c=c, cond=cond)
    if not err <= tol:
        raise oracles.Mismatch(f"{what}: relative error {err:.3g} > {tol:.3g} ({dt}, n={n})")


def _exact(what: str, got: np.ndarray, ref: np.ndarray) -> None:
    if got.shape != ref.shape or not np.array_equal(got, ref):
        raise oracles.Mismatch(f"{what}: differs from the reference (exact)")


def _orthonormal(what: str, q: np.ndarray, dt: str) -> None:
    k = q.shape[-1]
    err = float(np.linalg.norm(q.conj().T.astype(np.complex128) @ q - np.eye(k)))
    tol = bound(_REAL[dt], max(q.shape), c=16) * max(k, 1)
    if not err <= tol:
        raise oracles.Mismatch(f"{what}: columns not orthonormal ({err:.3g} > {tol:.3g})")



def _w(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.complex128)

