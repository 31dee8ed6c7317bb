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
import math
from typing import Any

import numpy as np

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
    repeat,
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
