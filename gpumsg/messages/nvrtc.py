"""User kernels as messages: a compiled module loaded on the device, and launches of its kernels.

Compiling happens on the caller's side (``dev.compile``: NVRTC, cached on disk); the device
thread only loads the image (:class:`LoadModule`, once per device and image) and launches
(:class:`Launch`, on the compute stream).

A :class:`Kernel` is plain data naming one kernel of one loaded module: the module's key (a hash
of its image), the name the user asked for, the symbol in the image (the lowered name of a
template instance) and the kinds of its parameters, in order: ``"ptr"`` for a pointer (a device
buffer is passed) or a gpumsg scalar dtype (``"f32"``, ``"i32"``, ``"u64"``, ``"bool"``, ...).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from ._base import BufRef, Message, _choice, _fail, _int, _ref, _set, fast_init, message

__all__ = ["Kernel", "LoadModule", "Launch", "Untyped", "pointer_params", "SCALAR_KINDS",
           "MAX_THREADS_PER_BLOCK"]

#: scalar parameter kinds -> (is_integer, bits, signed)
SCALAR_KINDS: dict[str, tuple[bool, int, bool]] = {
    "bool": (True, 1, False), "i8": (True, 8, True), "u8": (True, 8, False),
    "i16": (True, 16, True), "u16": (True, 16, False), "i32": (True, 32, True),
    "u32": (True, 32, False), "i64": (True, 64, True), "u64": (True, 64, False),
    "f16": (False, 16, True), "f32": (False, 32, True), "f64": (False, 64, True),
}
MAX_THREADS_PER_BLOCK = 1024
#: the largest dynamic shared memory a block may ask for on current GPUs (H100: 227 KiB)
MAX_SHARED_BYTES = 227 << 10
IMAGE_KINDS = ("cubin", "ptx", "sim")


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class Kernel:
    """One kernel of a loaded module (see the module docstring). ``owner`` is the device
    token; ``from_cache`` says whether the image came from the on-disk cache."""

    owner: int
    module: str
    name: str
    symbol: str
    params: tuple[str, ...]
    from_cache: bool = dataclasses.field(default=False, compare=False)
    #: per parameter, the element dtype a pointer parameter declares (``float*`` -> "f32"):
    #: a buffer of another dtype is refused unless passed through :class:`Untyped`. None (or
    #: an empty tuple: nothing declared) for scalars and ``void*``
    pointees: tuple = ()

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, params={list(self.params)})"


#: a kernel's parameter kinds -> (position, field name) of each pointer parameter
_POINTERS: dict[tuple[str, ...], tuple[tuple[int, str], ...]] = {}


def pointer_params(params: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """(position, ``args[i]``) of each pointer parameter of a kernel with these parameter
    kinds: a Launch holds a BufRef at exactly those positions (its checks make every pointer
    argument one) and a number everywhere else."""
    found = _POINTERS.get(params)
    if found is None:
        found = tuple((i, f"args[{i}]") for i, kind in enumerate(params) if kind == "ptr")
        if len(_POINTERS) < 4096:
            _POINTERS[params] = found
    return found


@message()
class LoadModule(Message):
    """Load a CUBIN/PTX image (``kind``) on the device thread (``cuModuleLoadData``) and look up
    ``symbols``; a module already loaded under ``key`` is reused. On the simulator ``kind`` is
    ``"sim"`` and each symbol must name a kernel of the simulator's registry. Replies None."""

    key: str
    image: bytes
    kind: str
    symbols: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise _fail(self, "key", "expected a non-empty string")
        if not isinstance(self.image, (bytes, bytearray)) or (self.kind != "sim"
                                                               and not self.image):
            raise _fail(self, "image", "expected the bytes of a CUBIN or PTX image")
        _choice(self, "kind", self.kind, IMAGE_KINDS)
        syms = tuple(self.symbols)
        if not syms or not all(isinstance(s, str) and s for s in syms):
            raise _fail(self, "symbols", "expected one or more kernel names")
        _set(self, "image", bytes(self.image))
        _set(self, "symbols", syms)


def _dims(msg: object, field: str, value: Any) -> tuple[int, int, int]:
    if type(value) is int and 0 < value < (1 << 31):  # the common case, without ABC checks
        return (value, 1, 1)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise _fail(msg, field, f"expected 1 to 3 positive ints, got {value!r}")
    dims = tuple(_int(msg, field, v, lo=1, hi=(1 << 31) - 1) for v in value)
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]


#: integer kinds -> (lowest, highest)
_RANGE = {k: ((-(1 << (b - 1)), (1 << (b - 1)) - 1) if s else (0, (1 << b) - 1))
          for k, (i, b, s) in SCALAR_KINDS.items() if i and k != "bool"}


def _scalar_arg(msg: object, field: str, kind: str, value: Any) -> int | float | bool:
    is_int, bits, signed = SCALAR_KINDS[kind]
    if kind == "bool":
        if isinstance(value, (bool, numbers.Integral)) and value in (0, 1):
            return bool(value)
        raise _fail(msg, field, f"expected a bool, got {value!r}")
    if is_int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise _fail(msg, field, f"parameter of type {kind} needs an integer, got "
                        f"{type(value).__name__}")
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        value = int(value)
        if not lo <= value <= hi:
            raise _fail(msg, field, f"{value} does not fit a {kind} parameter")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _fail(msg, field, f"parameter of type {kind} needs a real number, got "
                    f"{type(value).__name__}")
    value = float(value)
    if math.isnan(value):
        raise _fail(msg, field, "must not be NaN")
    return value


class Untyped:
    """A buffer passed to a kernel's pointer parameter as raw memory: its dtype is not checked
    against the element type the parameter declares (``dev.nvrtc.untyped(buf)``). The
    explicit way to reinterpret, say, f64 data through a ``float*``."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer


@message()
class Launch(Message):
    """Launch ``kernel`` on the compute stream with ``grid`` x ``block`` threads and ``shared``
    bytes of dynamic shared memory. ``args`` match the kernel's parameters: a device buffer
    (GpuBuffer, its future or a BufRef) for each pointer, a number for each scalar (checked
    against the parameter's type). ``reads``/``writes`` declare which buffer arguments the kernel
    reads and writes (default: every buffer argument, both), so that other streams' uses and
    stream-ordered frees are ordered around the launch. ``scratch`` names buffer arguments the
    kernel uses as workspace and leaves as it found them (a split reduction's arrival counters):
    ordered as read and written, but a failed launch does not mark them failed, since their
    contents never depend on the launch's inputs. Replies None."""

    kernel: Kernel
    grid: Any
    block: Any
    args: tuple = ()
    shared: int = 0
    reads: Any = None
    writes: Any = None
    scratch: Any = None

    def __post_init__(self) -> None:
        k = self.kernel
        if type(k) is not Kernel:
            raise _fail(self, "kernel", f"expected a Kernel (from dev.compile), got "
                        f"{type(k).__name__}")
        grid = _dims(self, "grid", self.grid)
        block = _dims(self, "block", self.block)
        if block[0] * block[1] * block[2] > MAX_THREADS_PER_BLOCK:
            raise _fail(self, "block", f"{block[0] * block[1] * block[2]} threads exceed "
                        f"{MAX_THREADS_PER_BLOCK} per block")
        if grid[1] > 65535 or grid[2] > 65535:
            raise _fail(self, "grid", "grid y and z must be <= 65535")
        _set(self, "grid", grid)
        _set(self, "block", block)
        _int(self, "shared", self.shared, hi=MAX_SHARED_BYTES)
        args = tuple(self.args) if isinstance(self.args, (tuple, list)) else None
        if args is None:
            raise _fail(self, "args", f"expected a tuple of arguments, got {self.args!r}")
        if len(args) != len(k.params):
            raise _fail(self, "args", f"{k.name} takes {len(k.params)} arguments "
                        f"({', '.join(k.params)}), got {len(args)}")
        out: list[Any] = []
        buffers: list[BufRef] = []
        ids: set[int] = set()
        for i, (kind, value) in enumerate(zip(k.params, args)):
            t = type(value)
            if kind == "ptr":
                if t is Untyped:
                    ref = _ref(self, f"args[{i}]", value.buffer)
                else:
                    ref = _ref(self, f"args[{i}]", value)
                    want = k.pointees[i] if k.pointees else None
                    if want is not None and ref.dtype != want:
                        raise _fail(self, f"args[{i}]", f"{k.name} declares parameter {i} a "
                                    f"pointer to {want} but {ref.describe()} holds "
                                    f"{ref.dtype}; pass a {want} buffer, or "
                                    "dev.nvrtc.untyped(buffer) to reinterpret its memory")
                out.append(ref)
                if ref.id not in ids:
                    ids.add(ref.id)
                    buffers.append(ref)
            elif t is float and kind[0] == "f" and value == value:  # fast paths
                out.append(value)
            elif t is int and kind in _RANGE and _RANGE[kind][0] <= value <= _RANGE[kind][1]:
                out.append(value)
            else:
                out.append(_scalar_arg(self, f"args[{i}]", kind, value))
        _set(self, "args", tuple(out))
        everything = tuple(buffers)
        for field in ("reads", "writes"):
            value = getattr(self, field)
            if value is None:
                chosen = everything
            else:
                if not isinstance(value, (tuple, list)):
                    value = (value,)
                chosen = tuple(dict.fromkeys(_ref(self, field, v) for v in value))
                for ref in chosen:
                    if ref.id not in ids:
                        raise _fail(self, field, f"{ref.describe()} is not an argument of the "
                                    "launch")
            _set(self, field, chosen)
        scratch = () if self.scratch is None else self.scratch
        if not isinstance(scratch, (tuple, list)):
            scratch = (scratch,)
        kept = tuple(dict.fromkeys(_ref(self, "scratch", v) for v in scratch))
        for ref in kept:
            if ref.id not in ids:
                raise _fail(self, "scratch", f"{ref.describe()} is not an argument of the "
                            "launch")
            for field in ("reads", "writes"):  # ordered as read and written
                chosen = getattr(self, field)
                if all(r.id != ref.id for r in chosen):
                    _set(self, field, (*chosen, ref))
        _set(self, "scratch", kept)

    def refs(self) -> list[BufRef]:
        args = self.args
        return [args[i] for i, _ in pointer_params(self.kernel.params)]

    def written(self) -> list[BufRef]:
        scratch = self.scratch
        if not scratch:
            return list(self.writes)
        ids = {r.id for r in scratch}
        return [r for r in self.writes if r.id not in ids]
