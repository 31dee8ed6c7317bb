"""``repeat``: a broadcast copy for one count, a binary search and a gather for a count per
element (above the manipulation, reduction, scan, sorting and indexing modules it combines)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import _dtypes as D
from ._array import Array, _copy, asarray_host, check_device
from ._creation import arange
from ._indexing import take
from ._manipulation import _arr, _axis, broadcast_to, expand_dims, reshape, stack
from ._reductions import max as max_
from ._reductions import min as min_
from ._reductions import sum as sum_
from ._scan import cumulative_sum
from ._sorting import searchsorted

__all__ = ["repeat"]


def repeat(x: Array, repeats: Any, /, *, axis: int | None = None) -> Array:
    """Each element of ``x`` along ``axis`` (the flattened ``x`` for None) repeated: ``repeats``
    times (an int, or an integer array or sequence of one element), or ``repeats[i]`` times
    element ``i`` (a 1-D integer array, list or tuple as long as that axis), on the device.
    Raises ValueError for a negative count or a length that does not match, TypeError for
    repeats of another dtype."""
    x = _arr(x, "repeat")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    a = _axis(axis, x.ndim)
    if isinstance(repeats, (list, tuple)):  # NumPy's and CuPy's sequence of counts
        counts = np.asarray(repeats)
        if counts.dtype.kind not in "biu":
            raise TypeError(f"repeat: repeats must be integers, got {counts.dtype}")
        repeats = asarray_host(x.device, counts.astype(np.int64), D.int64)
    if isinstance(repeats, Array):
        if repeats.ndim > 1 or D.kind_of(repeats.dtype) not in "bui":
            raise TypeError("repeat: repeats must be an int or a 0-d or 1-D integer array, got "
                            f"a {repeats.ndim}-d {repeats.dtype} array")
        if repeats.ndim == 1 and repeats.shape[0] != 1:
            return _repeat_each(x, repeats, a)
        repeats = int(reshape(repeats, ()))
    r = operator.index(repeats)
    if r < 0:
        raise ValueError("repeat: repeats must be non-negative")
    v = expand_dims(x, axis=a + 1)
    shape = x.shape[:a + 1] + (r,) + x.shape[a + 1:]
    b = broadcast_to(v, shape)
    return reshape(_copy(b), x.shape[:a] + (x.shape[a] * r,) + x.shape[a + 1:])


def _repeat_each(x: Array, repeats: Array, a: int) -> Array:
    """``x`` with element ``i`` along axis ``a`` repeated ``repeats[i]`` times: output position
    ``p`` takes the first element whose running count of repeats passes ``p`` (a binary search
    of the running sums), then one gather. The count's minimum, maximum and sum are read first
    (one host read), so that a negative count or a total past int64 is refused before anything
    of the result's size is made."""
    check_device(x, repeats)
    n = x.shape[a]
    if repeats.shape[0] != n:
        raise ValueError(f"repeat: {repeats.shape[0]} repeats for an axis of length {n}")
    if n == 0:
        return _copy(x)
    counts = repeats.astype(D.int64, copy=False)  # int64 counts are read as they are
    low, high, total = (int(v) for v in stack([min_(counts), max_(counts),
                                               sum_(counts)])._to_numpy())
    if low < 0:
        raise ValueError("repeat: repeats must be non-negative")
    if high > (2**63 - 1) // n:  # the sum may have wrapped: no such result fits in memory
        raise ValueError("repeat: the result would have more than 2**63 - 1 elements")
    ends = cumulative_sum(counts)
    source = searchsorted(ends, arange(total, dtype=D.int64, device=x.device), side="right")
    return take(x, source, axis=a)
