"""The per-device module cache and kernel launches on CUDA (device thread).

Modules are loaded once per device and image (``cuModuleLoadData``); kernel functions are looked
up once per symbol. A launch packs its arguments into ctypes values typed by the kernel's
parameter kinds and enqueues ``cuLaunchKernel`` on the given stream (the driver copies the
argument values at the call, so nothing needs to outlive it; under stream capture the values are
copied into the graph node).
"""

from __future__ import annotations

import ctypes
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


def pack(kinds: tuple[str, ...], values: list[Any]) -> tuple[Any, list[Any]]:
    """The ``void*[]`` of kernel parameters and the ctypes values it points into."""
    holders = []
    for kind, v in zip(kinds, values):
        if kind == "f16":
            v = int(np.float16(v).view(np.uint16))
        holders.append(CTYPE_OF_KIND[kind](v))
    params = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
    return params, holders


class NvrtcHandle:
    """Modules and functions loaded on one device (CUDA)."""

    raw_handle = 0  # nothing library-wide: modules belong to the device's context

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._cu = _driver()
        self.modules: dict[str, Any] = {}
        self.functions = LoadedFunctions()
        self._shared_set: dict[Any, int] = {}
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
        """Launch ``fn`` once with these arguments (packed for this call)."""
        self.bound(fn, grid, block, shared, kinds, values, refs)(stream)

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
            # the arguments as instances of their declared ctypes types, made once: ctypes
            # passes those as they are, where it converts a Python int at every call
            args: list[Any] = [ctypes.c_void_p(int(fn)),
                               *(ctypes.c_uint(v) for v in (gx, gy, gz, bx, by, bz, shared)),
                               None, ctypes.c_void_p(address), None]
            last: list[Any] = [None]  # the stream object whose handle is args[8]

            def launch(stream: Any) -> None:
                if stream is not last[0]:
                    last[0] = stream
                    args[8] = ctypes.c_void_p(int(stream))
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
