"""DLPack both ways: ``GpuBuffer.__dlpack__`` / ``__dlpack_device__`` (export) and
``Device.from_dlpack`` (import). Zero copy in both directions.

Export builds a ``DLManagedTensorVersioned`` (capsule ``"dltensor_versioned"``) when the consumer
passes ``max_version >= (1, 0)``, else a legacy ``DLManagedTensor`` (``"dltensor"``). The
capsule keeps the :class:`~gpumsg.client._buffers.GpuBuffer` alive until the consumer calls the
deleter. Ordering costs one message round trip and no device-wide synchronization: the device
thread makes the consumer's stream wait on fence events recorded after the buffer's last uses on
gpumsg's streams (``service/interop.py``). When the consumer deletes its tensor, gpumsg's compute
stream waits for the work already on the consumer's stream, so a later free or write of the
buffer cannot overtake it.

Import calls ``obj.__dlpack__(stream=<gpumsg's compute stream>)`` so the producer orders the
compute stream after its own work, and adopts the pointer as a buffer that the pool does not own:
freeing it (or dropping the last reference) calls the DLPack deleter once the compute stream has
finished with it; until then the producer (and its capsule) is held. A read-only tensor (the
DLPack 1.x flag) becomes a buffer every write to which is refused with ``InvalidMessage``.

On the simulator the device memory is host memory, and it is exported and imported as
``kDLCPU``: NumPy is the peer that tests the plumbing in CI.

Thread isolation only: in a worker process the pointers live in another address space.
"""

from __future__ import annotations

import ctypes
import struct
import weakref
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..dtypes import as_dtype, dtype_name
from ..errors import GpuError, InvalidMessage
from ..messages._base import checked_flag
from ..messages.interop import HOST_CONSUMER, NO_SYNC, Adopt, ExportSync
from ..service._interop import PER_THREAD_STREAM, register_release

if TYPE_CHECKING:
    from ._core import BufferCore as GpuBuffer
    from ._core import DeviceCore as Device

__all__ = ["export", "dlpack_device", "from_dlpack", "KDLCPU", "KDLCUDA", "KDLBOOL", "View",
           "is_readonly", "holds_bools"]

KDLCPU, KDLCUDA, KDLCUDAHOST, KDLCUDAMANAGED = 1, 2, 3, 13
FLAG_READ_ONLY, FLAG_IS_COPIED = 1 << 0, 1 << 1
#: the DLPack version this module writes
VERSION = (1, 1)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


#: void (*deleter)(DLManagedTensor*) and (DLManagedTensorVersioned*): the same C type
DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5,
# kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12 (dlpack.h 1.1)
_TO_DL: dict[str, tuple[int, int]] = {
    "i8": (0, 8), "i16": (0, 16), "i32": (0, 32), "i64": (0, 64),
    "u8": (1, 8), "u16": (1, 16), "u32": (1, 32), "u64": (1, 64),
    "f16": (2, 16), "f32": (2, 32), "f64": (2, 64), "bf16": (4, 16),
    "c64": (5, 64), "c128": (5, 128), "e4m3": (10, 8), "e5m2": (12, 8),
}
_FROM_DL = {v: k for k, v in _TO_DL.items()}

# the C API of capsules, through a PyDLL of our own (the GIL is held; argtypes are ours)
_py = ctypes.PyDLL(None)
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = _py.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _CAPSULE_DESTRUCTOR]
_capsule_valid = _py.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = _py.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_set_name = _py.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_void_p]

#: capsule names: the buffers live as long as the module (a capsule keeps the pointer)
_NAMES = {name: ctypes.create_string_buffer(name) for name in
          (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned")}


#: address of a managed tensor -> what its capsule keeps alive until the consumer's deleter
#: call: ``(block, buffer, keep, stream)`` (the memory of the struct, the exported buffer, the
#: simulator's bytes or None, the consumer's stream). Plain dict operations, atomic under the
#: GIL: the exporting and the deleting threads need no lock of their own
_exports: dict[int, tuple[Any, Any, Any, int]] = {}
#: ids of imported read-only buffers
_readonly: set[int] = set()
#: ids of buffers imported from DLPack booleans (kDLBool): u8 buffers of 0s and 1s
_bools: set[int] = set()
#: CU_STREAM_LEGACY: the legacy default stream, which exists as long as the context
LEGACY_STREAM = 1
_NOT_READY = 600  # CUDA_ERROR_NOT_READY
#: cuda.bindings' driver module and its CUstream of the legacy stream, once looked up
_LEGACY: list[Any] = []


def _settle_legacy(backend: Any) -> None:
    """Wait, on the calling thread, until the legacy default stream of the device's context
    has run the work already sent to it: a query first (nothing is waited for when it has, the
    common case of a tensor dropped after its work finished), a stream synchronize otherwise.
    gpumsg's own streams are not waited for, unlike a context synchronize."""
    if not _LEGACY:
        from cuda.bindings import driver

        _LEGACY.extend((driver, driver.CUstream(LEGACY_STREAM)))
    driver, legacy = _LEGACY
    token = backend.enter_thread()
    try:
        if int(driver.cuStreamQuery(legacy)[0]) == _NOT_READY:
            driver.cuStreamSynchronize(legacy)
    finally:
        backend.leave_thread(token)


def _delete_export(address: int) -> None:
    """The DLPack deleter of every tensor gpumsg exports (any thread, GIL taken by ctypes).

    The consumer may still have work queued that reads or writes the buffer (a tensor deleted
    right after the kernels that use it). gpumsg's later uses and its free must not overtake
    that work, so for an export to a CUDA consumer stream the deleter waits, on its own thread,
    until that work has run. The legacy default stream (torch's and CuPy's default, passed as
    1) always exists: it is queried, and synchronized only when work is pending on it. Any
    other consumer stream is not touched: a consumer may destroy it before it deletes the
    tensor (a CuPy stream gone with its ``with`` block), and any call on a destroyed stream is
    a use after free in the driver (it crashed the H100 suite); the deleter waits until the
    device's context has run everything already sent to it (cuCtxSynchronize). Nothing is
    waited for when the device is closing, or when the buffer is already gone."""
    entry = _exports.pop(address, None)
    if entry is None:
        return
    buf, stream = entry[1], entry[3]
    if stream > 0 and stream != PER_THREAD_STREAM and not buf.is_stale():
        dev = buf._device
        if not dev._state.accepting:
            return
        try:
            backend = dev._worker.ctx.backend
            if stream == LEGACY_STREAM:
                _settle_legacy(backend)
            else:
                backend.synchronize_context()
        except Exception:  # noqa: BLE001 - a failing device: its own errors say so
            pass


_DELETER = DELETER(_delete_export)
_DELETER_ADDRESS = ctypes.cast(_DELETER, ctypes.c_void_p).value or 0


def _capsule_destructor(capsule: int) -> None:
    """A capsule that no consumer took (still named dltensor*): call the deleter ourselves.
    Nothing may escape a ctypes callback (it would be printed as "Exception ignored"): a
    consumer that failed and left its error set makes the capsule calls fail too; the export
    then stays registered (its buffer alive) rather than freed blind."""
    try:
        for name in (b"dltensor_versioned", b"dltensor"):
            if _capsule_valid(capsule, name):
                _delete_export(_capsule_pointer(capsule, name))
                return
    except Exception:  # noqa: BLE001, S110 - see the docstring
        pass


_DESTRUCTOR = _CAPSULE_DESTRUCTOR(_capsule_destructor)
_DESTRUCTOR_ADDRESS = ctypes.cast(_DESTRUCTOR, ctypes.c_void_p).value or 0
_VERSIONED_NAME = ctypes.addressof(_NAMES[b"dltensor_versioned"])
_LEGACY_NAME = ctypes.addressof(_NAMES[b"dltensor"])
#: PyCapsule_New with the destructor passed as an address (no CFUNCTYPE check per call)
_capsule_at = ctypes.PyDLL(None).PyCapsule_New
_capsule_at.restype = ctypes.py_object
_capsule_at.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]

# The structs are written in one struct.pack_into per export, into one block that also holds
# shape and strides (the DLTensor points into it); these layouts are the ctypes classes'
# above (checked at import), in the host's byte order with standard sizes and no padding.
#: DLManagedTensorVersioned: version (2 x u32), manager_ctx, deleter, flags, then DLTensor
_VERSIONED_HEAD = "IIQQQ"
#: DLTensor: data, device (2 x i32), ndim, dtype (u8, u8, u16), shape*, strides*, byte_offset
_TENSOR = "QiiiBBHQQQ"
#: DLManagedTensor: DLTensor, then manager_ctx, deleter
_LEGACY_TAIL = "QQ"
assert struct.calcsize("=" + _TENSOR) == ctypes.sizeof(DLTensor)
assert struct.calcsize("=" + _VERSIONED_HEAD) == DLManagedTensorVersioned.dl_tensor.offset
assert struct.calcsize("=" + _VERSIONED_HEAD + _TENSOR) == \
    ctypes.sizeof(DLManagedTensorVersioned)
assert DLManagedTensor.manager_ctx.offset == ctypes.sizeof(DLTensor)
assert struct.calcsize("=" + _TENSOR + _LEGACY_TAIL) == ctypes.sizeof(DLManagedTensor)
#: (versioned, shape, dtype, order) -> what every export of such a buffer writes alike: the
#: Struct, the ctypes block type, the offset of shape in the block, the strides' distance from
#: it, ndim, the dtype's code and bits, and shape and strides (padded to one entry for ndim 0)
_LAYOUTS: dict[tuple, tuple] = {}


#: DLDataTypeCode kDLBool: one byte per element, 0 or 1 (how gpumsg holds a bool array)
KDLBOOL = 6


class View(NamedTuple):
    """What an export of part of a buffer shows: ``shape``, ``strides`` and ``offset`` in
    elements of the buffer's memory (as an array's view of it), and ``bool``: a u8 buffer's
    bytes as DLPack booleans (kDLBool, 8 bits)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    bool: bool = False


def _layout_of(versioned: bool, buf: GpuBuffer, view: View | None = None) -> tuple:
    ref = buf._ref
    key = (versioned, ref.shape, ref.dtype, ref.order) if view is None else \
        (versioned, view.shape, view.strides, view.bool, ref.dtype)
    got = _LAYOUTS.get(key)
    if got is None:
        head = _VERSIONED_HEAD + _TENSOR if versioned else _TENSOR + _LEGACY_TAIL
        shape, strides = (ref.shape, _strides(buf)) if view is None else \
            (view.shape, view.strides)
        ndim = len(shape)
        dims = max(ndim, 1)
        fmt = struct.Struct(f"={head}{dims}q{dims}q")
        pad = (0,) * (dims - ndim)
        code, bits = (KDLBOOL, 8) if view is not None and view.bool else _TO_DL[ref.dtype]
        got = (fmt, ctypes.c_char * fmt.size, struct.calcsize("=" + head), 8 * dims, ndim,
               code, bits, shape + pad + strides + pad)
        if len(_LAYOUTS) >= 4096:  # many shapes: start over rather than grow without end
            _LAYOUTS.clear()
        _LAYOUTS[key] = got
    return got


def is_readonly(buf: GpuBuffer) -> bool:
    """Whether ``buf`` was imported from a read-only DLPack tensor."""
    return buf._ref.id in _readonly


def holds_bools(buf: GpuBuffer) -> bool:
    """Whether ``buf`` was imported from DLPack booleans (kDLBool, 8 bits): a u8 buffer whose
    bytes are 0 and 1, which an array reads as bool."""
    return buf._ref.id in _bools


def dlpack_device(buf: GpuBuffer) -> tuple[int, int]:
    """``(device_type, device_id)``: ``(kDLCUDA, ordinal)`` on CUDA, ``(kDLCPU, 0)`` on the
    simulator (its memory is host memory)."""
    dev = buf._device
    if dev.backend == "cuda":
        return (KDLCUDA, dev.ordinal)
    return (KDLCPU, 0)


def _consumer_stream(dev: Device, stream: Any) -> int:
    """The stream argument of ``__dlpack__`` as the ExportSync message takes it."""
    if dev.backend != "cuda":
        if stream is not None and stream != NO_SYNC:
            raise BufferError(f"stream must be None for a kDLCPU (simulator) export, "
                              f"got {stream!r}")
        return HOST_CONSUMER if stream is None else NO_SYNC
    if stream is None:
        return 1  # the legacy default stream (DLPack: None means the legacy default on CUDA)
    if isinstance(stream, bool) or not isinstance(stream, (int, np.integer)):
        raise InvalidMessage(f"stream must be an int CUstream handle, None or -1, got "
                             f"{stream!r}", field="stream")
    stream = int(stream)
    if stream == 0:
        raise InvalidMessage("stream 0 is ambiguous and disallowed by DLPack: pass 1 (legacy "
                             "default stream), 2 (per-thread default) or a stream handle",
                             field="stream")
    if stream < -1:
        raise InvalidMessage(f"stream must be -1, 1, 2 or a stream handle, got {stream}",
                             field="stream")
    return stream


def _strides(buf: GpuBuffer) -> tuple[int, ...]:
    shape = buf.shape
    out = [0] * len(shape)
    acc = 1
    dims = range(len(shape)) if buf.order == "F" else reversed(range(len(shape)))
    for i in dims:
        out[i] = acc
        acc *= shape[i]
    return tuple(out)


#: dtypes that NumPy's DLPack import does not take (it fails with a SystemError and leaves an
#: error behind for the capsule's destructor): a host (kDLCPU) export of them is refused to
#: every consumer but gpumsg's own import
_NOT_NUMPY = frozenset({"bf16", "e4m3", "e5m2"})


def export(buf: GpuBuffer, stream: Any = None, max_version: Any = None, dl_device: Any = None,
           copy: bool | None = None, any_dtype: bool = False, view: View | None = None) -> Any:
    """``buf.__dlpack__``: a DLPack capsule of ``buf`` (zero copy unless ``copy``).

    ``stream``: the consumer's stream (CUDA: ``None`` the legacy default stream, 1 legacy, 2
    per-thread default, -1 no synchronization, else a ``CUstream`` handle of this device's
    context; the simulator's kDLCPU export takes only None, and answers once the buffer's last
    write has completed). ``max_version``: the highest DLPack version the consumer reads;
    ``(1, x)`` gets ``DLManagedTensorVersioned``, None or ``(0, x)`` the legacy struct.
    ``dl_device``: ``(kDLCPU, 0)`` from a CUDA buffer copies to the host (unless ``copy`` is
    False); any other device than the buffer's raises BufferError. ``copy=True`` exports a fresh
    device copy (``copy``: None, True or False). Raises BufferError for what DLPack cannot
    express (a read-only buffer to a legacy consumer, process isolation), InvalidMessage for a
    bad stream or ``copy``, GpuRefStale for a freed or stale buffer.

    ``view`` (an array's strided view, or its bool elements) exports that part of the buffer
    in the buffer's own memory: the data pointer is the view's first element (byte_offset 0,
    as torch and CuPy export views), the strides are the view's. It is for the buffer's own
    device: with another ``dl_device`` it raises BufferError (the array compacts first)."""
    if copy is not None:
        checked_flag(copy, "copy")
    dev = buf._device
    buf.ref  # noqa: B018 - raises GpuRefStale if freed or stale
    if dev.isolation != "thread":
        raise BufferError("DLPack needs isolation='thread': a worker process's device pointers "
                          "are not valid in this process")
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    mine = dlpack_device(buf)
    to_host = mine[0] == KDLCPU or (dl_device is not None and tuple(dl_device)[0] == KDLCPU)
    if to_host and not any_dtype and buf.ref.dtype in _NOT_NUMPY:
        raise BufferError(f"{buf.ref.describe()}: a {buf.ref.dtype} buffer is not exported to "
                          "host DLPack consumers (NumPy's DLPack has no such dtype); use "
                          "dev.copy_to_host(buffer).result(), or dev.from_dlpack on another "
                          "gpumsg device")
    if dl_device is not None and tuple(dl_device) != mine:
        if view is not None:
            raise BufferError(f"a view is exported on its buffer's device {mine}, not "
                              f"{tuple(dl_device)}")
        if tuple(dl_device) == (KDLCPU, 0) and copy is not False:
            host = dev.copy_to_host(buf).result()
            kwargs: dict[str, Any] = {"stream": None}
            if max_version is not None:
                kwargs["max_version"] = max_version
            return host.__dlpack__(**kwargs)
        raise BufferError(f"cannot export a buffer on {mine} to device {tuple(dl_device)}"
                          + (" without a copy" if copy is False else ""))
    readonly = is_readonly(buf)
    if readonly and not versioned:
        raise BufferError("a read-only (imported) buffer cannot be exported to a legacy DLPack "
                          "consumer, which has no read-only flag: pass max_version=(1, 0)")
    flags = FLAG_READ_ONLY if readonly else 0
    if copy:
        fresh = dev.alloc(buf.shape, buf.dtype, buf.order)
        dev.copy(fresh, buf)
        buf, flags = fresh.buffer, FLAG_IS_COPIED
    consumer = _consumer_stream(dev, stream)
    quiet = _quiet_address(dev, buf)
    if quiet is not None:  # nothing pending anywhere on the device: no message at all
        ptr, host, keep = quiet
        counts["zero_trip"] += 1
    else:
        ptr, host, keep = dev._request(ExportSync(buf.ref, consumer))
        counts["round_trip"] += 1
    if consumer == PER_THREAD_STREAM and keep:
        _wait_on_this_thread(keep)
        keep = None
    data = host if mine[0] == KDLCPU else ptr
    if view is not None:
        data += view.offset * buf.dtype.itemsize
    return _capsule(buf, data, mine, keep, versioned, flags, consumer, view)


#: how exports were ordered (zero_trip: the device was quiet; round_trip: one ExportSync)
counts = {"zero_trip": 0, "round_trip": 0}


def quiet(dev: Device) -> bool:
    """True when every message posted to ``dev`` so far has been handled and all its work has
    completed, read without a message: the device thread is blocked on an empty mailbox (its
    ``epoch`` is odd and unchanged across the reads) and nothing is in flight. Thread isolation
    only; a False answer is always safe (the caller sends ExportSync)."""
    worker = dev._worker
    ctx = getattr(worker, "ctx", None)
    mailbox = getattr(worker, "mailbox", None)
    if ctx is None or mailbox is None:
        return False
    epoch = ctx.epoch
    executor = ctx.executor
    turns = executor.turns  # a caller's turn (service/executor.py) leaves the epoch alone
    try:
        if not epoch & 1 or executor.lock.locked() or mailbox.qsize() or ctx.in_flight() \
                or ctx.capture is not None:
            return False
    except ValueError:  # the device is shutting down (its streams are gone)
        return False
    return ctx.epoch == epoch and executor.turns == turns and not executor.lock.locked()


def _quiet_address(dev: Device, buf: GpuBuffer) -> tuple[int, int, Any] | None:
    """``(device_ptr, host_ptr, keep)`` of ``buf`` when the device is quiet, else None."""
    if buf._ptr is None or not quiet(dev):
        return None
    a = dev._worker.ctx.buffers.get(buf._ref.id)  # stable: the device thread is idle
    if a is None or a.failed is not None:
        return None  # the message says why (freed, or its producer failed)
    ptr = a.ptr
    if dev.backend == "cuda":
        return ptr, 0, None
    try:  # the simulator's bytes (its view() takes the backend's lock: any thread may ask)
        keep = dev._worker.ctx.backend.view(ptr, buf.nbytes)
    except Exception:  # noqa: BLE001 - let the device thread say what is wrong
        return None
    return ptr, keep.ctypes.data, keep


def _wait_on_this_thread(events: list[Any]) -> None:
    """The per-thread default stream is the calling thread's: it waits here."""
    from cuda.bindings import driver

    for ev in events:
        err = driver.cuStreamWaitEvent(driver.CUstream(PER_THREAD_STREAM), ev, 0)[0]
        if err:
            from ..errors import CudaError

            raise CudaError(int(err), str(err), "cuStreamWaitEvent")


def _capsule(buf: GpuBuffer, data: int, device: tuple[int, int], keep: Any, versioned: bool,
             flags: int, stream: int, view: View | None = None) -> Any:
    fmt, block_type, at, step, ndim, code, bits, dims = _layout_of(versioned, buf, view)
    block = block_type()
    address = ctypes.addressof(block)
    shape_at = address + at
    tensor = (data, device[0], device[1], ndim, code, bits, 1, shape_at, shape_at + step, 0)
    if versioned:
        fmt.pack_into(block, 0, VERSION[0], VERSION[1], 0, _DELETER_ADDRESS, flags, *tensor,
                      *dims)
    else:
        fmt.pack_into(block, 0, *tensor, 0, _DELETER_ADDRESS, *dims)
    _exports[address] = (block, buf, keep, stream)
    try:
        return _capsule_at(address, _VERSIONED_NAME if versioned else _LEGACY_NAME,
                           _DESTRUCTOR_ADDRESS)
    except BaseException:
        _exports.pop(address, None)
        raise


# -- import ----------------------------------------------------------------------------------
def _parse_dtype(dt: DLDataType) -> str:
    if dt.lanes != 1:
        raise InvalidMessage(f"obj has {dt.lanes} lanes per element; gpumsg buffers hold one",
                             field="obj")
    name = _FROM_DL.get((dt.code, dt.bits))
    if name is None:
        raise InvalidMessage(f"obj has DLPack dtype code {dt.code} with {dt.bits} bits, which "
                             "no gpumsg dtype matches", field="obj")
    return name


def _layout(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> str:
    """'C' or 'F' for a compact tensor (strides in elements); raises for any other layout."""
    if strides is None:
        return "C"
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]

    def compact(order: list[tuple[int, int]]) -> bool:
        acc = 1
        for n, s in order:
            if s != acc:
                return False
            acc *= n
        return True

    if any(n == 0 for n in shape) or compact(list(reversed(dims))):
        return "C"
    if compact(dims):
        return "F"
    raise InvalidMessage(f"obj has strides {strides} for shape {shape}: gpumsg buffers are "
                         "compact C- or F-ordered (make it contiguous first)", field="obj")


def from_dlpack(dev: Device, obj: Any, *, future: Any, sink: Any, buffer: Any) -> Future:
    """``dev.from_dlpack(obj)``: adopt a DLPack producer's memory as a buffer of ``dev``,
    without a copy. Resolves to the :class:`~gpumsg.client._buffers.GpuBuffer` (the future can be
    passed to later calls at once).

    ``obj`` must be on this device (``kDLCUDA`` with this ordinal; on the simulator ``kDLCPU``
    host memory) and compact in C or F order, of a dtype gpumsg has (booleans, kDLBool, become
    a u8 buffer of 0s and 1s: :func:`holds_bools`). The producer is asked to
    order gpumsg's compute stream after its own pending work (``stream=`` the compute stream's
    handle), so no synchronization is needed. The producer stays alive until the buffer is
    freed; its deleter runs once the compute stream has finished every use. A read-only tensor
    gives a buffer that refuses writes. Raises InvalidMessage (field ``obj``) for anything
    else, BufferError from the producer as it raised it."""
    dev._check_open()
    if dev.isolation != "thread":
        raise InvalidMessage("from_dlpack needs isolation='thread': a worker process cannot "
                             "use this process's pointers", field="obj")
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise InvalidMessage(f"obj must support DLPack (__dlpack__ and __dlpack_device__), got "
                             f"{type(obj).__name__}", field="obj")
    kind, ordinal = (int(v) for v in obj.__dlpack_device__())
    if dev.backend == "cuda":
        if kind not in (KDLCUDA, KDLCUDAMANAGED) or ordinal != dev.ordinal:
            raise InvalidMessage(f"obj is on DLPack device ({kind}, {ordinal}); device "
                                 f"{dev.ordinal} adopts CUDA memory of ordinal {dev.ordinal} "
                                 "(copy it there first)", field="obj")
        stream: Any = dev._compute_stream_handle()
    else:
        if kind != KDLCPU:
            raise InvalidMessage(f"obj is on DLPack device ({kind}, {ordinal}); the simulator "
                                 "adopts host (kDLCPU) memory", field="obj")
        stream = None
    # ``future``/``buffer``: the client's BufferFuture and GpuBuffer classes (buffers.py
    # imports this module, so they are handed over by the caller)
    if isinstance(obj, (buffer, future)):  # gpumsg to gpumsg: every dtype
        source = obj.result() if isinstance(obj, future) else obj
        capsule = export(source, stream, VERSION, any_dtype=True)
        return _adopt(dev, obj, capsule, future, sink)
    try:
        try:
            capsule = obj.__dlpack__(stream=stream, max_version=VERSION)
        except TypeError:  # a producer older than DLPack 1.0's keywords
            capsule = obj.__dlpack__(stream=stream)
    except BufferError as exc:  # the producer cannot export it (object dtype, ...)
        raise InvalidMessage(f"obj: expected an array DLPack can export (integer, float or "
                             f"complex elements); its producer refused: {exc}",
                             field="obj") from None
    return _adopt(dev, obj, capsule, future, sink)


def _adopt(dev: Device, producer: Any, capsule: Any, future: Any, sink: Any) -> Future:
    """``future``/``sink``: the client's BufferFuture and PointerSink classes, handed over by
    the caller (buffers.py imports this module)."""

    cap = ctypes.c_void_p(id(capsule))
    if _capsule_valid(cap, b"dltensor_versioned"):
        address = _capsule_pointer(cap, b"dltensor_versioned")
        managed: Any = DLManagedTensorVersioned.from_address(address)
        used = _NAMES[b"used_dltensor_versioned"]
        if managed.version.major != 1:
            raise InvalidMessage(f"obj's DLPack version {managed.version.major}."
                                 f"{managed.version.minor} is not 1.x", field="obj")
        flags = int(managed.flags)
    elif _capsule_valid(cap, b"dltensor"):
        address = _capsule_pointer(cap, b"dltensor")
        managed = DLManagedTensor.from_address(address)
        used, flags = _NAMES[b"used_dltensor"], 0
    else:
        raise InvalidMessage("obj.__dlpack__() returned no unused DLPack capsule", field="obj")
    # from here on the tensor is ours: its deleter is called exactly once
    if _capsule_set_name(capsule, ctypes.addressof(used)):
        raise InvalidMessage("could not mark the DLPack capsule as used", field="obj")
    deleter = managed.deleter

    def release() -> None:
        nonlocal producer, capsule
        if deleter:
            deleter(address)
        producer = capsule = None  # the producer may go now

    try:
        t = managed.dl_tensor
        ndim = int(t.ndim)
        shape = tuple(int(t.shape[i]) for i in range(ndim))
        strides = (tuple(int(t.strides[i]) for i in range(ndim)) if t.strides else None)
        is_bool = (int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)) == (KDLBOOL, 8, 1)
        name = "u8" if is_bool else _parse_dtype(t.dtype)
        order = _layout(shape, strides)
        ref = dev._mint(shape, as_dtype(name), order)
        ptr = (t.data or 0) + int(t.byte_offset)
        readonly = bool(flags & FLAG_READ_ONLY)
        msg = Adopt(ref, ptr if ref.nbytes else max(ptr, 1), readonly, 0)
    except BaseException:
        release()
        raise
    buf = dev._new_buffer(ref)
    if readonly or is_bool:
        if readonly:
            _readonly.add(ref.id)
        if is_bool:
            _bools.add(ref.id)

        def forget(_buf: Any, i: int = ref.id) -> None:
            _readonly.discard(i)
            _bools.discard(i)

        weakref.finalize(buf, forget, None)
    token = register_release(release)
    fut = future(buf)
    # On CUDA the pointer is the producer's: the buffer exists for every later message as soon
    # as Adopt is in the mailbox (FIFO), so the future resolves now, with no round trip (an
    # Adopt that fails, on a poisoned context, gives the producer back and later uses fail).
    # The simulator maps the host memory at an address its device thread chooses: wait for it.
    now = dev.backend == "cuda"
    try:
        dev._post(Adopt.unchecked(msg.out, msg.ptr, readonly, token),
                  sink(buf) if now else fut)
    except GpuError:
        from ..service._interop import run_release

        run_release(token)
        raise
    if now:
        fut.set_result(msg.ptr)
    return fut


def dtype_supported(dtype: Any) -> bool:
    """Whether a NumPy dtype can cross DLPack as a gpumsg buffer."""
    try:
        return dtype_name(dtype) in _TO_DL
    except InvalidMessage:
        return False
