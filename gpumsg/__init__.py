"""gpumsg: a GPU as a message service.

Each device is owned by one thread that drains a queue of typed messages; every call returns a
:class:`concurrent.futures.Future`. ``open_device()`` picks the GPU when one is present and the
NumPy simulator otherwise::

    import numpy as np, gpumsg
    with gpumsg.open_device(0) as dev:
        a = dev.to_device(np.random.rand(512, 256).astype(np.float32))
        b = dev.to_device(np.random.rand(256, 128).astype(np.float32))
        c = dev.alloc((512, 128), np.float32)  # C order, as NumPy's
        dev.sgemm(a, b, c)  # m, n, k from the shapes; each buffer read in its own order
        out = dev.copy_to_host(c).result()
"""

from . import libs, messages, supervision  # noqa: F401  (libraries and isolations register)
from .client import (
    BufferFuture,
    Device,
    GpuBuffer,
    GpuFuture,
    PinnedHostBuffer,
    Stream,
    devices,
    open_device,
)
from .client import _buffers as _client_buffers
from .config import Config, configure
from .dtypes import as_dtype, bfloat16, dtype_name
from .errors import (
    CompileError,
    ContextPoisoned,
    CudaError,
    DependencyFailed,
    DeviceClosed,
    DidNotConverge,
    DriverNotFound,
    FaultInjectionDisabled,
    GpuError,
    GpuRefStale,
    GraphCaptureError,
    IndexOutOfRange,
    InvalidMessage,
    LibraryError,
    LinAlgError,
    NotPositiveDefinite,
    OperationTimeout,
    OutOfBudget,
    OutOfMemory,
    SingularMatrix,
    Unrecoverable,
    WorkerDied,
)
from .memory import MemoryConfig
from .multi import CollectiveError, Communicator, DeviceGroup, open_devices
from .service._stats import DeviceLoad
from .service._trace import KernelTrace, NvtxTrace, OpRecord, RecordingTrace

GpuRef = GpuBuffer  # the name the design seeds use


def _array_view(buffer: object) -> object:
    """A buffer's array view (operators, indexing, ``buf.sum()``): loads the array layer
    on first use, which then answers directly (the client imports nothing above it)."""
    from .array_api import _array

    return _array.view_of(buffer)


if _client_buffers.ARRAY_VIEW is None:
    _client_buffers.ARRAY_VIEW = _array_view


def __getattr__(name: str) -> object:
    # user kernels of the array namespace, imported when first asked for
    if name in ("ElementwiseKernel", "ReductionKernel"):
        from . import array_api

        return getattr(array_api, name)
    raise AttributeError(f"module 'gpumsg' has no attribute {name!r}")

__version__ = "0.1.0"

__all__ = [
    "open_device", "devices", "Device", "Config", "configure", "GpuBuffer", "GpuRef",
    "BufferFuture", "GpuFuture", "Stream",
    "PinnedHostBuffer", "DeviceLoad", "MemoryConfig", "KernelTrace", "RecordingTrace",
    "NvtxTrace", "OpRecord", "messages", "as_dtype", "dtype_name", "bfloat16",
    "GpuError", "InvalidMessage", "IndexOutOfRange", "GpuRefStale", "DeviceClosed",
    "ContextPoisoned", "WorkerDied", "OperationTimeout", "Unrecoverable", "OutOfMemory",
    "OutOfBudget",
    "LibraryError", "CudaError", "DependencyFailed", "FaultInjectionDisabled",
    "CompileError", "GraphCaptureError",
    "LinAlgError", "SingularMatrix", "NotPositiveDefinite", "DidNotConverge", "DriverNotFound",
    "open_devices", "DeviceGroup", "Communicator", "CollectiveError",
]
