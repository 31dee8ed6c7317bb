"""The standard's data types, its type promotion table and its rules for Python scalars.

The dtype objects are NumPy dtypes (``float32 == np.dtype("float32")``). ``bool`` arrays are held
in one-byte buffers (gpumsg buffers have no bool element type): the array knows it is bool.
float16 and bfloat16 are extensions: they promote to float32 with each other and with float32.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..dtypes import bfloat16 as _bf16

__all__ = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "ALL",
    "result_type", "kind_of", "storage_name", "CTYPE", "check_dtype", "is_dtype",
]

_pybool = builtins.bool
bool = np.dtype(np.bool_)  # noqa: A001 - the standard's name
int8, int16, int32, int64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32,
                                                       np.uint64))
float16, float32, float64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
bfloat16 = _bf16
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)

ALL = (bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16,
       float32, float64, complex64, complex128)
_ALLSET = frozenset(ALL)
SIGNED = (int8, int16, int32, int64)
UNSIGNED = (uint8, uint16, uint32, uint64)
REAL_FLOAT = (float16, bfloat16, float32, float64)
COMPLEX = (complex64, complex128)

#: gpumsg buffer element type (short name) holding each dtype
_STORAGE = {bool: "u8", int8: "i8", int16: "i16", int32: "i32", int64: "i64", uint8: "u8",
            uint16: "u16", uint32: "u32", uint64: "u64", float16: "f16", bfloat16: "bf16",
            float32: "f32", float64: "f64", complex64: "c64", complex128: "c128"}

#: per dtype: (C storage type, C compute type, NumPy compute dtype, load format, store format)
CTYPE: dict[np.dtype, tuple[str, str, np.dtype, str, str]] = {
    bool: ("unsigned char", "bool", bool, "({} != 0)", "(unsigned char)({})"),
    int8: ("signed char", "signed char", int8, "{}", "(signed char)({})"),
    int16: ("short", "short", int16, "{}", "(short)({})"),
    int32: ("int", "int", int32, "{}", "(int)({})"),
    int64: ("long long", "long long", int64, "{}", "(long long)({})"),
    uint8: ("unsigned char", "unsigned char", uint8, "{}", "(unsigned char)({})"),
    uint16: ("unsigned short", "unsigned short", uint16, "{}", "(unsigned short)({})"),
    uint32: ("unsigned int", "unsigned int", uint32, "{}", "(unsigned int)({})"),
    uint64: ("unsigned long long", "unsigned long long", uint64, "{}",
             "(unsigned long long)({})"),
    float16: ("unsigned short", "float", float32, "gm_h2f({})", "gm_f2h((float)({}))"),
    bfloat16: ("unsigned short", "float", float32, "gm_bf2f({})", "gm_f2bf((float)({}))"),
    float32: ("float", "float", float32, "{}", "(float)({})"),
    float64: ("double", "double", float64, "{}", "(double)({})"),
    complex64: ("gm_c64", "gm_c64", complex64, "{}", "gm_c64({})"),
    complex128: ("gm_c128", "gm_c128", complex128, "{}", "gm_c128({})"),
}


def is_dtype(value: Any) -> Any:
    try:
        return np.dtype(value) in _ALLSET
    except TypeError:
        return False


def check_dtype(value: Any, field: str = "dtype") -> np.dtype:
    """The dtype ``value`` names (one of :data:`ALL`), or TypeError."""
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt is None or dt not in _ALLSET:
        raise TypeError(f"{field}: {value!r} is not a data type of gpumsg.array_api")
    return dt


def storage_name(dtype: np.dtype) -> str:
    return _STORAGE[dtype]


def kind_of(dtype: np.dtype) -> str:
    """'b' bool, 'i' signed, 'u' unsigned, 'f' real floating, 'c' complex."""
    found = _KINDS.get(dtype)  # a dict lookup: comparing NumPy dtypes one by one is slow
    if found is not None:
        return found
    if dtype == bool:
        return "b"
    if dtype in SIGNED:
        return "i"
    if dtype in UNSIGNED:
        return "u"
    if dtype in COMPLEX:
        return "c"
    return "f"


_KINDS = {dt: "b" if dt == bool else "i" if dt in SIGNED else "u" if dt in UNSIGNED else
          "c" if dt in COMPLEX else "f" for dt in ALL}
_FLOAT_RANK = {float16: 1, bfloat16: 1, float32: 2, float64: 3}


def _promote2(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    ka, kb = kind_of(a), kind_of(b)
    if ka == "b" or kb == "b":
        raise TypeError(f"no promotion of {a} with {b} (bool mixes only with bool)")
    if ka in "iu" and kb in "iu":
        if ka == kb:
            return a if a.itemsize >= b.itemsize else b
        s, u = (a, b) if ka == "i" else (b, a)
        if u == uint64:
            raise TypeError(f"no promotion of {a} with {b} (uint64 with a signed integer)")
        if s.itemsize > u.itemsize:
            return s
        return np.dtype(f"i{u.itemsize * 2}")
    if ka in "iu" or kb in "iu":  # mixed kinds: not in the table; the floating type wins
        return b if ka in "iu" else a
    if ka == "c" or kb == "c":
        prec = max(_real_of(a).itemsize, _real_of(b).itemsize)
        return complex128 if prec >= 8 else complex64
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if _FLOAT_RANK[a] >= _FLOAT_RANK[b] else b


def _real_of(dt: np.dtype) -> np.dtype:
    if dt == complex64:
        return float32
    if dt == complex128:
        return float64
    return dt if dt.itemsize >= 4 else float32


def real_dtype(dt: np.dtype) -> np.dtype:
    """The real dtype of a complex one (float32 for complex64); other dtypes as they are."""
    return {complex64: float32, complex128: float64}.get(dt, dt)


def result_type(*items: Any) -> np.dtype:
    """The standard's ``result_type``: dtypes and arrays by the promotion table, then Python
    scalars by the scalar rules."""
    dts = []
    scalars = []
    for it in items:
        if isinstance(it, (_pybool, int, float, complex)) and not isinstance(it, np.generic):
            scalars.append(it)
        elif hasattr(it, "dtype") and not isinstance(it, np.dtype):
            dts.append(check_dtype(it.dtype))
        else:
            dts.append(check_dtype(it))
    if not dts:
        if not scalars:
            raise ValueError("result_type needs at least one array or dtype")
        dts.append(scalar_dtype(scalars[0]))
        scalars = scalars[1:]
    out = dts[0]
    for d in dts[1:]:
        out = _promote2(out, d)
    for s in scalars:
        out = scalar_result(out, s)
    return out


def scalar_dtype(value: Any) -> np.dtype:
    """The default dtype of a Python scalar."""
    if isinstance(value, _pybool):
        return bool
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return float64
    return complex128


def scalar_result(dt: np.dtype, value: Any) -> np.dtype:
    """The dtype of an operation between an array of ``dt`` and a Python scalar: the array's,
    when the scalar's kind fits it (bool < int < float < complex); else the scalar's kind at
    the default precision (complex at the array's precision)."""
    k = kind_of(dt)
    if isinstance(value, _pybool):
        return dt
    if isinstance(value, int):
        return dt if k != "b" else int64
    if isinstance(value, float):
        return dt if k in "fc" else float64
    if isinstance(value, complex):
        if k == "c":
            return dt
        if k == "f":
            return complex128 if dt == float64 else complex64
        return complex128
    raise TypeError(f"{type(value).__name__} is not a scalar an array can take")
