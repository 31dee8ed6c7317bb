"""Sparse linear algebra, under ``scipy.sparse.linalg``'s names: :func:`spsolve`.

The solve is cuSOLVER's sparse QR on the device (``cusolverSp<t>csrlsvqr``, its GPU path, through
the message ``SpSolveQR``): A is factored as Q R without column reordering and x found from
R x = Q^H b. cuDSS is not used. The library waits for its own work inside the call, so a solve
holds the device's thread while it runs (other callers' messages queue behind it).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, check_device
from .._creation import full
from .._elementwise import astype
from .._manipulation import stack
from . import _primitives as P
from ._base import SparseMatrix

__all__ = ["spsolve", "MatrixRankWarning"]


class MatrixRankWarning(UserWarning):
    """The matrix of a solve is singular (SciPy's warning of the same name)."""


def spsolve(A: SparseMatrix, b: Any, permc_spec: Any = None, use_umfpack: bool = False,
            *, tol: float = 0.0) -> Array:
    """The solution x of ``A @ x = b`` for a square sparse ``A`` and a dense gpumsg array ``b``
    of shape (n,) or (n, k) (each column solved in turn), by cuSOLVER's sparse QR. Where a
    pivot of R is at most ``tol`` in magnitude (exactly zero by default) the matrix is singular:
    as SciPy, a :class:`MatrixRankWarning` is issued and x is all NaN. ``permc_spec`` and
    ``use_umfpack`` (SciPy's choices of host solver) are accepted and ignored. Waits for the
    solve."""
    if not isinstance(A, SparseMatrix):
        raise TypeError(f"spsolve: A must be a sparse matrix, got {type(A).__name__}")
    if not isinstance(b, Array):
        raise TypeError(f"spsolve: b must be a gpumsg array, got {type(b).__name__}")
    check_device(A.data, b)
    n, m = A.shape
    if n != m:
        raise ValueError(f"spsolve: A must be square, got shape {A.shape}")
    if b.ndim not in (1, 2) or b.shape[0] != n:
        raise ValueError(f"spsolve: b of shape {b.shape} does not match A of shape {A.shape}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < np.inf:
        raise InvalidMessage(f"tol: expected a finite tolerance >= 0, got {tol!r}",
                             field="tol")
    dt = P.promote(A.dtype, b.dtype)
    dev = A.device
    if n == 0 or (b.ndim == 2 and b.shape[1] == 0):
        return full(b.shape, 0, dtype=dt, device=dev)
    a = A.tocsr()._canon().astype(dt, copy=False)
    if a.indices.dtype != D.int32:
        if max(n, a.nnz) > P.INT32_MAX:
            raise InvalidMessage(f"A: cusolverSp takes 32-bit indices; {A.shape} with "
                                 f"{a.nnz} entries does not fit", field="A")
        a = a._as_index(D.int32)
    if a.nnz == 0:
        return _singular(b.shape, dt, dev)
    handle = a._handle()
    bv = astype(b, dt, copy=False)
    cols = [bv] if b.ndim == 1 else [bv[:, j] for j in range(b.shape[1])]
    out, flags = [], []
    for col in cols:
        x, singular = dev.cusparse.solve_qr(handle, P.whole(col).buffer, tol=float(tol))
        out.append(Array(x, (n,), dt, dev))
        flags.append(singular)
    if any(f.result() >= 0 for f in flags):
        return _singular(b.shape, dt, dev)
    return out[0] if b.ndim == 1 else stack(out, axis=1)


def _singular(shape: tuple[int, ...], dt: np.dtype, dev: Any) -> Array:
    warnings.warn("Matrix is exactly singular", MatrixRankWarning, stacklevel=3)
    return full(shape, float("nan"), dtype=dt, device=dev)
