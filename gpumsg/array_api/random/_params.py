"""Arguments of the Generator's methods as NumPy takes them: ``size``, ``dtype``, and
distribution parameters that are scalars or arrays (host or device), broadcast together.

A parameter is checked where NumPy checks it, and a bad one raises
:class:`~gpumsg.errors.InvalidMessage` (a ``ValueError``, as NumPy raises) naming it. A
condition is written as the valid case (``lambda v: v >= 0``), so that NaN fails it as it fails
NumPy's checks. Host values are checked on the host; a device array is checked on the device
(one reduction, whose answer the call waits for: a wrong number is worse than a wait).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, asarray_host
from .._elementwise import broadcast_shapes

__all__ = ["size_shape", "float_dtype", "Param", "param", "out_shape", "materialize",
           "check", "int_value", "real_host"]


def size_shape(size: Any) -> tuple[int, ...] | None:
    """NumPy's ``size``: None, an int or a sequence of ints -> a shape (None stays None)."""
    if size is None:
        return None
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (int(size),)
    if not isinstance(size, (tuple, list)) or not all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in size):
        raise InvalidMessage(f"size: expected None, an int or a tuple of ints, got {size!r}",
                             field="size")
    out = tuple(int(d) for d in size)
    if any(d < 0 for d in out):
        raise InvalidMessage(f"size: negative dimensions are not allowed, got {out}",
                             field="size")
    return out


def float_dtype(dtype: Any) -> np.dtype:
    """float64 or float32 (NumPy's choices where a method takes ``dtype``)."""
    try:
        dt = D.check_dtype(dtype)
    except Exception as exc:  # noqa: BLE001 - any unreadable dtype is the caller's field
        raise InvalidMessage(f"dtype: {exc}", field="dtype") from None
    if dt not in (D.float32, D.float64):
        raise InvalidMessage(f"dtype: expected float64 or float32, got {dt}", field="dtype")
    return dt


class Param:
    """One distribution parameter: ``value`` is a float (a scalar) or a float64 Array on the
    device; ``shape`` its shape (``()`` for a scalar); ``host`` the NumPy values when it came
    from the host."""

    __slots__ = ("name", "value", "shape", "host")

    def __init__(self, name: str, value: Any, shape: tuple[int, ...], host: Any) -> None:
        self.name, self.value, self.shape, self.host = name, value, shape, host

    @property
    def scalar(self) -> bool:
        return not isinstance(self.value, Array)


def real_host(value: Any, name: str, dtype: Any = np.float64) -> np.ndarray:
    """Host values of parameter ``name`` as ``dtype`` (None: as they are). Raises
    InvalidMessage for what is not real numbers: complex values are refused, not cast (NumPy's
    cast would drop the imaginary part with only a warning), and text is not parsed as
    numbers (NumPy's Generator refuses a str too)."""
    try:
        host = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting, say
        raise InvalidMessage(f"{name}: expected real numbers, got {type(value).__name__}",
                             field=name) from None
    if host.dtype.kind not in "biufO":  # complex, text, dates: not parsed, not cast
        raise InvalidMessage(f"{name}: expected real numbers, got {host.dtype} values",
                             field=name)
    try:
        return host if dtype is None else np.asarray(host, dtype=dtype)
    except (TypeError, ValueError):  # objects that are not real numbers (a complex, a str)
        raise InvalidMessage(f"{name}: expected real numbers, got {host.dtype} values",
                             field=name) from None


def param(dev: Any, name: str, value: Any) -> Param:
    """``value`` (a real number, a sequence, a NumPy array or an Array on ``dev``) as a Param."""
    if isinstance(value, Array):
        if value.device is not dev:
            raise InvalidMessage(f"{name}: the array is on another device than the generator",
                                 field=name)
        if D.kind_of(value.dtype) not in "biuf":
            raise InvalidMessage(f"{name}: expected real values, got {value.dtype}", field=name)
        if value.ndim == 0:
            return Param(name, float(value), (), np.float64(float(value)))
        arr = value if value.dtype == D.float64 else _astype(value, D.float64)
        return Param(name, arr, value.shape, None)
    if isinstance(value, numbers.Real):
        return Param(name, float(value), (), np.float64(value))
    host = real_host(value, name)
    if host.ndim == 0:
        return Param(name, float(host), (), host)
    return Param(name, asarray_host(dev, host, D.float64), host.shape, host)


def _astype(x: Array, dt: np.dtype) -> Array:
    from .._elementwise import astype

    return astype(x, dt)


def check(p: Param, valid: Callable[[Any], Any], message: str) -> None:
    """InvalidMessage naming ``p`` unless ``valid`` holds for all its values."""
    if p.host is not None:
        with np.errstate(invalid="ignore"):
            ok = bool(np.all(valid(np.asarray(p.host))))
    else:
        from .._reductions import all as all_

        ok = bool(all_(valid(p.value)))
    if not ok:
        raise InvalidMessage(f"{p.name}: {message}", field=p.name)


def out_shape(size: tuple[int, ...] | None, params: list[Param]) -> tuple[int, ...]:
    """The result's shape: ``size``, which the parameters must broadcast to, or their
    broadcast shape."""
    try:
        shape = broadcast_shapes(*(p.shape for p in params)) if params else ()
    except ValueError:
        raise InvalidMessage("shape mismatch: the parameters do not broadcast together ("
                             + ", ".join(f"{p.name} {p.shape}" for p in params) + ")",
                             field=params[0].name) from None
    if size is None:
        return shape
    try:
        full = broadcast_shapes(shape, size)
    except ValueError:
        full = None
    if full != size:
        raise InvalidMessage(f"size: the parameters of shape {shape} do not broadcast to "
                             f"size {size}", field="size")
    return size


def materialize(p: Param, shape: tuple[int, ...]) -> Any:
    """``p`` as a kernel takes it: a float, or a C-contiguous float64 array of ``shape``."""
    if p.scalar:
        return p.value
    x = p.value
    if x.shape == shape and x._is_contiguous() and x._offset == 0:
        return x
    from .._manipulation import broadcast_to

    return _astype(broadcast_to(x, shape), D.float64)


def int_value(value: Any, field: str) -> int:
    """A Python int from an integral scalar."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidMessage(f"{field}: expected an int, got {value!r}", field=field)
    return int(value)
