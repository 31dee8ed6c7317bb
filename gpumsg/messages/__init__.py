"""Every message gpumsg understands. ``dev.send(msg)`` accepts any of them."""

from ._base import BufRef, HostRef, Message, message
from .cublas import (
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
from .cublaslt import BlasLtCacheInfo, Matmul
from .cudnn import (
    Activation,
    ActivationBackward,
    BatchNormBackward,
    BatchNormInference,
    BatchNormTrain,
    ConvBackwardData,
    ConvBackwardFilter,
    ConvForward,
    DnnCacheInfo,
    Dropout,
    DropoutBackward,
    DropoutReserveSize,
    GroupNorm,
    GroupNormBackward,
    IndexCheck,
    LayerNorm,
    LayerNormBackward,
    Pool,
    PoolBackward,
    Softmax,
    SoftmaxBackward,
)
from .cudnn_attention import AttentionBackward, AttentionCacheInfo, AttentionForward
from .cudnn_rnn import (  # cudnn RNNs (v8 API)
    RnnBackwardData,
    RnnBackwardWeights,
    RnnCacheInfo,
    RnnDropoutInit,
    RnnForward,
    RnnSpaceInfo,
    RnnSpec,
    RnnWeightInfo,
)
from .cufft import FftCacheConfig, FftCacheInfo, FftExec, FftPlan, FftReplayInfo, FftSpec
from .curand import CreateGenerator, DestroyGenerator, Generate, SeedGenerator
from .cusolver import (  # cuSOLVER: LU, Cholesky, QR, eigen, SVD, batched
    CholeskyBatched,
    Geev,
    Geqrf,
    Gesvd,
    Gesvdj,
    GesvdjBatched,
    GesvdjStrided,
    Getrf,
    GetrfBatched,
    Getrs,
    GetrsBatched,
    Orgqr,
    Ormqr,
    Potrf,
    PotrfBatched,
    Potri,
    Potrs,
    PotrsBatched,
    SolverCacheInfo,
    SyevBatched,
    Syevd,
    Syevj,
    SyevjBatched,
    Sygvd,
    ZeroTriangle,
)
from .cusparse import (
    SDDMM,
    CompressRows,
    DenseToSparseFinish,
    DenseToSparseStart,
    ExpandRows,
    SparseCacheInfo,
    SparseConvert,
    SparseCreate,
    SparseDestroy,
    SparseRef,
    SparseReplayInfo,
    SparseToDense,
    SpGEMMDrop,
    SpGEMMFinish,
    SpGEMMStart,
    SpMM,
    SpMV,
    SpSM,
    SpSolveQR,
    SpSV,
)
from .device import (
    FAULT_KINDS,
    STREAMS,
    Alloc,
    AllocPinned,
    AllocThen,
    CloseStream,
    CopyDevice,
    CopyFromHost,
    CopyToHost,
    Free,
    FreePinned,
    InjectFault,
    Memset,
    OnStream,
    OpenStream,
    RegisterHostMemory,
    SnapshotChildren,
    SnapshotContext,
    SnapshotStream,
    Stats,
    Synchronize,
    SynchronizeStream,
    TrimMemory,
    UnregisterHostMemory,
    WatchGeneration,
)
from .graph import CaptureGraph, DestroyGraph, LaunchGraph, UpdateGraph
from .interop import Adopt, ExportSync
from .nccl import Collective, CollOp, CommAbort, CommInit, CommPoll
from .nvrtc import Kernel, Launch, LoadModule
from .peer import EnablePeerAccess, GrantPoolAccess, PeerCopyRecv, PeerCopySend, PeerQuery

__all__ = [
    "Message", "message", "BufRef", "HostRef", "STREAMS", "FAULT_KINDS",
    "Alloc", "AllocThen", "Free", "CopyFromHost", "CopyToHost", "CopyDevice", "Memset",
    "Synchronize", "Stats", "SnapshotContext", "SnapshotStream", "SnapshotChildren",
    "WatchGeneration", "OpenStream", "CloseStream", "OnStream", "SynchronizeStream",
    "AllocPinned", "FreePinned", "TrimMemory", "InjectFault", "Sgemm", "Gemm",
    "GemmStridedBatched", "GemmBatched", "Axpy", "Scal", "Dot", "Nrm2", "Asum", "Iamax", "Iamin",
    "Copy", "Swap", "Rot", "Gemv", "Ger", "Symv", "Trsv", "Geam", "Syrk", "Symm", "Trmm", "Trsm",
    "Matmul", "BlasLtCacheInfo", "RegisterHostMemory", "UnregisterHostMemory",
    # nvrtc, graphs
    "Kernel", "LoadModule", "Launch", "CaptureGraph", "LaunchGraph", "UpdateGraph", "DestroyGraph",
    # cudnn
    "ConvForward", "ConvBackwardData", "ConvBackwardFilter",
    "DnnCacheInfo", "Activation", "ActivationBackward", "Softmax", "SoftmaxBackward", "Pool",
    "PoolBackward", "BatchNormTrain", "BatchNormInference", "BatchNormBackward",
    "Dropout", "DropoutBackward", "DropoutReserveSize", "LayerNorm", "LayerNormBackward",
    "GroupNorm", "GroupNormBackward", "IndexCheck",
    # cusolver
    "Potrf", "Potrs", "Getrf", "Getrs", "PotrfBatched", "SolverCacheInfo",
    # cusolver: QR, eigen, SVD, potri, batched
    "Geqrf", "Orgqr", "Ormqr", "Syevd", "Syevj", "SyevjBatched", "Sygvd", "Gesvd", "Gesvdj",
    "GesvdjBatched", "Potri", "PotrsBatched", "GetrfBatched", "GetrsBatched", "ZeroTriangle",
    "CholeskyBatched", "SyevBatched", "GesvdjStrided", "Geev",
    # nccl
    "CollOp", "Collective", "CommInit", "CommAbort", "CommPoll",
    # peer (multi-GPU copies)
    "PeerQuery", "EnablePeerAccess", "GrantPoolAccess", "PeerCopySend", "PeerCopyRecv",
    # curand
    "CreateGenerator", "SeedGenerator", "Generate", "DestroyGenerator",
    # cusparse
    "SparseRef", "SparseCreate", "SparseDestroy", "SpMV", "SpMM", "SpGEMMStart", "SpGEMMFinish",
    "SpGEMMDrop", "SpSV", "SpSM", "SDDMM", "SparseToDense", "DenseToSparseStart",
    "DenseToSparseFinish", "SparseConvert", "SparseCacheInfo", "SparseReplayInfo",
    "CompressRows", "ExpandRows", "SpSolveQR",
    # cufft
    "FftSpec", "FftPlan", "FftExec", "FftCacheInfo", "FftCacheConfig", "FftReplayInfo",
    # interop (DLPack)
    "ExportSync", "Adopt",
    # cudnn attention (graph API)
    "AttentionForward", "AttentionBackward", "AttentionCacheInfo",
    # cudnn RNNs (v8 API)
    "RnnSpec", "RnnForward", "RnnBackwardData", "RnnBackwardWeights", "RnnWeightInfo",
    "RnnSpaceInfo", "RnnCacheInfo", "RnnDropoutInit",
]
