"""Many devices: :func:`open_devices`, :class:`DeviceGroup` (placement), NCCL communicators."""

from ..errors import CollectiveError
from .group import CollectiveFuture, Communicator, DeviceGroup, open_devices

__all__ = ["CollectiveError", "CollectiveFuture", "Communicator", "DeviceGroup", "open_devices"]
