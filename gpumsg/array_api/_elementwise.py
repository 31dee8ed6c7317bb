"""The standard's element-wise functions, each described once (:data:`TABLE`).

A description names the input kinds it takes (``b`` bool, ``i``/``u`` integers, ``f`` real
floating, ``c`` complex), the result dtype rule and the operation in the description language of
:mod:`._expr` (one text, or one per kind). Calling a function promotes the inputs (the standard's
table and scalar rules), broadcasts them, allocates the result and launches the generated kernel
(:mod:`._codegen`); Python scalars travel as kernel arguments.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _dtypes as D
from ._array import Array, check_device
from ._codegen import ElementwiseSpec, elementwise_new_of, launch_elementwise
from ._fusion import defer

_pybool = builtins.bool
_SCALARS = (_pybool, int, float, complex)

__all__ = ["TABLE", "Func", "apply_into", "copy_into", "cast_into", "broadcast_shapes"]


@dataclass(frozen=True)
class Func:
    """One element-wise function. ``result``: ``same`` (the promoted dtype), ``bool``, ``real``
    (complex -> its real dtype), ``float`` (integers computed and answered as float64)."""

    name: str
    nin: int
    kinds: str
    op: Any  # str, or {kinds: str}
    result: str = "same"

    def text(self, kind: str) -> str:
        if isinstance(self.op, str):
            return self.op
        for kinds, text in self.op.items():
            if kind in kinds:
                return text
        raise TypeError(f"{self.name}: no operation for kind {kind}")


_NUM = "iufc"
_REAL = "iuf"
_FLT = "fc"
_INT = "iu"
_INTB = "biu"


def _u(name: str, kinds: str, op: Any, result: str = "same") -> Func:
    return Func(name, 1, kinds, op, result)


def _b(name: str, kinds: str, op: Any, result: str = "same") -> Func:
    return Func(name, 2, kinds, op, result)


TABLE: dict[str, Func] = {f.name: f for f in [
    _u("abs", _NUM, "out = abs(x)", "real"),
    _u("acos", _FLT, "out = acos(x)"), _u("acosh", _FLT, "out = acosh(x)"),
    _u("asin", _FLT, "out = asin(x)"), _u("asinh", _FLT, "out = asinh(x)"),
    _u("atan", _FLT, "out = atan(x)"), _u("atanh", _FLT, "out = atanh(x)"),
    _u("cos", _FLT, "out = cos(x)"), _u("cosh", _FLT, "out = cosh(x)"),
    _u("sin", _FLT, "out = sin(x)"), _u("sinh", _FLT, "out = sinh(x)"),
    _u("tan", _FLT, "out = tan(x)"), _u("tanh", _FLT, "out = tanh(x)"),
    _u("exp", _FLT, "out = exp(x)"), _u("expm1", _FLT, "out = expm1(x)"),
    _u("log", _FLT, "out = log(x)"), _u("log1p", _FLT, "out = log1p(x)"),
    _u("log2", _FLT, "out = log2(x)"), _u("log10", _FLT, "out = log10(x)"),
    _u("sqrt", _FLT, "out = sqrt(x)"),
    _u("square", _NUM, "out = x * x"),
    _u("ceil", _REAL, "out = ceil(x)"), _u("floor", _REAL, "out = floor(x)"),
    _u("trunc", _REAL, "out = trunc(x)"), _u("round", _NUM, "out = round(x)"),
    _u("sign", _NUM, "out = sign(x)"), _u("signbit", "f", "out = signbit(x)", "bool"),
    _u("isnan", _NUM + "b", "out = isnan(x)", "bool"),
    _u("isinf", _NUM + "b", "out = isinf(x)", "bool"),
    _u("isfinite", _NUM + "b", "out = isfinite(x)", "bool"),
    _u("negative", _NUM, "out = -x"), _u("positive", _NUM, "out = x"),
    _u("reciprocal", _FLT, "out = 1 / x"),
    _u("conj", _NUM, "out = conj(x)"), _u("real", _NUM, "out = real(x)", "real"),
    _u("imag", _NUM, "out = imag(x)", "real"),
    _u("bitwise_invert", _INTB, {"b": "out = !x", "iu": "out = ~x"}),
    _u("logical_not", "b", "out = !x"),
    _b("add", _NUM, "out = x + y"), _b("subtract", _NUM, "out = x - y"),
    _b("multiply", _NUM, "out = x * y"),
    _b("divide", _NUM, "out = x / y", "float"),
    _b("floor_divide", _REAL, "out = floordiv(x, y)"),
    _b("remainder", _REAL, "out = mod(x, y)"),
    _b("pow", _NUM, "out = pow(x, y)"),
    _b("atan2", "f", "out = atan2(x, y)"), _b("hypot", "f", "out = hypot(x, y)"),
    _b("copysign", "f", "out = copysign(x, y)"),
    _b("nextafter", "f", "out = nextafter(x, y)"),
    _b("logaddexp", "f", "out = logaddexp(x, y)"),
    _b("maximum", _REAL, "out = maximum(x, y)"), _b("minimum", _REAL, "out = minimum(x, y)"),
    _b("equal", _NUM + "b", "out = x == y", "bool"),
    _b("not_equal", _NUM + "b", "out = x != y", "bool"),
    _b("less", _REAL, "out = x < y", "bool"), _b("less_equal", _REAL, "out = x <= y", "bool"),
    _b("greater", _REAL, "out = x > y", "bool"),
    _b("greater_equal", _REAL, "out = x >= y", "bool"),
    _b("logical_and", "b", "out = x && y"), _b("logical_or", "b", "out = x || y"),
    _b("logical_xor", "b", "out = x != y"),
    _b("bitwise_and", _INTB, "out = x & y"), _b("bitwise_or", _INTB, "out = x | y"),
    _b("bitwise_xor", _INTB, "out = x ^ y"),
    _b("bitwise_left_shift", _INT, "out = shl(x, y)"),
    _b("bitwise_right_shift", _INT, "out = shr(x, y)"),
]}


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The standard's broadcasting of ``shapes`` (ValueError when they do not broadcast)."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(nd):
        size = 1
        for s in shapes:
            d = s[k - nd + len(s)] if k - nd + len(s) >= 0 else 1
            if d != 1:
                if size not in (1, d):
                    raise ValueError(f"shapes {shapes} do not broadcast")
                size = d
        out.append(size)
    return tuple(out)


def _check_scalar(value: Any, dt: np.dtype, fname: str) -> None:
    """A Python int must fit an integer array's dtype (the standard leaves overflow
    unspecified: gpumsg refuses it rather than wrap silently)."""
    if isinstance(value, int) and not isinstance(value, _pybool) and D.kind_of(dt) in "iu":
        info = np.iinfo(dt)
        if not info.min <= value <= info.max:
            raise OverflowError(f"{fname}: {value} does not fit {dt}")


def _resolve(f: Func, args: tuple[Any, ...]) -> tuple[Any, np.dtype, np.dtype, np.dtype]:
    """(device, input dtype after promotion, compute dtype, result dtype) of ``f(*args)``."""
    arrays = [a for a in args if isinstance(a, Array)]
    if not arrays:
        raise TypeError(f"{f.name}: at least one argument must be an array")
    for a in args:
        if not isinstance(a, (Array, *_SCALARS)):
            raise TypeError(f"{f.name}: expected arrays or Python scalars, got "
                            f"{type(a).__name__}")
    dev = check_device(*arrays)
    dt = D.result_type(*args)
    kind = D.kind_of(dt)
    if kind not in f.kinds:
        raise TypeError(f"{f.name} is not defined for {dt}")
    compute = dt
    if f.result == "float" and kind in "iu":
        compute = D.float64
    if f.result == "bool":
        res = D.bool
    elif f.result == "real":
        res = D.real_dtype(compute)
    else:
        res = compute
    return dev, dt, compute, res


def _spec(f: Func, args: tuple[Any, ...], dt: np.dtype, compute: np.dtype,
          res: np.dtype) -> ElementwiseSpec:
    names = ("x", "y", "z")
    ins = []
    for name, a in zip(names, args):
        if isinstance(a, Array):
            ins.append((name, a.dtype, False))
        else:
            _check_scalar(a, dt, f.name)
            ins.append((name, dt, True))
    return ElementwiseSpec(f.name, f.text(D.kind_of(compute)), tuple(ins),
                           (compute,) * len(args), (("out", res),))


#: (function, per argument its dtype or, for a Python scalar, its type) -> the call's spec: a
#: repeated kind of call is not worked out again (a scalar's value is still checked per call)
_SPECS: dict[tuple, ElementwiseSpec] = {}
_SPECS_SIZE = 4096


def apply(f: Func, *args: Any) -> Array:
    """``f(*args)`` as a new array."""
    # the table's functions by name (a Func holds a dict: it does not hash)
    key = (f.name, *[a._dtype if isinstance(a, Array) else type(a) for a in args])
    spec = _SPECS.get(key) if TABLE.get(f.name) is f else None
    if spec is None:
        dev, dt, compute, res = _resolve(f, args)
        spec = _spec(f, args, dt, compute, res)
        if TABLE.get(f.name) is f:
            if len(_SPECS) >= _SPECS_SIZE:
                _SPECS.clear()
            _SPECS[key] = spec
    else:
        dev = check_device(*args)
        for a, (_, dt, sc) in zip(args, spec.ins):
            if sc:
                _check_scalar(a, dt, f.name)
    shapes = [a._shape for a in args if isinstance(a, Array)]
    shape = shapes[0] if len(shapes) == 1 or all(s == shapes[0] for s in shapes) else \
        broadcast_shapes(*shapes)
    return _run(dev, spec, shape, args)


def _apply1(f: Func, x: Array) -> Array:
    """:func:`apply` of a one-argument table function to an array: the same, written out for
    a kind of call seen before (its spec kept)."""
    spec = _SPECS.get((f.name, x._dtype))
    if spec is None or TABLE.get(f.name) is not f:
        return apply(f, x)
    return _run(x._dev, spec, x._shape, (x,))


def _apply2(f: Func, x1: Any, x2: Any) -> Array:
    """:func:`apply` of a two-argument table function: the same, written out for a kind of
    call seen before (its spec kept, so that each argument is an array or a Python scalar
    and one of them an array)."""
    name = f.name
    a1 = isinstance(x1, Array)
    a2 = isinstance(x2, Array)
    spec = _SPECS.get((name, x1._dtype if a1 else type(x1), x2._dtype if a2 else type(x2)))
    if spec is None or TABLE.get(name) is not f:
        return apply(f, x1, x2)
    if not a1:
        _check_scalar(x1, spec.ins[0][1], name)
        return _run(x2._dev, spec, x2._shape, (x1, x2))
    if not a2:
        _check_scalar(x2, spec.ins[1][1], name)
        return _run(x1._dev, spec, x1._shape, (x1, x2))
    dev = x1._dev
    if x2._dev is not dev:
        check_device(x1, x2)  # raises
    shape = x1._shape
    if x2._shape != shape:
        shape = broadcast_shapes(shape, x2._shape)
    return _run(dev, spec, shape, (x1, x2))


def _run(dev: Any, spec: ElementwiseSpec, shape: tuple[int, ...], args: Any) -> Array:
    """The result of one-output ``spec`` over ``args`` (arrays and scalars in the order of
    ``spec.ins``): pending when fusion is on (:mod:`._fusion`), else launched now."""
    out = defer(dev, spec, shape, args, _pending)
    if out is not None:
        return out
    # the new buffer's future resolves once the launch writing it has
    return Array(elementwise_new_of(dev, spec, shape, args), shape, spec.outs[0][1], dev)


_pending = Array._pending


def _base(x: Array) -> Any:
    buf = x.buffer
    return buf.buffer if hasattr(buf, "buffer") else buf


def _unaliased(target: Array, x: Any) -> Any:
    """``x``, or a copy of it when it reads ``target``'s buffer through another view: a kernel
    that writes one element while other threads read it elsewhere would race."""
    if isinstance(x, Array) and _base(x) is _base(target) and (
            x._offset != target._offset or x.strides != target.strides or
            x.shape != target.shape):
        from ._array import _copy

        return _copy(x)
    return x


def apply_into(target: Array, name: str, other: Any) -> None:
    """``target <op>= other``: the result must have target's dtype and shape."""
    f = TABLE[name]
    other = _unaliased(target, other)
    args = (target, other)
    dev, dt, compute, res = _resolve(f, args)
    if res != target.dtype:
        raise TypeError(f"{name}: an in-place result of {res} cannot be stored in "
                        f"{target.dtype}")
    shape = broadcast_shapes(target.shape, *([other.shape] if isinstance(other, Array) else []))
    if shape != target.shape:
        raise ValueError(f"{name}: in place, the result shape {shape} must be the array's "
                         f"{target.shape}")
    spec = _spec(f, args, dt, compute, res)
    ins = [a._operand(shape) if isinstance(a, Array) else a for a in args]
    target._wrote(launch_elementwise(dev, spec, shape, [target._operand()], ins))


def cast_into(out: Array, x: Any) -> None:
    """Copy ``x`` (an array broadcastable to ``out`` or a Python scalar) into ``out``,
    converting to ``out``'s dtype."""
    dev = out.device
    if isinstance(x, Array):
        check_device(out, x)
        x = _unaliased(out, x)
        shape = broadcast_shapes(out.shape, x.shape)
        if shape != out.shape:
            raise ValueError(f"cannot store shape {x.shape} into shape {out.shape}")
        if D.kind_of(x.dtype) == "c" and D.kind_of(out.dtype) != "c":
            raise TypeError(f"cannot store {x.dtype} in {out.dtype}")
        text = "out = x" if out.dtype != D.bool else "out = x != 0" if \
            D.kind_of(x.dtype) != "b" else "out = x"
        spec = ElementwiseSpec("copy", text, (("x", x.dtype, False),), (x.dtype,),
                               (("out", out.dtype),))
        done = launch_elementwise(dev, spec, out.shape, [out._operand()],
                                  [x._operand(out.shape)])
    else:
        if not isinstance(x, _SCALARS):
            raise TypeError(f"cannot store a {type(x).__name__} in an array")
        _check_scalar(x, out.dtype, "setitem")
        if isinstance(x, complex) and D.kind_of(out.dtype) != "c":
            raise TypeError(f"cannot store a complex in {out.dtype}")
        spec = ElementwiseSpec("fill", "out = x", (("x", out.dtype, True),), (out.dtype,),
                               (("out", out.dtype),))
        done = launch_elementwise(dev, spec, out.shape, [out._operand()], [x])
    out._wrote(done)


def copy_into(out: Array, x: Array) -> None:
    cast_into(out, x)


def _public(f: Func) -> Any:
    if f.nin == 1:
        def fn(x: Array, /) -> Array:
            if not isinstance(x, Array):
                raise TypeError(f"{f.name}: expected an array, got {type(x).__name__}")
            return _apply1(f, x)
    else:
        def fn(x1: Any, x2: Any, /) -> Array:  # type: ignore[misc]
            return _apply2(f, x1, x2)
    fn.__name__ = fn.__qualname__ = f.name
    fn.__doc__ = (f"The standard's ``{f.name}``, element-wise on the device: "
                  f"``{f.op if isinstance(f.op, str) else f.op}``.")
    return fn


for _f in TABLE.values():
    globals()[_f.name] = _public(_f)
__all__ += list(TABLE)


def where(condition: Array, x1: Any, x2: Any, /) -> Array:
    """``x1`` where ``condition`` else ``x2`` (broadcast; x1/x2 promoted)."""
    if not isinstance(condition, Array) or condition.dtype != D.bool:
        raise TypeError("where: condition must be a bool array")
    arrays = [a for a in (condition, x1, x2) if isinstance(a, Array)]
    dev = check_device(*arrays)
    vals = [a for a in (x1, x2)]
    # the spec per kind of call, as apply keeps it (scalars' values still checked per call)
    key = ("where", *[a._dtype if isinstance(a, Array) else type(a) for a in vals])
    spec = _SPECS.get(key)
    if spec is None:
        dt = D.result_type(*vals)
        ins = [("c", D.bool, False)]
        for name, a in zip(("x", "y"), vals):
            if isinstance(a, Array):
                ins.append((name, a.dtype, False))
            elif isinstance(a, _SCALARS):
                _check_scalar(a, dt, "where")
                ins.append((name, dt, True))
            else:
                raise TypeError(f"where: expected arrays or Python scalars, got "
                                f"{type(a).__name__}")
        spec = ElementwiseSpec("where", "out = c ? x : y", tuple(ins), (D.bool, dt, dt),
                               (("out", dt),))
        if len(_SPECS) >= _SPECS_SIZE:
            _SPECS.clear()
        _SPECS[key] = spec
    else:
        for a, (_, dt, sc) in zip(vals, spec.ins[1:]):
            if sc:
                _check_scalar(a, dt, "where")
    shapes = [a._shape for a in arrays]
    shape = shapes[0] if all(sh == shapes[0] for sh in shapes) else broadcast_shapes(*shapes)
    return _run(dev, spec, shape, (condition, x1, x2))


def clip(x: Array, /, min: Any = None, max: Any = None) -> Array:  # noqa: A002
    """``x`` limited to [min, max] (either may be None; arrays broadcast with ``x``); the
    result has ``x``'s dtype."""
    if not isinstance(x, Array):
        raise TypeError("clip: x must be an array")
    if D.kind_of(x.dtype) not in "iuf":
        raise TypeError(f"clip is not defined for {x.dtype}")
    dt = x.dtype
    args: list[Any] = [x]
    ins = [("x", dt, False)]
    text = "out = x"
    for name, bound, fn in (("lo", min, "maximum"), ("hi", max, "minimum")):
        if bound is None:
            continue
        if isinstance(bound, Array):
            check_device(x, bound)
            if D.kind_of(bound.dtype) not in "iuf":
                raise TypeError(f"clip: bound of {bound.dtype}")
            ins.append((name, bound.dtype, False))
        elif isinstance(bound, (int, float)) and not isinstance(bound, _pybool):
            if isinstance(bound, float) and D.kind_of(dt) in "iu":
                raise TypeError("clip: a float bound for an integer array")
            if isinstance(bound, int) and D.kind_of(dt) in "iu":
                info = np.iinfo(dt)
                bound = builtins.min(builtins.max(bound, int(info.min)), int(info.max))
            ins.append((name, dt, True))
        else:
            raise TypeError(f"clip: bounds are arrays or Python scalars, got {bound!r}")
        text = f"out = {fn}({text[6:]}, {name})"
        args.append(bound)
    shape = broadcast_shapes(*(a.shape for a in args if isinstance(a, Array)))
    spec = ElementwiseSpec("clip", text, tuple(ins), (dt,) * len(ins), (("out", dt),))
    return _run(x.device, spec, shape, args)


def astype(x: Array, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Array:
    """``x`` converted to ``dtype`` (complex -> real is refused, as the standard says)."""
    if not isinstance(x, Array):
        raise TypeError("astype: x must be an array")
    dt = D.check_dtype(dtype)
    if device is not None:
        x = x.to_device(device)
    if dt == x.dtype and not copy:
        return x
    if D.kind_of(x.dtype) == "c" and D.kind_of(dt) != "c":
        raise TypeError(f"astype: {x.dtype} to {dt} would drop the imaginary part; use real()")
    text = "out = x != 0" if dt == D.bool and D.kind_of(x.dtype) != "b" else "out = x"
    spec = ElementwiseSpec("copy", text, (("x", x.dtype, False),), (x.dtype,), (("out", dt),))
    return _run(x.device, spec, x.shape, (x,))


__all__ += ["where", "clip", "astype"]
