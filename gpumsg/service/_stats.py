"""DeviceLoad: the answer to ``Stats``."""

from __future__ import annotations

from typing import NamedTuple

from ..memory._adaptors import MemoryStatistics

__all__ = ["DeviceLoad"]


class DeviceLoad(NamedTuple):
    """A device's load and memory at one moment (all byte counts in bytes).

    ``free_bytes``/``total_bytes`` and the pool figures come from the driver; they are re-read
    whenever this device allocated or freed since the last Stats, and otherwise at most every
    millisecond (this device's own changes show at once, other processes' within 1 ms).
    ``pool_reserved_bytes``/``pool_used_bytes`` describe the memory resource (for the pool: what
    it holds from the driver and what buffers use); ``budget_bytes`` is the budget limit or None;
    ``queue_depth`` counts messages waiting in the mailbox; ``ops_in_flight`` operations issued
    and not yet observed complete; ``ops_completed`` operations completed since the device opened.
    ``workspaces`` pairs each library holding a workspace with its bytes (0: the budget or the
    device could not give one and the library runs without; see ``gpumsg.libs._workspace``).
    ``streams``: per compute stream of the device's pool, first stream first, how many messages
    were placed on it since the device opened (empty with one compute stream; see
    ``service/_placement.py``). An immutable named tuple: plain data, cheap to build on the
    device thread.
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
    workspaces: tuple[tuple[str, int], ...] = ()
    streams: tuple[int, ...] = ()
