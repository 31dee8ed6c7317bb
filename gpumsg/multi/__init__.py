"""Many devices: :func:`open_devices`, :class:`DeviceGroup` (placement, topology), NCCL
communicators, and peer copies (:mod:`gpumsg.multi._peer`, also ``Device.copy_peer``)."""

from ..errors import CollectiveError
from ._group import CollectiveFuture, Communicator, DeviceGroup, open_devices
from ._peer import PeerCopyError, Topology, copy_peer  # also registers the peer handlers

__all__ = ["CollectiveError", "CollectiveFuture", "Communicator", "DeviceGroup", "open_devices",
           "PeerCopyError", "Topology", "copy_peer"]
