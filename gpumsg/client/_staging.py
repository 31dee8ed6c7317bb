"""Host copies through page-locked host blocks, done by the caller's thread.

DMA needs page-locked host memory. A NumPy array that already lies in a host block (a
:class:`~gpumsg.service.buffers.PinnedHostBuffer`) is copied directly. Any other array is staged
in chunks: the caller's thread copies chunk *i* into a block (in parallel over a few threads for
large chunks) while the copy engine moves chunk *i-1*. Device-to-host goes the other way: the
DMA fills a block and the completion thread copies it out. The device thread never waits on any
of this. Blocks go back to their pool when the copy's reply arrives.

Where the blocks come from is the host pool's business: in thread isolation the device's
page-locked pool (:class:`DevicePinnedPool`), in process isolation shared-memory segments the
worker has registered (:class:`~gpumsg.supervision._shm.SharedHostPool`). Both offer ``kind``,
``take_cached``, ``can_grow``, ``grow``, ``release``, ``wait_for_release``, ``find`` and ``get``.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DeviceClosed
from ..memory._pinned import PinnedBlock, PinnedPool
from ..messages._base import BufRef, HostRef
from ..messages.device import AllocPinned, AllocThen, CopyFromHost, CopyToHost
from ._buffers import BufferFuture, GpuFuture, gather

if TYPE_CHECKING:
    from ._core import DeviceCore as Device

__all__ = ["HostStaging", "DevicePinnedPool", "ReleaseOnReply", "ReleasingFuture", "copy_bytes",
           "CHUNK", "NEW_ARRAY_LIMIT"]

#: the chunk messages of a copy already validated as a whole (see Message.unchecked)
_UPLOAD = CopyFromHost.unchecked  # type: ignore[attr-defined]
_DOWNLOAD = CopyToHost.unchecked  # type: ignore[attr-defined]
_HOSTREF = HostRef.unchecked  # type: ignore[attr-defined]
_ALLOC_THEN = AllocThen.unchecked  # type: ignore[attr-defined]

#: staging chunk: large enough to amortize a message per chunk, small enough to overlap
CHUNK = 16 << 20
#: below this a single thread copies; above, the copy is split over the memcpy threads
_PARALLEL_MIN = 4 << 20
#: a whole-buffer download below this makes its array out of the staging block in one copy
#: (HostStaging.download_new); a larger one copies into an array made up front, over threads
NEW_ARRAY_LIMIT = _PARALLEL_MIN
_MEMCPY_THREADS = max(1, min(8, os.cpu_count() or 1))
_executor: ThreadPoolExecutor | None = None
#: staging messages a host block keeps for reuse (HostStaging._message)
_KEPT_PER_BLOCK = 8


def _memcpy_pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(_MEMCPY_THREADS, thread_name_prefix="gpumsg-memcpy")
    return _executor


def copy_bytes(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` for uint8 arrays, split over several threads when large (NumPy releases
    the GIL while it copies)."""
    n = dst.nbytes
    parts = min(_MEMCPY_THREADS, n // (1 << 20))
    if n < _PARALLEL_MIN or parts < 2:
        np.copyto(dst, src)
        return
    step = ((n + parts - 1) // parts + 4095) & ~4095  # page-aligned pieces
    pool = _memcpy_pool()
    futures = [pool.submit(np.copyto, dst[i:i + step], src[i:i + step])
               for i in range(step, n, step)]
    np.copyto(dst[:step], src[:step])
    for f in futures:
        f.result()


class DevicePinnedPool:
    """Thread isolation's host pool: the device's page-locked pool, grown by the device thread
    (``AllocPinned``) and shared with client threads for everything else."""

    kind = "pinned"

    def __init__(self, device: Device, pool: PinnedPool) -> None:
        self._device = device
        self._pool = pool

    def grow(self, nbytes: int, staging: bool) -> PinnedBlock:
        """A new block of at least ``nbytes``, made by the device thread. Raises the device's
        refusal (DeviceClosed) when the device closed, and freed its pool, between making the
        block and this lookup."""
        block_id = self._device._request(AllocPinned(nbytes, staging))
        block = self._pool.get(block_id)
        if block is None:
            self._device._check_open()
            raise DeviceClosed(f"pinned block {block_id} was freed as soon as it was made: "
                               "the device is closing")
        return block

    def take_cached(self, nbytes: int, staging: bool = False) -> PinnedBlock | None:
        return self._pool.take_cached(nbytes, staging)

    def can_grow(self, nbytes: int) -> bool:
        return self._pool.can_grow(nbytes)

    def release(self, block: PinnedBlock) -> None:
        self._pool.release(block)

    def wait_for_release(self, timeout: float) -> None:
        self._pool.wait_for_release(timeout)

    def find(self, ptr: int, nbytes: int) -> tuple[PinnedBlock, int] | None:
        return self._pool.find(ptr, nbytes)

    def get(self, block_id: int) -> PinnedBlock | None:
        return self._pool.get(block_id)

    @property
    def staging_in_use(self) -> int:
        return self._pool.staging_in_use


class ReleaseOnReply:
    """A reply that gives a host block back to its pool when the device has answered (success
    or failure): the device is done with the block by then."""

    __slots__ = ("pool", "block")

    def __init__(self, pool: Any, block: Any) -> None:
        self.pool = pool
        self.block = block

    def set_result(self, _value: Any) -> None:
        self.pool.release(self.block)

    def set_exception(self, _exc: BaseException) -> None:
        self.pool.release(self.block)


class _Answering(GpuFuture):
    """A future that resolves to ``answer`` when the device answers its message (a copy into
    the caller's own host memory resolves to the caller's array)."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self._answer = answer

    def set_result(self, result: Any) -> None:
        super().set_result(self._answer)


class _BlockFuture(GpuFuture):
    """A future that holds a host block of ``pool`` until the device has answered; each kind
    below says when it gives the block back."""

    def __init__(self, pool: Any, block: Any) -> None:
        super().__init__()
        self._pool = pool
        self._block = block


class _ChunkDownload(_BlockFuture):
    """One device-to-host chunk: when the DMA into the staging block is done, copy the block
    out to the destination, answer, and give the block back (after answering: the waiting
    caller wakes meanwhile). A failing copy out answers the error instead."""

    def __init__(self, pool: Any, block: Any, dest: np.ndarray, answer: Any = None) -> None:
        super().__init__(pool, block)
        self._dest = dest
        self._answer = answer  # what the future resolves to (the whole copy's result)

    def _copy_out(self) -> Any:
        """Copy the block out; returns what the future answers."""
        copy_bytes(self._dest, self._block.bytes[:self._dest.nbytes])
        return self._answer

    def set_result(self, result: Any) -> None:
        try:
            answer = self._copy_out()
        except BaseException as exc:  # noqa: BLE001 - the copy's failure is the caller's answer
            self._pool.release(self._block)
            super().set_exception(exc)
            return
        super().set_result(answer)
        self._pool.release(self._block)

    def set_exception(self, exception: BaseException | None) -> None:
        self._pool.release(self._block)
        super().set_exception(exception)


class _NewArrayDownload(_ChunkDownload):
    """A whole buffer's download below :data:`NEW_ARRAY_LIMIT` into a new array: the copy out
    of the block makes the array, of ``shape``, ``dtype`` and ``order``, and answers it.
    Making the array here, in one copy, costs less than the caller's making an empty one up
    front and copying into it."""

    def __init__(self, pool: Any, block: Any, nbytes: int, dtype: np.dtype,
                 shape: tuple[int, ...], order: str) -> None:
        _BlockFuture.__init__(self, pool, block)  # no destination: _copy_out makes it
        self._nbytes = nbytes
        self._dtype = dtype
        self._shape = shape
        self._order = order

    def _copy_out(self) -> np.ndarray:
        flat = self._block.bytes[:self._nbytes].view(self._dtype)
        if len(self._shape) == 1:
            return flat.copy()
        order = self._order
        return flat.reshape(self._shape, order=order).copy(order=order)


class _ChunkUpload(_BlockFuture):
    """One host-to-device chunk: answers when the DMA out of the staging block is done, then
    gives the block back (after answering: the waiting caller wakes meanwhile)."""

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._pool.release(self._block)

    def set_exception(self, exception: BaseException | None) -> None:
        super().set_exception(exception)
        self._pool.release(self._block)


class _NewUpload(BufferFuture):
    """The future of a new buffer made with its contents (``to_device``) in one message: the
    buffer's ``AllocThen`` carries the upload of one staging block, which goes back to its
    pool once answered."""

    def __init__(self, buffer: Any, pool: Any, block: Any) -> None:
        BufferFuture.__init__(self, buffer)
        self._pool = pool
        self._block = block

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self._pool.release(self._block)

    def set_exception(self, exception: BaseException | None) -> None:
        super().set_exception(exception)
        self._pool.release(self._block)


class ReleasingFuture(_BlockFuture):
    """A future that gives a host block back to its pool when the device has answered, before
    it resolves: whoever waits on it finds the block free (a pinned buffer once the device has
    unregistered it)."""

    def set_result(self, result: Any) -> None:
        self._pool.release(self._block)
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        self._pool.release(self._block)
        super().set_exception(exception)


class HostStaging:
    """A device client's staging copies through its host pool."""

    def __init__(self, device: Device, pool: Any) -> None:
        self._device = device
        self.pool = pool
        #: set for good once a block was handed to a caller (``alloc_pinned``)
        self.user_blocks = False

    def acquire(self, nbytes: int) -> Any:
        """A staging block of at least ``nbytes``: cached, newly made, or (when staging already
        holds its limit) the next one given back."""
        pool = self.pool
        while True:
            block = pool.take_cached(nbytes, staging=True)
            if block is not None:
                return block
            if pool.can_grow(nbytes):
                return pool.grow(nbytes, staging=True)
            pool.wait_for_release(0.05)
            self._device._check_open()

    def find(self, raw: np.ndarray) -> HostRef | None:
        """A HostRef for a contiguous array that lies inside a host block, else None."""
        if raw.nbytes == 0:
            return None
        if not self.user_blocks:  # only a block handed to a caller can hold a caller's array
            return None
        hit = self.pool.find(raw.__array_interface__["data"][0], raw.nbytes)
        if hit is None:
            return None
        block, offset = hit
        return _HOSTREF(self.pool.kind, block.id, offset, raw.nbytes)  # all of it ours

    def upload(self, dst: BufRef, raw: np.ndarray, dst_offset: int) -> Future:
        """Copy the bytes ``raw`` (contiguous uint8) into ``dst`` at byte ``dst_offset``. The
        caller has checked ``dst`` and the span (its messages are built unchecked here)."""
        device = self._device
        n = raw.nbytes
        direct = self.find(raw)
        if direct is not None or n == 0:
            fut = GpuFuture()
            if n == 0:
                fut.set_result(None)
            else:
                device._post(_UPLOAD(dst, direct, dst_offset), fut)
            return fut
        if n <= CHUNK:  # the common case: one chunk, its own future answers
            return self._upload_chunk(dst, raw, dst_offset, n)
        return gather([self._upload_chunk(dst, raw[off:off + CHUNK], dst_offset + off,
                                          min(CHUNK, n - off)) for off in range(0, n, CHUNK)])

    def upload_new(self, buffer: Any, raw: np.ndarray) -> Future | None:
        """Allocate ``buffer`` (minted, never sent) and copy ``raw`` (contiguous uint8, all
        of it) into it, as one message: ``AllocThen(ref, CopyFromHost(...))`` through a
        staging block; the future resolves to the buffer. None where that does not apply
        (nothing to copy, more than one chunk, an array inside a host block of the caller's):
        the caller allocates and uploads apart. Thread isolation, nothing recording."""
        n = raw.nbytes
        if n == 0 or n > CHUNK or self.find(raw) is not None:
            return None
        block = self.acquire(n)
        fut = _NewUpload(buffer, self.pool, block)
        try:
            if n < _PARALLEL_MIN:
                np.copyto(block.bytes[:n], raw)
            else:
                copy_bytes(block.bytes[:n], raw)
            ref = buffer._ref
            buffer._named = False  # only its producer names it
            self._device._post(_ALLOC_THEN(ref, self._message(block, _UPLOAD, ref, 0, n)), fut)
        except BaseException:
            self.pool.release(block)
            raise
        return fut

    def _upload_chunk(self, dst: BufRef, raw: np.ndarray, dst_offset: int, m: int) -> Future:
        block = self.acquire(m)
        fut = _ChunkUpload(self.pool, block)
        try:
            if m < _PARALLEL_MIN:
                np.copyto(block.bytes[:m], raw)
            else:
                copy_bytes(block.bytes[:m], raw)
            # dst and the span were checked by the caller's message; the block is ours
            self._device._post(self._message(block, _UPLOAD, dst, dst_offset, m), fut)
        except BaseException:
            self.pool.release(block)
            raise
        return fut

    def _message(self, block: Any, kind: Any, ref: BufRef, offset: int, m: int) -> Any:
        """The staging message ``kind`` (``_UPLOAD`` or ``_DOWNLOAD``) between ``ref`` at byte
        ``offset`` and the first ``m`` bytes of ``block``. A message is immutable and names
        the block, so the block keeps the last few made for it: a repeated copy through the
        same block (the pool gives the last block back first) reuses its message instead of
        building a HostRef and a message. The key holds ``id(ref)``, which cannot name another
        object while the kept message holds ``ref``; a buffer's reference is one object for
        life, owner and generation included."""
        kept = block.sent
        key = (kind, id(ref), offset, m)
        if kept is None:
            kept = block.sent = {}
        else:
            msg = kept.get(key)
            if msg is not None:
                return msg
            if len(kept) >= _KEPT_PER_BLOCK:
                kept.clear()
        host = _HOSTREF(self.pool.kind, block.id, 0, m)
        msg = _UPLOAD(ref, host, offset) if kind is _UPLOAD else _DOWNLOAD(ref, host, offset, m)
        kept[key] = msg
        return msg

    def download(self, src: BufRef, src_offset: int, raw: np.ndarray, result: Any,
                 fresh: bool = False) -> Future:
        """Copy ``raw.nbytes`` bytes of ``src`` from ``src_offset`` into ``raw`` (contiguous
        uint8); the future answers ``result``. ``fresh``: ``raw`` was just made here, so it
        lies in no host block."""
        device = self._device
        n = raw.nbytes
        if n == 0:
            done = GpuFuture()
            done.set_result(result)
            return done
        direct = None if fresh else self.find(raw)
        if direct is not None:
            fut = _Answering(result)
            device._post(_DOWNLOAD(src, direct, src_offset, n), fut)
            return fut
        if n <= CHUNK:  # one chunk answers ``result`` itself: no gathering future
            return self._download_chunk(src, src_offset, raw, n, result)
        return gather([self._download_chunk(src, src_offset + off, raw[off:off + CHUNK],
                                            min(CHUNK, n - off), None)
                       for off in range(0, n, CHUNK)], result)

    def _download_chunk(self, src: BufRef, src_offset: int, raw: np.ndarray, m: int,
                        result: Any) -> Future:
        block = self.acquire(m)
        fut = _ChunkDownload(self.pool, block, raw, result)
        try:
            self._device._post(self._message(block, _DOWNLOAD, src, src_offset, m), fut)
        except BaseException:
            self.pool.release(block)
            raise
        return fut

    def download_new(self, src: BufRef, dtype: np.dtype) -> Future:
        """Copy all of ``src`` (less than :data:`NEW_ARRAY_LIMIT` bytes) into a new array of its
        shape, ``dtype`` and order; the future answers the array. The caller has checked
        ``src``."""
        n = src.nbytes
        if n == 0:
            done = GpuFuture()
            done.set_result(np.empty(src.shape, dtype, order=src.order))  # type: ignore
            return done
        block = self.acquire(n)
        fut = _NewArrayDownload(self.pool, block, n, dtype, src.shape, src.order)
        try:
            self._device._post(self._message(block, _DOWNLOAD, src, 0, n), fut)
        except BaseException:
            self.pool.release(block)
            raise
        return fut
