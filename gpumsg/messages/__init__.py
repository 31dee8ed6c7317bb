"""Every message gpumsg understands. ``dev.send(msg)`` accepts any of them."""

from .base import BufRef, HostRef, Message, message
from .blas import (
    Asum,
    Axpy,
    Copy,
    Dot,
    Geam,
    Gemm,
    GemmBatched,
    GemmStridedBatched,
    Gemv,
    Ger,
    Iamax,
    Iamin,
    Nrm2,
    Rot,
    Scal,
    Sgemm,
    Swap,
    Symm,
    Symv,
    Syrk,
    Trmm,
    Trsm,
    Trsv,
)
from .blaslt import BlasLtCacheInfo, Matmul
from .collective import Collective, CollOp, CommAbort, CommInit, CommPoll
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
    RegisterHostMemory,
    SnapshotChildren,
    SnapshotContext,
    SnapshotStream,
    Stats,
    Synchronize,
    TrimMemory,
    UnregisterHostMemory,
    WatchGeneration,
)

__all__ = [
    "Message", "message", "BufRef", "HostRef", "STREAMS", "FAULT_KINDS",
    "Alloc", "Free", "CopyFromHost", "CopyToHost", "CopyDevice", "Memset", "Synchronize",
    "Stats", "SnapshotContext", "SnapshotStream", "SnapshotChildren", "WatchGeneration",
    "AllocPinned", "FreePinned", "TrimMemory", "InjectFault", "Sgemm", "Gemm",
    "GemmStridedBatched", "GemmBatched", "Axpy", "Scal", "Dot", "Nrm2", "Asum", "Iamax", "Iamin",
    "Copy", "Swap", "Rot", "Gemv", "Ger", "Symv", "Trsv", "Geam", "Syrk", "Symm", "Trmm", "Trsm",
    "Matmul", "BlasLtCacheInfo", "RegisterHostMemory", "UnregisterHostMemory",
    "CollOp", "Collective", "CommInit", "CommAbort", "CommPoll",
]
