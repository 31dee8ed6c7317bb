"""How a device's memory stack is described (plain data) and built (on the device thread)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Union

from ..errors import InvalidMessage
from ._adaptors import BudgetAdaptor, CsvSink, LoggingAdaptor, StatisticsAdaptor
from ._resource import NO_RELEASE, AsyncPoolResource, DirectResource, MemoryResource

__all__ = ["MemoryConfig", "MemorySpec", "build_resource"]


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    """The device memory stack, top to bottom: logging (if ``log``), budget (if ``budget``),
    statistics (if ``statistics``), then the base resource.

    ``resource``: ``"pool"`` (stream-ordered pool, the default) or ``"direct"``.
    ``budget``: bytes the buffers may hold (see :class:`BudgetAdaptor`), or None.
    ``log``: a CSV file path, or a callable receiving each ``MemoryEvent``.
    ``release_threshold``: bytes the pool keeps cached across synchronizations.
    """

    resource: str = "pool"
    budget: int | None = None
    statistics: bool = True
    log: Any = None
    release_threshold: int = NO_RELEASE

    def __post_init__(self) -> None:
        if self.resource not in ("pool", "direct"):
            raise InvalidMessage(f"memory resource must be 'pool' or 'direct', got "
                                 f"{self.resource!r}", field="resource")
        if self.budget is not None and (not isinstance(self.budget, int) or self.budget < 0):
            raise InvalidMessage(f"budget must be a non-negative number of bytes, got "
                                 f"{self.budget!r}", field="budget")


#: what ``open_device(memory=...)`` accepts
MemorySpec = Union[str, MemoryConfig, Callable[[Any], MemoryResource]]


def build_resource(spec: MemorySpec, backend: Any) -> MemoryResource:
    """Build the memory stack for ``backend`` (call on the device thread)."""
    if isinstance(spec, str):
        spec = MemoryConfig(resource=spec)
    if not isinstance(spec, MemoryConfig):
        if callable(spec):
            resource = spec(backend)
            if not isinstance(resource, MemoryResource):
                raise InvalidMessage("memory factory must return a MemoryResource",
                                     field="memory")
            return resource
        raise InvalidMessage(f"memory must be 'pool', 'direct', a MemoryConfig or a factory, "
                             f"got {spec!r}", field="memory")
    resource: MemoryResource
    if spec.resource == "pool":
        resource = AsyncPoolResource(backend, spec.release_threshold)
    else:
        resource = DirectResource(backend)
    if spec.statistics:
        resource = StatisticsAdaptor(resource)
    if spec.budget is not None:
        resource = BudgetAdaptor(resource, spec.budget)
    if spec.log is not None:
        sink = CsvSink(spec.log) if isinstance(spec.log, str) else spec.log
        resource = LoggingAdaptor(resource, sink, backend.stream_handle)
    return resource
