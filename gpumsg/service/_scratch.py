"""Result slots for reductions that must not block the device thread.

A BLAS reduction (dot, nrm2, asum, iamax, iamin) runs in device pointer mode: it writes its
result into a 16-byte device slot, a copy on the same stream brings the slot into pinned host
memory, and the completion thread reads the value from there when the stream's event has fired.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ScalarScratch", "Slot"]

SLOT_BYTES = 16
#: result dtype -> its layout in a slot (little-endian, as on every CUDA host)
_STRUCT = {"f4": struct.Struct("<f"), "f8": struct.Struct("<d"), "i4": struct.Struct("<i"),
           "c8": struct.Struct("<2f"), "c16": struct.Struct("<2d")}
CHUNK_SLOTS = 1024


class Slot:
    __slots__ = ("dev", "host", "view")

    def __init__(self, dev: int, host: int, view: np.ndarray) -> None:
        self.dev = dev
        self.host = host
        self.view = view


class ScalarScratch:
    """A pool of result slots, grown a chunk (1024 slots) at a time on the device thread;
    slots are given back by the completion threads."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._free: list[Slot] = []
        self._chunks: list[tuple[int, Any]] = []

    def acquire(self) -> Slot:
        if not self._free:
            self._grow()
        return self._free.pop()

    def release(self, slot: Slot) -> None:
        self._free.append(slot)

    def reader(self, slot: Slot, dtype: Any, convert: Callable[[Any], Any] = lambda v: v
               ) -> Callable[[Any, BaseException | None], Any]:
        """A completion ``finish`` that reads the slot as one ``dtype`` value, gives the slot
        back, and answers ``convert(value)`` as a Python scalar."""
        fmt = _STRUCT.get(dtype) if isinstance(dtype, str) else None
        given_back = [False]

        def release(slot: Slot) -> None:  # once, however often finish is called
            if not given_back[0]:
                given_back[0] = True
                self._free.append(slot)
        if fmt is not None:  # the common result types, read with struct (a third of the time)
            unpack = fmt.unpack_from
            pair = fmt.size > 8 or dtype == "c8"

            def finish_fast(_value: Any, error: BaseException | None) -> Any:
                try:
                    if error is None:
                        v = unpack(slot.view)
                        return convert(complex(v[0], v[1]) if pair else v[0])
                    return None
                finally:
                    release(slot)

            return finish_fast
        dt = np.dtype(dtype)

        def finish(_value: Any, error: BaseException | None) -> Any:
            try:
                if error is None:
                    return convert(slot.view[:dt.itemsize].view(dt)[0].item())
                return None
            finally:
                release(slot)

        return finish

    def _grow(self) -> None:
        ctx = self._ctx
        nbytes = SLOT_BYTES * CHUNK_SLOTS
        dev = ctx.memory.allocate(nbytes, ctx.compute.obj)
        ctx.publish()  # the slots serve every compute stream: each orders after the allocation
        block = ctx.pinned.allocate(nbytes)
        self._chunks.append((dev, block))
        for i in range(CHUNK_SLOTS):
            off = i * SLOT_BYTES
            self._free.append(Slot(dev + off, block.ptr + off, block.bytes[off:off + SLOT_BYTES]))

    def close(self) -> None:
        ctx = self._ctx
        for dev, block in self._chunks:
            ctx.memory.deallocate(dev, SLOT_BYTES * CHUNK_SLOTS, ctx.compute.obj)
            ctx.pinned.release(block)
        self._chunks.clear()
        self._free.clear()
