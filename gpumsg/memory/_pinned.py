"""Page-locked host memory: the pool of blocks behind staging copies and pinned host buffers.

Blocks are allocated (``cuMemHostAlloc``) and finally freed only on the device thread, but any
thread may take a cached block or give one back: client threads take staging blocks without a
round trip to the device, and completion threads return them when a copy has finished.
"""

from __future__ import annotations

import abc
import bisect
import ctypes
import threading
from typing import Any

import numpy as np

__all__ = ["PinnedBlock", "BlockPool", "PinnedPool", "host_view", "size_class"]

_MIN_BLOCK = 64 << 10
_POW2_LIMIT = 64 << 20
_LARGE_GRAIN = 2 << 20


def host_view(ptr: int, nbytes: int, owner: Any = None) -> np.ndarray:
    """A writable uint8 NumPy view of ``nbytes`` of host memory at ``ptr``. If ``owner`` is
    given, every array derived from the view keeps it alive."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    raw = (ctypes.c_uint8 * nbytes).from_address(ptr)
    if owner is not None:
        raw._gpumsg_owner = owner  # views -> ctypes object -> owner: no cycle, no early free
    return np.ctypeslib.as_array(raw)


def size_class(nbytes: int) -> int:
    """Block size used for a request: powers of two from 64 KiB up to 64 MiB, then multiples of
    2 MiB, so that blocks are reused across nearby sizes."""
    if nbytes <= _MIN_BLOCK:
        return _MIN_BLOCK
    if nbytes <= _POW2_LIMIT:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // _LARGE_GRAIN) * _LARGE_GRAIN


class PinnedBlock:
    """One host block. ``staging``: taken by a staging copy (counted against the staging
    limit) rather than by a pinned host buffer. ``handle``: what the pool made it from.
    ``sent``: the last few staging messages that named this block, kept by the client's
    staging (client/staging.py) so that a repeated copy through the block reuses its own."""

    __slots__ = ("id", "ptr", "nbytes", "bytes", "in_use", "staging", "handle", "sent")

    def __init__(self, block_id: int, ptr: int, nbytes: int, view: np.ndarray | None = None,
                 handle: Any = None) -> None:
        self.id = block_id
        self.ptr = ptr
        self.nbytes = nbytes
        # internal view: staging copies go through it
        self.bytes = host_view(ptr, nbytes) if view is None else view
        self.in_use = True
        self.staging = False
        self.handle = handle
        self.sent: Any = None


class BlockPool(abc.ABC):
    """Blocks of DMA-able host memory, cached by size class. Subclasses say where blocks come
    from (:meth:`_create`) and how they go (:meth:`_destroy`).

    ``cache_limit`` bounds the bytes kept cached (not in use); ``staging_limit`` bounds the bytes
    staging copies may hold at once before they wait for blocks to come back (pinned host
    buffers do not count against it, so holding them can never starve staging).
    """

    def __init__(self, cache_limit: int = 512 << 20, staging_limit: int = 256 << 20) -> None:
        self.cache_limit = cache_limit
        self.staging_limit = staging_limit
        # a plain lock: nothing here re-enters it, and an RLock costs more on every take
        self._lock = threading.Lock()
        # taken as ``self._lock`` where nothing waits: the Condition's own __enter__/__exit__
        # are two Python calls more per take and release
        self._cond = threading.Condition(self._lock)
        self._waiters = 0  # threads in wait_for_release: only then does a release notify
        self._blocks: dict[int, PinnedBlock] = {}
        self._free: dict[int, list[PinnedBlock]] = {}
        self._addrs: list[int] = []
        self._by_addr: dict[int, PinnedBlock] = {}
        self._next_id = 1
        self.reserved = 0
        self.in_use = 0
        self.staging_in_use = 0
        self._closed = False

    # -- any thread --------------------------------------------------------------------------------
    def take_cached(self, nbytes: int, staging: bool = False) -> PinnedBlock | None:
        """A cached block of at least ``nbytes``, now in use; None if there is none."""
        cls = size_class(nbytes)
        with self._lock:
            free = self._free.get(cls)
            if not free:
                return None
            block = free.pop()
            self._take(block, staging)
            return block

    def _take(self, block: PinnedBlock, staging: bool) -> None:
        block.in_use = True
        block.staging = staging
        self.in_use += block.nbytes
        if staging:
            self.staging_in_use += block.nbytes

    def release(self, block: PinnedBlock) -> None:
        """Return a block to the cache (any thread)."""
        with self._lock:
            if not block.in_use or block.id not in self._blocks:
                return
            block.in_use = False
            self.in_use -= block.nbytes
            if block.staging:
                self.staging_in_use -= block.nbytes
                block.staging = False
            self._free.setdefault(block.nbytes, []).append(block)
            if self._waiters:
                self._cond.notify_all()

    def wait_for_release(self, timeout: float) -> None:
        with self._cond:
            self._waiters += 1
            try:
                self._cond.wait(timeout)
            finally:
                self._waiters -= 1

    def can_grow(self, nbytes: int) -> bool:
        """Whether staging may take another block of this size."""
        return self.staging_in_use + size_class(nbytes) <= self.staging_limit

    def get(self, block_id: int) -> PinnedBlock | None:
        return self._blocks.get(block_id)

    def find(self, ptr: int, nbytes: int) -> tuple[PinnedBlock, int] | None:
        """The in-use block containing [ptr, ptr+nbytes) and the offset in it, or None."""
        with self._lock:
            i = bisect.bisect_right(self._addrs, ptr) - 1
            if i < 0:
                return None
            block = self._by_addr[self._addrs[i]]
            if ptr + nbytes <= block.ptr + block.nbytes and block.in_use:
                return block, ptr - block.ptr
        return None

    def blocks(self) -> list[PinnedBlock]:
        """Every block the pool holds (in use or cached)."""
        with self._lock:
            return list(self._blocks.values())

    # -- where blocks come from ---------------------------------------------------------------
    @abc.abstractmethod
    def _create(self, size: int) -> tuple[int, np.ndarray | None, Any]:
        """Make a block of ``size`` bytes: (address, a uint8 view or None, handle)."""

    @abc.abstractmethod
    def _destroy(self, block: PinnedBlock) -> None:
        """Release a block that is no longer in the pool."""

    def allocate(self, nbytes: int, staging: bool = False) -> PinnedBlock:
        """A block of at least ``nbytes``, in use: from the cache, else newly made."""
        block = self.take_cached(nbytes, staging)
        if block is not None:
            return block
        size = size_class(nbytes)
        ptr, view, handle = self._create(size)
        with self._lock:
            block = PinnedBlock(self._next_id, ptr, size, view, handle)
            self._next_id += 1
            self._blocks[block.id] = block
            bisect.insort(self._addrs, ptr)
            self._by_addr[ptr] = block
            self.reserved += size
            block.in_use = False
            self._take(block, staging)
        return block

    def trim(self, keep: int = 0) -> None:
        """Free cached blocks until at most ``keep`` cached bytes remain."""
        with self._lock:
            cached = self.reserved - self.in_use
            doomed = []
            for size in sorted(self._free, reverse=True):
                blocks = self._free[size]
                while blocks and cached > keep:
                    b = blocks.pop()
                    cached -= b.nbytes
                    doomed.append(b)
            for b in doomed:
                del self._blocks[b.id]
                self._addrs.remove(b.ptr)
                del self._by_addr[b.ptr]
                self.reserved -= b.nbytes
        for b in doomed:
            self._destroy(b)

    def enforce_cache_limit(self) -> None:
        if self.reserved - self.in_use > self.cache_limit:
            self.trim(self.cache_limit)

    def close(self) -> None:
        with self._lock:
            blocks = list(self._blocks.values())
            self._blocks.clear()
            self._free.clear()
            self._addrs.clear()
            self._by_addr.clear()
            self.reserved = self.in_use = 0
            self._closed = True
            self._cond.notify_all()
        for b in blocks:
            self._destroy(b)


class PinnedPool(BlockPool):
    """Page-locked host memory (``cuMemHostAlloc``): allocated and freed on the device thread,
    taken and given back by any thread."""

    def __init__(self, backend: Any, cache_limit: int = 512 << 20,
                 staging_limit: int = 256 << 20) -> None:
        super().__init__(cache_limit, staging_limit)
        self.backend = backend

    def _create(self, size: int) -> tuple[int, np.ndarray | None, Any]:
        return self.backend.host_alloc(size), None, None

    def _destroy(self, block: PinnedBlock) -> None:
        self.backend.host_free(block.ptr)
