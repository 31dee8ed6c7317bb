"""Adaptors that wrap a memory resource and stack (RMM's model):

* :class:`BudgetAdaptor`: bounds the bytes held for callers (buffers, and frees not yet done);
* :class:`StatisticsAdaptor`: counts bytes and allocations, current and peak;
* :class:`LoggingAdaptor`: one record per allocation, free and failure, to any sink (a CSV file
  with :class:`CsvSink`).
"""

from __future__ import annotations

import csv
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TextIO

from ..errors import GpuError, OutOfBudget
from ._resource import MemoryResource, MemoryUsage

__all__ = ["ResourceAdaptor", "BudgetAdaptor", "StatisticsAdaptor", "MemoryStatistics",
           "LoggingAdaptor", "MemoryEvent", "CsvSink"]


class ResourceAdaptor(MemoryResource):
    """Base of the adaptors: delegates everything to ``upstream``."""

    def __init__(self, upstream: MemoryResource) -> None:
        self.upstream = upstream

    def allocate(self, nbytes: int, stream: Any) -> int:
        return self.upstream.allocate(nbytes, stream)

    def deallocate(self, ptr: int, nbytes: int, stream: Any) -> None:
        self.upstream.deallocate(ptr, nbytes, stream)

    def usage(self) -> MemoryUsage:
        return self.upstream.usage()

    def trim(self) -> None:
        self.upstream.trim()

    def pending_bytes(self) -> int:
        return self.upstream.pending_bytes()

    def poll(self) -> None:
        self.upstream.poll()

    def close(self) -> None:
        self.upstream.close()

    def stack(self) -> Iterator[MemoryResource]:
        yield self
        yield from self.upstream.stack()


class BudgetAdaptor(ResourceAdaptor):
    """Refuse allocations that would take the bytes held for callers past ``limit``.

    Held bytes are those allocated through this adaptor and not yet freed, plus freed bytes the
    resource below still holds until the work before the free has run (the direct resource
    defers its frees). Before refusing, the adaptor trims the resource below once (finishing the
    deferred frees that can be, releasing cached memory) and checks again. Refusal raises
    :class:`~gpumsg.errors.OutOfBudget` with requested/current/limit.
    """

    def __init__(self, upstream: MemoryResource, limit: int) -> None:
        super().__init__(upstream)
        if limit < 0:
            raise ValueError("budget must be >= 0 bytes")
        self.limit = limit
        self.current = 0

    def allocate(self, nbytes: int, stream: Any) -> int:
        if self.current + self.upstream.pending_bytes() + nbytes > self.limit:
            self.upstream.trim()
            held = self.current + self.upstream.pending_bytes()
            if held + nbytes > self.limit:
                raise OutOfBudget(nbytes, held, self.limit)
        ptr = self.upstream.allocate(nbytes, stream)
        self.current += nbytes
        return ptr

    def deallocate(self, ptr: int, nbytes: int, stream: Any) -> None:
        self.upstream.deallocate(ptr, nbytes, stream)
        self.current -= nbytes


class MemoryStatistics(NamedTuple):
    """What a :class:`StatisticsAdaptor` counted (bytes and buffers, current and peak)."""

    current_bytes: int
    peak_bytes: int
    current_count: int
    peak_count: int
    total_allocations: int
    total_frees: int
    failed_allocations: int


class StatisticsAdaptor(ResourceAdaptor):
    """Counts what passes through it: bytes and buffers outstanding (current, peak), allocations,
    frees and failures."""

    def __init__(self, upstream: MemoryResource) -> None:
        super().__init__(upstream)
        self._bytes = self._peak_bytes = self._count = self._peak_count = 0
        self._allocs = self._frees = self._failures = 0

    def allocate(self, nbytes: int, stream: Any) -> int:
        try:
            ptr = self.upstream.allocate(nbytes, stream)
        except GpuError:
            self._failures += 1
            raise
        self._allocs += 1
        self._bytes += nbytes
        self._count += 1
        if self._bytes > self._peak_bytes:
            self._peak_bytes = self._bytes
        if self._count > self._peak_count:
            self._peak_count = self._count
        return ptr

    def deallocate(self, ptr: int, nbytes: int, stream: Any) -> None:
        self.upstream.deallocate(ptr, nbytes, stream)
        self._frees += 1
        self._bytes -= nbytes
        self._count -= 1

    def changes(self) -> tuple[int, int]:
        """(allocations, frees) so far: changes whenever the memory held through it changes."""
        return self._allocs, self._frees

    def statistics(self) -> MemoryStatistics:
        return MemoryStatistics(self._bytes, self._peak_bytes, self._count, self._peak_count,
                                self._allocs, self._frees, self._failures)


@dataclasses.dataclass(frozen=True)
class MemoryEvent:
    """One logged memory operation. ``op`` is ``alloc``, ``free`` or ``fail``; ``stream`` the
    raw stream handle; ``detail`` the error for failures."""

    time: float
    op: str
    ptr: int
    nbytes: int
    stream: int
    detail: str = ""

    FIELDS = ("time", "op", "ptr", "nbytes", "stream", "detail")


class CsvSink:
    """Writes :class:`MemoryEvent` records as CSV rows (with a header) to a path or open file."""

    def __init__(self, target: str | TextIO) -> None:
        self._own = isinstance(target, str)
        self._file: TextIO = open(target, "w", newline="") if isinstance(target, str) else target
        self._writer = csv.writer(self._file)
        self._writer.writerow(MemoryEvent.FIELDS)
        self._lock = threading.Lock()

    def __call__(self, event: MemoryEvent) -> None:
        with self._lock:
            self._writer.writerow([f"{event.time:.6f}", event.op, f"{event.ptr:#x}", event.nbytes,
                                   f"{event.stream:#x}", event.detail])

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._own:
                self._file.close()
            else:
                self._file.flush()


class LoggingAdaptor(ResourceAdaptor):
    """Sends a :class:`MemoryEvent` to ``sink`` for every allocation, free and failure."""

    def __init__(self, upstream: MemoryResource, sink: Callable[[MemoryEvent], None],
                 stream_handle: Callable[[Any], int] = lambda s: 0) -> None:
        super().__init__(upstream)
        self.sink = sink
        self._stream_handle = stream_handle

    def allocate(self, nbytes: int, stream: Any) -> int:
        try:
            ptr = self.upstream.allocate(nbytes, stream)
        except GpuError as exc:
            self.sink(MemoryEvent(time.time(), "fail", 0, nbytes, self._stream_handle(stream),
                                  f"{type(exc).__name__}: {exc}"))
            raise
        self.sink(MemoryEvent(time.time(), "alloc", ptr, nbytes, self._stream_handle(stream)))
        return ptr

    def deallocate(self, ptr: int, nbytes: int, stream: Any) -> None:
        self.upstream.deallocate(ptr, nbytes, stream)
        self.sink(MemoryEvent(time.time(), "free", ptr, nbytes, self._stream_handle(stream)))

    def close(self) -> None:
        super().close()
        closer = getattr(self.sink, "close", None)
        if closer is not None:
            closer()
