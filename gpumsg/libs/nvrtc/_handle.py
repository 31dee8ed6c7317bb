"""The per-device module cache and kernel launches on CUDA (device thread).

Modules are loaded once per device and image (``cuModuleLoadData``); kernel functions are looked
up once per symbol. A launch packs its arguments into ctypes values typed by the kernel's
parameter kinds and enqueues ``cuLaunchKernel`` on the given stream (the driver copies the
argument values at the call, so nothing needs to outlive it; under stream capture the values are
copied into the graph node).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.cuda._driver import _driver, _fail, raw_kernel_launch
from ...errors import InvalidMessage
from ._functions import LoadedFunctions

__all__ = ["NvrtcHandle", "CTYPE_OF_KIND"]

CTYPE_OF_KIND: dict[str, Any] = {
    "ptr": ctypes.c_uint64, "bool": ctypes.c_bool, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
    "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
    "f16": ctypes.c_uint16, "f32": ctypes.c_float, "f64": ctypes.c_double,
}
_DEFAULT_SHARED_LIMIT = 48 << 10


def pack_each(kinds: tuple[str, ...], values: list[Any]) -> tuple[Any, list[Any]]:
    """:func:`pack` with one ctypes value per parameter (any value ctypes converts)."""
    holders = []
    for kind, v in zip(kinds, values):
        if kind == "f16":
            v = int(np.float16(v).view(np.uint16))
        holders.append(CTYPE_OF_KIND[kind](v))
    params = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
    return params, holders


#: struct codes of the parameter kinds (little-endian, standard sizes)
_CODE = {"ptr": "Q", "bool": "?", "i8": "b", "u8": "B", "i16": "h", "u16": "H", "i32": "i",
         "u32": "I", "i64": "q", "u64": "Q", "f16": "H", "f32": "f", "f64": "d"}
#: parameter kinds -> (the array type of the block, the struct writing it, the slots' offsets)
_PACKERS: dict[tuple[str, ...], tuple[Any, Any, tuple[int, ...]]] = {}


def _packer(kinds: tuple[str, ...]) -> tuple[Any, Any, tuple[int, ...]]:
    found = _PACKERS.get(kinds)
    if found is None:
        n = len(kinds)
        fmt = "<" + "Q" * n
        for k in kinds:
            size = struct.calcsize("<" + _CODE[k])
            fmt += _CODE[k] + (f"{8 - size}x" if size < 8 else "")
        found = (ctypes.c_uint64 * (2 * n), struct.Struct(fmt),
                 tuple(8 * (n + i) for i in range(n)))
        if len(_PACKERS) < 1024:
            _PACKERS[kinds] = found
    return found


def pack(kinds: tuple[str, ...], values: list[Any]) -> tuple[Any, list[Any]]:
    """The ``void*[]`` of kernel parameters and the memory it points into, in one block
    written by one ``struct.pack_into``: the n pointers, then every value in an 8-byte slot
    (each parameter is at most 8 bytes; slot starts are aligned for any of them). A ctypes
    object a parameter (:func:`pack_each`) cost about a microsecond each, and an array of
    ``c_void_p`` made from ints several more. A value struct refuses (out of its type's range:
    a checked Launch has none) is converted by ctypes, as before."""
    if not kinds:
        return pack_each(kinds, values)
    array, packer, offsets = _packer(kinds)
    raw = values
    if "f16" in kinds:
        raw = [int(np.float16(v).view(np.uint16)) if k == "f16" else v
               for k, v in zip(kinds, values)]
    block = array()
    base = ctypes.addressof(block)
    try:
        packer.pack_into(block, 0, *[base + o for o in offsets], *raw)
    except (struct.error, OverflowError, TypeError):
        return pack_each(kinds, values)
    return block, [block]


class _ParamBlock:
    """One kernel signature's parameter block, kept and rewritten at each launch: the layout
    of :func:`pack` with its pointer array written once, so a launch writes only the values
    (one ``pack_into``, about a quarter of :func:`pack`'s cost). The driver copies the
    values at ``cuLaunchKernel`` (into the graph node under capture), and launches run one at
    a time on the device's executor, so one block per signature serves every launch."""

    __slots__ = ("block", "values", "address", "f16")

    def __init__(self, kinds: tuple[str, ...]) -> None:
        array, packer, offsets = _packer(kinds)
        n = len(kinds)
        self.block = array()
        base = ctypes.addressof(self.block)
        for i, off in enumerate(offsets):
            self.block[i] = base + off
        self.values = struct.Struct("<" + packer.format[1 + n:])
        self.address = ctypes.c_void_p(base)
        self.f16 = "f16" in kinds

    def fill(self, kinds: tuple[str, ...], values: list[Any]) -> Any:
        """Write ``values``; the block's address (a ``c_void_p``), or None for a value the
        struct refuses (:func:`pack` converts those through ctypes)."""
        if self.f16:
            values = [int(np.float16(v).view(np.uint16)) if k == "f16" else v
                      for k, v in zip(kinds, values)]
        try:
            self.values.pack_into(self.block, 8 * len(kinds), *values)
        except (struct.error, OverflowError, TypeError):
            return None
        return self.address


class NvrtcHandle:
    """Modules and functions loaded on one device (CUDA)."""

    raw_handle = 0  # nothing library-wide: modules belong to the device's context

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._cu = _driver()
        self.modules: dict[str, Any] = {}
        self.functions = LoadedFunctions()
        self._shared_set: dict[Any, int] = {}
        #: (function handle, grid, block, shared) -> their ctypes values (see bound)
        self._heads: dict[tuple, list[Any]] = {}
        #: stream handle -> its ctypes value (the device's streams are few and long-lived)
        self._streams: dict[int, Any] = {}
        #: parameter kinds -> the block one-off launches write their values into
        self._blocks: dict[tuple[str, ...], _ParamBlock] = {}
        #: cuLaunchKernel through ctypes (backends/cuda/driver.py), or None for the binding
        self._raw = raw_kernel_launch(ctx.compute.in_flight if ctx is not None else None)

    def load(self, key: str, image: bytes, kind: str, symbols: tuple[str, ...]) -> None:
        """Load ``image`` under ``key`` unless loaded, and look up ``symbols`` in it."""
        if kind == "sim":
            raise InvalidMessage("kind: a simulator module cannot be loaded on a GPU",
                                 field="kind")
        cu = self._cu
        module = self.modules.get(key)
        if module is None:
            data = image if kind == "cubin" or image.endswith(b"\0") else image + b"\0"
            err, module = cu.cuModuleLoadData(data)
            if err:
                raise _fail(err, "cuModuleLoadData")
            self.modules[key] = module
        for sym in symbols:
            if (key, sym) not in self.functions:
                err, fn = cu.cuModuleGetFunction(module, sym.encode())
                if err:
                    raise InvalidMessage(f"symbols: the module has no kernel {sym!r} "
                                         f"({_fail(err, 'cuModuleGetFunction')})",
                                         field="symbols")
                self.functions[(key, sym)] = fn

    def function(self, module: str, symbol: str) -> Any:
        return self.functions.lookup(module, symbol)

    def _allow_shared(self, fn: Any, shared: int) -> None:
        """Let ``fn`` take ``shared`` bytes of dynamic shared memory (beyond the default 48 KiB
        a kernel must opt in, once per function and size)."""
        if shared > _DEFAULT_SHARED_LIMIT and self._shared_set.get(fn, 0) < shared:
            cu = self._cu
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            err = cu.cuFuncSetAttribute(fn, attr, shared)[0]
            if err:
                raise _fail(err, "cuFuncSetAttribute")
            self._shared_set[fn] = shared

    def launch(self, stream: Any, fn: Any, grid: tuple, block: tuple, shared: int,
               kinds: tuple[str, ...], values: list[Any], refs: list[Any]) -> None:
        """Launch ``fn`` once with these arguments on ``stream``, written into the kept block
        of their signature (:class:`_ParamBlock`): no launcher is made, nothing is kept.
        Called on the device's executor (a handler), whose turns never overlap."""
        raw = self._raw
        address = None
        if raw is not None and kinds:
            params = self._blocks.get(kinds)
            if params is None:
                if len(self._blocks) >= 1024:
                    self._blocks.clear()
                params = self._blocks[kinds] = _ParamBlock(kinds)
            address = params.fill(kinds, values)
        if address is None:  # the binding, no parameters, or a value ctypes must convert
            self.bound(fn, grid, block, shared, kinds, values, refs)(stream)
            return
        self._allow_shared(fn, shared)
        err = raw(*self._head(fn, grid, block, shared), self._stream_arg(stream), address, None)
        if err:
            raise _fail(err, "cuLaunchKernel")

    def _head(self, fn: Any, grid: tuple, block: tuple, shared: int) -> list[Any]:
        """The function's and the configuration's ctypes values, made once per (function,
        configuration): ctypes passes instances of the declared types as they are, where it
        converts a Python int at every call."""
        handle = int(fn)
        key = (handle, grid, block, shared)
        head = self._heads.get(key)
        if head is None:
            head = [ctypes.c_void_p(handle), *(ctypes.c_uint(v) for v in (*grid, *block, shared))]
            if len(self._heads) >= 4096:
                self._heads.clear()
            self._heads[key] = head
        return head

    def _stream_arg(self, stream: Any) -> Any:
        """The stream's handle as a ``c_void_p`` (the device's streams are few and
        long-lived)."""
        h = int(stream)
        arg = self._streams.get(h)
        if arg is None:
            if len(self._streams) >= 256:
                self._streams.clear()
            arg = self._streams[h] = ctypes.c_void_p(h)
        return arg

    def bound(self, fn: Any, grid: tuple, block: tuple, shared: int, kinds: tuple[str, ...],
              values: list[Any], refs: list[Any]) -> Callable[[Any], None]:
        """``launch(stream)``: ``cuLaunchKernel`` of ``fn`` with these arguments on ``stream``.
        The parameters are packed once, into memory the launcher keeps (the driver copies
        them at each call), so a repeated launch message whose handler keeps the launcher
        (service/derived.py) passes one address instead of packing its arguments again."""
        self._allow_shared(fn, shared)
        params, holders = pack(kinds, values)
        address = ctypes.addressof(params)
        gx, gy, gz = grid
        bx, by, bz = block
        raw = self._raw
        if raw is None:
            cu = self._cu

            def launch(stream: Any) -> None:
                err = cu.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, address,
                                        0)[0]
                if err:
                    raise _fail(err, "cuLaunchKernel")
        else:
            # the arguments as instances of their declared ctypes types (see _head)
            args: list[Any] = [*self._head(fn, grid, block, shared), None,
                               ctypes.c_void_p(address), None]
            last: list[Any] = [None]  # the stream object whose handle is args[8]
            stream_arg = self._stream_arg

            def launch(stream: Any) -> None:
                if stream is not last[0]:
                    last[0] = stream
                    args[8] = stream_arg(stream)
                err = raw(*args)
                if err:
                    raise _fail(err, "cuLaunchKernel")

        launch.keep = (params, holders)  # type: ignore[attr-defined]  # the packed values
        return launch

    def close(self) -> None:
        for module in self.modules.values():
            self._cu.cuModuleUnload(module)
        self.modules.clear()
        self.functions.clear()
