"""Client-side handles: futures, device buffers and pinned host buffers."""

from __future__ import annotations

import threading
from _thread import allocate_lock
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import _base as _fb
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dtypes import dtype_of
from ..errors import GpuRefStale, InvalidMessage
from ..memory._pinned import host_view
from ..messages._base import BufRef, HostRef

if TYPE_CHECKING:
    from ._core import DeviceCore as Device

__all__ = ["GpuFuture", "BufferFuture", "GpuBuffer", "PinnedHostBuffer", "ArrayFace",
           "buffer_after", "gather"]


#: states in which a future can no longer be answered
_DONE = frozenset((_fb.CANCELLED, _fb.CANCELLED_AND_NOTIFIED, _fb.FINISHED))
_FINISHED = _fb.FINISHED
#: CPython's Condition keeps its waiters in ``_waiters``: notify only when someone waits
_COND_WAITERS = hasattr(threading.Condition(), "_waiters")


#: guards the making of a future's condition against its answer (see GpuFuture)
_LAZY = threading.Lock()


class GpuFuture(Future):
    """A :class:`concurrent.futures.Future` for device work. Work sent to a device cannot be
    called back, so :meth:`cancel` always returns False.

    A thread blocked in :meth:`result` or :meth:`exception` sleeps on a bare lock of its own,
    which the answer releases: no ``threading.Condition`` on either side, whose Python-level
    ``wait`` and ``notify`` cost a round trip 3-4 µs (a two-thread ping-pong: 45 against 41 µs).
    The condition is made only when something needs it: a done-callback, or
    ``concurrent.futures.wait``/``as_completed``. Registering a sleeper or making the condition,
    and answering, take one module lock (``_LAZY``), so an answer either finds them (and wakes
    them) or is in place before they are made (and they see it at once)."""

    _cond: threading.Condition | None = None
    #: the locks of threads asleep in result()/exception() (each held until the answer)
    _sleepers: list[Any] | None = None
    #: set by a transport whose answers a waiting caller may read itself (process isolation,
    #: supervision/client.py): ``_lead(future, timeout)`` returns, with what is left of
    #: ``timeout``, once the future is answered or the caller should wait as usual
    _lead: Any = None
    #: set by a device that ran the future's message on the caller's thread
    #: (service/executor.py): ``_nudge(future, 0.0)`` makes sure the answer comes without a
    #: caller waiting (someone is to be told of it: a done-callback, ``wait``, ``as_completed``)
    _nudge: Any = None

    #: the lists behind ``_waiters`` and ``_done_callbacks``, made when first used
    _waiter_list: list[Any] | None = None
    _callback_list: list[Any] | None = None

    def __init__(self) -> None:  # Future.__init__, without the condition and the two lists
        self._state = _fb.PENDING
        self._result = None
        self._exception: BaseException | None = None

    # concurrent.futures appends to these (wait/as_completed, add_done_callback, under the
    # condition's lock). Made on first use, so that a future nobody waits on with them costs
    # the cyclic garbage collector two objects less: with 2000 allocations kept, the collector
    # took 2.0 µs of each 15.1 (tools/gc_share.py, H100).
    @property
    def _waiters(self) -> list[Any]:
        found = self._waiter_list
        if found is None:
            found = self._waiter_list = []
        return found

    @property
    def _done_callbacks(self) -> list[Any]:
        found = self._callback_list
        if found is None:
            found = self._callback_list = []
        return found

    @property  # type: ignore[override]
    def _condition(self) -> threading.Condition:
        if self._cond is None and self._nudge is not None and self._state is not _FINISHED:
            # someone is to be told of the answer (a done-callback, wait, as_completed) rather
            # than wait for it: make sure it comes without a waiting caller
            self._nudge(self, 0.0)
        return self._made_condition()

    def _chain(self, fn: Any) -> None:
        """``add_done_callback(fn)`` for gpumsg's own chaining (:func:`buffer_after`,
        :func:`gather`), whose outer future takes this one's ``_lead`` and ``_nudge``: a
        caller waiting on the outer future answers this one itself, so nothing is handed over
        meanwhile, and a callback on the outer future nudges this one."""
        with self._made_condition():
            if self._state not in _DONE:
                self._done_callbacks.append(fn)
                return
        fn(self)

    def _made_condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _LAZY:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition()
        return cond

    def cancel(self) -> bool:
        return False

    def done(self) -> bool:
        return self._state in _DONE  # an attribute read: answered futures never change back

    def result(self, timeout: float | None = None) -> Any:
        if self._state is not _FINISHED:
            if self._lead is not None:
                timeout = self._lead(self, timeout)
            self._sleep(timeout)
        if self._exception is None:
            return self._result
        try:
            raise self._exception
        finally:
            self = None  # type: ignore[assignment]  # no cycle through the traceback

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state is not _FINISHED:
            if self._lead is not None:
                timeout = self._lead(self, timeout)
            self._sleep(timeout)
        return self._exception

    def _sleep(self, timeout: float | None) -> None:
        """Block until answered; raise TimeoutError after ``timeout`` seconds (None: never)."""
        lock = allocate_lock()
        lock.acquire()
        with _LAZY:
            if self._state is _FINISHED:
                return
            sleepers = self._sleepers
            if sleepers is None:
                sleepers = self._sleepers = []
            sleepers.append(lock)
        if lock.acquire(True, -1 if timeout is None else max(0.0, timeout)):
            return
        with _LAZY:
            if self._state is _FINISHED:  # answered as the wait ran out
                return
            self._sleepers.remove(lock)  # type: ignore[union-attr]
        raise _fb.TimeoutError()

    def set_result(self, result: Any) -> None:
        self._resolve_with(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        self._resolve_with(None, exception)

    def _resolve_with(self, result: Any, exception: BaseException | None) -> None:
        if self._cond is None:
            with _LAZY:  # nothing in here may touch _condition: the lock is not reentrant
                answered = self._cond is None and self._state not in _DONE
                if answered:  # no condition: nobody to tell but the sleepers
                    self._result = result
                    self._exception = exception
                    self._state = _FINISHED
                    sleepers, self._sleepers = self._sleepers, None
            if answered:
                if sleepers is not None:
                    for lock in sleepers:
                        lock.release()
                return
        # Future.set_result/set_exception, minus the notify nobody waits for
        cond = self._made_condition()
        with cond:
            if self._state in _DONE:
                raise _fb.InvalidStateError(f"{self._state}: {self!r}")
            self._result = result
            self._exception = exception
            self._state = _FINISHED
            for waiter in self._waiter_list or ():
                if exception is None:
                    waiter.add_result(self)
                else:
                    waiter.add_exception(self)
            if not _COND_WAITERS or cond._waiters:  # type: ignore[attr-defined]
                cond.notify_all()
        with _LAZY:  # a sleeper registers under it, seeing the state set above or not
            sleepers, self._sleepers = self._sleepers, None
        if sleepers is not None:
            for lock in sleepers:
                lock.release()
        if self._callback_list:
            self._invoke_callbacks()  # type: ignore[attr-defined]


#: The array view of a buffer: ``ARRAY_VIEW(buffer_or_future)`` answers a
#: :class:`gpumsg.array_api.Array` over the same memory (zero copy). Set from above (the client
#: imports nothing of the array layer): by the package at import, as a loader of
#: ``gpumsg.array_api``, and by ``gpumsg.array_api`` itself once imported.
ARRAY_VIEW: Callable[[Any], Any] | None = None


def _view(buf: Any) -> Any:
    make = ARRAY_VIEW
    if make is None:  # only if gpumsg's package __init__ did not run (it always does)
        raise TypeError("array operations on a buffer need gpumsg.array_api: import it first")
    return make(buf)


def _binary(name: str) -> Callable[..., Any]:
    def op(self: Any, other: Any) -> Any:
        return getattr(_view(self), name)(other)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"``Array.{name}`` of the buffer's array view (see :class:`ArrayFace`)."
    return op


def _inplace(name: str) -> Callable[..., Any]:
    def op(self: Any, other: Any) -> Any:
        if getattr(_view(self), name)(other) is NotImplemented:
            return NotImplemented
        return self  # the name stays bound to the buffer, whose memory now holds the result

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"In place through the buffer's array view: ``Array.{name}``; answers self."
    return op


def _method(name: str) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(_view(self), name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``Array.{name}`` of the buffer's array view (see :class:`ArrayFace`)."
    return method


class ArrayFace:
    """What makes a buffer (and the future of one) an array of the Array API standard: the
    operators, indexing, ``T``/``mT``, the scalar conversions, ``__array_namespace__``,
    ``to_device`` and NumPy-style methods (``sum``, ``mean``, ``reshape``, ``astype``, ...),
    each taken from the buffer's zero-copy :class:`gpumsg.array_api.Array` view (its shape,
    dtype and memory order: an F-ordered buffer is seen with F strides). An operation
    answers a new array at once and queues behind the buffer's producer; reading a value
    (``bool``/``int``/``float``, ``np.asarray``) is the only wait. A buffer of a dtype the
    array layer lacks (fp8) raises TypeError.

    Equality is the standard's (``a == b`` is an element-wise array), but the hash stays the
    object's identity, as a torch tensor's: buffers and futures key dicts and sets by
    identity (``concurrent.futures.wait`` puts futures in sets), which never compares
    distinct live objects. Compare buffers themselves with ``is``."""

    __slots__ = ()
    __hash__ = object.__hash__

    @property
    def T(self) -> Any:
        return _view(self).T

    @property
    def mT(self) -> Any:
        return _view(self).mT

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        return _view(self).__array_namespace__(api_version=api_version)

    def to_device(self, device: Any, /, *, stream: Any = None) -> Any:
        """The array on ``device``: the view itself on its own device, else a copy."""
        return _view(self).to_device(device, stream=stream)

    def __getitem__(self, key: Any) -> Any:
        return _view(self)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        _view(self)[key] = value

    def __len__(self) -> int:
        return len(_view(self))

    def __iter__(self) -> Any:
        return iter(_view(self))

    def __bool__(self) -> bool:
        return bool(_view(self))

    def __int__(self) -> int:
        return int(_view(self))

    def __float__(self) -> float:
        return float(_view(self))

    def __complex__(self) -> complex:
        return complex(_view(self))

    def __index__(self) -> int:
        return _view(self).__index__()

    def __neg__(self) -> Any:
        return -_view(self)

    def __pos__(self) -> Any:
        return +_view(self)

    def __abs__(self) -> Any:
        return abs(_view(self))

    def __invert__(self) -> Any:
        return ~_view(self)


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor",
              "lshift", "rshift", "matmul"):
    setattr(ArrayFace, f"__{_name}__", _binary(f"__{_name}__"))
    setattr(ArrayFace, f"__r{_name}__", _binary(f"__r{_name}__"))
    setattr(ArrayFace, f"__i{_name}__", _inplace(f"__i{_name}__"))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(ArrayFace, f"__{_name}__", _binary(f"__{_name}__"))
#: NumPy- and CuPy-style methods, each the array view's
ARRAY_METHODS = ("sum", "prod", "mean", "std", "var", "max", "min", "argmax", "argmin", "all",
                 "any", "cumsum", "reshape", "astype", "transpose", "swapaxes", "squeeze",
                 "flatten", "ravel", "copy", "get", "item", "tolist", "clip", "round", "conj")
for _name in ARRAY_METHODS:
    setattr(ArrayFace, _name, _method(_name))
del _name


class BufferFuture(GpuFuture, ArrayFace):
    """The future of a new buffer. It can be passed to later calls before it resolves (the
    device runs messages in order), and resolves to its :class:`GpuBuffer`. It is an array
    as the buffer is (:class:`ArrayFace`): its operations queue behind its producer."""

    def __init__(self, buffer: GpuBuffer) -> None:  # GpuFuture.__init__'s three, inlined
        self._state = _fb.PENDING
        self._result = None
        self._exception = None
        self.buffer = buffer

    @property
    def ref(self) -> BufRef:
        return self.buffer.ref

    # what the buffer will be, known before it resolves (the reference was minted with it)
    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> np.dtype:
        return self.buffer.dtype

    @property
    def order(self) -> str:
        return self.buffer.order

    @property
    def ndim(self) -> int:
        return self.buffer.ndim

    @property
    def size(self) -> int:
        return self.buffer.size

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    @property
    def device(self) -> Device:
        return self.buffer.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        """DLPack export of the buffer, once it exists (see :meth:`GpuBuffer.__dlpack__`)."""
        return self.result().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.buffer.__dlpack_device__()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(future)``: waits for the buffer (raising its producer's error), then
        copies it to the host (see :meth:`GpuBuffer.__array__`)."""
        return self.result().__array__(dtype, copy)

    def set_result(self, result: Any) -> None:
        # The device answers an allocation with the device pointer, an operation that wrote
        # the buffer (Device.send_writing) with its own reply: callers get the buffer.
        if type(result) is int:
            self.buffer._ptr = result
        self._resolve_with(self.buffer, None)

    def set_pointer(self, ptr: int) -> None:
        """The device thread made the buffer's allocation (``AllocThen``): its address, told
        before the operation writing the buffer completes and answers this future."""
        self.buffer._ptr = ptr


def buffer_after(done: Future, buffer: GpuBuffer) -> BufferFuture:
    """A future of ``buffer`` that resolves once ``done`` (the operation writing it) has, or
    fails with its exception."""
    out = BufferFuture(buffer)

    def finish(f: Future) -> None:
        exc = f.exception()
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(buffer)

    if isinstance(done, GpuFuture):
        done._chain(finish)  # a caller waiting on ``out`` answers ``done`` itself (its _lead)
    else:
        done.add_done_callback(finish)
    out._lead = getattr(done, "_lead", None)
    out._nudge = getattr(done, "_nudge", None)
    return out


class PointerSink:
    """A reply that only records an allocation's pointer (its errors reach dependants)."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: GpuBuffer) -> None:
        self.buffer = buffer

    def set_result(self, ptr: int) -> None:
        self.buffer._ptr = ptr

    def set_exception(self, exc: BaseException) -> None:
        pass


class GpuBuffer(ArrayFace):
    """A device allocation, checked on every use.

    It records the device and the generation it was made in; using it after :meth:`free`, after
    its device closed or was rebuilt raises :class:`~gpumsg.errors.GpuRefStale` before anything
    is sent. When the last reference goes, a ``Free`` message is posted (no CUDA call is ever
    made from the finalizer); a buffer that no message but the one making it named, dropped on
    the device thread (its future answered and let go), is freed by the device loop without a
    message. A buffer has NumPy's memory order: C (row-major) unless made with order='F'.
    A buffer is also an array of the Array API standard (:class:`ArrayFace`: ``buf + buf``,
    ``buf[0]``, ``buf.T``, ``buf.sum()``), through its zero-copy ``gpumsg.array_api`` view.
    """

    __slots__ = ("_device", "_ref", "_ptr", "_freed", "_named", "__weakref__")

    def __init__(self, device: Device, ref: BufRef) -> None:
        self._device = device
        self._ref = ref
        self._ptr: int | None = None
        self._freed = False
        #: false while no message but its producer can name the buffer: set false by the
        #: makers that post only the producer (``Device.alloc``, ``Device._send_new``), true
        #: again once the reference is taken (every other message that names a buffer takes
        #: it). An unnamed buffer dropped on the device thread is freed there without a
        #: message (Device._post_free).
        self._named = True

    @property
    def ref(self) -> BufRef:
        """The message-level reference. Raises GpuRefStale if the buffer cannot be used."""
        self._named = True
        if self._freed:
            raise GpuRefStale(f"{self._ref.describe()} was freed")
        state = self._device._state
        if self._ref.generation != state.generation or not state.accepting:
            raise GpuRefStale(f"{self._ref.describe()} is stale: {self._stale_reason()}")
        return self._ref

    def _stale_reason(self) -> str:
        state = self._device._state
        if self._ref.generation != state.generation:
            return (f"it belongs to generation {self._ref.generation} and the device was rebuilt "
                    f"(generation {state.generation})")
        return str(state.refusal)

    def is_stale(self) -> bool:
        state = self._device._state
        return self._freed or self._ref.generation != state.generation or not state.accepting

    @property
    def shape(self) -> tuple[int, ...]:
        return self._ref.shape

    @property
    def dtype(self) -> np.dtype:
        return dtype_of(self._ref.dtype)

    @property
    def order(self) -> str:
        return self._ref.order

    @property
    def nbytes(self) -> int:
        return self._ref.nbytes

    @property
    def size(self) -> int:
        return self._ref.size

    @property
    def ndim(self) -> int:
        return len(self._ref.shape)

    @property
    def id(self) -> int:
        return self._ref.id

    @property
    def generation(self) -> int:
        return self._ref.generation

    @property
    def device(self) -> Device:
        return self._device

    @property
    def device_id(self) -> int:
        """The CUDA ordinal of the device that holds the buffer."""
        return self._device.ordinal

    def raw_device_ptr(self) -> int:
        """The device address (valid in the order of the device's compute stream: share the
        timeline through ``snapshot_stream()``). Raises if the allocation has not been made
        yet (wait for the future of ``alloc``) or the buffer is stale."""
        self.ref  # noqa: B018 - raises if stale
        if self._ptr is None:
            raise InvalidMessage(f"{self._ref.describe()} is not allocated yet: wait for the "
                                 "future that alloc()/to_device() returned")
        return self._ptr

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface (v3) for CuPy, PyTorch, Numba: a zero-copy view. ``stream``
        is the device's compute stream, which is first made to wait for the buffer's last
        write and reads on gpumsg's other streams (one message round trip, no host wait):
        a consumer that synchronizes with it sees every write sent before."""
        from ..messages.interop import ExportSync
        from ._dlpack import quiet

        stream = self._device._compute_stream_handle()
        if self._ptr is None or not quiet(self._device):  # else nothing is pending at all
            self._device._request(ExportSync(self.ref, stream))
        ptr = self.raw_device_ptr()
        item = self.dtype.itemsize
        strides = None
        if self._ref.order == "F" and self.ndim > 1:
            acc, st = item, []
            for dim in self.shape:
                st.append(acc)
                acc *= dim
            strides = tuple(st)
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (ptr, False),
                "strides": strides, "version": 3,
                "stream": stream}

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """DLPack export, zero copy: see :func:`gpumsg.client._dlpack.export` (the consumer's
        ``stream`` waits for the buffer's last write through events; the capsule keeps the
        buffer alive until the consumer deletes it)."""
        from ._dlpack import export

        return export(self, stream, max_version, dl_device, copy)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(buffer)``: a copy of the buffer on the host, in its shape, dtype and
        memory order, waiting for the writes sent before (reading values is the wait of the
        array model). ``copy=False`` raises ValueError: device memory is always copied.
        ``dev.copy_to_host(buffer)`` is the same copy as a future."""
        if copy is False:
            raise ValueError(f"{self._ref.describe()} is device memory: NumPy gets a copy of "
                             "it (copy=False cannot be honoured)")
        host = self._device.copy_to_host(self).result()
        return host if dtype is None else host.astype(dtype, copy=False)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCUDA, ordinal)`` on CUDA; ``(kDLCPU, 0)`` on the simulator (host memory)."""
        from ._dlpack import dlpack_device

        return dlpack_device(self)

    def free(self) -> Future:
        """Release the buffer (stream-ordered behind its uses). Later uses raise GpuRefStale."""
        ref = self.ref
        self._freed = True
        return self._device._free(ref)

    def __del__(self) -> None:
        if not self._freed:
            self._freed = True
            try:
                self._device._post_free(self._ref, self._named)
            except Exception:  # noqa: BLE001 - interpreter shutdown, closed device
                pass

    def __repr__(self) -> str:
        state = "freed" if self._freed else ("stale" if self.is_stale() else "live")
        return (f"<GpuBuffer #{self._ref.id} {self._ref.dtype}{list(self.shape)} "
                f"order={self.order} device={self._device.ordinal} gen={self.generation} "
                f"{state}>")


class PinnedHostBuffer:
    """Page-locked host memory from the device's pinned pool, seen as a NumPy array.

    Copies to and from it run at full DMA bandwidth without staging. It stays valid while this
    object or any array taken from :attr:`array` lives; it must not be modified while a copy
    that reads it is pending.
    """

    __slots__ = ("_device", "_block", "shape", "dtype", "order", "nbytes", "_freed",
                 "__weakref__")

    def __init__(self, device: Device, block: Any, shape: tuple[int, ...], dtype: np.dtype,
                 order: str) -> None:
        self._device = device
        self._block = block
        self.shape = shape
        self.dtype = dtype
        self.order = order
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self._freed = False

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(pinned)``: the host memory itself (a view; a copy if ``copy`` or a
        ``dtype`` conversion asks for one)."""
        view = self.array
        if dtype is not None and np.dtype(dtype) != view.dtype:
            if copy is False:
                raise ValueError("a dtype conversion needs a copy")
            return view.astype(dtype)
        return view.copy() if copy else view

    @property
    def array(self) -> np.ndarray:
        """A NumPy view of the buffer (it keeps the buffer alive)."""
        if self._freed:
            raise GpuRefStale("pinned host buffer was freed")
        raw = host_view(self._block.ptr, self.nbytes, owner=self)
        return raw.view(self.dtype).reshape(self.shape, order=self.order)

    @property
    def ref(self) -> HostRef:
        if self._freed:
            raise GpuRefStale("pinned host buffer was freed")
        return HostRef("pinned", self._block.id, 0, self.nbytes)

    def free(self) -> Future:
        self.ref  # noqa: B018 - raises if already freed
        self._freed = True
        return self._device._free_pinned(self._block)

    def __del__(self) -> None:
        if not self._freed:
            self._freed = True
            try:
                self._device._post_free_pinned(self._block)
            except Exception:  # noqa: BLE001 - interpreter shutdown, closed device
                pass

    def __repr__(self) -> str:
        return f"<PinnedHostBuffer {self.dtype}{list(self.shape)} {self.nbytes} bytes>"


def gather(futures: Iterable[Future], value: Any = None) -> GpuFuture:
    """A future answered with ``value`` once all ``futures`` succeeded, or with the first
    failure."""
    futures = list(futures)
    out = GpuFuture()
    if not futures:
        out.set_result(value)
        return out
    lock = threading.Lock()
    remaining = [len(futures)]

    def done(f: Future) -> None:
        exc = f.exception()
        with lock:
            remaining[0] -= 1
            if out.done():
                return
            if exc is not None:
                out.set_exception(exc)
            elif remaining[0] == 0:
                out.set_result(value)

    for f in futures:
        if isinstance(f, GpuFuture):
            f._chain(done)  # see buffer_after
        else:
            f.add_done_callback(done)
    # a caller waiting on the whole may read the answers of its parts itself, as it would
    # waiting on one of them (process isolation), when they all come from one device
    lead = getattr(futures[0], "_lead", None)
    if lead is not None and all(getattr(f, "_lead", None) is lead for f in futures):
        out._lead = lead
    nudges = [n for n in (getattr(f, "_nudge", None) for f in futures) if n is not None]
    if nudges:  # a callback on the whole: every part that needs one is nudged
        out._nudge = lambda _f, t, parts=futures: [
            f._nudge(f, t) for f in parts if getattr(f, "_nudge", None) is not None]
    return out
