"""Reading a constructor's first argument, as SciPy's ``csr_matrix(arg1, shape, dtype, copy)``
takes it: another sparse matrix, a SciPy sparse matrix, a dense gpumsg array, a host array-like,
a shape ``(M, N)``, ``(data, indices, indptr)`` or ``(data, (row, col))``. Index arrays given
by the caller are checked against the shape (one read of a few device reductions), since
cuSPARSE would read out of bounds where SciPy raises."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, asarray_host, resolve_device
from .._creation import arange
from .._elementwise import TABLE, apply, astype
from .._manipulation import concat, diff, reshape
from .._reductions import any as _any
from .._reductions import max as _max
from .._reductions import min as _min
from .._sorting import searchsorted
from . import _primitives as P
from ._base import check_shape

__all__ = ["is_shape", "device_of", "upload_scipy", "check_compressed", "check_coo",
           "host_dtype"]


def is_shape(arg: Any) -> bool:
    """Whether ``arg`` is ``(M, N)`` of ints."""
    if not isinstance(arg, tuple) or len(arg) != 2:
        return False
    try:
        operator.index(arg[0])
        operator.index(arg[1])
    except TypeError:
        return False
    return True


def device_of(device: Any, *arrays: Any) -> Any:
    """The device of the first gpumsg array among ``arrays``, else ``device`` (or the
    default). An explicit ``device`` must agree with the arrays'."""
    for a in arrays:
        if isinstance(a, Array):
            if device is not None and resolve_device(device) is not a.device:
                raise InvalidMessage("device: the arrays live on another device", field="device")
            return a.device
    return resolve_device(device)


def host_dtype(dt: np.dtype, dtype: Any) -> np.dtype:
    """The value type of host data of ``dt`` (``dtype`` overrides)."""
    return P.value_dtype(dtype if dtype is not None else dt)


def upload_scipy(dev: Any, m: Any, dtype: Any) -> tuple[Array, Array, Array, bool]:
    """The arrays of the SciPy matrix ``m`` (CSR, CSC or COO) on ``dev`` as (ptr or row, indices
    or col, data), int32 indices where they fit, and whether they are canonical."""
    dt = host_dtype(m.dtype, dtype)
    if m.format == "coo":
        it = P.index_dtype_for(*m.shape, m.nnz)
        rows, cols = np.asarray(m.row), np.asarray(m.col)
        first = asarray_host(dev, rows.astype(it), it)
        second = asarray_host(dev, cols.astype(it), it)
        canonical = bool(getattr(m, "has_canonical_format", False))
    else:
        m.sum_duplicates()  # sorts the indices too (on the host, where the matrix is)
        it = P.index_dtype_for(*m.shape, m.nnz)
        first = asarray_host(dev, m.indptr.astype(it), it)
        second = asarray_host(dev, m.indices.astype(it), it)
        canonical = True
    data = np.asarray(m.data)
    if data.dtype.kind == "c" and np.dtype(dt).kind != "c":
        raise TypeError(f"complex values cannot become {dt}")
    return first, second, asarray_host(dev, data.astype(dt), dt), canonical


def _read_stats(parts: list[Array]) -> np.ndarray:
    """One read of several int64 scalars computed on the device."""
    flat = concat([reshape(astype(p, D.int64), (1,)) for p in parts])
    return np.asarray(flat)


def _unordered(first: Array, second: Array, same: Array | None = None) -> Array:
    """Whether some neighbouring entries are out of (first, second) order or repeat a
    position, ``same`` (where given) saying which neighbours share their major index: an int64
    0/1 scalar, computed on the device."""
    a0, a1 = first[:-1], first[1:]
    b0, b1 = second[:-1], second[1:]
    ties = apply(TABLE["equal"], a1, a0) if same is None else same
    bad = apply(TABLE["logical_and"], ties, apply(TABLE["less_equal"], b1, b0))
    if same is None:
        bad = apply(TABLE["logical_or"], bad, apply(TABLE["less"], a1, a0))
    return astype(_any(bad), D.int64)


def check_compressed(indptr: Array, indices: Array, nnz: int, shape: Any,
                     major_axis: int) -> tuple[int, int, bool]:
    """Check CSR/CSC arrays (offsets from 0 to nnz, non-decreasing; indices in range) and
    answer the shape, inferred as SciPy does where ``shape`` is None (major extent from the
    offsets, minor extent from the largest index), and whether the arrays are canonical
    (indices increasing within each row or column: sorted, no repeats). One read."""
    nmajor = indptr.shape[0] - 1
    if nmajor < 0:
        raise InvalidMessage("indptr: needs at least one offset", field="indptr")
    if indices.shape[0] != nnz:
        raise InvalidMessage(f"indices: {indices.shape[0]} indices for {nnz} values",
                             field="indices")
    parts = [indptr[0], indptr[-1]]
    if nmajor > 0:
        parts.append(_min(diff(indptr)))
    if nnz > 1:
        # the major index of each entry by binary search (safe on offsets not yet checked)
        pos = arange(nnz, dtype=indptr.dtype, device=indptr.device)
        major = searchsorted(indptr, pos, side="right")
        parts.append(_unordered(major, indices, apply(TABLE["equal"], major[1:], major[:-1])))
    if nnz:
        parts += [_min(indices), _max(indices)]
    stats = _read_stats(parts)
    canonical = nnz <= 1 or not stats[3 if nmajor > 0 else 2]
    if stats[0] != 0 or stats[1] != nnz:
        raise InvalidMessage(f"indptr: offsets must run from 0 to nnz={nnz}, got "
                             f"{stats[0]} to {stats[1]}", field="indptr")
    if nmajor > 0 and stats[2] < 0:
        raise InvalidMessage("indptr: offsets must not decrease", field="indptr")
    lo, hi = (int(stats[-2]), int(stats[-1])) if nnz else (0, -1)
    if shape is None:
        dims = [nmajor, hi + 1]
        m, n = dims if major_axis == 0 else dims[::-1]
    else:
        m, n = check_shape(shape)
        if (m, n)[major_axis] != nmajor:
            raise InvalidMessage(f"indptr: {nmajor + 1} offsets do not fit shape {(m, n)}",
                                 field="indptr")
    nminor = (m, n)[1 - major_axis]
    if lo < 0 or hi >= nminor:
        raise InvalidMessage(f"indices: values from {lo} to {hi} fall outside 0..{nminor - 1}",
                             field="indices")
    return m, n, canonical


def check_coo(row: Array, col: Array, nnz: int, shape: Any) -> tuple[int, int, bool]:
    """Check COO index arrays against ``shape`` (inferred from the largest indices where
    None), and say whether the entries are canonical (sorted by row, then column, each
    position once). One read."""
    if row.shape[0] != nnz or col.shape[0] != nnz:
        raise InvalidMessage(f"row, col: {row.shape[0]} rows and {col.shape[0]} columns for "
                             f"{nnz} values", field="row")
    if nnz:
        parts = [_min(row), _max(row), _min(col), _max(col)]
        if nnz > 1:
            parts.append(_unordered(row, col))
        s = _read_stats(parts)
    else:
        s = np.array([0, -1, 0, -1])
    canonical = nnz <= 1 or not s[4]
    if shape is None:
        m, n = int(s[1]) + 1, int(s[3]) + 1
    else:
        m, n = check_shape(shape)
    if s[0] < 0 or s[1] >= m:
        raise InvalidMessage(f"row: indices from {s[0]} to {s[1]} fall outside 0..{m - 1}",
                             field="row")
    if s[2] < 0 or s[3] >= n:
        raise InvalidMessage(f"col: indices from {s[2]} to {s[3]} fall outside 0..{n - 1}",
                             field="col")
    return m, n, canonical
