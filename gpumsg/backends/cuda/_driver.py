"""The CUDA backend: the driver API through ``cuda.bindings.driver``.

Streams are non-blocking (no implicit synchronization with the legacy default stream); events are
created without timing, the cheapest kind to record, query and wait on. The memory pool is the
device's own ``cuMemPoolCreate`` pool (not the default pool that other libraries in the process
may share), with its release threshold raised so memory freed on one call is reused by the next
instead of going back to the driver at every synchronization.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from ...config import setting
from ...errors import CudaError, InvalidMessage
from .._base import Backend, DeviceProperties

__all__ = ["CudaBackend", "cuda_available", "guarded_launch", "raw_graph_launch",
           "raw_kernel_launch"]

_cu: Any = None
_LOCK = threading.Lock()
_RAW_LAUNCH: list[Any] = []  # [{symbol: (its CDLL function, its PyDLL one)}], once looked up
_NOT_READY = 600
_ERROR_NAMES: dict[int, str] = {}


def _driver() -> Any:
    """Import ``cuda.bindings.driver`` and initialize the driver, once."""
    global _cu
    if _cu is None:
        with _LOCK:
            if _cu is None:
                from cuda.bindings import driver

                err = driver.cuInit(0)[0]
                if err:
                    raise CudaError(int(err), _name(driver, int(err)), "cuInit")
                _cu = driver
    return _cu


#: GPUMSG_RAW_LAUNCH's values: how libcuda's cuGraphLaunch is called (None: the binding)
_RAW_MODES = ("hold", "release", "0")
#: a launch holds the GIL only while fewer operations than this are in flight on its stream
HOLD_IN_FLIGHT = 256


def raw_graph_launch(in_flight: Callable[[], int] | None = None
                     ) -> Callable[[int, int], int] | None:
    """``cuGraphLaunch(exec, stream)`` through ctypes, on the libcuda that cuda.bindings
    loaded: the handles as ints, the CUresult answered as an int. The replays of repeated
    library calls launch through it (backends/cuda/replays.py): the binding's call converts
    its arguments and builds a result tuple and an enum on every launch.

    ``GPUMSG_RAW_LAUNCH`` says how (read once per process):

    - ``hold`` (the default): the GIL is held during the launch (``ctypes.PyDLL``), as torch
      holds it for its launches, while ``in_flight()`` (the operations issued on the stream
      and not yet seen complete) is under :data:`HOLD_IN_FLIGHT`. A device thread that
      releases the GIL for a launch of a few µs queues for it again behind a caller that is
      posting, for up to a switch interval (client/gil.py). Past the bound the GPU has plenty
      queued, and a launch may have to wait for room in the GPU's queue (a hung kernel,
      say): then the GIL is released, so that the process's other threads keep running.
    - ``release``: always released (``ctypes.CDLL``, as the binding does).
    - ``0``: None, the binding is used. None also where libcuda cannot be opened by its
      soname.

    Raises InvalidMessage for another value."""
    return _raw_entry("cuGraphLaunch", in_flight)


def raw_kernel_launch(in_flight: Callable[[], int] | None = None) -> Callable[..., int] | None:
    """``cuLaunchKernel(function, grid x, y, z, block x, y, z, shared bytes, stream,
    params, extra)`` through ctypes, as :func:`raw_graph_launch` (the same
    ``GPUMSG_RAW_LAUNCH`` modes, the same bound on holding the GIL): the function, stream and
    ``void**`` parameter array as ints, ``extra`` None, the CUresult answered as an int. User
    kernels launch through it (libs/nvrtc/handle.py)."""
    return _raw_entry("cuLaunchKernel", in_flight)


#: libcuda's launch entry points called through ctypes, with their parameter types
_RAW_SYMBOLS: dict[str, tuple] = {
    "cuGraphLaunch": (ctypes.c_void_p, ctypes.c_void_p),
    "cuLaunchKernel": (ctypes.c_void_p, *(ctypes.c_uint,) * 7, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_void_p),
    "cuMemAllocFromPoolAsync": (ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t,
                                ctypes.c_void_p, ctypes.c_void_p),
    "cuMemFreeAsync": (ctypes.c_uint64, ctypes.c_void_p),
}


def raw_call(symbol: str) -> Any:
    """libcuda's ``symbol`` (one of :data:`_RAW_SYMBOLS`) through ctypes, holding the GIL in
    ``GPUMSG_RAW_LAUNCH``'s ``hold`` mode (the default), releasing it in ``release``; None for
    ``0`` or where libcuda cannot be opened (the binding is used). For the stream-ordered pool
    allocation and free, which return at once: the binding releases the GIL around them, and
    a caller running its own message then queued for it behind the completion threads for up
    to a switch interval (about 100 µs of a 256 MiB allocation's call on an H200)."""
    _raw_entry(symbol, None)  # looks the symbols up, once per process
    release, hold = _RAW_LAUNCH[0].get(symbol, (None, None))
    return hold if hold is not None else release


def _raw_entry(symbol: str, in_flight: Callable[[], int] | None) -> Callable[..., int] | None:
    """The guarded ctypes call of ``symbol`` (one of :data:`_RAW_SYMBOLS`) in the mode
    ``GPUMSG_RAW_LAUNCH`` says, or None for the binding."""
    if not _RAW_LAUNCH:
        with _LOCK:
            if not _RAW_LAUNCH:
                mode = (setting("GPUMSG_RAW_LAUNCH") or "hold").strip().lower() or "hold"
                if mode not in _RAW_MODES:
                    raise InvalidMessage(f"GPUMSG_RAW_LAUNCH must be one of "
                                         f"{', '.join(_RAW_MODES)}, got {mode!r}",
                                         field="GPUMSG_RAW_LAUNCH")
                found: dict[str, tuple] = {}
                if mode != "0":
                    try:
                        found = {name: (_launch_fn(ctypes.CDLL, name),
                                        _launch_fn(ctypes.PyDLL, name) if mode == "hold"
                                        else None) for name in _RAW_SYMBOLS}
                    except (OSError, AttributeError):
                        found = {}
                _RAW_LAUNCH.append(found)
    release, hold = _RAW_LAUNCH[0].get(symbol, (None, None))
    return guarded_launch(release, hold, in_flight)


def guarded_launch(release: Any, hold: Any, in_flight: Callable[[], int] | None,
                   limit: int = HOLD_IN_FLIGHT) -> Any:
    """``hold(*args)`` while ``in_flight() < limit``, else ``release(*args)``; ``release``
    alone where there is no ``hold`` or no ``in_flight``."""
    if hold is None or in_flight is None or release is None:
        return release

    def launch(*args: Any) -> int:
        if in_flight() < limit:
            return hold(*args)
        return release(*args)

    return launch


_CTX_STACK: list[Any] = []  # [(cuCtxPushCurrent_v2, cuCtxPopCurrent_v2) or None], once looked up


def _ctx_stack() -> tuple[Any, Any] | None:
    """libcuda's ``cuCtxPushCurrent_v2(CUcontext)`` and ``cuCtxPopCurrent_v2(CUcontext*)``
    through ctypes, holding the GIL (they return at once); None where libcuda cannot be
    opened by its soname (the binding is used then)."""
    if not _CTX_STACK:
        with _LOCK:
            if not _CTX_STACK:
                try:
                    lib = ctypes.PyDLL("libcuda.so.1")
                    push, pop = lib.cuCtxPushCurrent_v2, lib.cuCtxPopCurrent_v2
                    push.argtypes, push.restype = (ctypes.c_void_p,), ctypes.c_int
                    pop.argtypes, pop.restype = (ctypes.c_void_p,), ctypes.c_int
                    _CTX_STACK.append((push, pop))
                except (OSError, AttributeError):
                    _CTX_STACK.append(None)
    return _CTX_STACK[0]


def _launch_fn(loader: Any, symbol: str) -> Any:
    """libcuda's ``symbol`` opened with ``loader`` (CDLL releases the GIL, PyDLL holds it)."""
    fn = getattr(loader("libcuda.so.1"), symbol)
    fn.argtypes = _RAW_SYMBOLS[symbol]
    fn.restype = ctypes.c_int
    return fn


def _name(cu: Any, code: int) -> str:
    name = _ERROR_NAMES.get(code)
    if name is None:
        try:
            err, raw = cu.cuGetErrorName(code)
            name = raw.decode() if not err and raw else f"CUDA_ERROR_{code}"
        except Exception:
            name = f"CUDA_ERROR_{code}"
        _ERROR_NAMES[code] = name
    return name


def _fail(err: int, function: str) -> CudaError:
    return CudaError(int(err), _name(_cu, int(err)), function)


def cuda_available(ordinal: int = 0) -> tuple[bool, str]:
    """Whether a CUDA driver and device ``ordinal`` are usable here, and if not, why."""
    try:
        cu = _driver()
    except CudaError as exc:
        return False, str(exc)
    except Exception as exc:  # no cuda-bindings, no libcuda.so
        return False, f"no CUDA driver: {exc}"
    err, count = cu.cuDeviceGetCount()
    if err:
        return False, str(_fail(err, "cuDeviceGetCount"))
    if ordinal >= count:
        return False, f"device {ordinal} requested but {count} CUDA device(s) present"
    return True, ""


# PTX for fault injection: a store to an address the device does not map (-> error 700), and a
# kernel that spins for a number of nanoseconds of %globaltimer (all ones: for ever).
_FAULT_PTX = b"""
.version 7.0
.target sm_52
.address_size 64

.visible .entry gpumsg_fault_store(.param .u64 addr)
{
    .reg .u64 %rd<2>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [addr];
    mov.b32 %r1, 1;
    st.global.u32 [%rd1], %r1;
    ret;
}

.visible .entry gpumsg_fault_spin(.param .u64 ns)
{
    .reg .u64 %rd<5>;
    .reg .pred %p;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
SPIN:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra SPIN;
    ret;
}
\x00"""


class CudaBackend(Backend):
    """One CUDA device, driven through its primary context."""

    kind = "cuda"

    def __init__(self, ordinal: int = 0) -> None:
        super().__init__(ordinal)
        self._dev: Any = None
        self._ctx: Any = None
        self._fault_module: Any = None
        self._oom_pending = 0
        #: the pool's stream-ordered allocation and free through ctypes (raw_call), looked up
        #: on first use; False where the binding is used
        self._raw_alloc: Any = None
        self._raw_free: Any = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self) -> DeviceProperties:
        cu = _driver()
        err, count = cu.cuDeviceGetCount()
        if err:
            raise _fail(err, "cuDeviceGetCount")
        if self.ordinal >= count:
            raise CudaError(101, "CUDA_ERROR_INVALID_DEVICE",
                            f"device {self.ordinal} requested but {count} present")
        err, dev = cu.cuDeviceGet(self.ordinal)
        if err:
            raise _fail(err, "cuDeviceGet")
        err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
        if err:
            raise _fail(err, "cuDevicePrimaryCtxRetain")
        self._dev, self._ctx = dev, ctx
        self.make_current()
        err, raw = cu.cuDeviceGetName(256, dev)
        name = raw.split(b"\0", 1)[0].decode() if not err else f"CUDA device {self.ordinal}"
        attr = cu.CUdevice_attribute
        major = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
        minor = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
        sms = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)[1]
        total = cu.cuDeviceTotalMem(dev)[1]
        driver_version = cu.cuDriverGetVersion()[1]
        return DeviceProperties(name=name, ordinal=self.ordinal, compute_capability=(major, minor),
                                total_bytes=int(total), multiprocessors=int(sms),
                                driver_version=int(driver_version))

    def close(self) -> None:
        if self._ctx is not None:
            if self._fault_module is not None:
                _cu.cuModuleUnload(self._fault_module)
                self._fault_module = None
            _cu.cuDevicePrimaryCtxRelease(self._dev)
            self._ctx = None

    def make_current(self) -> None:
        err = _cu.cuCtxSetCurrent(self._ctx)[0]
        if err:
            raise _fail(err, "cuCtxSetCurrent")

    def enter_thread(self) -> Any:
        # pushed and popped through ctypes (about 0.3 µs each, the binding about 1 µs): a
        # caller's thread keeps whatever context it had current (a runtime API library on
        # another device, say) once the turn is over
        fns = _ctx_stack()
        if fns is None:
            err = _cu.cuCtxPushCurrent(self._ctx)[0]
            if err:
                raise _fail(err, "cuCtxPushCurrent")
            return None
        err = fns[0](int(self._ctx))
        if err:
            raise _fail(err, "cuCtxPushCurrent")
        return fns

    def leave_thread(self, token: Any) -> None:
        if token is None:
            _cu.cuCtxPopCurrent()
        else:
            token[1](ctypes.byref(ctypes.c_void_p()))

    def context_handle(self) -> int:
        return int(self._ctx)

    def synchronize_context(self) -> None:
        """Wait, on the calling thread (any thread), until every stream of this device's
        context has run the work already sent to it, whoever sent it and whether or not its
        stream still exists (cuCtxSynchronize with the context pushed; the GIL is released
        while it waits). Errors are the device's to report: they are not raised here."""
        cu = _cu
        if self._ctx is None or cu.cuCtxPushCurrent(self._ctx)[0]:
            return
        try:
            cu.cuCtxSynchronize()
        finally:
            cu.cuCtxPopCurrent()

    # -- streams and events ------------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> Any:
        if priority:
            err, s = _cu.cuStreamCreateWithPriority(1, int(priority))  # CU_STREAM_NON_BLOCKING
            if err:
                raise _fail(err, "cuStreamCreateWithPriority")
            return s
        err, s = _cu.cuStreamCreate(1)  # CU_STREAM_NON_BLOCKING
        if err:
            raise _fail(err, "cuStreamCreate")
        return s

    def stream_priority_range(self) -> tuple[int, int]:
        err, least, greatest = _cu.cuCtxGetStreamPriorityRange()
        if err:
            raise _fail(err, "cuCtxGetStreamPriorityRange")
        return int(least), int(greatest)

    def stream_destroy(self, stream: Any) -> None:
        _cu.cuStreamDestroy(stream)

    def stream_handle(self, stream: Any) -> int:
        return int(stream)

    def stream_synchronize(self, stream: Any) -> None:
        err = _cu.cuStreamSynchronize(stream)[0]
        if err:
            raise _fail(err, "cuStreamSynchronize")

    def event_create(self) -> Any:
        err, ev = _cu.cuEventCreate(2)  # CU_EVENT_DISABLE_TIMING
        if err:
            raise _fail(err, "cuEventCreate")
        return ev

    def event_destroy(self, event: Any) -> None:
        _cu.cuEventDestroy(event)

    # The event calls go through the binding, which releases the GIL, unlike the launches and
    # the pool's allocations (raw_call). Holding it for records, waits and queries as well made
    # pipelined calls slower in paired runs on an H200 (1 Ki adds 112 -> 152 µs a call, sums of
    # 64 Mi 81 -> 93; exp 143 -> 136): the device thread's reaping between the caller's turns
    # then kept the GIL from the caller, whose issuing is the critical path.
    def event_record(self, event: Any, stream: Any) -> None:
        err = _cu.cuEventRecord(event, stream)[0]
        if err:
            raise _fail(err, "cuEventRecord")

    def event_query(self, event: Any) -> bool:
        err = _cu.cuEventQuery(event)[0]
        if not err:
            return True
        if err == _NOT_READY:
            return False
        raise _fail(err, "cuEventQuery")

    def event_synchronize(self, event: Any) -> None:
        err = _cu.cuEventSynchronize(event)[0]  # releases the GIL while it waits
        if err:
            raise _fail(err, "cuEventSynchronize")

    def stream_wait_event(self, stream: Any, event: Any) -> None:
        err = _cu.cuStreamWaitEvent(stream, event, 0)[0]
        if err:
            raise _fail(err, "cuStreamWaitEvent")

    # -- device memory -----------------------------------------------------------------------------
    def mem_info(self) -> tuple[int, int]:
        err, free, total = _cu.cuMemGetInfo()
        if err:
            raise _fail(err, "cuMemGetInfo")
        return int(free), int(total)

    def pool_create(self, release_threshold: int) -> Any:
        cu = _cu
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = self.ordinal
        err, pool = cu.cuMemPoolCreate(props)
        if err:
            raise _fail(err, "cuMemPoolCreate")
        err = cu.cuMemPoolSetAttribute(
            pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            cu.cuuint64_t(min(release_threshold, (1 << 64) - 1)))[0]
        if err:
            raise _fail(err, "cuMemPoolSetAttribute")
        return pool

    def pool_destroy(self, pool: Any) -> None:
        _cu.cuMemPoolDestroy(pool)

    def pool_handle(self, pool: Any) -> int:
        return int(pool)

    def _injected_oom(self, function: str) -> None:
        if self._oom_pending:
            self._oom_pending -= 1
            raise CudaError(2, "CUDA_ERROR_OUT_OF_MEMORY", function + " (injected)")

    def pool_alloc(self, pool: Any, nbytes: int, stream: Any) -> int:
        if self._oom_pending:  # injected faults (tests): no call for the other allocations
            self._injected_oom("cuMemAllocFromPoolAsync")
        raw = self._raw_alloc
        if raw is None:
            raw = self._raw_alloc = raw_call("cuMemAllocFromPoolAsync") or False
        if raw:
            out = ctypes.c_uint64()
            err = raw(ctypes.byref(out), nbytes, int(pool), int(stream))
            if err:
                raise _fail(err, "cuMemAllocFromPoolAsync")
            return int(out.value)
        err, ptr = _cu.cuMemAllocFromPoolAsync(nbytes, pool, stream)
        if err:
            raise _fail(err, "cuMemAllocFromPoolAsync")
        return int(ptr)

    def pool_trim(self, pool: Any, keep: int) -> None:
        err = _cu.cuMemPoolTrimTo(pool, keep)[0]
        if err:
            raise _fail(err, "cuMemPoolTrimTo")

    def pool_usage(self, pool: Any) -> tuple[int, int]:
        attr = _cu.CUmemPool_attribute
        err, reserved = _cu.cuMemPoolGetAttribute(pool, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        if err:
            raise _fail(err, "cuMemPoolGetAttribute")
        err, used = _cu.cuMemPoolGetAttribute(pool, attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
        if err:
            raise _fail(err, "cuMemPoolGetAttribute")
        return int(reserved), int(used)

    def free_async(self, ptr: int, stream: Any) -> None:
        raw = self._raw_free
        if raw is None:
            raw = self._raw_free = raw_call("cuMemFreeAsync") or False
        err = raw(ptr, int(stream)) if raw else _cu.cuMemFreeAsync(ptr, stream)[0]
        if err:
            raise _fail(err, "cuMemFreeAsync")

    def mem_alloc(self, nbytes: int) -> int:
        self._injected_oom("cuMemAlloc")
        err, ptr = _cu.cuMemAlloc(nbytes)
        if err:
            raise _fail(err, "cuMemAlloc")
        return int(ptr)

    def mem_free(self, ptr: int) -> None:
        err = _cu.cuMemFree(ptr)[0]
        if err:
            raise _fail(err, "cuMemFree")

    # -- host memory -------------------------------------------------------------------------------
    def host_alloc(self, nbytes: int) -> int:
        err, ptr = _cu.cuMemHostAlloc(nbytes, 1)  # CU_MEMHOSTALLOC_PORTABLE
        if err:
            raise _fail(err, "cuMemHostAlloc")
        return int(ptr)

    def host_free(self, ptr: int) -> None:
        err = _cu.cuMemFreeHost(ptr)[0]
        if err:
            raise _fail(err, "cuMemFreeHost")

    def host_register(self, ptr: int, nbytes: int) -> None:
        err = _cu.cuMemHostRegister(ptr, nbytes, 1)[0]  # CU_MEMHOSTREGISTER_PORTABLE
        if err:
            raise _fail(err, "cuMemHostRegister")

    def host_unregister(self, ptr: int) -> None:
        err = _cu.cuMemHostUnregister(ptr)[0]
        if err:
            raise _fail(err, "cuMemHostUnregister")

    # -- copies ------------------------------------------------------------------------------------
    def copy_htod(self, stream: Any, dst: int, src_host: int, nbytes: int) -> None:
        err = _cu.cuMemcpyHtoDAsync(dst, src_host, nbytes, stream)[0]
        if err:
            raise _fail(err, "cuMemcpyHtoDAsync")

    def copy_dtoh(self, stream: Any, dst_host: int, src: int, nbytes: int) -> None:
        err = _cu.cuMemcpyDtoHAsync(dst_host, src, nbytes, stream)[0]
        if err:
            raise _fail(err, "cuMemcpyDtoHAsync")

    def copy_dtod(self, stream: Any, dst: int, src: int, nbytes: int) -> None:
        err = _cu.cuMemcpyDtoDAsync(dst, src, nbytes, stream)[0]
        if err:
            raise _fail(err, "cuMemcpyDtoDAsync")

    def memset(self, stream: Any, dst: int, value: int, count: int, width: int) -> None:
        if width == 1:
            err, fn = _cu.cuMemsetD8Async(dst, value, count, stream)[0], "cuMemsetD8Async"
        elif width == 2:
            err, fn = _cu.cuMemsetD16Async(dst, value, count, stream)[0], "cuMemsetD16Async"
        else:
            err, fn = _cu.cuMemsetD32Async(dst, value, count, stream)[0], "cuMemsetD32Async"
        if err:
            raise _fail(err, fn)

    # -- peers (gpumsg/multi/_peer.py) ----------------------------------------------------------
    def peer_query(self, peer_ordinal: int) -> dict[str, Any]:
        """The link from this device to ``peer_ordinal`` (cuDeviceCanAccessPeer and
        cuDeviceGetP2PAttribute): ``can_access``, ``perf_rank`` (lower is faster),
        ``native_atomics``. No context is needed."""
        err, peer = _cu.cuDeviceGet(peer_ordinal)
        if err:
            raise _fail(err, "cuDeviceGet")
        err, can = _cu.cuDeviceCanAccessPeer(self._dev, peer)
        if err:
            raise _fail(err, "cuDeviceCanAccessPeer")
        out: dict[str, Any] = {"can_access": bool(can), "perf_rank": -1, "native_atomics": False}
        if can:
            attr = _cu.CUdevice_P2PAttribute
            err, rank = _cu.cuDeviceGetP2PAttribute(
                attr.CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, self._dev, peer)
            if err:
                raise _fail(err, "cuDeviceGetP2PAttribute")
            err, atomics = _cu.cuDeviceGetP2PAttribute(
                attr.CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, self._dev, peer)
            if err:
                raise _fail(err, "cuDeviceGetP2PAttribute")
            out["perf_rank"], out["native_atomics"] = int(rank), bool(atomics)
        return out

    def peer_handle(self) -> Any:
        """What a peer's :meth:`copy_peer` and :meth:`enable_peer_access` take: the context."""
        return self._ctx

    def enable_peer_access(self, peer: Any) -> bool:
        """cuCtxEnablePeerAccess from this (current) context to ``peer`` (a context or its
        handle). True if enabled now or before; False if the devices cannot be peers."""
        ctx = peer if isinstance(peer, _cu.CUcontext) else _cu.CUcontext(int(peer))
        err = int(_cu.cuCtxEnablePeerAccess(ctx, 0)[0])
        if err in (0, 704):  # CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            return True
        if err in (217, 711):  # CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, CUDA_ERROR_TOO_MANY_PEERS
            return False
        raise _fail(err, "cuCtxEnablePeerAccess")

    def pool_grant_access(self, pool: Any, peer_ordinal: int) -> None:
        """Let device ``peer_ordinal`` read and write allocations of this device's ``pool``
        (cuMemPoolSetAccess: pool memory does not follow cuCtxEnablePeerAccess)."""
        cu = _cu
        desc = cu.CUmemAccessDesc()
        desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = peer_ordinal
        desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        err = cu.cuMemPoolSetAccess(pool, [desc], 1)[0]
        if err:
            raise _fail(err, "cuMemPoolSetAccess")

    def copy_peer(self, stream: Any, peer: Any, dst: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` from this device's ``src`` to ``dst`` in the peer context ``peer``
        (cuMemcpyPeerAsync on this device's ``stream``)."""
        err = _cu.cuMemcpyPeerAsync(dst, peer, src, self._ctx, nbytes, stream)[0]
        if err:
            raise _fail(err, "cuMemcpyPeerAsync")

    # -- libraries ---------------------------------------------------------------------------------
    # -- fault injection ---------------------------------------------------------------------------
    def _fault_kernel(self, name: bytes) -> Any:
        if self._fault_module is None:
            err, mod = _cu.cuModuleLoadData(_FAULT_PTX)
            if err:
                raise _fail(err, "cuModuleLoadData")
            self._fault_module = mod
        err, fn = _cu.cuModuleGetFunction(self._fault_module, name)
        if err:
            raise _fail(err, "cuModuleGetFunction")
        return fn

    def _launch1(self, fn: Any, stream: Any, arg: int) -> None:
        value = ctypes.c_uint64(arg)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(value))
        err = _cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, ctypes.addressof(params), 0)[0]
        if err:
            raise _fail(err, "cuLaunchKernel")

    def inject_illegal_address(self, stream: Any) -> None:
        self._launch1(self._fault_kernel(b"gpumsg_fault_store"), stream, 0x8)

    def inject_oom(self, count: int) -> None:
        self._oom_pending += count

    def inject_hang(self, stream: Any, seconds: float | None) -> None:
        ns = (1 << 64) - 1 if seconds is None else int(seconds * 1e9)
        self._launch1(self._fault_kernel(b"gpumsg_fault_spin"), stream, ns)
