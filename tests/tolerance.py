"""Tolerances derived from each precision's unit roundoff and the size of the problem, instead of
fixed constants: a bound that is loose enough for a correct result computed in that precision
and tight enough that a wrong operation (a missing conjugate, a lower-precision accumulator, a
transposed operand) lands far outside it.

The model: a result computed in precision ``p`` from inputs already rounded to ``p`` carries a
relative (Frobenius) error of at most about ``n * u(p)`` for a reduction of length ``n`` (the
classic worst-case bound; random data typically lands near ``sqrt(n) * u``), times the
condition number for a solve. :func:`bound` is that, times a small safety constant ``c``.

Typical use::

    from tests.tolerance import assert_rel, bound

    assert_rel(out, ref, "f32", n=k)             # GEMM with inner size k
    assert_rel(x, ref, "f64", n=n, cond=kappa)   # a solve with condition number kappa
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["unit_roundoff", "bound", "sum_cond", "rel_err", "assert_rel", "orthonormality_error",
           "assert_orthonormal", "REAL_OF"]

#: u = 2^-(mantissa bits + 1): half the distance from 1 to the next number, per precision.
#: Complex types carry their real part's roundoff; "tf32" is float32 data rounded to 10 bits.
_U = {"f64": 2.0 ** -53, "f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8,
      "tf32": 2.0 ** -11, "e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}
REAL_OF = {"c64": "f32", "c128": "f64"}

_ALIASES = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16",
            "complex64": "c64", "complex128": "c128"}


def _name(dtype: Any) -> str:
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
    else:
        dt = np.dtype(dtype)
        name = _ALIASES.get(dt.name, dt.name)
    return REAL_OF.get(name, name)


def unit_roundoff(dtype: Any) -> float:
    """The unit roundoff of ``dtype`` (a gpumsg dtype name, a NumPy dtype, or "tf32")."""
    return _U[_name(dtype)]


def bound(dtype: Any, n: int = 1, c: float = 4.0, cond: float = 1.0) -> float:
    """``c * max(n, 1) * u(dtype) * cond``: the relative error a correct computation of a
    reduction (or solve) of size ``n`` in ``dtype`` stays under."""
    return c * max(int(n), 1) * unit_roundoff(dtype) * max(float(cond), 1.0)


def sum_cond(x: Any, axis: Any = None) -> float:
    """The condition number of summing ``x``'s entries (along ``axis``; an array or a SciPy
    sparse matrix): the norm of the sums of magnitudes over the norm of the sums. Random signed
    terms may cancel to a small sum, whose relative error is then larger by that factor,
    however the sum is taken."""
    mags, sums = abs(x).sum(axis=axis), x.sum(axis=axis)
    den = float(np.linalg.norm(np.asarray(sums)))
    return max(1.0, float(np.linalg.norm(np.asarray(mags))) / den) if den else 1.0


def _wide(x: Any) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def rel_err(out: Any, ref: Any) -> float:
    """||out - ref||_F / ||ref||_F in float64 (the absolute error where ref is zero)."""
    out, ref = _wide(out), _wide(ref)
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (den if den else 1.0))


def assert_rel(out: Any, ref: Any, dtype: Any, n: int = 1, c: float = 4.0, cond: float = 1.0,
               what: str = "") -> float:
    """Fail unless ``out`` is within :func:`bound` of the float64 reference ``ref`` (same
    shape, no NaN). Returns the error (for tests that compare errors)."""
    out, ref = np.asarray(out), np.asarray(ref)
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != reference {ref.shape}"
    assert not np.isnan(_wide(out)).any(), f"{what}: NaN in the result"
    err = rel_err(out, ref)
    tol = bound(dtype, n, c, cond)
    assert err <= tol, (f"{what}: relative error {err:.3g} > {tol:.3g} "
                        f"({c} * {n} * u({_name(dtype)}) * cond {cond:.3g})")
    return err


def orthonormality_error(q: Any) -> float:
    """||Q^H Q - I||_F for the columns of ``q`` (0 for an orthonormal set)."""
    q = _wide(q)
    return float(np.linalg.norm(q.conj().T @ q - np.eye(q.shape[1])))


def assert_orthonormal(q: Any, dtype: Any, c: float = 4.0, what: str = "") -> None:
    """Fail unless the columns of ``q`` are orthonormal to within ``c * n * u(dtype)``."""
    q = np.asarray(q)
    err = orthonormality_error(q)
    tol = bound(dtype, max(q.shape), c)
    assert err <= tol, f"{what}: ||Q^H Q - I|| = {err:.3g} > {tol:.3g}"
