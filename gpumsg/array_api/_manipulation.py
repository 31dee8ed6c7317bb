"""Manipulation functions. Whatever can be a view (a new shape and strides over the same
buffer) is one, with no message; the rest are copy kernels into a new array."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from . import _dtypes as D
from ._array import Array, _copy, c_strides, check_device, new_array
from ._concat import concat_new
from ._elementwise import broadcast_shapes

__all__ = ["reshape", "permute_dims", "expand_dims", "squeeze", "concat", "stack",
           "broadcast_to", "broadcast_arrays", "flip", "roll", "tile", "moveaxis",
           "unstack"]


def _arr(x: Any, name: str) -> Array:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    return x


def _axis(a: int, ndim: int) -> int:
    a = operator.index(a)
    if not -ndim <= a < ndim:
        raise ValueError(f"axis {a} is out of range for {ndim} dimensions")
    return a % ndim


def reshape(x: Array, /, shape: Any, *, copy: bool | None = None) -> Array:
    x = _arr(x, "reshape")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ValueError("reshape: at most one -1")
    if -1 in shape:
        rest = math.prod(d for d in shape if d != -1)
        if rest == 0 or x.size % rest:
            raise ValueError(f"cannot reshape {x.shape} into {shape}")
        shape = tuple(x.size // rest if d == -1 else d for d in shape)
    if math.prod(shape) != x.size or any(d < 0 for d in shape):
        raise ValueError(f"cannot reshape {x.shape} into {shape}")
    if x._is_contiguous() and not copy:
        return x._view(shape, c_strides(shape), x._offset)
    if copy is False:
        raise ValueError("reshape: copy=False but the array is not contiguous")
    y = _copy(x)
    return y._view(shape, c_strides(shape), y._offset)


def permute_dims(x: Array, /, axes: tuple[int, ...]) -> Array:
    x = _arr(x, "permute_dims")
    axes = tuple(_axis(a, x.ndim) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute_dims: {axes} is not a permutation of {x.ndim} axes")
    return x._view(tuple(x.shape[a] for a in axes), tuple(x.strides[a] for a in axes),
                   x._offset)


def matrix_transpose(x: Array, /) -> Array:
    return _arr(x, "matrix_transpose").mT


def expand_dims(x: Array, /, axis: int = 0) -> Array:
    x = _arr(x, "expand_dims")
    nd = x.ndim + 1
    a = operator.index(axis)
    if not -nd <= a < nd:
        raise IndexError(f"expand_dims: axis {a} is out of range")
    a %= nd
    return x._view(x.shape[:a] + (1,) + x.shape[a:], x.strides[:a] + (0,) + x.strides[a:],
                   x._offset)


def squeeze(x: Array, /, axis: Any) -> Array:
    x = _arr(x, "squeeze")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(_axis(a, x.ndim) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("squeeze: repeated axis")
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} has size {x.shape[a]}, not 1")
    keep = [k for k in range(x.ndim) if k not in axes]
    return x._view(tuple(x.shape[k] for k in keep), tuple(x.strides[k] for k in keep),
                   x._offset)


def broadcast_to(x: Array, /, shape: tuple[int, ...]) -> Array:
    x = _arr(x, "broadcast_to")
    shape = tuple(int(d) for d in shape)
    if broadcast_shapes(x.shape, shape) != shape:
        raise ValueError(f"cannot broadcast {x.shape} to {shape}")
    op = x._operand(shape)
    return x._view(shape, op.strides, x._offset)


def broadcast_arrays(*arrays: Array) -> list[Array]:
    check_device(*arrays)
    shape = broadcast_shapes(*(_arr(a, "broadcast_arrays").shape for a in arrays))
    return [broadcast_to(a, shape) for a in arrays]


def concat(arrays: Any, /, *, axis: int | None = 0) -> Array:
    arrays = [_arr(a, "concat") for a in arrays]
    if not arrays:
        raise ValueError("concat needs at least one array")
    dev = check_device(*arrays)
    dt = D.result_type(*arrays)
    if axis is None:
        arrays = [reshape(a, (-1,)) for a in arrays]
        axis = 0
    nd = arrays[0].ndim
    if nd == 0:
        raise ValueError("concat: 0-d arrays cannot be concatenated")
    ax = _axis(axis, nd)
    for a in arrays:
        if a.ndim != nd or a.shape[:ax] + a.shape[ax + 1:] != \
                arrays[0].shape[:ax] + arrays[0].shape[ax + 1:]:
            raise ValueError("concat: shapes differ outside the axis")
    total = sum(a.shape[ax] for a in arrays)
    shape = arrays[0].shape[:ax] + (total,) + arrays[0].shape[ax + 1:]
    filled = [a for a in arrays if a.shape[ax]]
    if math.prod(shape) and all(a.dtype == dt for a in filled):
        return concat_new(dev, filled, ax, shape, dt)  # one launch per eight inputs
    out = new_array(dev, shape, dt)
    start = 0
    for a in arrays:
        n = a.shape[ax]
        if n:
            key = (slice(None),) * ax + (slice(start, start + n),)
            out[key] = a
        start += n
    return out


def stack(arrays: Any, /, *, axis: int = 0) -> Array:
    arrays = [_arr(a, "stack") for a in arrays]
    if not arrays:
        raise ValueError("stack needs at least one array")
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError("stack: arrays must have one shape")
    nd = arrays[0].ndim + 1
    a = operator.index(axis)
    if not -nd <= a < nd:
        raise ValueError(f"stack: axis {a} is out of range")
    return concat([expand_dims(x, axis=a % nd) for x in arrays], axis=a % nd)


def flip(x: Array, /, *, axis: Any = None) -> Array:
    x = _arr(x, "flip")
    axes = range(x.ndim) if axis is None else (
        (axis,) if isinstance(axis, (int, np.integer)) else axis)
    axes = {_axis(a, x.ndim) for a in axes}
    offset = x._offset
    strides = list(x.strides)
    for a in axes:
        if x.shape[a] > 0:
            offset += (x.shape[a] - 1) * x.strides[a]
        strides[a] = -x.strides[a]
    return x._view(x.shape, tuple(strides), offset)


def roll(x: Array, /, shift: Any, *, axis: Any = None) -> Array:
    x = _arr(x, "roll")
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), x.shape)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(shifts) != len(axes):
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        else:
            raise ValueError("roll: shift and axis differ in length")
    out = x
    for s, a in zip(shifts, axes):
        a = _axis(a, x.ndim)
        n = x.shape[a]
        if n == 0:
            continue
        s = int(s) % n
        if s == 0:
            continue
        pre = (slice(None),) * a
        out = concat([out[pre + (slice(n - s, n),)], out[pre + (slice(0, n - s),)]], axis=a)
    return out if out is not x else _copy(x)


def tile(x: Array, repetitions: tuple[int, ...], /) -> Array:
    x = _arr(x, "tile")
    reps = tuple(int(r) for r in repetitions)
    nd = max(x.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + reps
    shape = (1,) * (nd - x.ndim) + x.shape
    base = reshape(x, shape)
    # (r0, d0, r1, d1, ...) broadcast, then merged
    exp_shape = []
    exp_view_shape = []
    for r, d in zip(reps, shape):
        exp_shape += [r, d]
        exp_view_shape += [1, d]
    v = reshape(base, tuple(exp_view_shape))
    b = broadcast_to(v, tuple(exp_shape))
    return reshape(_copy(b), tuple(r * d for r, d in zip(reps, shape)))


def moveaxis(x: Array, source: Any, destination: Any, /) -> Array:
    x = _arr(x, "moveaxis")
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    src = tuple(_axis(s, x.ndim) for s in src)
    dst = tuple(_axis(d, x.ndim) for d in dst)
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("moveaxis: source and destination must be distinct and match")
    order = [k for k in range(x.ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, tuple(order))


def unstack(x: Array, /, *, axis: int = 0) -> tuple[Array, ...]:
    x = _arr(x, "unstack")
    if x.ndim == 0:
        raise ValueError("unstack: a 0-d array")
    a = _axis(axis, x.ndim)
    pre = (slice(None),) * a
    return tuple(x[pre + (i,)] for i in range(x.shape[a]))


__all__ += ["matrix_transpose"]


def diff(x: Array, /, *, axis: int = -1, n: int = 1, prepend: Array | None = None,
         append: Array | None = None) -> Array:
    """The ``n``-th forward difference along ``axis`` (slices and a subtraction kernel)."""
    from ._elementwise import TABLE, apply

    x = _arr(x, "diff")
    if x.ndim == 0:
        raise ValueError("diff needs at least one dimension")
    n = operator.index(n)
    if n < 0:
        raise ValueError("diff: n must be non-negative")
    a = _axis(axis, x.ndim)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = concat(parts, axis=a)
    pre = (slice(None),) * a
    name = "not_equal" if x.dtype == D.bool else "subtract"
    for _ in range(n):
        if x.shape[a] == 0:
            break
        x = apply(TABLE[name], x[pre + (slice(1, None),)], x[pre + (slice(None, -1),)])
    return x


__all__ += ["diff"]
