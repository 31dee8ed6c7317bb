"""The device building blocks of the sparse formats: value and index dtypes, whole arrays,
cuSPARSE descriptors over arrays, products, and the conversions between formats.

Everything here runs on the device through existing messages: cuSPARSE SpMV/SpMM/SpGEMM and
conversions (``dev.cusparse``) and the array layer's generated kernels (sort, searchsorted,
compaction, element-wise). Two tools carry the rest:

* **gather** ``x[idx]``: the array layer's bit-exact gather (``take``);
* **coalesce** (sort entries by (major, minor) and sum duplicates): a stable argsort of the key
  ``major * n_minor + minor``, the starts of runs of equal keys (a compaction), and one
  generated kernel that sums each run's values in sorted order (:mod:`._segments`). The number
  of distinct entries sizes the result, so coalescing waits for that count (as SciPy's host
  code and CuPy's do).
"""

from __future__ import annotations

import builtins
import numbers
from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, asarray_host, new_array
from .._compact import compact as _compact
from .._compact import nonzero
from .._creation import arange
from .._elementwise import TABLE, apply, astype
from .._manipulation import concat
from .._sorting import searchsorted
from ._segments import segment_sums

__all__ = ["VALUE_DTYPES", "INT32_MAX", "value_dtype", "promote", "whole", "as_index",
           "as_values", "cusparse_matrix", "spmv", "spmm", "gather", "coalesce", "compress",
           "expand", "index_dtype_for", "is_scalar", "sort_entries", "narrow"]

#: the value types cuSPARSE computes in
VALUE_DTYPES = (D.float32, D.float64, D.complex64, D.complex128)
INT32_MAX = 2**31 - 1


def value_dtype(dt: Any, field: str = "dtype") -> np.dtype:
    """``dt`` as one of :data:`VALUE_DTYPES`, or InvalidMessage naming ``field``."""
    try:
        out = np.dtype(dt)
    except TypeError:
        out = None
    if out not in VALUE_DTYPES:
        raise InvalidMessage(f"{field}: sparse matrices hold float32, float64, complex64 or "
                             f"complex128 values, got {dt}", field=field)
    return out


def promote(*dts: np.dtype) -> np.dtype:
    """The value type two operands compute in (NumPy's promotion, as SciPy applies it; a
    half-precision or integer operand takes the matrix's precision)."""
    out = np.result_type(*[np.float32 if np.dtype(d).kind in "biu" or d == D.float16
                           or d == D.bfloat16 else d for d in dts])
    if out not in VALUE_DTYPES:
        raise TypeError(f"no sparse value type for {', '.join(str(d) for d in dts)}")
    return np.dtype(out)


def is_scalar(x: Any) -> bool:
    """A Python or NumPy number (not bool)."""
    return isinstance(x, numbers.Number) and not isinstance(x, (builtins.bool, np.bool_))


def whole(x: Array) -> Array:
    """``x`` as an array occupying its whole buffer in C order (a copy when it does not): what a
    message can name as a plain buffer."""
    if x._is_whole():
        return x
    out = new_array(x.device, x.shape, x.dtype)
    from .. import _elementwise

    _elementwise.copy_into(out, x)
    return out


def index_dtype_for(*extents: int) -> np.dtype:
    return D.int32 if builtins.max(extents, default=0) <= INT32_MAX else D.int64


def as_index(dev: Any, obj: Any, field: str, dtype: np.dtype | None = None) -> Array:
    """A whole 1-D index array on ``dev`` from an Array or a host array-like: of ``dtype``, or
    where None of its own type if that is int32 or int64 (int64 otherwise), so that checks
    see the values before they are narrowed."""
    if isinstance(obj, Array):
        if obj.device is not dev:
            raise InvalidMessage(f"{field}: on another device than the matrix; move it with "
                                 "to_device() first", field=field)
        if D.kind_of(obj.dtype) not in "iu":
            raise InvalidMessage(f"{field}: indices must be integers, got {obj.dtype}",
                                 field=field)
        x = obj
    else:
        host = np.asarray(obj)
        if host.dtype.kind not in "iu" and not (host.size == 0 and host.dtype.kind == "f"):
            raise InvalidMessage(f"{field}: indices must be integers, got {host.dtype}",
                                 field=field)
        kind = np.dtype(host.dtype)
        keep = kind if kind in (D.int32, D.int64) else D.int64
        x = asarray_host(dev, host.astype(keep), keep)
    if x.ndim != 1:
        raise InvalidMessage(f"{field}: expected a 1-D array, got shape {x.shape}", field=field)
    want = dtype if dtype is not None else (x.dtype if x.dtype in (D.int32, D.int64)
                                            else D.int64)
    if x.dtype != want:
        x = astype(x, want, copy=False)
    return whole(x)


def narrow(x: Array, dtype: np.dtype) -> Array:
    """Index array ``x`` (checked to fit) as ``dtype``."""
    return x if x.dtype == dtype else whole(astype(x, dtype, copy=False))


def as_values(dev: Any, obj: Any, field: str, dtype: Any) -> Array:
    """A whole 1-D value array on ``dev`` (converted to ``dtype``, or its own type if None)."""
    if isinstance(obj, Array):
        if obj.device is not dev:
            raise InvalidMessage(f"{field}: on another device than the matrix; move it with "
                                 "to_device() first", field=field)
        x = obj
    else:
        host = np.asarray(obj)
        if host.dtype.kind not in "biufc":
            raise InvalidMessage(f"{field}: expected numbers, got {host.dtype}", field=field)
        dt = value_dtype(dtype if dtype is not None else host.dtype, "dtype")
        x = asarray_host(dev, host.astype(dt), dt)
    if x.ndim != 1:
        raise InvalidMessage(f"{field}: expected a 1-D array, got shape {x.shape}", field=field)
    dt = value_dtype(dtype if dtype is not None else x.dtype, "dtype")
    if x.dtype != dt:
        if D.kind_of(x.dtype) == "c" and D.kind_of(dt) != "c":
            raise TypeError(f"{field}: complex values cannot become {dt}")
        x = astype(x, dt, copy=False)
    return whole(x)


def cusparse_matrix(fmt: str, shape: tuple[int, int], ptr: Array, idx: Array,
                    val: Array) -> Any:
    """A cuSPARSE descriptor (``dev.cusparse.from_buffers``) over the arrays' buffers, which
    stay theirs: dropping the handle destroys only the descriptor."""
    dev = val.device
    return dev.cusparse.from_buffers(fmt, shape, ptr.buffer, idx.buffer, val.buffer,
                                     nnz=idx.shape[0])


def spmv(handle: Any, x: Array, op: str = "N") -> Array:
    """``op(A) @ x`` as a new 1-D array (``x`` whole, of the matrix's dtype)."""
    rows, cols = handle.shape
    n = rows if op == "N" else cols
    dev = x.device
    buf = dev.cusparse.spmv(handle, x.buffer, op=op)
    return Array(buf, (n,), handle.dtype, dev)


def spmm(handle: Any, b: Array, op: str = "N") -> Array:
    """``op(A) @ B`` for a whole C-ordered 2-D ``b`` as a new C-ordered array."""
    rows, cols = handle.shape
    m = rows if op == "N" else cols
    dev = b.device
    buf = dev.cusparse.spmm(handle, b.buffer, op=op)
    return Array(buf, (m, b.shape[1]), handle.dtype, dev)


def gather(x: Array, idx: Array) -> Array:
    """``x[idx]`` for a whole 1-D value array ``x`` and integer ``idx`` (in range): a bit-exact
    generated gather."""
    from .._indexing import take

    if idx.shape[0] == 0 or x.shape[0] == 0:
        return new_array(x.device, (idx.shape[0],), x.dtype)
    return whole(take(x, idx))


def sort_entries(major: Array, minor: Array, n_minor: int) -> tuple[Array, Array, Array]:
    """The entries (major, minor) ordered by major, then minor, then position (a stable sort,
    on the device): (order: the original position of each sorted entry, sorted majors, sorted
    minors), all int32.

    One stable device-wide radix sort (the array layer's ``argsort``) of the int64 keys
    ``major * n_minor + minor`` (below 2**62 for 32-bit indices), then gathers."""
    from .._indexing import take
    from .._sorting import argsort

    keys = apply(TABLE["add"], apply(TABLE["multiply"], astype(major, D.int64), int(n_minor)),
                 astype(minor, D.int64))
    order = argsort(keys, stable=True)
    majors = whole(astype(take(major, order), D.int32, copy=False))
    minors = whole(astype(take(minor, order), D.int32, copy=False))
    return whole(astype(order, D.int32)), majors, minors


def coalesce(major: Array, minor: Array, data: Array, n_major: int,
             n_minor: int) -> tuple[Array, Array, Array]:
    """The entries (major, minor, value) sorted by (major, minor) with the values of equal
    positions summed: whole int32 arrays and the values. Waits for the number of distinct
    positions (which sizes the result). 32-bit indices only: cuSPARSE's conversions, which
    sort here, take no other."""
    nnz = data.shape[0]
    dev = data.device
    if max(n_major, n_minor, nnz) > INT32_MAX:
        raise InvalidMessage(f"a matrix of shape {(n_major, n_minor)} with {nnz} entries: "
                             "sorting entries takes 32-bit indices (cusparseCsr2cscEx2)",
                             field="shape")
    if nnz == 0:
        return new_array(dev, (0,), D.int32), new_array(dev, (0,), D.int32), data
    order, majors, minors = sort_entries(major, minor, n_minor)
    head = asarray_host(dev, np.ones(1, np.bool_), D.bool)
    if nnz > 1:
        differ = apply(TABLE["logical_or"],
                       apply(TABLE["not_equal"], majors[1:], majors[:-1]),
                       apply(TABLE["not_equal"], minors[1:], minors[:-1]))
        starts = concat([head, differ])
    else:
        starts = head
    first = nonzero(starts)[0]
    ptr = concat([first, asarray_host(dev, np.array([nnz], np.int64), D.int64)])
    # run r covers sorted positions ptr[r]..ptr[r+1]-1, which name the entries' original
    # places: one generated kernel gathers each run's values in order and sums them
    summed = segment_sums(whole(data), order, whole(ptr))
    return whole(_compact(starts, majors)), whole(_compact(starts, minors)), summed


_LEGACY: list[bool] = []


def _row_conversions(dev: Any) -> bool:
    """Whether ``dev``'s cuSPARSE has the (legacy API) row conversions: the simulator always;
    a CUDA library without them gets the binary searches instead."""
    if dev.backend != "cuda":
        return True
    if not _LEGACY:
        from ...libs._loader import load

        lib = load("cusparse")
        _LEGACY.append(lib.cusparseXcoo2csr is not None and lib.cusparseXcsr2coo is not None)
    return _LEGACY[0]


def compress(major: Array, n: int) -> Array:
    """Offsets (``n + 1``, ``major``'s index type) of the sorted positions ``major`` (each in
    [0, n)): cuSPARSE's ``cusparseXcoo2csr`` for 32-bit indices, a binary search per offset
    otherwise."""
    dev = major.device
    if major.dtype == D.int32 and _row_conversions(dev):
        buf = dev.cusparse.compress_rows(major.buffer, n, nnz=major.shape[0])
        return Array(buf, (n + 1,), D.int32, dev)
    bounds = arange(n + 1, dtype=major.dtype, device=dev)
    if major.shape[0] == 0:
        return whole(astype(apply(TABLE["multiply"], bounds, 0), major.dtype, copy=False))
    return whole(astype(searchsorted(major, bounds, side="left"), major.dtype, copy=False))


def expand(ptr: Array, nnz: int) -> Array:
    """The major position of each of the ``nnz`` entries of offsets ``ptr`` (the inverse of
    :func:`compress`): ``cusparseXcsr2coo`` for 32-bit indices, a binary search per entry
    otherwise."""
    dev = ptr.device
    if nnz == 0:
        return new_array(dev, (0,), ptr.dtype)
    if ptr.dtype == D.int32 and _row_conversions(dev):
        buf = dev.cusparse.expand_rows(ptr.buffer, nnz)
        return Array(buf, (nnz,), D.int32, dev)
    pos = arange(nnz, dtype=ptr.dtype, device=dev)
    found = searchsorted(ptr, pos, side="right")
    return whole(astype(apply(TABLE["subtract"], found, 1), ptr.dtype, copy=False))
