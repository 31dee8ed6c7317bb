"""User kernels from the same machinery as the built-in functions, in CuPy's form::

    squared_diff = ElementwiseKernel("T x, T y", "T z", "z = (x - y) * (x - y)", "squared_diff")
    z = squared_diff(x, y)

    l2 = ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", 0, "l2norm")
    n = l2(x, axis=1)

The operation is written in the description language of :mod:`gpumsg.array_api._expr` (a C
expression subset); the kernel is generated, compiled with NVRTC and launched on the GPU, and
evaluated by its NumPy twin on the simulator. A parameter's type is a dtype name (``float32``,
``int64``, ...) or a single upper-case letter standing for the dtype of the first array bound
to it.
"""

from __future__ import annotations

import builtins
import numbers
from typing import Any

import numpy as np

from ..errors import InvalidMessage
from . import _dtypes as D
from ._array import BUFFERS, Array, check_device, new_array, view_of
from ._codegen import ElementwiseSpec, check_names, launch_elementwise, program
from ._elementwise import broadcast_shapes
from ._reductions import reduce

__all__ = ["ElementwiseKernel", "ReductionKernel"]


def _text(value: Any, field: str) -> str:
    """A kernel description's text (``field`` names it): a str, else InvalidMessage."""
    if not isinstance(value, str):
        raise InvalidMessage(f"{field} must be a str, got {type(value).__name__}", field=field)
    return value


def _identity(value: Any) -> Any:
    """A reduction's identity: a number (a bool, int, float or complex) or its text ("0",
    "-inf")."""
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in ".eEn") else int(value)
        except ValueError:
            raise InvalidMessage(f"identity must be a number or its text, got {value!r}",
                                 field="identity") from None
    if not isinstance(value, numbers.Number):
        raise InvalidMessage(f"identity must be a number, got {type(value).__name__}",
                             field="identity")
    return value


def _params(text: str, field: str) -> list[tuple[str, str]]:
    _text(text, field)
    out = []
    for item in text.split(","):
        parts = item.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise InvalidMessage(f"{field}: expected 'type name' items, got {item.strip()!r}",
                                 field=field)
        typ, name = parts
        if not (len(typ) == 1 and typ.isupper()):
            D.check_dtype(typ, field)
        out.append((typ, name))
    return out


def _bind(params: list[tuple[str, str]], args: tuple[Any, ...],
          types: dict[str, np.dtype]) -> list[np.dtype]:
    dts = []
    for (typ, name), a in zip(params, args):
        if len(typ) == 1 and typ.isupper():
            if isinstance(a, Array):
                if typ in types and types[typ] != a.dtype:
                    raise TypeError(f"{name}: {a.dtype} but {typ} is {types[typ]}")
                types.setdefault(typ, a.dtype)
    for (typ, name), a in zip(params, args):
        if len(typ) == 1 and typ.isupper():
            if typ not in types:
                if isinstance(a, Array):
                    types[typ] = a.dtype
                else:
                    raise TypeError(f"{name}: type {typ} is bound by no array")
            dts.append(types[typ])
        else:
            dts.append(D.check_dtype(typ))
    return dts


class ElementwiseKernel:
    """An element-wise kernel from ``in_params``, ``out_params`` and ``operation`` (see the
    module docstring). Call it with the inputs (arrays, broadcast, or Python scalars) and
    optionally the outputs; it answers the output array (a tuple for several)."""

    def __init__(self, in_params: str, out_params: str, operation: str,
                 name: str = "kernel") -> None:
        self.in_params = _params(in_params, "in_params")
        self.out_params = _params(out_params, "out_params")
        if not self.out_params:
            raise InvalidMessage("out_params: at least one output", field="out_params")
        if not _text(name, "name").isidentifier():
            raise InvalidMessage(f"name must be an identifier, got {name!r}", field="name")
        self.operation = _text(operation, "operation")
        self.name = name
        prog = program(operation)  # parsed now: a syntax error raises here
        names = {n for _, n in self.in_params}
        for _, n in self.out_params:
            if n not in prog.assigned:
                raise InvalidMessage(f"operation: output {n!r} is never assigned",
                                     field="operation")
        for n in prog.free:
            if n not in names and n not in {o for _, o in self.out_params}:
                raise InvalidMessage(f"operation: {n!r} is not a parameter", field="operation")

    def __call__(self, *args: Any) -> Any:
        nin, nout = len(self.in_params), len(self.out_params)
        if len(args) not in (nin, nin + nout):
            raise TypeError(f"{self.name} takes {nin} inputs (and optionally {nout} outputs), "
                            f"got {len(args)} arguments")
        given = args[nin:]  # the outputs as passed (a buffer given is answered as itself)
        args = tuple(view_of(a) if isinstance(a, BUFFERS) else a for a in args)
        ins, outs = args[:nin], args[nin:]
        arrays = [a for a in args if isinstance(a, Array)]
        if not arrays:
            raise TypeError(f"{self.name}: at least one argument must be an array")
        dev = check_device(*arrays)
        types: dict[str, np.dtype] = {}
        in_dts = _bind(self.in_params, ins, types)
        out_dts = _bind(self.out_params, outs if outs else (None,) * nout, types)
        shape = broadcast_shapes(*(a.shape for a in ins if isinstance(a, Array)))
        spec_ins = []
        for (_, name), a, dt in zip(self.in_params, ins, in_dts):
            if isinstance(a, Array):
                spec_ins.append((name, a.dtype, False))
            elif isinstance(a, (builtins.bool, int, float, complex)):
                spec_ins.append((name, dt, True))
            else:
                raise TypeError(f"{name}: expected an array or a Python scalar")
        casts = tuple(in_dts)
        if outs:
            out_arrays = list(outs)
            for o, dt in zip(out_arrays, out_dts):
                if not isinstance(o, Array) or o.dtype != dt:
                    raise TypeError(f"{self.name}: outputs must be arrays of {dt}")
                shape = broadcast_shapes(shape, o.shape)
                if o.shape != shape:
                    raise ValueError(f"{self.name}: output shape {o.shape}, needs {shape}")
        else:
            out_arrays = [new_array(dev, shape, dt) for dt in out_dts]
        spec = ElementwiseSpec(f"ek_{self.name}", self.operation, tuple(spec_ins), casts,
                               tuple((n, dt) for (_, n), dt in zip(self.out_params, out_dts)))
        ops = [a._operand(shape) if isinstance(a, Array) else a for a in ins]
        done = launch_elementwise(dev, spec, shape, [o._operand() for o in out_arrays], ops)
        for o in out_arrays:
            o._wrote(done)
        if outs:
            out_arrays = list(given)
        return out_arrays[0] if nout == 1 else tuple(out_arrays)


class ReductionKernel:
    """A reduction kernel: ``map_expr`` (an expression of the one input, ``_j`` and ``_n``),
    ``reduce_expr`` (combines ``a`` and ``b``), ``post_map_expr`` (statements assigning the
    output from ``a`` and ``_n``), ``identity`` (a number). Called as
    ``kernel(x, axis=None, keepdims=False)``."""

    def __init__(self, in_params: str, out_params: str, map_expr: str, reduce_expr: str,
                 post_map_expr: str, identity: Any, name: str = "reduce",
                 reduce_type: Any = None) -> None:
        self.in_params = _params(in_params, "in_params")
        self.out_params = _params(out_params, "out_params")
        if len(self.in_params) != 1 or len(self.out_params) != 1:
            raise InvalidMessage("ReductionKernel takes one input and one output",
                                 field="in_params")
        if not _text(name, "name").isidentifier():
            raise InvalidMessage(f"name must be an identifier, got {name!r}", field="name")
        # parsed and checked now: a syntax error or a name that is not the input, ``_j`` or
        # ``_n`` (``a``/``b`` to combine, ``a``/``_n`` after) raises here
        what = f"ReductionKernel {name!r}"
        check_names(program(f"v_ = {_text(map_expr, 'map_expr')}"),
                    {self.in_params[0][1], "_j", "_n"}, "map_expr", what)
        check_names(program(f"r_ = {_text(reduce_expr, 'reduce_expr')}"), {"a", "b"},
                    "reduce_expr", what)
        post = program(_text(post_map_expr, "post_map_expr"))
        check_names(post, {"a", "_n"}, "post_map_expr", what)
        if self.out_params[0][1] not in post.assigned:
            raise InvalidMessage("post_map_expr must assign the output",
                                 field="post_map_expr")
        identity = _identity(identity)
        self.map_expr, self.reduce_expr, self.post = map_expr, reduce_expr, post_map_expr
        self.identity = identity
        self.name = name
        self.reduce_type = None if reduce_type is None else D.check_dtype(reduce_type)

    def __call__(self, x: Array, axis: Any = None, keepdims: bool = False) -> Array:
        if isinstance(x, BUFFERS):
            x = view_of(x)
        if not isinstance(x, Array):
            raise TypeError(f"{self.name}: expected an array")
        types: dict[str, np.dtype] = {}
        (in_dt,) = _bind(self.in_params, (x,), types)
        (out_dt,) = _bind(self.out_params, (None,), types)
        acc = self.reduce_type or out_dt
        var = self.in_params[0][1]
        # the input is named ``x`` inside reduce(): rename it in the expressions
        mapped = self.map_expr if var == "x" else _rename(self.map_expr, var, "x")
        post = self.post if self.out_params[0][1] == "out" else _rename(
            self.post, self.out_params[0][1], "out")
        return reduce(x, axis, keepdims, f"rk_{self.name}", mapped, self.reduce_expr,
                      self.identity, acc, out_dt, post=post, casts=(in_dt,))


def _rename(text: str, old: str, new: str) -> str:
    import re

    return re.sub(rf"\b{re.escape(old)}\b", new, text)
