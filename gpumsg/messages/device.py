"""Device messages: memory, copies, memset, introspection, supervision hooks and fault injection.

Byte offsets and counts are in bytes; shapes and element offsets are in elements. Which stream
each message runs on is part of its contract:

==================  ============  ==================================================
message             stream        reply
==================  ============  ==================================================
Alloc               compute       the device pointer (int) once the allocation exists
AllocThen           then's        then's reply (the client's own: see its docstring)
Free                compute       None (stream-ordered behind every recorded use)
CopyFromHost        h2d           None once the data is on the device
CopyToHost          d2h           None once the data is in host memory
CopyDevice          compute       None
Memset              compute       None
Synchronize         all           None once all work sent before it has completed
OpenStream          none          None once the explicit stream exists
OnStream            the stream    then's reply
SynchronizeStream   the stream    None once the work sent before on that stream completed
CloseStream         none          None (its slot serves a later explicit stream)
Stats ... Snapshot  none          answered at once from the device thread
OpenLibraries       none          the open libraries' names, once the named ones are open
==================  ============  ==================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import dtype_name
from ._base import (
    MAX_NBYTES,
    BufRef,
    HostRef,
    Message,
    _choice,
    _fail,
    _int,
    _opt_int,
    _ref,
    _set,
    _span,
    message,
)

__all__ = [
    "Alloc",
    "AllocThen",
    "Free",
    "CopyFromHost",
    "CopyToHost",
    "CopyDevice",
    "Memset",
    "Synchronize",
    "Stats",
    "SnapshotContext",
    "SnapshotStream",
    "SnapshotChildren",
    "OpenLibraries",
    "WatchGeneration",
    "AllocPinned",
    "FreePinned",
    "TrimMemory",
    "RegisterHostMemory",
    "UnregisterHostMemory",
    "InjectFault",
    "STREAMS",
    "FAULT_KINDS",
]

#: The device's streams, by name: kernels, host-to-device copies, device-to-host copies.
STREAMS = ("compute", "h2d", "d2h")

#: What InjectFault can do (see its docstring).
FAULT_KINDS = ("illegal_address", "oom", "hang", "stall", "exit")


def _check_ref_consistent(msg: object, field: str, ref: BufRef) -> None:
    if ref.order not in ("C", "F"):
        raise _fail(msg, field, f"order must be 'C' or 'F', got {ref.order!r}")
    expected = ref.size * ref.itemsize
    if ref.nbytes != expected:
        raise _fail(msg, field, f"nbytes {ref.nbytes} does not match shape {ref.shape} of "
                    f"{ref.dtype} ({expected} bytes)")
    if ref.nbytes > MAX_NBYTES:
        raise _fail(msg, field, f"{ref.nbytes} bytes is beyond any device")


@message(buffers=("out",))
class Alloc(Message):
    """Allocate device memory for ``out`` (a reference the client minted) from the device's
    memory resource, stream-ordered on the compute stream. Contents are uninitialized."""

    out: BufRef

    def __post_init__(self) -> None:
        _set(self, "out", _ref(self, "out", self.out))
        _check_ref_consistent(self, "out", self.out)


@message(buffers=("out",))
class AllocThen(Message):
    """Allocate ``out`` as :class:`Alloc` does, then handle ``then``, a message that writes
    it, in the same turn of the device thread: a call that answers a new buffer (the
    NumPy-shaped FFTs, ``matmul`` without ``out``, a draw of a new shape) costs one message
    instead of two.

    The client's own protocol in thread isolation (``Device.send`` refuses it): the reply is
    the client's future of the new buffer, told the device pointer when the allocation is made
    (``set_pointer``) and answered as ``then`` is. If the allocation fails, so does the reply,
    with the allocation's error, and ``then`` is not run."""

    out: BufRef
    then: Message

    def __post_init__(self) -> None:
        _set(self, "out", _ref(self, "out", self.out))
        _check_ref_consistent(self, "out", self.out)
        if not isinstance(self.then, Message) or isinstance(self.then, (Alloc, AllocThen)):
            raise _fail(self, "then", f"expected a message that writes out, got "
                        f"{type(self.then).__name__}")

    def refs(self) -> list[BufRef]:
        return [self.out, *self.then.refs()]

    def written(self) -> list[BufRef]:
        return self.then.written()


@message(buffers=("buffer",))
class Free(Message):
    """Release a buffer. The memory goes back to the resource stream-ordered behind every use
    already sent; later uses of the reference raise :class:`~gpumsg.errors.GpuRefStale`."""

    buffer: BufRef

    def __post_init__(self) -> None:
        _set(self, "buffer", _ref(self, "buffer", self.buffer))


#: array dtype -> gpumsg dtype name, for the dtypes CopyFromHost has accepted
_ARRAY_DTYPE_NAMES: dict[np.dtype, str] = {}


def accepted_array_dtype(dt: np.dtype) -> str | None:
    """The gpumsg dtype name of a NumPy dtype that CopyFromHost has accepted before, else None
    (the client's fast path for host copies asks this; None sends it the checked way)."""
    return _ARRAY_DTYPE_NAMES.get(dt)


@message(buffers=("dst",), writes=("dst",))
class CopyFromHost(Message):
    """Copy host data into ``dst`` at byte offset ``dst_offset``.

    ``src`` is either DMA-able host memory (:class:`HostRef`) or a NumPy array. An array must
    have ``dst``'s dtype. A multi-dimensional array must have ``dst``'s shape (any memory order:
    it is copied in ``dst``'s order); a 1-D array is copied flat at ``dst_offset``. The client
    stages arrays through pinned memory before the message reaches the device.
    """

    dst: BufRef
    src: Any
    dst_offset: int = 0

    def __post_init__(self) -> None:
        _set(self, "dst", _ref(self, "dst", self.dst))
        _int(self, "dst_offset", self.dst_offset, hi=MAX_NBYTES)
        src = self.src
        if isinstance(src, HostRef):
            nbytes = src.nbytes
        elif isinstance(src, np.ndarray):
            dt = src.dtype
            name = _ARRAY_DTYPE_NAMES.get(dt)
            if name is None:
                if dt.hasobject:
                    raise _fail(self, "src", "object arrays cannot be copied to a device")
                name = dtype_name(dt, "CopyFromHost.src")
                _ARRAY_DTYPE_NAMES[dt] = name
            if name != self.dst.dtype:
                raise _fail(self, "src", f"array dtype {src.dtype} does not match "
                            f"{self.dst.describe()}")
            nbytes = src.nbytes
            if src.ndim > 1 and (src.shape != self.dst.shape or self.dst_offset):
                raise _fail(self, "src", f"a {src.ndim}-D array must have the shape of "
                            f"{self.dst.describe()} and offset 0 (got {src.shape}); copy 1-D "
                            "arrays for partial copies")
        else:
            raise _fail(self, "src", f"expected a NumPy array or a HostRef, got "
                        f"{type(src).__name__}")
        _span(self, "dst_offset", self.dst, self.dst_offset, nbytes)

    @property
    def nbytes(self) -> int:
        return self.src.nbytes

    def __eq__(self, other: object) -> bool:
        if type(other) is not CopyFromHost:
            return NotImplemented
        if self.dst != other.dst or self.dst_offset != other.dst_offset:
            return False
        a, b = self.src, other.src
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))
        return a == b

    __hash__ = None  # type: ignore[assignment]


@message(buffers=("src",))
class CopyToHost(Message):
    """Copy ``nbytes`` of ``src`` starting at byte ``src_offset`` into host memory.

    With ``dst`` (a :class:`HostRef`) the device writes there and replies None. Without it the
    client stages the copy and replies with a NumPy array: of ``src``'s shape and order for a
    whole-buffer copy, else flat. ``nbytes=None`` means "to the end of the buffer".
    """

    src: BufRef
    dst: HostRef | None = None
    src_offset: int = 0
    nbytes: int | None = None

    def __post_init__(self) -> None:
        _set(self, "src", _ref(self, "src", self.src))
        _int(self, "src_offset", self.src_offset, hi=MAX_NBYTES)
        if self.nbytes is None:
            _set(self, "nbytes", max(self.src.nbytes - self.src_offset, 0))
        _int(self, "nbytes", self.nbytes, hi=MAX_NBYTES)
        if self.dst is not None:
            if not isinstance(self.dst, HostRef):
                raise _fail(self, "dst",
                            f"expected a HostRef or None, got {type(self.dst).__name__}")
            if self.dst.nbytes < self.nbytes:
                raise _fail(self, "dst", f"host block of {self.dst.nbytes} bytes is smaller than "
                            f"the {self.nbytes} bytes copied")
        _span(self, "src_offset", self.src, self.src_offset, self.nbytes)


@message(buffers=("dst", "src"), writes=("dst",))
class CopyDevice(Message):
    """Device-to-device copy of ``nbytes`` (default: all of ``src`` from ``src_offset``)."""

    dst: BufRef
    src: BufRef
    dst_offset: int = 0
    src_offset: int = 0
    nbytes: int | None = None

    def __post_init__(self) -> None:
        _set(self, "dst", _ref(self, "dst", self.dst))
        _set(self, "src", _ref(self, "src", self.src))
        _int(self, "dst_offset", self.dst_offset, hi=MAX_NBYTES)
        _int(self, "src_offset", self.src_offset, hi=MAX_NBYTES)
        if self.nbytes is None:
            _set(self, "nbytes", max(self.src.nbytes - self.src_offset, 0))
        _int(self, "nbytes", self.nbytes, hi=MAX_NBYTES)
        _span(self, "src_offset", self.src, self.src_offset, self.nbytes)
        _span(self, "dst_offset", self.dst, self.dst_offset, self.nbytes)
        if self.dst.id == self.src.id and self.dst.owner == self.src.owner:
            lo, hi = sorted((self.dst_offset, self.src_offset))
            if hi < lo + self.nbytes and self.nbytes:
                raise _fail(self, "dst_offset", "source and destination ranges overlap")


@message(buffers=("dst",), writes=("dst",))
class Memset(Message):
    """Fill ``nbytes`` of ``dst`` from byte ``offset`` with ``value`` repeated as a ``width``-byte
    unsigned pattern (1, 2 or 4; offset and nbytes must be multiples of the width)."""

    dst: BufRef
    value: int
    offset: int = 0
    nbytes: int | None = None
    width: int = 1

    def __post_init__(self) -> None:
        _set(self, "dst", _ref(self, "dst", self.dst))
        _choice(self, "width", _int(self, "width", self.width), (1, 2, 4))
        _int(self, "value", self.value, 0, (1 << (8 * self.width)) - 1)
        _int(self, "offset", self.offset, hi=MAX_NBYTES)
        if self.nbytes is None:
            _set(self, "nbytes", max(self.dst.nbytes - self.offset, 0))
        _int(self, "nbytes", self.nbytes, hi=MAX_NBYTES)
        if self.offset % self.width or self.nbytes % self.width:
            raise _fail(self, "width", f"offset {self.offset} and nbytes {self.nbytes} must be "
                        f"multiples of the {self.width}-byte pattern")
        _span(self, "offset", self.dst, self.offset, self.nbytes)


@message()
class Synchronize(Message):
    """Reply once every operation sent before this one has completed on the device."""


@message()
class OpenStream(Message):
    """Create the explicit compute stream ``stream`` (an id the client mints, like a buffer's)
    with CUDA stream ``priority`` (lower numbers run first; 0 is the default; the device
    clamps it to its range)."""

    stream: int
    priority: int = 0

    def __post_init__(self) -> None:
        _int(self, "stream", self.stream, lo=1)
        _int(self, "priority", self.priority, lo=-(1 << 31), hi=(1 << 31) - 1)


@message()
class CloseStream(Message):
    """Give back the explicit stream ``stream``: work sent on it still runs, and its slot
    serves a later :class:`OpenStream`."""

    stream: int

    def __post_init__(self) -> None:
        _int(self, "stream", self.stream, lo=1)


@message()
class OnStream(Message):
    """Handle ``then`` on the explicit stream ``stream`` instead of the compute stream the
    device would place it on: the envelope issues its compute work there, ordered against
    every other stream by the buffers it reads and writes."""

    stream: int
    then: Message

    def __post_init__(self) -> None:
        _int(self, "stream", self.stream, lo=1)
        if not isinstance(self.then, Message) or isinstance(self.then, OnStream):
            raise _fail(self, "then", f"expected a message, got {type(self.then).__name__}")

    def refs(self) -> list[BufRef]:
        return self.then.refs()

    def written(self) -> list[BufRef]:
        return self.then.written()


@message()
class SynchronizeStream(Message):
    """Reply once every operation sent before this one on the explicit stream ``stream``
    has completed."""

    stream: int

    def __post_init__(self) -> None:
        _int(self, "stream", self.stream, lo=1)


@message()
class Stats(Message):
    """Reply with a :class:`~gpumsg.service._stats.DeviceLoad`."""


@message()
class SnapshotContext(Message):
    """Reply with the raw ``CUcontext`` handle (int) for FFI users sharing the device."""


@message()
class SnapshotStream(Message):
    """Reply with the raw ``CUstream`` handle (int) of one of the device's streams. Work an FFI
    user enqueues there is ordered with the device's own work on that stream."""

    stream: str = "compute"

    def __post_init__(self) -> None:
        _choice(self, "stream", self.stream, STREAMS)


@message()
class SnapshotChildren(Message):
    """Reply with ``{name: raw handle}`` of every library handle and pool the device created
    so far (``"cublas"``, ``"mempool"``, ...)."""


@message()
class OpenLibraries(Message):
    """Make this device's handles of the named libraries now (``"cublas"``, ``"cudnn"``, ...: the
    names of :data:`~gpumsg.service._registry.LIBRARIES`) rather than at their first use, and
    reply with the names of every library open on the device, in opening order (``names=()``
    only asks). A process-isolated device's standby worker is sent one with the libraries its
    active worker has opened, so that after a recovery the first call does not wait for them."""

    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.names, tuple) or not all(type(n) is str for n in self.names):
            raise _fail(self, "names", f"expected a tuple of library names, got {self.names!r}")


@message()
class WatchGeneration(Message):
    """Reply with the device generation as soon as it is greater than ``after`` (``None``: the
    generation current when the device reads this message). Send again with the returned value
    to hear of the next rebuild."""

    after: int | None = None

    def __post_init__(self) -> None:
        _opt_int(self, "after", self.after)


@message()
class AllocPinned(Message):
    """Allocate a page-locked host block of at least ``nbytes``; reply with its block id.
    ``staging`` blocks count against the pool's staging limit."""

    nbytes: int
    staging: bool = False

    def __post_init__(self) -> None:
        _int(self, "nbytes", self.nbytes, lo=1, hi=MAX_NBYTES)
        if not isinstance(self.staging, bool):
            raise _fail(self, "staging", f"expected True or False, got {self.staging!r}")


@message()
class FreePinned(Message):
    """Reply once the copies already sent (which may use pinned block ``block``) have completed;
    the client then returns the block to its pool."""

    block: int

    def __post_init__(self) -> None:
        _int(self, "block", self.block)


@message()
class RegisterHostMemory(Message):
    """Process isolation: map the client's shared-memory segment ``name`` (``nbytes``) into the
    worker and page-lock it, as host block ``block`` of the ``"shm"`` pool."""

    block: int
    name: str
    nbytes: int

    def __post_init__(self) -> None:
        _int(self, "block", self.block)
        _int(self, "nbytes", self.nbytes, lo=1, hi=MAX_NBYTES)
        if not isinstance(self.name, str) or not self.name:
            raise _fail(self, "name", "expected the shared-memory segment's name")


@message()
class UnregisterHostMemory(Message):
    """Process isolation: unlock and unmap shared-memory block ``block`` (no copy uses it)."""

    block: int

    def __post_init__(self) -> None:
        _int(self, "block", self.block)


@message()
class TrimMemory(Message):
    """Release cached device and pinned memory that no buffer uses; reply with the number of
    device bytes the pool still reserves."""


@message()
class InjectFault(Message):
    """Make the device fail on purpose (tests). Refused unless the device was opened with
    ``allow_fault_injection=True``.

    * ``illegal_address``: a kernel writes to an invalid address on ``stream``; the context
      becomes poisoned (CUDA error 700).
    * ``oom``: the driver refuses the next ``count`` allocation attempts as out of memory. A
      request makes up to two attempts (the resource trims and retries once), so ``count=1`` is
      absorbed by the retry and ``count=2`` fails one request with ``OutOfMemory``.
    * ``hang``: a kernel spins on ``stream`` for ``seconds`` (``None``: until the device goes).
    * ``stall``: the device thread itself blocks for ``seconds`` (a driver call that does not
      return); messages sent meanwhile wait, unstarted, in the mailbox.
    * ``exit``: the worker process exits at once (process isolation only).
    """

    kind: str
    stream: str = "compute"
    seconds: float | None = None
    count: int = 1

    def __post_init__(self) -> None:
        _choice(self, "kind", self.kind, FAULT_KINDS)
        _choice(self, "stream", self.stream, STREAMS)
        if self.seconds is not None:
            if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) \
                    or not self.seconds >= 0:
                raise _fail(self, "seconds", f"must be a non-negative number, got {self.seconds!r}")
        _int(self, "count", self.count, lo=1)
        if self.kind == "stall" and self.seconds is None:
            raise _fail(self, "seconds", "a stall needs a duration")
