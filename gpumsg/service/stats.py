"""DeviceLoad: the answer to ``Stats``."""

from __future__ import annotations

import dataclasses

from ..memory.adaptors import MemoryStatistics

__all__ = ["DeviceLoad"]


@dataclasses.dataclass(frozen=True)
class DeviceLoad:
    """A device's load and memory at one moment (all byte counts in bytes).

    ``pool_reserved_bytes``/``pool_used_bytes`` describe the memory resource (for the pool: what
    it holds from the driver and what buffers use); ``budget_bytes`` is the budget limit or None;
    ``queue_depth`` counts messages waiting in the mailbox; ``ops_in_flight`` operations issued
    and not yet observed complete; ``ops_completed`` operations completed since the device opened.
    """

    name: str
    ordinal: int
    backend: str
    compute_capability: tuple[int, int]
    generation: int
    free_bytes: int
    total_bytes: int
    pool_reserved_bytes: int
    pool_used_bytes: int
    budget_bytes: int | None
    pinned_reserved_bytes: int
    queue_depth: int
    ops_in_flight: int
    ops_completed: int
    memory: MemoryStatistics | None = None
