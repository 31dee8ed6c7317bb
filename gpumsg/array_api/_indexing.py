"""``x[key]``, ``x[key] = value``, ``take`` and ``take_along_axis``, on the device.

Basic indexing (integers, slices, ``...``, ``None``) makes a view that shares the buffer, with no
message at all; assigning to it launches one copy kernel. Integer-array indexing follows NumPy's
rules (the index arrays broadcast together; their dimensions replace the indexed ones where those
are adjacent, else they lead): the element offset of each index is computed by a generated
element-wise kernel, then one gather (or, for assignment, one scatter) kernel moves the elements.
Negative indices count from the end, as NumPy's. An index outside ``[-n, n)`` of its axis
raises IndexError: at the call for indices that come from the host (a list, a NumPy array, an
int), whose range is known there; for index arrays on the device, the kernels that use them
mark the result instead (no wait for the indices): reading it, or anything computed from it,
raises :class:`~gpumsg.errors.IndexOutOfRange` (an IndexError), the reader of a derived array
through DependencyFailed. An assignment through such an index writes no element for it, and
the assigned array then raises as well. A boolean mask
becomes the integer arrays of its ``nonzero`` (its count is read back: the result's shape depends
on it); ``x[mask] = scalar`` (or a value that broadcasts to ``x``) is a ``where`` and waits for
nothing. Duplicate indices in an assignment leave one of the values (which one is unspecified, as
in the standard).
"""

from __future__ import annotations

import builtins
import math
import operator
import threading
from typing import Any

import numpy as np

from ..messages.cudnn import IndexCheck
from . import _dtypes as D
from ._array import Array, asarray_host, c_strides, new_array
from ._codegen import ElementwiseSpec, _failed, launch_elementwise
from ._compact import compact, nonzero
from ._elementwise import broadcast_shapes
from ._expr import cast_name
from ._gather import OUT_OF_RANGE, move, take_new

__all__ = ["getitem", "setitem", "basic_view", "take", "take_along_axis"]

def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (builtins.bool, np.bool_))


def _is_basic(key: tuple[Any, ...]) -> bool:
    for k in key:
        if k is None or k is Ellipsis or isinstance(k, slice) or _is_int(k):
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


# -- advanced indexing: the plan ------------------------------------------------------------------
class _Plan:
    """``x[key]`` for a key with index arrays: ``view`` is ``x`` under the key's basic part
    (each advanced position a full slice), ``axes`` the view's axes indexed by ``arrays``
    (int64 index arrays, or ints), ``shape`` the result's shape and ``lead`` where the
    broadcast index dimensions go in it."""

    def __init__(self, x: Array, key: tuple[Any, ...]) -> None:
        items: list[Any] = []
        for k in key:
            if isinstance(k, Array) and k.device is not x.device:
                raise IndexError("an index array must be on the indexed array's device")
            if isinstance(k, (builtins.bool, np.bool_)) or (
                    isinstance(k, Array) and k.dtype == D.bool and k.ndim == 0):
                # a 0-d boolean: a new axis indexed by [0] (True) or by nothing (False)
                items.append(("new", builtins.bool(k)))
            elif isinstance(k, Array) and k.dtype == D.bool:
                items.append(("mask", k))
            elif isinstance(k, Array):
                if D.kind_of(k.dtype) not in "iu":
                    raise IndexError(f"arrays used as indices must be integer or boolean, "
                                     f"got {k.dtype}")
                items.append(("array", k))
            elif isinstance(k, (list, tuple, np.ndarray)):
                host = np.asarray(k)
                if host.dtype == np.bool_:
                    items.append(("mask", asarray_host(x.device, host, D.bool)))
                elif host.dtype.kind in "iu" or host.size == 0:
                    if host.size and host.dtype == np.uint64 and host.max() > 2 ** 63 - 1:
                        raise IndexError(f"index {host.max()} is out of bounds")
                    host = host.astype(np.int64)
                    items.append(("host", asarray_host(x.device, host, D.int64),
                                  (int(host.min()), int(host.max())) if host.size else None))
                else:
                    raise IndexError(f"arrays used as indices must be integer or boolean, "
                                     f"got {host.dtype}")
            elif k is None or k is Ellipsis or isinstance(k, slice):
                items.append(("basic", k))
            elif _is_int(k) or (isinstance(k, Array) and k.ndim == 0):
                items.append(("int", operator.index(k)))
            else:
                raise IndexError(f"only integers, slices, ellipsis, None, integer and boolean "
                                 f"arrays are valid indices, got {type(k).__name__}")
        consuming = sum(k.ndim if kind == "mask" else 1 for kind, k, *_ in items
                        if kind in ("mask", "array", "host", "int")
                        or (kind == "basic" and k is not None and k is not Ellipsis))
        if consuming > x.ndim:
            raise IndexError(f"too many indices for an array of {x.ndim} dimensions")
        basic: list[Any] = []
        advanced: list[tuple[int, Any]] = []  # (position in the view, index) pairs
        #: the positions indexed by device arrays, whose range the kernels check
        self.unchecked: list[int] = []
        pos = 0
        rest = x.ndim - consuming
        axis = 0
        for kind, k, *span in items:
            if kind == "basic" and k is Ellipsis:
                basic.append(Ellipsis)
                pos += rest
                axis += rest
                rest = 0
            elif kind == "basic" and k is None:
                basic.append(None)
                pos += 1
            elif kind == "basic":
                basic.append(k)
                pos += 1
                axis += 1
            elif kind == "new":
                basic.append(None)
                advanced.append((pos, asarray_host(x.device, np.zeros(1 if k else 0, np.int64),
                                                   D.int64)))
                pos += 1
            elif kind == "mask":
                dims = x.shape[axis:axis + k.ndim]
                # a mask's extent is the array's, or 0 (an empty mask: nothing selected)
                if len(dims) != k.ndim or any(m not in (d, 0) for m, d in zip(k.shape, dims)):
                    raise IndexError(f"boolean index of shape {k.shape} does not match the "
                                     f"indexed dimensions {dims}")
                for part in (nonzero(k) if k.ndim else ()):
                    basic.append(slice(None))
                    advanced.append((pos, part))
                    pos += 1
                axis += k.ndim
            else:
                d = x.shape[axis]
                if kind == "int" and not -d <= k < d:
                    raise IndexError(f"index {k} is out of bounds for axis {axis} of size {d}")
                if kind == "host" and span[0] is not None:
                    lo, hi = span[0]
                    if lo < -d or hi >= d:
                        raise IndexError(f"index {lo if lo < -d else hi} is out of bounds for "
                                         f"axis {axis} of size {d}")
                if kind == "array":
                    self.unchecked.append(pos)
                basic.append(slice(None))
                advanced.append((pos, k))
                pos += 1
                axis += 1
        self.view = basic_view(x, tuple(basic))
        self.axes = [p for p, _ in advanced]
        self.arrays = [a for _, a in advanced]
        bshape = broadcast_shapes(*(a.shape for a in self.arrays if isinstance(a, Array)))
        for ax in self.axes:
            if self.view.shape[ax] == 0 and math.prod(bshape) > 0:
                raise IndexError(f"index out of bounds for axis {ax} of size 0")
        self.bshape = bshape
        others = [k for k in range(self.view.ndim) if k not in self.axes]
        adjacent = self.axes == list(range(self.axes[0], self.axes[-1] + 1))
        self.lead = self.axes[0] if adjacent else 0
        before = [k for k in others if k < self.lead] if adjacent else []
        after = [k for k in others if k not in before]
        self.others = (before, after)
        self.shape = (tuple(self.view.shape[k] for k in before) + bshape +
                      tuple(self.view.shape[k] for k in after))

    def offsets(self) -> Array:
        """The element offset (from the view's own offset) of each broadcast index: a
        generated element-wise kernel, int64, of the broadcast shape. Extents, strides and the
        ints' part are scalar arguments, so one kernel serves every shape. An index of a device
        array outside ``[-d, d)`` gives OUT_OF_RANGE (the checked moves skip it)."""
        view, dev = self.view, self.view.device
        const = 0
        ins: list[tuple[str, np.dtype, bool]] = [("c", D.int64, True)]
        casts: list[np.dtype] = [D.int64]
        ops: list[Any] = []
        terms = ["c"]
        tests: list[str] = []
        for j, (pos, a) in enumerate(zip(self.axes, self.arrays)):
            d, s = view.shape[pos], view.strides[pos]
            if isinstance(a, Array):
                ins += [(f"i{j}", a.dtype, False), (f"d{j}", D.int64, True),
                        (f"s{j}", D.int64, True)]
                ops += [a._operand(self.bshape), d, s]
                if pos not in self.unchecked:  # in range: only negative ones move
                    casts += [D.int64] * 3
                    terms.append(f"((i{j} % d{j} + d{j}) % d{j}) * s{j}")
                elif a.dtype == D.uint64:  # compared as unsigned: 2**64 - 1 is not -1
                    casts += [D.uint64, D.int64, D.int64]
                    tests.append(f"(i{j} < d{j})")
                    terms.append(f"{cast_name(D.int64)}(i{j}) * s{j}")
                else:
                    casts += [D.int64] * 3
                    tests.append(f"(i{j} >= -d{j} && i{j} < d{j})")
                    terms.append(f"((i{j} + d{j}) % d{j}) * s{j}")
            elif d:
                const += (a % d) * s
        text = "out = " + " + ".join(terms)
        if tests:
            text = f"out = ({' && '.join(tests)}) ? ({' + '.join(terms)}) : {OUT_OF_RANGE}"
        out = new_array(dev, self.bshape, D.int64)
        name = "index_offsets_checked" if tests else "index_offsets"
        spec = ElementwiseSpec(name, text, tuple(ins), tuple(casts), (("out", D.int64),))
        out._wrote(launch_elementwise(dev, spec, self.bshape, [out._operand()], [const] + ops))
        return out

    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Over the result's dimensions: the strides into the view, and into the offsets."""
        before, after = self.others
        ostr = c_strides(self.bshape)
        nb = len(self.bshape)
        vs = tuple(self.view.strides[k] for k in before) + (0,) * nb + tuple(
            self.view.strides[k] for k in after)
        os_ = (0,) * len(before) + tuple(0 if d == 1 else s for d, s in
                                         zip(self.bshape, ostr)) + (0,) * len(after)
        return vs, os_


def _move(plan: _Plan, dst: Array, src: Array, scatter: bool, written: Array,
          field: str) -> None:
    """Launch the gather (``dst`` is the new result) or the scatter (``src`` the values, C
    order over the result's shape) and record it on ``written`` (the array whose buffer it
    writes). With device index arrays the move is checked: an IndexCheck then fails
    ``written`` with IndexOutOfRange (naming ``field``) if an index was out of range."""
    if math.prod(plan.shape) == 0:
        return
    vs, os_ = plan.layout()
    dev = dst.device
    flag = token = None
    if plan.unchecked:
        flag, token = _thread_flag(dev)
    written._wrote(move(dst, src, plan.view._offset, plan.offsets(), plan.shape, vs, os_,
                        scatter, flag, token or 1))
    if flag is not None:
        extents = ", ".join(str(plan.view.shape[p]) for p in plan.unchecked)
        text = f"{field}: an index lies outside [-n, n) of its axis (n: {extents})"
        checked = dev.port.send_writing(IndexCheck(flag, written.buffer, field, text, token),
                                        written.buffer)
        written._wrote(checked)


#: the device attribute holding {thread ident: [device generation, flag buffer, its zeroing's
#: future, last token]}: each thread's i32 flag of checked gathers and scatters on the device
_FLAGS_ATTR = "_array_index_flags"
_FLAGS_SIZE = 1024
_flags_lock = threading.Lock()
_TOKENS = (1 << 31) - 1


def _thread_flag(dev: Any) -> tuple[Any, int]:
    """This thread's index flag on ``dev`` (a one-int32 buffer's future) and a token no
    earlier move of the thread stored in it. A checked move stores its token where an index
    is out of range and its IndexCheck looks for that token, so the flag is zeroed once, when
    made, not before every move (two messages, an allocation and a memset, a gather used to
    spend on it).
    The flag is the thread's own: each thread posts a move and its check one after the other,
    and the flag's reads and writes order them on the device, so no other move can store
    into it between the two (one flag shared by threads could lose a token stored by one
    thread's move under another's). A token repeats after 2**31 - 1 moves of one thread; a
    flag still holding it then fails a check that found nothing (an error, never a wrong
    result). A flag whose allocation or zeroing failed, or of an earlier generation of the
    device, is made again."""
    me = threading.get_ident()
    table = getattr(dev, _FLAGS_ATTR, None)
    entry = table.get(me) if table is not None else None
    if entry is None or entry[0] != dev.generation or _failed(entry[1]) or _failed(entry[2]):
        buf = dev.alloc((1,), "i32")
        entry = [dev.generation, buf, dev.memset(buf, 0), 0]
        with _flags_lock:
            table = getattr(dev, _FLAGS_ATTR, None)
            if table is None or len(table) >= _FLAGS_SIZE:
                table = {}
                setattr(dev, _FLAGS_ATTR, table)
            table[me] = entry
    entry[3] = entry[3] % _TOKENS + 1
    return entry[1], entry[3]


def getitem(x: Array, key: Any, field: str = "key") -> Array:
    tkey = key if isinstance(key, tuple) else (key,)
    if _is_basic(tkey):
        return basic_view(x, tuple(int(k) if isinstance(k, Array) else k for k in tkey))
    if (len(tkey) == 1 and isinstance(tkey[0], Array) and tkey[0].dtype == D.bool
            and tkey[0].ndim and tkey[0].shape == x.shape and tkey[0].device is x.device):
        return compact(tkey[0], x)  # a mask over every dimension: one compaction
    plan = _Plan(x, tkey)
    if len(plan.arrays) == 1 and plan.unchecked and math.prod(plan.shape):
        return _take(plan, field)
    out = new_array(x.device, plan.shape, x.dtype)
    _move(plan, out, plan.view, False, out, field)
    return out


def _take(plan: _Plan, field: str) -> Array:
    """``x[key]`` with one device index array (any shape, on one axis): the checked gather
    that computes each offset itself, allocating its output, and the check (two messages;
    the offsets, a zeroed flag and its free apart took eight)."""
    (index,) = plan.arrays
    (axis,) = plan.axes
    view, dev = plan.view, plan.view.device
    vs, _ = plan.layout()
    before, after = plan.others
    at = (0,) * len(before) + index._operand(plan.bshape).strides + (0,) * len(after)
    flag, token = _thread_flag(dev)
    out = take_new(view, index, axis, plan.shape, vs, at, flag, token)
    text = f"{field}: an index lies outside [-n, n) of its axis (n: {view.shape[axis]})"
    out._wrote(dev.port.send_writing(IndexCheck(flag, out.buffer.ref, field, text, token),
                                     out.buffer))
    return out


def setitem(x: Array, key: Any, value: Any) -> None:
    from ._elementwise import cast_into, where

    tkey = key if isinstance(key, tuple) else (key,)
    if isinstance(value, Array) and value.device is not x.device:
        raise ValueError("the value must be on the array's device")
    if _is_basic(tkey):
        view = basic_view(x, tuple(int(k) if isinstance(k, Array) else k for k in tkey))
        cast_into(view, value)
        x._buf = view._buf
        return
    if (len(tkey) == 1 and isinstance(tkey[0], Array) and tkey[0].dtype == D.bool
            and tkey[0].shape == x.shape and tkey[0].device is x.device
            and (not isinstance(value, Array) or value.ndim == 0)):
        # x[mask] = scalar: a where over x, no count needed
        val = value if isinstance(value, Array) else _scalar_array(x, value)
        cast_into(x, where(tkey[0], val, x))
        return
    plan = _Plan(x, tkey)
    vals = new_array(x.device, plan.shape, x.dtype)
    if math.prod(plan.shape):
        cast_into(vals, value)  # converts, broadcasts, and reads an aliased value first
    _move(plan, plan.view, vals, True, x, "key")


def _scalar_array(x: Array, value: Any) -> Array:
    from ._elementwise import cast_into

    out = new_array(x.device, (), x.dtype)
    cast_into(out, value)
    return out


def _index_array(x: Array, indices: Any, name: str) -> Array:
    if not isinstance(indices, Array) or D.kind_of(indices.dtype) not in "iu":
        raise TypeError(f"{name}: indices must be an integer array")
    if indices.device is not x.device:
        raise ValueError(f"{name}: indices must be on the array's device")
    return indices


def take(x: Array, indices: Array, /, *, axis: int | None = None) -> Array:
    """Elements of ``x`` at ``indices`` along ``axis`` (a gather on the device)."""
    if not isinstance(x, Array):
        raise TypeError("take: x must be an array")
    idx = _index_array(x, indices, "take")
    if axis is None:
        if x.ndim != 1:
            raise ValueError("take: axis is required for arrays of more than one dimension")
        axis = 0
    ax = operator.index(axis)
    if not -x.ndim <= ax < x.ndim:
        raise ValueError(f"take: axis {ax} is out of range")
    ax %= x.ndim
    return getitem(x, (slice(None),) * ax + (idx,), "indices")


def take_along_axis(x: Array, indices: Array, /, *, axis: int = -1) -> Array:
    """``x`` gathered at ``indices`` along ``axis``; the other dimensions broadcast (a gather
    on the device)."""
    from ._creation import arange
    from ._manipulation import reshape

    if not isinstance(x, Array):
        raise TypeError("take_along_axis: x must be an array")
    idx = _index_array(x, indices, "take_along_axis")
    if idx.ndim != x.ndim:
        raise ValueError("take_along_axis: x and indices must have the same number of "
                         "dimensions")
    ax = operator.index(axis)
    if not -x.ndim <= ax < x.ndim:
        raise ValueError(f"take_along_axis: axis {ax} is out of range")
    ax %= x.ndim
    key: list[Any] = []
    for k in range(x.ndim):
        if k == ax:
            key.append(idx)
        else:
            shape = [1] * x.ndim
            shape[k] = x.shape[k]
            key.append(reshape(arange(x.shape[k], dtype=D.int64, device=x.device),
                               tuple(shape)))
    return getitem(x, tuple(key), "indices")
