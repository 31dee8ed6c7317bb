"""Every message gpumsg understands. ``dev.send(msg)`` accepts any of them."""

from .base import BufRef, HostRef, Message, message
from .blas import Sgemm
from .device import (
    FAULT_KINDS,
    STREAMS,
    Alloc,
    AllocPinned,
    CopyDevice,
    CopyFromHost,
    CopyToHost,
    Free,
    FreePinned,
    InjectFault,
    Memset,
    SnapshotChildren,
    SnapshotContext,
    SnapshotStream,
    Stats,
    Synchronize,
    TrimMemory,
    WatchGeneration,
)

__all__ = [
    "Message", "message", "BufRef", "HostRef", "STREAMS", "FAULT_KINDS",
    "Alloc", "Free", "CopyFromHost", "CopyToHost", "CopyDevice", "Memset", "Synchronize",
    "Stats", "SnapshotContext", "SnapshotStream", "SnapshotChildren", "WatchGeneration",
    "AllocPinned", "FreePinned", "TrimMemory", "InjectFault", "Sgemm",
]
