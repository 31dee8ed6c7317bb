"""``x[key]`` and ``x[key] = value``.

Basic indexing (integers, slices, ``...``, ``None``) makes a view that shares the buffer, with no
message at all; assigning to it launches one copy kernel. Integer-array and boolean-mask indexing
still go through host memory (a copy out, NumPy's indexing, a copy in): correct, but each such
call waits for the array's producers. Their device kernels need a gather and a compaction
(``nonzero``, CUB's select), which are not generated yet.
"""

from __future__ import annotations

import builtins
import operator
from typing import Any

import numpy as np

from . import _dtypes as D
from ._array import Array, asarray_host

__all__ = ["getitem", "setitem", "basic_view"]


def _is_basic(key: tuple[Any, ...]) -> bool:
    for k in key:
        if k is None or k is Ellipsis or isinstance(k, slice):
            continue
        if isinstance(k, builtins.bool) or isinstance(k, np.bool_):
            return False
        if isinstance(k, (int, np.integer)):
            continue
        if isinstance(k, Array) and k.ndim == 0 and D.kind_of(k.dtype) in "iu":
            continue  # a 0-d integer array indexes like an int
        return False
    return True


def basic_view(x: Array, key: Any) -> Array:
    """The view ``x[key]`` for a basic index; IndexError for an index out of range."""
    if not isinstance(key, tuple):
        key = (key,)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consuming = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consuming > x.ndim:
        raise IndexError(f"too many indices for an array of {x.ndim} dimensions")
    if n_ell == 0:
        key = key + (Ellipsis,)
    shape: list[int] = []
    strides: list[int] = []
    offset = x._offset
    axis = 0
    for k in key:
        if k is None:
            shape.append(1)
            strides.append(0)
        elif k is Ellipsis:
            for _ in range(x.ndim - consuming):
                shape.append(x.shape[axis])
                strides.append(x.strides[axis])
                axis += 1
        elif isinstance(k, slice):
            d = x.shape[axis]
            start, stop, step = k.indices(d)
            n = len(range(start, stop, step))
            if n > 0:
                offset += start * x.strides[axis]
            shape.append(n)
            strides.append(x.strides[axis] * step)
            axis += 1
        else:
            i = operator.index(k)
            d = x.shape[axis]
            if not -d <= i < d:
                raise IndexError(f"index {i} is out of bounds for axis {axis} of size {d}")
            offset += (i % d) * x.strides[axis]
            axis += 1
    return x._view(tuple(shape), tuple(strides), offset)


def _host_key(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple(_host_key(k) for k in key)
    if isinstance(key, Array):
        return key._to_numpy()
    return key


def getitem(x: Array, key: Any) -> Array:
    tkey = key if isinstance(key, tuple) else (key,)
    if _is_basic(tkey):
        return basic_view(x, tuple(int(k) if isinstance(k, Array) else k for k in tkey))
    for k in tkey:
        if isinstance(k, Array) and k.device is not x.device:
            raise IndexError("an index array must be on the indexed array's device")
    host = x._to_numpy()
    try:
        result = host[_host_key(key)]
    except IndexError:
        raise
    except (ValueError, TypeError) as exc:
        raise IndexError(str(exc)) from None
    return asarray_host(x.device, np.asarray(result), x.dtype)


def setitem(x: Array, key: Any, value: Any) -> None:
    from ._elementwise import cast_into

    tkey = key if isinstance(key, tuple) else (key,)
    if isinstance(value, Array) and value.device is not x.device:
        raise ValueError("the value must be on the array's device")
    if _is_basic(tkey):
        view = basic_view(x, tuple(int(k) if isinstance(k, Array) else k for k in tkey))
        cast_into(view, value)
        x._buf = view._buf
        return
    host = x._to_numpy()
    val = value._to_numpy() if isinstance(value, Array) else value
    host[_host_key(key)] = val
    cast_into(x, asarray_host(x.device, host, x.dtype))


def _index_array(x: Array, indices: Any, name: str) -> np.ndarray:
    if not isinstance(indices, Array) or D.kind_of(indices.dtype) not in "iu":
        raise TypeError(f"{name}: indices must be an integer array")
    if indices.device is not x.device:
        raise ValueError(f"{name}: indices must be on the array's device")
    return indices._to_numpy()


def take(x: Array, indices: Array, /, *, axis: int | None = None) -> Array:
    """Elements of ``x`` at ``indices`` along ``axis`` (through host memory, as integer-array
    indexing)."""
    if not isinstance(x, Array):
        raise TypeError("take: x must be an array")
    idx = _index_array(x, indices, "take")
    if axis is None:
        if x.ndim != 1:
            raise ValueError("take: axis is required for arrays of more than one dimension")
        axis = 0
    return asarray_host(x.device, np.take(x._to_numpy(), idx, axis=axis), x.dtype)


def take_along_axis(x: Array, indices: Array, /, *, axis: int = -1) -> Array:
    """``x`` gathered at ``indices`` along ``axis`` (through host memory)."""
    if not isinstance(x, Array):
        raise TypeError("take_along_axis: x must be an array")
    idx = _index_array(x, indices, "take_along_axis")
    return asarray_host(x.device, np.take_along_axis(x._to_numpy(), idx, axis=axis), x.dtype)


__all__ += ["take", "take_along_axis"]
