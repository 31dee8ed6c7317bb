"""Building blocks of messages: the message base class, buffer and host-memory references,
and the field validators every message uses in ``__post_init__``.

A message is a frozen, slotted dataclass: pure data, picklable, comparable. It never holds a
future, a lock or a client object; buffers appear in it as :class:`BufRef` values. Constructing a
message validates it, and a bad field raises :class:`~gpumsg.errors.InvalidMessage` naming
``Message.field``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
from collections.abc import Callable
from typing import Any, TypeVar

from ..dtypes import dtype_name, dtype_of
from ..errors import GpuError, InvalidMessage

__all__ = ["Message", "BufRef", "HostRef", "message", "MAX_NBYTES", "as_ref", "as_refs",
           "check_choice", "checked_flag", "check_extent", "touched"]

#: Upper bound for any single byte count in a message (2**48: far above any device, far below
#: overflow of the 64-bit sizes the driver takes).
MAX_NBYTES = 1 << 48

T = TypeVar("T")


class Message:
    """Base class of every message. ``__buffers__`` names the fields that hold a :class:`BufRef`
    (so the client can check ownership before sending); ``__writes__`` those the message
    writes (if it fails, their contents are marked invalid and readers fail naming why)."""

    __slots__ = ()
    __buffers__: tuple[str, ...] = ()
    __writes__: tuple[str, ...] = ()

    def refs(self) -> list[BufRef]:
        """Every buffer the message names."""
        return _collect(self, type(self).__buffers__)

    def written(self) -> list[BufRef]:
        """The buffers the message writes (their contents are invalid if it fails)."""
        return _collect(self, type(self).__writes__)


def _collect(msg: Message, fields: tuple[str, ...]) -> list[BufRef]:
    out: list[BufRef] = []
    for name in fields:
        value = getattr(msg, name)
        if type(value) is BufRef:
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(value)
    return out


def message(*, buffers: tuple[str, ...] = (), writes: tuple[str, ...] = ()
            ) -> Callable[[type[T]], type[T]]:
    """Class decorator: a frozen, slotted dataclass subclass of :class:`Message`."""

    def wrap(cls: type[T]) -> type[T]:
        out = fast_init(dataclasses.dataclass(frozen=True, slots=True)(cls))
        out.__buffers__ = buffers  # type: ignore[attr-defined]
        out.__writes__ = writes  # type: ignore[attr-defined]
        return out

    return wrap


def fast_init(cls: type[T]) -> type[T]:
    """Give a frozen, slotted dataclass an ``__init__`` that stores each field through its slot
    descriptor: the same signature and behaviour as the generated one (fields in order, then
    ``__post_init__``), at about half the cost. The dataclass's own ``__init__`` goes through
    ``object.__setattr__`` per field; with a dozen fields that was 3 µs of every GEMM sent.
    Classes with features this does not reproduce (default factories, keyword-only fields,
    init-only variables) keep the generated ``__init__``."""
    fields = getattr(cls, "__dataclass_fields__", {})
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not params.frozen or "__slots__" not in cls.__dict__:
        return cls
    args: list[str] = []
    body: list[str] = []
    env: dict[str, Any] = {"_as_int": _as_int, "_plain": _plain}
    coerce: list[str] = []
    for i, f in enumerate(fields.values()):
        if (f._field_type is not dataclasses._FIELD  # type: ignore[attr-defined]
                or f.kw_only is True or f.default_factory is not dataclasses.MISSING):
            return cls
        slot = next((k.__dict__[f.name] for k in cls.__mro__ if f.name in k.__dict__), None)
        if slot is None or not hasattr(slot, "__set__"):
            return cls
        env[f"_set{i}"] = slot.__set__
        if f.init:
            if f.default is dataclasses.MISSING:
                args.append(f.name)
            else:
                env[f"_default{i}"] = f.default
                args.append(f"{f.name}=_default{i}")
            body.append(f"    _set{i}(self, {f.name})")
            # NumPy integers become Python ints before any validator does arithmetic on them
            # (an np.int8 stride would wrap); a bool is refused where an int is expected
            kind = _NUMERIC_FIELDS.get(str(f.type))
            if kind == "int":
                coerce.append(f"    if {f.name} is not None and type({f.name}) is not int:\n"
                              f"        _set{i}(self, _as_int(self, {f.name!r}, {f.name}))")
            elif kind == "any":
                coerce.append(f"    if type({f.name}) not in _PLAIN:\n"
                              f"        _set{i}(self, _plain({f.name}))")
        elif f.default is not dataclasses.MISSING:
            env[f"_default{i}"] = f.default
            body.append(f"    _set{i}(self, _default{i})")
    stores = list(body)
    body.extend(coerce)
    env["_PLAIN"] = _PLAIN
    if hasattr(cls, "__post_init__"):
        # a validator that trips over an odd value (None where a buffer goes, an unhashable
        # flag) still answers InvalidMessage, never a bare TypeError or AttributeError
        body.append("    try:\n        self.__post_init__()\n    except _GpuError:\n"
                    "        raise\n    except _UNTYPED as exc:\n"
                    "        raise _untyped(self, exc) from exc")
        env.update(_GpuError=GpuError, _UNTYPED=_UNTYPED, _untyped=_untyped)
    src = f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    # ``unchecked(...)``: the same fields stored without __post_init__, for values the client
    # derived from a message it has validated (the staging chunks of a checked copy)
    names = [a.split("=")[0] for a in args]
    if all(f.init for f in fields.values()):
        src += (f"def unchecked({', '.join(names)}):\n    self = _new(_cls)\n"
                + "".join(line + "\n" for line in stores) + "    return self\n")
    else:
        # ``whole(...)``: every field, derived ones too, stored as given without
        # __post_init__, for a caller that has checked the values and derived the rest itself
        # (the client minting a BufRef)
        src += (f"def whole({', '.join(fields)}):\n    self = _new(_cls)\n"
                + "".join(f"    _set{i}(self, {name})\n" for i, name in enumerate(fields))
                + "    return self\n")
    env["_new"] = object.__new__
    env["_cls"] = cls
    exec(src, env)  # noqa: S102 - generated from the class's own field names, as dataclasses does
    for name in ("unchecked", "whole"):
        if name in env:
            setattr(cls, name, staticmethod(env[name]))
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = cls.__init__.__annotations__
    cls.__init__ = init  # type: ignore[misc]
    return cls


#: field annotations whose values are normalized before ``__post_init__``: "int" fields hold a
#: Python int (or None) after construction, "any" fields (scalars or tuples of them) have
#: their NumPy integers turned into Python ints
_NUMERIC_FIELDS = {"int": "int", "int | None": "int", "Any": "any",
                   "tuple[int, ...]": "any", "tuple[int, ...] | None": "any"}
_PLAIN = frozenset((int, float, str, bool, complex, type(None)))


_UNTYPED = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError,
            ZeroDivisionError)


def _untyped(msg: object, exc: Exception) -> InvalidMessage:
    """The InvalidMessage for a validator's untyped error: it names the first field whose
    value is not of a kind messages hold (a buffer, a number, a string, a tuple, None)."""
    field = None
    for name in getattr(type(msg), "__dataclass_fields__", {}):
        value = getattr(msg, name, None)
        if type(value) not in _PLAIN and type(value) not in (BufRef, tuple) and not (
                dataclasses.is_dataclass(value)):
            field = name
            break
    where = f"{type(msg).__name__}.{field}" if field else type(msg).__name__
    got = f" (got {type(getattr(msg, field)).__name__})" if field else ""
    return InvalidMessage(f"{where}: invalid argument{got}: {type(exc).__name__}: {exc}",
                          field=field)


def _as_int(msg: object, field: str, value: Any) -> Any:
    """``value`` as a Python int when it is a non-bool integer (NumPy's of any width
    included); a bool raises :class:`InvalidMessage`; anything else is returned for the
    field's validator to refuse with its own words."""
    if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b":
        raise _fail(msg, field, f"expected an integer, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return int(value)
    return value


def _plain(value: Any) -> Any:
    """``value`` with NumPy integers (itself, or the items of a tuple or list) made Python
    ints; other values as they are."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (tuple, list)) and any(
            type(v) is not int and isinstance(v, numbers.Integral) and not isinstance(v, bool)
            for v in value):
        return type(value)(int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool)
                           else v for v in value)
    return value


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class BufRef:
    """A device buffer as messages see it: plain data naming one allocation of one device.

    ``owner`` is the token of the device client that minted it, ``id`` its number there,
    ``generation`` the device generation it belongs to. ``shape`` and ``order`` ('C' or 'F')
    describe the logical array; ``nbytes`` the allocation.
    """

    owner: int
    id: int
    generation: int
    dtype: str
    shape: tuple[int, ...]
    order: str
    nbytes: int
    #: number of elements (derived from ``shape``; kept because every validation needs it)
    size: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", math.prod(self.shape))

    @property
    def itemsize(self) -> int:
        return dtype_of(self.dtype).itemsize

    def describe(self) -> str:
        return f"buffer #{self.id} ({self.dtype}{list(self.shape)}, {self.order} order)"


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class HostRef:
    """Host memory the device can copy to or from by DMA: ``nbytes`` at ``offset`` inside block
    ``block`` of a host pool (``"pinned"``: the device's page-locked pool; ``"shm"``: a shared
    segment the worker process has registered). The block belongs to the client until the copy's
    reply has arrived."""

    pool: str
    block: int
    offset: int
    nbytes: int

    def __post_init__(self) -> None:
        _choice(self, "pool", self.pool, ("pinned", "shm"))
        _int(self, "block", self.block)
        _int(self, "offset", self.offset)
        _int(self, "nbytes", self.nbytes, hi=MAX_NBYTES)


# ---------------------------------------------------------------------------------------------
# validators: each takes the message, the field name and the value, and raises InvalidMessage.


def _where(msg: object, field: str) -> str:
    return f"{type(msg).__name__}.{field}"


def _fail(msg: object, field: str, text: str) -> InvalidMessage:
    return InvalidMessage(f"{_where(msg, field)}: {text}", field=field)


def _int(msg: object, field: str, value: Any, lo: int = 0, hi: int | None = None) -> int:
    if type(value) is int and value >= lo and (hi is None or value <= hi):
        return value  # the common case, without the ABC checks below
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail(msg, field, f"expected an integer, got {type(value).__name__}")
    value = int(value)
    if value < lo:
        raise _fail(msg, field, f"must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise _fail(msg, field, f"must be <= {hi}, got {value}")
    return value


def _opt_int(msg: object, field: str, value: Any, lo: int = 0, hi: int | None = None) -> int | None:
    return None if value is None else _int(msg, field, value, lo, hi)


def _real(msg: object, field: str, value: Any) -> float:
    if type(value) is float and value == value:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(msg, field, f"expected a real number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise _fail(msg, field, "must not be NaN")
    return value


def _scalar(msg: object, field: str, value: Any) -> complex | float:
    """A real or complex scalar (alpha/beta of complex routines)."""
    if isinstance(value, numbers.Complex) and not isinstance(value, (numbers.Real, bool)):
        value = complex(value)
        if math.isnan(value.real) or math.isnan(value.imag):
            raise _fail(msg, field, "must not be NaN")
        return value
    return _real(msg, field, value)


def _known(value: Any, choices: tuple) -> bool:
    try:
        return bool(value in choices)
    except (TypeError, ValueError):  # an array (ambiguous truth value) or an odd object
        return False


def _choice(msg: object, field: str, value: Any, choices: tuple) -> Any:
    if not _known(value, choices):
        raise _fail(msg, field, f"must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def check_choice(value: Any, field: str, choices: tuple) -> Any:
    """``value`` if it is one of ``choices``, else :class:`~gpumsg.errors.InvalidMessage`
    naming ``field``: the client-side form of a message's choice check (an array or an odd
    object is refused, never compared element-wise)."""
    if not _known(value, choices):
        raise InvalidMessage(f"{field}: must be one of {', '.join(map(repr, choices))}; "
                             f"got {value!r}", field=field)
    return value


def checked_flag(value: Any, field: str) -> bool:
    """``value`` if it is True or False (a Python bool), else
    :class:`~gpumsg.errors.InvalidMessage` naming ``field``: the client-side form of a
    message's bool check (an array is refused, never asked for its truth value; 1 or "yes" is
    not taken for True)."""
    if not isinstance(value, bool):
        raise InvalidMessage(f"{field}: expected True or False, got {value!r}", field=field)
    return value


def _bool(msg: object, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(msg, field, f"expected True or False, got {value!r}")
    return value


def _ref(msg: object, field: str, value: Any) -> BufRef:
    """Coerce a GpuBuffer / its future / a BufRef into a BufRef (the client objects check, in
    their ``ref`` property, that they are not freed or stale)."""
    if type(value) is BufRef:
        return value
    try:
        ref = value.ref
    except AttributeError:
        raise _fail(msg, field, f"expected a GpuBuffer, its future or a BufRef, got "
                    f"{type(value).__name__}") from None
    if type(ref) is not BufRef:
        raise _fail(msg, field, f"expected a GpuBuffer, got {type(value).__name__}")
    return ref


def as_ref(value: Any, field: str) -> BufRef:
    """The :class:`BufRef` of ``value`` (a GpuBuffer, its future or a BufRef), for client code
    that needs a buffer's shape or dtype before building a message. Anything else (a NumPy
    array, an int, None, ...) raises :class:`~gpumsg.errors.InvalidMessage` naming ``field``;
    a freed or stale buffer raises :class:`~gpumsg.errors.GpuRefStale`. Every library client
    uses this one helper, so a wrong argument is reported the same way everywhere."""
    if type(value) is BufRef:
        return value
    ref = getattr(value, "ref", None) if not isinstance(value, type) else None
    if type(ref) is not BufRef:
        raise InvalidMessage(f"{field}: expected a GpuBuffer, its future or a BufRef, got "
                             f"{type(value).__name__}", field=field)
    return ref


def as_refs(values: Any, field: str) -> tuple[BufRef, ...]:
    """:func:`as_ref` of each item of a sequence (a list or tuple of buffers)."""
    if not isinstance(values, (tuple, list)):
        raise InvalidMessage(f"{field}: expected a list or tuple of buffers, got "
                             f"{type(values).__name__}", field=field)
    return tuple(as_ref(v, f"{field}[{i}]") for i, v in enumerate(values))


def _opt_ref(msg: object, field: str, value: Any) -> BufRef | None:
    return None if value is None else _ref(msg, field, value)


def _set(msg: object, field: str, value: Any) -> None:
    """Store a normalized value into a frozen message during ``__post_init__``."""
    object.__setattr__(msg, field, value)


def _dtype(msg: object, field: str, value: Any) -> str:
    return dtype_name(value, _where(msg, field))


def _shape(msg: object, field: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise _fail(msg, field, f"expected a tuple of non-negative ints, got {value!r}")
    out = tuple(_int(msg, field, v) for v in value)
    return out


def _require_dtype(msg: object, field: str, ref: BufRef, allowed: tuple[str, ...]) -> None:
    if ref.dtype not in allowed:
        raise _fail(msg, field, f"{ref.describe()} has dtype {ref.dtype}; this operation needs "
                    + " or ".join(allowed))


INT32_MAX = 2**31 - 1  # the largest size or element count the cuDNN APIs take


def _dense_rows(msg: object, field: str, ref: BufRef) -> None:
    """``ref`` is row-major (order 'C', or of one non-unit dimension), not empty, and holds at
    most ``INT32_MAX`` elements (cuDNN's tensor sizes are int32)."""
    if ref.order != "C" and sum(s > 1 for s in ref.shape) > 1:
        raise _fail(msg, field, f"{ref.describe()} must be row-major (order 'C')")
    if any(s == 0 for s in ref.shape):
        raise _fail(msg, field, f"{ref.describe()} is empty")
    if ref.size > INT32_MAX:
        raise _fail(msg, field, f"{ref.describe()} has more than 2**31 - 1 elements")


def touched(offset: int, dims: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
    """The first and last unit (element or byte) an access touches: it starts ``offset`` units
    into a buffer and walks ``dims``, pairs (count, stride) — a vector is ((n, inc),), a
    column-major matrix ((rows, 1), (cols, ld)), a strided batch adds (batch, stride). None when
    a count is 0 (nothing is touched). Computed in Python integers, which do not wrap: every
    value is turned into one first (``operator.index``), so a NumPy scalar cannot overflow."""
    lo = hi = offset if type(offset) is int else operator.index(offset)
    for count, stride in dims:
        if type(count) is not int:
            count = operator.index(count)
        if type(stride) is not int:
            stride = operator.index(stride)
        if count <= 0:
            return None
        step = (count - 1) * stride
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi


def check_extent(msg: object, field: str, ref: BufRef, offset: int,
                 dims: tuple[tuple[int, int], ...], what: str | Callable[[], str] = "", *,
                 unit: str = "elements") -> None:
    """The bounds check every message shares: the access described by ``offset`` and ``dims``
    (see :func:`touched`) stays inside ``ref`` — its elements, or its bytes with
    ``unit="bytes"`` — or :class:`InvalidMessage` naming ``field`` says how far it reaches,
    describing the access as ``what`` (a string, or a callable made into one only then)."""
    span = touched(offset, dims)
    if span is None:
        return
    lo, hi = span
    size = ref.nbytes if unit == "bytes" else ref.size
    if lo < 0 or hi >= size:
        desc = (what() if callable(what) else what) or ", ".join(
            f"{c} at stride {s}" for c, s in dims)
        where = f"[{lo}, {hi}]" if lo < 0 else f"up to {unit[:-1]} {hi}"
        raise _fail(msg, field, f"{desc} from offset {offset} reaches {unit} {where} but "
                    f"{ref.describe()} holds {size} {unit}")


def _span(msg: object, field: str, ref: BufRef, offset: int, nbytes: int) -> None:
    # an empty range still has to start inside the buffer or at its end
    span = touched(offset, ((nbytes, 1),)) or (offset, offset - 1)
    if span[0] < 0 or span[1] >= ref.nbytes:
        raise _fail(msg, field, f"{nbytes} bytes at offset {offset} exceed {ref.describe()} of "
                    f"{ref.nbytes} bytes")
