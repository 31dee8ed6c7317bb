"""Arrays on the Python Array API standard (2024.12) over a gpumsg device.

::

    import gpumsg.array_api as xp
    x = xp.asarray(np.random.rand(1000, 64))
    y = (x - xp.mean(x, axis=0)) / xp.std(x, axis=0)
    c = y.T @ y            # answered at once; the work queues behind its producers
    float(c[0, 0])         # reading a value waits

An array is a gpumsg buffer seen with a shape, strides and dtype (:class:`Array`). Every
element-wise function and reduction is described once and generated into a CUDA kernel (NVRTC)
and its NumPy twin (the simulator): see :mod:`gpumsg.array_api._codegen`. Calls that name no
device use :func:`default_device` (the first GPU, else the simulator). The same machinery is
open to users: :class:`ElementwiseKernel`, :class:`ReductionKernel`.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..client import _buffers as _client_buffers
from . import _array, _dtypes, _elementwise, _indexing, fft, linalg, random
from ._array import Array, default_device, set_default_device
from ._compact import nonzero
from ._creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    meshgrid,
    ones,
    ones_like,
    tril,
    triu,
    zeros,
    zeros_like,
)
from ._dtypes import (
    bfloat16,
    bool,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ._elementwise import *  # noqa: F403 - the standard's element-wise functions
from ._elementwise import TABLE as _TABLE
from ._elementwise import astype, clip, where
from ._fusion import flush, fusion, fusion_stats
from ._indexing import take, take_along_axis
from ._info import __array_namespace_info__
from ._kernels import ElementwiseKernel, ReductionKernel
from ._linalg import matmul, matrix_transpose, tensordot, vecdot
from ._manipulation import (
    broadcast_arrays,
    broadcast_to,
    concat,
    diff,
    expand_dims,
    flip,
    moveaxis,
    permute_dims,
    reshape,
    roll,
    squeeze,
    stack,
    tile,
    unstack,
)
from ._reductions import (
    all,
    any,
    argmax,
    argmin,
    count_nonzero,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)
from ._repeat import repeat
from ._scan import cumulative_prod, cumulative_sum
from ._sorting import (
    argsort,
    searchsorted,
    sort,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
)

__array_api_version__ = "2024.12"

_array.OPS.update({f: globals()[f] for f in _TABLE})
_array.OPS.update(getitem=_indexing.getitem, setitem=_indexing.setitem, matmul=matmul,
                  apply_into=_elementwise.apply_into, copy_into=_elementwise.copy_into)
_array.OPS["namespace"] = __import__("sys").modules[__name__]
# the functions behind the array's NumPy-style methods (``x.sum()``, ``x.reshape(...)``, ...)
_array.OPS.update(sum=sum, prod=prod, mean=mean, var=var, std=std, max=max, min=min,
                  argmax=argmax, argmin=argmin, all=all, any=any,
                  cumulative_sum=cumulative_sum, reshape=reshape, permute_dims=permute_dims,
                  squeeze=squeeze, astype=astype, where=where, clip=clip)
# a gpumsg buffer (or its future) is an array through its zero-copy view
_client_buffers.ARRAY_VIEW = _array.view_of

e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None


# -- data type functions --------------------------------------------------------------------------
def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The standard's type promotion of arrays, dtypes and Python scalars."""
    return _dtypes.result_type(*arrays_and_dtypes)


def can_cast(from_: Any, to: Any, /) -> builtins.bool:
    """Whether ``from_`` (a dtype or array) converts to ``to`` without loss of kind: within a
    kind by the promotion table; bool to any dtype; integers to floating; real to complex of
    at least the same precision."""
    src = _dtypes.check_dtype(from_.dtype if isinstance(from_, Array) else from_)
    dst = _dtypes.check_dtype(to)
    if src == dst:
        return True
    ks, kd = _dtypes.kind_of(src), _dtypes.kind_of(dst)
    if ks == "b":
        return True
    if kd == "b":
        return False
    if ks in "iu" and kd in "fc":
        return True
    if ks in "iu" and kd in "iu":
        try:
            return _dtypes.result_type(src, dst) == dst
        except TypeError:
            return False
    if ks in "fc" and kd in "fc":
        return _dtypes.result_type(src, dst) == dst
    return False


class finfo_object:
    """Machine limits of a floating dtype."""

    def __init__(self, dt: np.dtype) -> None:
        real = _dtypes.real_dtype(dt)
        fi = np.finfo(real)
        self.bits = fi.bits
        self.eps = float(fi.eps)
        self.max = float(fi.max)
        self.min = float(fi.min)
        self.smallest_normal = float(fi.smallest_normal)
        self.dtype = real

    def __repr__(self) -> str:
        return f"finfo(dtype={self.dtype}, bits={self.bits})"


class iinfo_object:
    """Limits of an integer dtype."""

    def __init__(self, dt: np.dtype) -> None:
        ii = np.iinfo(dt)
        self.bits = ii.bits
        self.max = int(ii.max)
        self.min = int(ii.min)
        self.dtype = dt

    def __repr__(self) -> str:
        return f"iinfo(dtype={self.dtype}, bits={self.bits})"


def finfo(type: Any, /) -> finfo_object:  # noqa: A002
    dt = _dtypes.check_dtype(type.dtype if isinstance(type, Array) else type)
    if _dtypes.kind_of(dt) not in "fc":
        raise ValueError(f"finfo needs a floating dtype, got {dt}")
    return finfo_object(dt)


def iinfo(type: Any, /) -> iinfo_object:  # noqa: A002
    dt = _dtypes.check_dtype(type.dtype if isinstance(type, Array) else type)
    if _dtypes.kind_of(dt) not in "iu":
        raise ValueError(f"iinfo needs an integer dtype, got {dt}")
    return iinfo_object(dt)


_KIND_NAMES = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
               "real floating": "f", "complex floating": "c", "numeric": "iufc"}


def isdtype(dtype: Any, kind: Any) -> builtins.bool:
    """Whether ``dtype`` is of ``kind`` (a dtype, a kind name or a tuple of them)."""
    dt = _dtypes.check_dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KIND_NAMES:
            raise ValueError(f"unknown dtype kind {kind!r}")
        return _dtypes.kind_of(dt) in _KIND_NAMES[kind]
    return dt == _dtypes.check_dtype(kind)


__all__ = [
    "__array_api_version__", "__array_namespace_info__", "Array", "ElementwiseKernel",
    "ReductionKernel", "default_device", "set_default_device",
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "e", "inf", "nan", "pi", "newaxis",
    "result_type", "can_cast", "finfo", "iinfo", "isdtype", "astype",
    "asarray", "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "arange", "linspace", "eye", "from_dlpack", "meshgrid", "tril", "triu",
    *_TABLE, "where", "clip",
    "sum", "prod", "max", "min", "mean", "var", "std", "all", "any", "count_nonzero",
    "argmax", "argmin", "cumulative_sum", "cumulative_prod",
    "reshape", "permute_dims", "expand_dims", "squeeze", "concat", "stack", "broadcast_to",
    "broadcast_arrays", "flip", "roll", "tile", "repeat", "moveaxis", "unstack", "diff",
    "take", "take_along_axis",
    "matmul", "tensordot", "vecdot", "matrix_transpose", "linalg", "fft", "random", "sort",
    "argsort",
    "searchsorted", "nonzero", "unique_all", "unique_counts", "unique_inverse",
    "unique_values",
    "fusion", "fusion_stats", "flush",
]


# -- buffers as arguments ------------------------------------------------------------------------
#: the names of the namespace that take no arrays (or take them as they are)
_NO_ARRAYS = frozenset(("default_device", "set_default_device", "fusion", "fusion_stats",
                        "flush", "__array_namespace_info__", "isdtype"))
#: the functions that take a list or tuple of arrays as their first argument
_SEQUENCES = frozenset(("concat", "stack"))


def _taking_buffers(fn: Callable[..., Any], sequence: builtins.bool,
                    nin: int | None = None) -> Callable[..., Any]:
    """``fn``, taking gpumsg buffers (and their futures) wherever it takes arrays: each is
    seen as its zero-copy array (:func:`._array.view_of`), so that ``xp.sum(buf)`` is
    ``buf.sum()`` and generic Array API code that got ``xp`` from
    ``buf.__array_namespace__()`` works on buffers. Arrays pass unchanged. ``nin``: the
    element-wise functions' fixed count of positional-only arguments (1 or 2), checked
    without packing them (about 0.1 us a call, against 0.27 for the general form)."""
    bufs, view_of, array = _array.BUFFERS, _array.view_of, Array

    if nin == 1:
        def call1(x: Any, /) -> Any:
            if x.__class__ is not array and isinstance(x, bufs):
                x = view_of(x)
            return fn(x)

        return functools.wraps(fn)(call1)
    if nin == 2:
        def call2(x1: Any, x2: Any, /) -> Any:
            if x1.__class__ is not array and isinstance(x1, bufs):
                x1 = view_of(x1)
            if x2.__class__ is not array and isinstance(x2, bufs):
                x2 = view_of(x2)
            return fn(x1, x2)

        return functools.wraps(fn)(call2)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        for a in args:
            if isinstance(a, bufs):
                args = tuple(view_of(v) if isinstance(v, bufs) else v for v in args)
                break
        if sequence and args and isinstance(args[0], (list, tuple)) and \
                builtins.any(isinstance(v, bufs) for v in args[0]):
            args = ([view_of(v) if isinstance(v, bufs) else v for v in args[0]], *args[1:])
        if kwargs:
            for k, v in kwargs.items():
                if isinstance(v, bufs):
                    kwargs[k] = view_of(v)
        return fn(*args, **kwargs)

    return call


for _name in __all__:
    _fn = globals()[_name]
    if _name not in _NO_ARRAYS and callable(_fn) and getattr(_fn, "__module__", "") and \
            _fn.__module__.startswith(__name__) and not isinstance(_fn, type):
        globals()[_name] = _taking_buffers(_fn, _name in _SEQUENCES,
                                           _TABLE[_name].nin if _name in _TABLE else None)
# the extensions' functions too (``xp.linalg.solve(buf, b)``, ``xp.fft.rfft(buf)``), on their
# modules, so that ``x.__array_namespace__().linalg`` takes buffers as the namespace does
for _mod in (linalg, fft):
    for _name in _mod.__all__:
        _fn = getattr(_mod, _name)
        if callable(_fn) and not isinstance(_fn, type) and \
                getattr(_fn, "__module__", "").startswith(__name__):
            setattr(_mod, _name, _taking_buffers(_fn, _name == "multi_dot"))
del _name, _fn, _mod
