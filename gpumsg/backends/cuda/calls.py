"""Launch calls that keep the GIL: how the device thread enqueues work (device thread).

A ctypes call through ``ctypes.CDLL`` (and every ``cuda.bindings`` call) gives the GIL up for
the duration of the C call and takes it back afterwards. For a call that only enqueues work (a
GEMM, a copy on a stream, an event record) the C part takes 1-5 us, and taking the GIL back is
what costs: while callers are posting, the device thread waits for the current holder's switch
interval, and with several posting threads for several of them, once per call. Calls bound
through ``ctypes.PyDLL`` keep the GIL instead, as torch and CuPy do when they launch. The device
thread then gives the GIL up only where it blocks (an empty mailbox, a wait on an event) or when
the switch interval says so.

Only calls that neither block for long nor call back into Python are bound this way: the
enqueue-only driver calls listed in :class:`DriverCalls`, and the library calls declared with
``Fn(..., holds_gil=True)`` (:mod:`gpumsg.libs.loader`). Blocking calls (synchronizations,
algorithm searches, communicator set-up) keep releasing the GIL.

``GPUMSG_LAUNCH_GIL=release`` in the environment binds them all through ``ctypes.CDLL`` (the GIL
released), for comparison or for an application whose other threads must run during launches;
``hold`` (the default) keeps it.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from ...errors import InvalidMessage

__all__ = ["launch_gil", "dll_class", "DriverCalls", "driver_calls"]

_MODES = ("hold", "release")


def launch_gil() -> str:
    """``"hold"`` or ``"release"``, from ``GPUMSG_LAUNCH_GIL`` (default ``hold``). Raises
    InvalidMessage for another value."""
    text = os.environ.get("GPUMSG_LAUNCH_GIL", "").strip().lower() or "hold"
    if text not in _MODES:
        raise InvalidMessage(f"GPUMSG_LAUNCH_GIL must be 'hold' or 'release', got {text!r}",
                             field="GPUMSG_LAUNCH_GIL")
    return text


def dll_class() -> type[ctypes.CDLL]:
    """The ctypes class that binds enqueue-only calls: PyDLL (keeps the GIL) or CDLL."""
    return ctypes.PyDLL if launch_gil() == "hold" else ctypes.CDLL


_u64, _ptr, _size, _int = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int

#: (exported symbol, attribute, argtypes): handles are passed as integers; every call returns a
#: CUresult. The exported names are the ones cuda.h maps the API names to (the _v2 copies).
_DRIVER = (
    ("cuEventRecord", "event_record", (_ptr, _ptr)),
    ("cuEventQuery", "event_query", (_ptr,)),
    ("cuStreamWaitEvent", "stream_wait_event", (_ptr, _ptr, ctypes.c_uint)),
    ("cuMemAllocFromPoolAsync", "alloc_from_pool", (ctypes.POINTER(_u64), _size, _ptr, _ptr)),
    ("cuMemFreeAsync", "free_async", (_u64, _ptr)),
    ("cuMemcpyHtoDAsync_v2", "copy_htod", (_u64, _ptr, _size, _ptr)),
    ("cuMemcpyDtoHAsync_v2", "copy_dtoh", (_ptr, _u64, _size, _ptr)),
    ("cuMemcpyDtoDAsync_v2", "copy_dtod", (_u64, _u64, _size, _ptr)),
    ("cuGraphLaunch", "graph_launch", (_ptr, _ptr)),
)


class DriverCalls:
    """The driver's enqueue-only entry points, bound once per process through
    :func:`dll_class` from the driver library that cuda.bindings has loaded. Arguments are
    integers (``int()`` of a cuda.bindings handle); each returns the CUresult as an int."""

    event_record: Any
    event_query: Any
    stream_wait_event: Any
    alloc_from_pool: Any
    free_async: Any
    copy_htod: Any
    copy_dtoh: Any
    copy_dtod: Any
    graph_launch: Any

    def __init__(self, cls: type[ctypes.CDLL], name: str = "libcuda.so.1") -> None:
        self.holds_gil = cls is ctypes.PyDLL
        lib = cls(name)
        for symbol, attr, argtypes in _DRIVER:
            fn = getattr(lib, symbol)
            fn.restype = _int
            fn.argtypes = list(argtypes)
            setattr(self, attr, fn)

    def launch_graph(self, exec_: Any, stream: Any) -> int:
        """``cuGraphLaunch`` of cuda.bindings handles (a CUgraphExec, a CUstream)."""
        return self.graph_launch(int(exec_), int(stream))


_CALLS: DriverCalls | None = None
_LOCK = threading.Lock()


def driver_calls() -> DriverCalls:
    """The process's :class:`DriverCalls`, bound on first use in the mode
    ``GPUMSG_LAUNCH_GIL`` names then (the driver must be initialized: the CUDA backend opens
    first). Raises InvalidMessage for a bad ``GPUMSG_LAUNCH_GIL``."""
    global _CALLS
    calls = _CALLS
    if calls is None:
        with _LOCK:
            if _CALLS is None:
                _CALLS = DriverCalls(dll_class())
            calls = _CALLS
    return calls
