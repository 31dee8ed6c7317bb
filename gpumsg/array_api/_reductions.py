"""Reductions: each is a map expression, a combiner and an identity (:class:`ReductionSpec`),
generated into one kernel (one block per output element) and twinned with NumPy on the
simulator. ``var``/``std`` and ``argmax``/``argmin`` are two launches (the mean, or the extreme
value, then a reduction that reads it broadcast)."""

from __future__ import annotations

import builtins
import contextlib
from typing import Any

import numpy as np

from . import _dtypes as D
from . import _fusion
from ._array import Array
from ._codegen import Operand, ReductionSpec, _c_strides, reduction_new, reduction_new_of
from ._expr import cast_name, float_text

__all__ = ["sum", "prod", "max", "min", "mean", "var", "std", "all", "any", "count_nonzero",
           "argmax", "argmin", "reduce"]

_pybool = builtins.bool
_nothing = contextlib.nullcontext


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in items:
        a = int(a)
        if not -ndim <= a < builtins.max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
            raise ValueError(f"axis {a} is out of range for {ndim} dimensions")
        if ndim:
            a %= ndim
        if a in out:
            raise ValueError(f"axis {a} repeated")
        out.append(a)
    return tuple(sorted(out)) if ndim else ()


#: (the reduction's description, x's dtype, shape and strides, axis, keepdims) -> (spec,
#: output shape, reduced shape, x's strides in launch order, keepdims strides or None) of
#: reductions of an array in memory with no extras: a loop's repeated reduction derives them once
_LAYOUTS: dict[tuple, tuple] = {}
_LAYOUTS_SIZE = 4096
#: (the id of a pending chain's generated description, the reduction's own arguments, the
#: chain's shape, the axes, keepdims) -> (that description, the spec, the output and reduced
#: shapes, the kept dimensions' view): a chain of a structure reduced the same way before
#: builds no spec again (a new spec was hashed and compared whole at every plan lookup)
_CHAIN_SPECS: dict[tuple, tuple] = {}


def reduce(x: Array, axis: Any, keepdims: bool, name: str, map_expr: str, reduce_expr: str,
           identity: Any, acc: np.dtype, out_dt: np.dtype, post: str = "out = a",
           extra: tuple[Array, ...] = (), casts: tuple[np.dtype, ...] | None = None) -> Array:
    """Reduce ``x`` (and ``extra`` arrays of the result's keepdims shape, read broadcast) over
    ``axis``: ``map_expr`` sees ``x`` (and ``m`` for the first extra), ``_j`` and ``_n``."""
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    key = None
    if not extra and x._node is None:
        key = (name, map_expr, reduce_expr, post, acc, out_dt, casts, x._dtype, x._shape,
               x._strides, axis, keepdims)
        try:
            found = _LAYOUTS.get(key)
        except TypeError:  # an axis given as a list
            key = found = None
        if found is not None:
            spec, out_shape, red_shape, strides, kept = found
            dev = x._dev
            buf = reduction_new_of(dev, spec, out_shape, red_shape, x._b, x._offset, strides,
                                   identity)
            if kept is None:
                return Array(buf, out_shape, out_dt, dev)
            return Array(buf, kept[0], out_dt, dev, kept[1], 0)
    axes = normalize_axes(axis, x.ndim)
    keep = [k for k in range(x.ndim) if k not in axes]
    order = keep + list(axes)
    # a pending x: its chain is computed inside this kernel, x itself stays pending
    chain = _fusion.chain_of(x, tuple(order))
    if chain is not None and not extra:
        # a chain of a structure reduced this way before: its spec and shapes as they were
        ckey = (id(chain[6]), name, map_expr, reduce_expr, post, acc, out_dt, casts,
                x._dtype, x._shape, axes, keepdims)
        found = _CHAIN_SPECS.get(ckey)
        if found is not None and found[0] is chain[6]:
            _, spec, out_shape, red_shape, kept = found
            with _fusion.quiet():
                return _launched(x, spec, out_shape, red_shape, list(chain[5]), identity,
                                 out_dt, kept)
    else:
        ckey = None
    out_shape = tuple(x.shape[k] for k in keep)
    red_shape = tuple(x.shape[k] for k in axes)
    if casts is None:
        casts = (x.dtype,) + tuple(e.dtype for e in extra)
    pre = ""
    ins: list[tuple[str, np.dtype, bool]]
    ops: list[Any]
    if chain is None:
        ins = [("x", x.dtype, False)]
        ops = [Operand(x._buf, x.dtype, x._offset, tuple(x.strides[k] for k in order))]
    else:
        statements, root, root_dt, ins_c, casts_c, values, _ = chain
        pre = f"{statements}; x = {cast_name(casts[0])}({root})"
        ins, ops = list(ins_c), list(values)
        casts = casts_c + casts[1:]
    for nm, e in zip(("m",), extra):
        kd = e.strides
        ins.append((nm, e.dtype, False))
        # extras are results of reductions (in memory): _b leaves a pending x pending
        ops.append(Operand(e._b if e._node is None else e._buf, e.dtype, e._offset,
                           tuple(kd[k] for k in keep) + (0,) * len(axes)))
    spec = ReductionSpec(name, map_expr, reduce_expr, post, tuple(ins), casts, acc,
                         ("out", out_dt), pre)
    kept = None
    if keepdims:
        shape = tuple(1 if k in axes else x.shape[k] for k in range(x.ndim))
        strides = []
        it = iter(_c_strides(out_shape))
        for k in range(x.ndim):
            strides.append(0 if k in axes else next(it))
        kept = (shape, tuple(strides))
    if key is not None and chain is None:
        if len(_LAYOUTS) >= _LAYOUTS_SIZE:
            _LAYOUTS.clear()
        _LAYOUTS[key] = (spec, out_shape, red_shape, ops[0].strides, kept)
    elif ckey is not None:
        if len(_CHAIN_SPECS) >= _LAYOUTS_SIZE:
            _CHAIN_SPECS.clear()
        # the description is held beside its id: the id cannot be another object's meanwhile
        _CHAIN_SPECS[ckey] = (chain[6], spec, out_shape, red_shape, kept)
    with _fusion.quiet() if chain is not None else _nothing():
        return _launched(x, spec, out_shape, red_shape, ops, identity, out_dt, kept)


def _launched(x: Array, spec: ReductionSpec, out_shape: tuple[int, ...],
              red_shape: tuple[int, ...], ops: list[Any], identity: Any, out_dt: np.dtype,
              kept: tuple | None) -> Array:
    """The launch of ``spec`` into a new array (its future resolves once the launch writing it
    has), viewed with the reduced dimensions kept when ``kept`` gives their shape and
    strides."""
    buf = reduction_new(x._dev, spec, out_shape, red_shape, ops, identity)
    if kept is None:
        return Array(buf, out_shape, out_dt, x._dev)
    return Array(buf, kept[0], out_dt, x._dev, kept[1], 0)


def _sum_dtype(x: Array, dtype: Any) -> np.dtype:
    if dtype is not None:
        return D.check_dtype(dtype)
    k = D.kind_of(x.dtype)
    if k in "bi":
        return D.int64
    if k == "u":
        return D.uint64
    return x.dtype


def _acc(dt: np.dtype) -> np.dtype:
    """Accumulate half precision in float32."""
    return D.float32 if dt in _HALF else dt  # a set: comparing dtypes one by one is slow


_HALF = frozenset((D.float16, D.bfloat16))


def sum(x: Array, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    _numeric(x, "sum")
    dt = _sum_dtype(x, dtype)
    return reduce(x, axis, keepdims, "sum", "x", "a + b", 0, _acc(dt), dt,
                  casts=(dt,))


def prod(x: Array, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Array:
    _numeric(x, "prod")
    dt = _sum_dtype(x, dtype)
    return reduce(x, axis, keepdims, "prod", "x", "a * b", 1, _acc(dt), dt, casts=(dt,))


def _numeric(x: Any, name: str, kinds: str = "biufc") -> None:
    if not isinstance(x, Array):
        raise TypeError(f"{name}: expected an array, got {type(x).__name__}")
    if D.kind_of(x.dtype) not in kinds:
        raise TypeError(f"{name} is not defined for {x.dtype}")


def _extreme(x: Array, axis: Any, keepdims: bool, big: bool) -> Array:
    name = "max" if big else "min"
    _numeric(x, name, "iuf")
    if builtins.any(x.shape[k] == 0 for k in normalize_axes(axis, x.ndim)):
        raise ValueError(f"{name} of an empty reduction has no identity")
    acc = _acc(x.dtype)
    if D.kind_of(x.dtype) == "f":
        ident: Any = -np.inf if big else np.inf
    else:
        info = np.iinfo(x.dtype)
        ident = int(info.min) if big else int(info.max)
    fn = "maximum" if big else "minimum"
    return reduce(x, axis, keepdims, name, "x", f"{fn}(a, b)", ident, acc, x.dtype,
                  casts=(acc,))


def max(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    return _extreme(x, axis, keepdims, True)


def min(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    return _extreme(x, axis, keepdims, False)


def mean(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:
    _numeric(x, "mean", "fc")
    acc = _acc(x.dtype)
    return reduce(x, axis, keepdims, "mean", "x", "a + b", 0, acc, x.dtype,
                  post="out = a / _n", casts=(acc,))


def var(x: Array, /, *, axis: Any = None, correction: Any = 0.0,
        keepdims: bool = False) -> Array:
    _numeric(x, "var", "fc")
    return _var(x, axis, correction, keepdims, False)


def std(x: Array, /, *, axis: Any = None, correction: Any = 0.0,
        keepdims: bool = False) -> Array:
    _numeric(x, "std", "fc")
    return _var(x, axis, correction, keepdims, True)


def _var(x: Array, axis: Any, correction: Any, keepdims: bool, root: bool) -> Array:
    if isinstance(correction, _pybool) or not isinstance(correction, (int, float)):
        raise TypeError("correction must be an int or a float")
    c = float(correction)
    m = mean(x, axis=axis, keepdims=True)
    acc = _acc(x.dtype)
    real = D.real_dtype(acc)
    out_dt = D.real_dtype(x.dtype)
    # the standard: NaN where N - correction <= 0 (not a division by zero or a negative count)
    c_text = float_text(c)
    value = f"(_n - {c_text} > 0 ? a / (_n - {c_text}) : NAN)"
    post = f"out = sqrt({value})" if root else f"out = {value}"
    return reduce(x, axis, keepdims, "std" if root else "var",
                  "real((x - m) * conj(x - m))", "a + b", 0, real, out_dt, post=post,
                  extra=(m,), casts=(acc, acc))


def all(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    _numeric(x, "all")
    return reduce(x, axis, keepdims, "all", "x != 0", "a && b", True, D.bool, D.bool)


def any(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:  # noqa: A001
    _numeric(x, "any")
    return reduce(x, axis, keepdims, "any", "x != 0", "a || b", False, D.bool, D.bool)


def count_nonzero(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:
    _numeric(x, "count_nonzero")
    return reduce(x, axis, keepdims, "count_nonzero", "x != 0 ? 1 : 0", "a + b", 0,
                  D.int64, D.int64)


def _arg(x: Array, axis: Any, keepdims: bool, big: bool) -> Array:
    name = "argmax" if big else "argmin"
    _numeric(x, name, "iuf")
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name}: axis must be an int or None")
    axes = normalize_axes(axis, x.ndim)
    if builtins.any(x.shape[k] == 0 for k in axes) or x.size == 0:
        raise ValueError(f"{name} of an empty array")
    m = _extreme(x, axis, True, big)
    mapped = "(x == m || (m != m && x != x)) ? _j : _n"
    res = reduce(x, axis, False, name, mapped, "minimum(a, b)", int(np.iinfo(np.int64).max),
                 D.int64, D.int64, extra=(m,))
    if keepdims:
        shape = tuple(1 if k in axes else x.shape[k] for k in range(x.ndim))
        from ._manipulation import reshape

        return reshape(res, shape)
    return res


def argmax(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:
    return _arg(x, axis, keepdims, True)


def argmin(x: Array, /, *, axis: Any = None, keepdims: bool = False) -> Array:
    return _arg(x, axis, keepdims, False)
