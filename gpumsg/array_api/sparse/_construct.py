"""Constructors: ``eye``/``identity`` (made on the device), ``random``/``rand`` and ``diags``
(drawn or laid out on the host by SciPy, then uploaded: the same seed gives SciPy's matrix)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .. import _dtypes as D
from .._array import Array
from .._creation import arange, ones
from .._elementwise import TABLE, apply, astype
from . import _construct_args as C
from . import _primitives as P
from ._base import FORMATS, SparseMatrix, check_shape
from ._coo import coo_matrix

__all__ = ["eye", "identity", "random", "rand", "diags"]


def _format(format: str | None) -> str:  # noqa: A002
    fmt = "csr" if format is None else format
    if fmt not in FORMATS:
        raise ValueError(f"format: expected 'csr', 'csc' or 'coo', got {format!r}")
    return fmt


def eye(m: int, n: int | None = None, k: int = 0, dtype: Any = D.float64,
        format: str | None = None, *, device: Any = None) -> SparseMatrix:  # noqa: A002
    """The ``m`` x ``n`` matrix with ones on the ``k``-th diagonal (CSR unless ``format``
    says otherwise; SciPy's default, DIA, is not a format here)."""
    n = m if n is None else n
    m, n = check_shape((m, n))
    k = operator.index(k)
    dev = C.device_of(device)
    dt = P.value_dtype(dtype)
    start = max(0, -k)
    stop = min(m, n - k)
    count = max(0, stop - start)
    it = P.index_dtype_for(m, n)
    rows = arange(start, start + count, dtype=it, device=dev)
    cols = P.whole(astype(apply(TABLE["add"], rows, k), it, copy=False))
    coo = coo_matrix._make(ones((count,), dtype=dt, device=dev), rows, cols, (m, n), True)
    return coo.asformat(_format(format))


def identity(n: int, dtype: Any = D.float64, format: str | None = None, *,
             device: Any = None) -> SparseMatrix:  # noqa: A002
    """The ``n`` x ``n`` identity (see :func:`eye`)."""
    return eye(n, n, 0, dtype, format, device=device)


def _fits(dev: Any, nnz: int, dt: Any) -> None:
    """Refuse with the device's OutOfMemory, before anything is laid out on the host, a matrix
    of ``nnz`` stored values of ``dt`` (with their two int64 indices) that the device cannot
    hold: SciPy would otherwise build it in host memory first (a reference is minted for the
    bytes and checked; nothing is sent)."""
    dev.port.mint((nnz * (np.dtype(dt).itemsize + 16),), np.uint8, "C")


def random(m: int, n: int, density: float = 0.01, format: str = "coo", dtype: Any = None,
           random_state: Any = None, data_rvs: Any = None, *,
           device: Any = None) -> SparseMatrix:  # noqa: A002
    """A random ``m`` x ``n`` matrix with ``density * m * n`` entries at distinct random
    positions, values from ``data_rvs`` (default uniform on [0, 1)): SciPy's
    ``scipy.sparse.random`` with the same arguments (so the same ``random_state`` gives the
    same matrix), uploaded in ``format``."""
    import scipy.sparse as sp

    m, n = check_shape((m, n))
    dt = P.value_dtype(D.float64 if dtype is None else dtype)
    if isinstance(density, (int, float, np.integer, np.floating)) and 0 <= density <= 1:
        _fits(C.device_of(device), int(round(density * m * n)), dt)  # SciPy's count
    host = sp.random(m, n, density=density, format="coo", dtype=dt,
                     random_state=random_state, data_rvs=data_rvs)
    return coo_matrix(host, device=device).asformat(_format(format))


def rand(m: int, n: int, density: float = 0.01, format: str = "coo", dtype: Any = None,
         random_state: Any = None, *, device: Any = None) -> SparseMatrix:  # noqa: A002
    """:func:`random` with uniform values."""
    return random(m, n, density, format, dtype, random_state, device=device)


def diags(diagonals: Any, offsets: Any = 0, shape: Any = None, format: str | None = None,
          dtype: Any = None, *, device: Any = None) -> SparseMatrix:  # noqa: A002
    """The matrix with ``diagonals`` (sequences, host or gpumsg arrays) at ``offsets``: SciPy's
    ``scipy.sparse.diags`` laid out on the host, uploaded in ``format`` (default CSR)."""
    import scipy.sparse as sp

    def host(d: Any) -> Any:
        return np.asarray(d) if isinstance(d, Array) else d

    if isinstance(diagonals, Array):
        diagonals = np.asarray(diagonals)
    elif isinstance(diagonals, (list, tuple)):
        diagonals = [host(d) for d in diagonals]
    arrays = [diagonals] if isinstance(diagonals, Array) else []
    dev = C.device_of(device, *arrays)
    _diagonals_fit(dev, offsets, shape, dtype)
    made = sp.diags(diagonals, offsets, shape=shape, format="coo", dtype=dtype)
    if dtype is None and np.dtype(made.dtype).kind in "biu":
        made = made.astype(np.float64)
    return coo_matrix(made, device=dev).asformat(_format(format))


def _diagonals_fit(dev: Any, offsets: Any, shape: Any, dtype: Any) -> None:
    """For a ``shape`` given to :func:`diags`: its diagonals' stored values must fit the device
    (a scalar diagonal is broadcast along the whole diagonal on the host). Arguments SciPy
    refuses are left to SciPy."""
    try:
        m, n = (int(d) for d in shape)
        ks = [int(k) for k in np.atleast_1d(np.asarray(offsets)).ravel()]
        dt = np.dtype(np.float64 if dtype is None else dtype)
    except (TypeError, ValueError, OverflowError):
        return
    nnz = sum(max(0, min(m + min(k, 0), n - max(k, 0))) for k in ks)
    _fits(dev, nnz, dt)
