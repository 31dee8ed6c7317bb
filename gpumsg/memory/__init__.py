"""Device memory resources and adaptors, and the pinned host pool."""

from ._adaptors import (
    BudgetAdaptor,
    CsvSink,
    LoggingAdaptor,
    MemoryEvent,
    MemoryStatistics,
    ResourceAdaptor,
    StatisticsAdaptor,
)
from ._config import MemoryConfig, build_resource
from ._pinned import PinnedBlock, PinnedPool
from ._resource import AsyncPoolResource, DirectResource, MemoryResource, MemoryUsage

__all__ = [
    "MemoryResource", "MemoryUsage", "AsyncPoolResource", "DirectResource", "ResourceAdaptor",
    "BudgetAdaptor", "StatisticsAdaptor", "MemoryStatistics", "LoggingAdaptor", "MemoryEvent",
    "CsvSink", "MemoryConfig", "build_resource", "PinnedPool", "PinnedBlock",
]
