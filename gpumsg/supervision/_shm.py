"""Host memory shared between a client and its worker process.

The client creates shared-memory segments (:class:`SharedHostPool`) and tells the worker about
each one (``RegisterHostMemory``); the worker maps the segment and page-locks it
(``cuMemHostRegister``), so copies between the client's segments and the device run at pinned
bandwidth and the data is never pickled. After a worker is replaced, the client registers every
live segment with the new one before anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..memory._pinned import BlockPool, PinnedBlock

__all__ = ["SharedHostPool", "Segment", "SharedSegment", "attach", "open_existing",
           "close_quietly"]


def close_quietly(seg: shared_memory.SharedMemory) -> None:
    """Close our mapping of ``seg``. While NumPy views of it are alive close() raises
    BufferError, and would raise again from ``__del__`` at interpreter exit (printing a
    traceback); then the segment lets go of its buffer and mapping instead, which stay valid
    for the views and go with the last of them."""
    try:
        seg.close()
    except BufferError:
        seg._buf = None  # type: ignore[attr-defined]
        seg._mmap = None  # type: ignore[attr-defined]
        try:
            seg.close()  # the file descriptor, if any
        except (BufferError, OSError):
            pass


class SharedSegment(shared_memory.SharedMemory):
    """A shared-memory segment whose finalizer lets go quietly (:func:`close_quietly`) where
    the standard one raises BufferError because a NumPy view of it is still alive: at
    interpreter exit objects die in no set order, and a segment can die before its views."""

    def __del__(self) -> None:
        try:
            close_quietly(self)
        except Exception:  # noqa: BLE001 - a finalizer at interpreter exit: nothing to tell
            pass


class SharedHostPool(BlockPool):
    """Process isolation's host pool: blocks are shared-memory segments made by the client and
    page-locked by the worker. ``register``/``unregister`` tell the worker (they post the
    messages; FIFO order makes the worker see a block before any copy that uses it)."""

    kind = "shm"

    def __init__(self, register: Callable[[PinnedBlock], None],
                 unregister: Callable[[PinnedBlock], None], cache_limit: int = 512 << 20,
                 staging_limit: int = 256 << 20) -> None:
        super().__init__(cache_limit, staging_limit)
        self._register = register
        self._unregister = unregister

    def _create(self, size: int) -> tuple[int, np.ndarray | None, Any]:
        seg = SharedSegment(create=True, size=size)
        view = np.frombuffer(seg.buf, np.uint8, size)
        return view.ctypes.data, view, seg

    def _destroy(self, block: PinnedBlock) -> None:
        try:
            self._unregister(block)
        except Exception:  # noqa: BLE001 - the device is closed: nothing to tell
            pass
        seg = block.handle
        block.bytes = None  # drop our view before closing the mapping
        try:  # the name first: close() fails while a view still exists
            seg.unlink()
        except (FileNotFoundError, OSError):
            pass
        try:
            close_quietly(seg)  # a view may still exist (a dropped user array)
        except OSError:
            pass

    def grow(self, nbytes: int, staging: bool) -> PinnedBlock:
        """A new segment of at least ``nbytes``, registered with the worker."""
        block = self.allocate(nbytes, staging)
        self._register(block)
        return block


class Segment:
    """A client segment as the worker maps it."""

    __slots__ = ("shm", "ptr", "nbytes", "_view")

    def __init__(self, shm: shared_memory.SharedMemory, nbytes: int) -> None:
        self.shm = shm
        self._view = np.frombuffer(shm.buf, np.uint8, nbytes)
        self.ptr = self._view.ctypes.data
        self.nbytes = nbytes

    def close(self, backend: Any = None) -> None:
        """Unlock (when ``backend`` is given: the context still works) and unmap."""
        try:
            if backend is not None:
                backend.host_unregister(self.ptr)
        finally:
            self._view = None
            close_quietly(self.shm)


def open_existing(name: str) -> shared_memory.SharedMemory:
    """Map a segment the client made; the client unlinks it. (A spawned worker shares its
    client's resource tracker, where the segment is already registered, so attaching adds
    nothing there; Python 3.13+ is told not to track it at all.)"""
    try:
        return SharedSegment(name=name, track=False)  # Python 3.13+
    except TypeError:
        return SharedSegment(name=name)


def attach(backend: Any, name: str, nbytes: int) -> Segment:
    """Map a client segment into this worker and page-lock it (on the device thread)."""
    seg = Segment(open_existing(name), nbytes)
    backend.host_register(seg.ptr, nbytes)
    return seg
