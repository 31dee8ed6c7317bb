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
from .cudnn import (
    Activation,
    ActivationBackward,
    ConvBackwardData,
    ConvBackwardFilter,
    ConvForward,
    DnnCacheInfo,
    Pool,
    PoolBackward,
    Softmax,
    SoftmaxBackward,
)
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
from .graph import CaptureGraph, DestroyGraph, LaunchGraph, UpdateGraph
from .nvrtc import Kernel, Launch, LoadModule
from .peer import EnablePeerAccess, GrantPoolAccess, PeerCopyRecv, PeerCopySend, PeerQuery
from .solver import Getrf, Getrs, Potrf, PotrfBatched, Potrs, SolverCacheInfo

__all__ = [
    "Message", "message", "BufRef", "HostRef", "STREAMS", "FAULT_KINDS",
    "Alloc", "Free", "CopyFromHost", "CopyToHost", "CopyDevice", "Memset", "Synchronize",
    "Stats", "SnapshotContext", "SnapshotStream", "SnapshotChildren", "WatchGeneration",
    "AllocPinned", "FreePinned", "TrimMemory", "InjectFault", "Sgemm", "Gemm",
    "GemmStridedBatched", "GemmBatched", "Axpy", "Scal", "Dot", "Nrm2", "Asum", "Iamax", "Iamin",
    "Copy", "Swap", "Rot", "Gemv", "Ger", "Symv", "Trsv", "Geam", "Syrk", "Symm", "Trmm", "Trsm",
    "Matmul", "BlasLtCacheInfo", "RegisterHostMemory", "UnregisterHostMemory",
    # nvrtc, graphs
    "Kernel", "LoadModule", "Launch", "CaptureGraph", "LaunchGraph", "UpdateGraph", "DestroyGraph",
    # cudnn
    "ConvForward", "ConvBackwardData", "ConvBackwardFilter",
    "DnnCacheInfo", "Activation", "ActivationBackward", "Softmax", "SoftmaxBackward", "Pool",
    "PoolBackward",
    # cusolver
    "Potrf", "Potrs", "Getrf", "Getrs", "PotrfBatched", "SolverCacheInfo",
    # nccl
    "CollOp", "Collective", "CommInit", "CommAbort", "CommPoll",
    # peer (multi-GPU copies)
    "PeerQuery", "EnablePeerAccess", "GrantPoolAccess", "PeerCopySend", "PeerCopyRecv",
]
