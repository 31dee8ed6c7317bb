"""The interface the device service drives: one object per device, called only from that
device's own thread (event waits excepted: completion threads call :meth:`event_synchronize`).

Handles (streams, events, pools) are opaque to the service; pointers are ints. Every failing call
raises :class:`~gpumsg.errors.CudaError` carrying the driver's code, so the service can tell
sticky errors (which poison the device) from the rest.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

__all__ = ["Backend", "DeviceProperties"]


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    name: str
    ordinal: int
    compute_capability: tuple[int, int]
    total_bytes: int
    multiprocessors: int
    driver_version: int


class Backend(abc.ABC):
    """A device the service can drive. Subclasses: ``CudaBackend`` and ``SimBackend``."""

    #: "cuda" or "sim"
    kind: str = ""

    def __init__(self, ordinal: int = 0) -> None:
        self.ordinal = ordinal

    # -- lifecycle: open() and close() run on the device thread ---------------------------------
    @abc.abstractmethod
    def open(self) -> DeviceProperties:
        """Create (or retain) the context and make it current on the calling thread."""
        ...

    @abc.abstractmethod
    def close(self) -> None:
        """Release the context. Nothing may be called afterwards."""
        ...

    def make_current(self) -> None:
        """Make the device's context current on the calling (helper) thread."""

    def enter_thread(self) -> Any:
        """Make the device's context current on the calling thread for one executor turn
        (``service/_executor.py``), keeping the thread's own: returns what
        :meth:`leave_thread` needs to restore it. Raises the backend's error if it cannot."""
        return None

    def leave_thread(self, token: Any) -> None:
        """Undo :meth:`enter_thread` (``token`` is what it returned)."""

    @abc.abstractmethod
    def context_handle(self) -> int:
        ...

    # -- streams and events -----------------------------------------------------------------------
    @abc.abstractmethod
    def stream_create(self, priority: int = 0) -> Any:
        """A new non-blocking stream; ``priority`` in CUDA's convention (lower numbers run
        first; 0 is the default; values outside :meth:`stream_priority_range` are clamped)."""

    def stream_priority_range(self) -> tuple[int, int]:
        """``(least, greatest)`` stream priority of the device (CUDA's numbers: greatest is
        the lower one); ``(0, 0)`` where priorities are not supported."""
        return (0, 0)

    @abc.abstractmethod
    def stream_destroy(self, stream: Any) -> None: ...
    @abc.abstractmethod
    def stream_handle(self, stream: Any) -> int: ...
    @abc.abstractmethod
    def stream_synchronize(self, stream: Any) -> None: ...
    @abc.abstractmethod
    def event_create(self) -> Any: ...
    @abc.abstractmethod
    def event_destroy(self, event: Any) -> None: ...
    @abc.abstractmethod
    def event_record(self, event: Any, stream: Any) -> None: ...
    @abc.abstractmethod
    def event_query(self, event: Any) -> bool: ...

    def event_pause(self, event: Any, timeout: float) -> None:
        """Give other threads a moment while ``event`` may complete: at most ``timeout``
        seconds, possibly none. A driver's event query already releases the GIL, so the
        default returns at once."""

    @abc.abstractmethod
    def event_synchronize(self, event: Any) -> None: ...
    @abc.abstractmethod
    def stream_wait_event(self, stream: Any, event: Any) -> None: ...

    # -- device memory ---------------------------------------------------------------------------
    @abc.abstractmethod
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of device memory."""
        ...

    @abc.abstractmethod
    def pool_create(self, release_threshold: int) -> Any: ...
    @abc.abstractmethod
    def pool_destroy(self, pool: Any) -> None: ...
    @abc.abstractmethod
    def pool_handle(self, pool: Any) -> int: ...
    @abc.abstractmethod
    def pool_alloc(self, pool: Any, nbytes: int, stream: Any) -> int: ...
    @abc.abstractmethod
    def pool_trim(self, pool: Any, keep: int) -> None: ...
    @abc.abstractmethod
    def pool_usage(self, pool: Any) -> tuple[int, int]:
        """(reserved, used) bytes of the pool."""
        ...

    @abc.abstractmethod
    def free_async(self, ptr: int, stream: Any) -> None: ...
    @abc.abstractmethod
    def mem_alloc(self, nbytes: int) -> int: ...
    @abc.abstractmethod
    def mem_free(self, ptr: int) -> None: ...

    # -- host memory -------------------------------------------------------------------------------
    @abc.abstractmethod
    def host_alloc(self, nbytes: int) -> int:
        """Page-locked host memory; returns its address."""
        ...

    @abc.abstractmethod
    def host_free(self, ptr: int) -> None: ...
    @abc.abstractmethod
    def host_register(self, ptr: int, nbytes: int) -> None: ...
    @abc.abstractmethod
    def host_unregister(self, ptr: int) -> None: ...

    # -- copies and fills: asynchronous on ``stream``, which comes first in every enqueuing call --
    @abc.abstractmethod
    def copy_htod(self, stream: Any, dst: int, src_host: int, nbytes: int) -> None: ...
    @abc.abstractmethod
    def copy_dtoh(self, stream: Any, dst_host: int, src: int, nbytes: int) -> None: ...
    @abc.abstractmethod
    def copy_dtod(self, stream: Any, dst: int, src: int, nbytes: int) -> None: ...
    @abc.abstractmethod
    def memset(self, stream: Any, dst: int, value: int, count: int, width: int) -> None:
        """Set ``count`` elements of ``width`` bytes (1, 2 or 4) to ``value``."""

    def synchronize_context(self) -> None:
        """Wait until all work sent to the device, on any stream, has run (any thread). The
        simulator's DLPack peers are on the host: nothing to wait for."""

    # -- fault injection (tests) -------------------------------------------------------------------
    @abc.abstractmethod
    def inject_illegal_address(self, stream: Any) -> None: ...
    @abc.abstractmethod
    def inject_hang(self, stream: Any, seconds: float | None) -> None: ...
    @abc.abstractmethod
    def inject_oom(self, count: int) -> None:
        """Make the next ``count`` device allocations fail with CUDA_ERROR_OUT_OF_MEMORY."""
