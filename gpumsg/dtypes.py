"""Element types: NumPy dtypes, their short names, and the CUDA library enums for them.

Messages carry a dtype as its short name (``"f32"``, ``"bf16"``, ...) so that they stay plain,
picklable data; the client API accepts anything :func:`as_dtype` understands.
bfloat16 and the fp8 formats come from ``ml_dtypes``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from .errors import InvalidMessage

__all__ = [
    "as_dtype",
    "dtype_name",
    "CUDA_DATA_TYPE",
    "ALLOC_DTYPES",
    "bfloat16",
    "float8_e4m3",
    "float8_e5m2",
]

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)

#: short name -> NumPy dtype, for every element type a buffer can hold.
_BY_NAME: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f16": np.dtype(np.float16),
    "bf16": bfloat16,
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "i16": np.dtype(np.int16),
    "u16": np.dtype(np.uint16),
    "i32": np.dtype(np.int32),
    "u32": np.dtype(np.uint32),
    "i64": np.dtype(np.int64),
    "u64": np.dtype(np.uint64),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
    "e4m3": float8_e4m3,
    "e5m2": float8_e5m2,
}
_BY_DTYPE: dict[np.dtype, str] = {v: k for k, v in _BY_NAME.items()}

#: The types offered for typed allocation (fp8 buffers are allocated the same way).
ALLOC_DTYPES: tuple[str, ...] = ("f32", "f64", "f16", "bf16", "i8", "u8", "i16", "u16", "i32",
                                 "u32", "i64", "u64", "c64", "c128")

#: short name -> cudaDataType_t (library_types.h), used by cuBLAS(Lt), cuFFT, cuSOLVER, cuSPARSE.
CUDA_DATA_TYPE: dict[str, int] = {
    "f32": 0, "f64": 1, "f16": 2, "i8": 3, "c64": 4, "c128": 5, "u8": 8, "i32": 10, "u32": 12,
    "bf16": 14, "i16": 20, "u16": 22, "i64": 24, "u64": 26, "e4m3": 28, "e5m2": 29,
}

_ALIASES = {"float32": "f32", "float64": "f64", "float16": "f16", "half": "f16",
            "bfloat16": "bf16", "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16",
            "int32": "i32", "uint32": "u32",
            "int64": "i64", "uint64": "u64", "complex64": "c64", "complex128": "c128",
            "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "double": "f64", "float": "f32"}


def as_dtype(value: Any, field: str = "dtype") -> np.dtype:
    """Return the NumPy dtype for ``value`` (a dtype, a scalar type, or a name such as
    ``"f32"``, ``"float32"``, ``"bf16"``). Raises :class:`InvalidMessage` for anything gpumsg
    cannot hold in a buffer."""
    if isinstance(value, str):
        key = _ALIASES.get(value, value)
        found = _BY_NAME.get(key)
        if found is not None:
            return found
    try:
        dt = np.dtype(value)
    except (TypeError, ValueError):  # ValueError: an object whose ``.dtype`` is no dtype
        dt = None
    if dt is None or dt not in _BY_DTYPE:
        raise InvalidMessage(
            f"{field}: unsupported element type {value!r}; gpumsg buffers hold "
            + ", ".join(_BY_NAME), field=field)
    return dt


def dtype_name(value: Any, field: str = "dtype") -> str:
    """The short name (``"f32"``) of anything :func:`as_dtype` accepts."""
    if isinstance(value, str) and value in _BY_NAME:
        return value
    return _BY_DTYPE[as_dtype(value, field)]


def dtype_of(name: str) -> np.dtype:
    """The NumPy dtype for a short name that is already known to be valid."""
    return _BY_NAME[name]
