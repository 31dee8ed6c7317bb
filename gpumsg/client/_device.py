"""The client: :func:`open_device` and :class:`Device`, the synchronous API that returns futures.
Everything here runs on the caller's threads.

Every method checks its arguments and raises a typed error at the call site before anything is
sent; it then posts one message (or a few, for staged copies) and returns a
:class:`concurrent.futures.Future`. Futures of buffers may be passed to later calls before they
resolve. Many threads may share one Device.
"""

from __future__ import annotations

import atexit
import itertools
import math
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..backends import Backend, make_backend
from ..dtypes import as_dtype, dtype_name
from ..errors import DeviceClosed, GpuRefStale, InvalidMessage, OutOfMemory
from ..libs import namespaces
from ..libs.cublas._order import gemm_args
from ..memory._config import MemorySpec
from ..messages._base import MAX_NBYTES, BufRef, Message, as_ref, checked_flag
from ..messages._memo import MessageMemo
from ..messages.cublas import Sgemm
from ..messages.device import (
    Alloc,
    AllocPinned,
    AllocThen,
    CopyDevice,
    CopyFromHost,
    CopyToHost,
    Free,
    FreePinned,
    InjectFault,
    Memset,
    OpenLibraries,
    RegisterHostMemory,
    SnapshotChildren,
    SnapshotContext,
    SnapshotStream,
    Stats,
    Synchronize,
    TrimMemory,
    UnregisterHostMemory,
    WatchGeneration,
    accepted_array_dtype,
)
from ..service import _interop as _interop  # noqa: F401 (registers the DLPack handlers)
from ..service._registry import LIBRARIES
from ..service._state import DeviceState
from ..service._trace import KernelTrace
from ..service._worker import DeviceWorker
from ._buffers import (
    BufferFuture,
    GpuBuffer,
    GpuFuture,
    PinnedHostBuffer,
    PointerSink,
    buffer_after,
)
from ._gil import SWITCH, configured_interval
from ._graph import Graph
from ._port import Port
from ._staging import (
    NEW_ARRAY_LIMIT,
    DevicePinnedPool,
    HostStaging,
    ReleaseOnReply,
    ReleasingFuture,
)
from ._stream import Stream

__all__ = ["Device", "open_device", "devices", "register_isolation"]

_STATS = Stats()
#: the client's own host-memory protocol: sent by hand, they would hand the device blocks the
#: client does not know of (a staging block never given back: every later staged copy waits)
#: or free blocks the client is using
_INTERNAL = frozenset({AllocPinned, FreePinned, RegisterHostMemory, UnregisterHostMemory,
                       AllocThen})
#: the buffers of a message whose class keeps this ``refs`` are its ``__buffers__`` fields; a
#: class with its own (a launch's arguments, a sparse matrix's arrays) is checked through it
_FIELD_REFS = Message.refs
_ALLOC = Alloc.unchecked  # type: ignore[attr-defined]
_ALLOC_THEN = AllocThen.unchecked  # type: ignore[attr-defined]
_MINTED = BufRef.whole  # type: ignore[attr-defined]
_FREE = Free.unchecked  # type: ignore[attr-defined]
#: messages memoized per Device for repeated identical calls (see Device.sgemm)
_MEMO_SIZE = 256
#: dtype as callers pass it (np.float32, "f32", np.dtype(...)) -> (short name, itemsize)
_DTYPE_CACHE: dict[Any, tuple[str, int]] = {}
_tokens = itertools.count(1)
#: give the GIL away after posting, so a device thread waiting for it runs while this thread
#: prepares its next message (performance experiment; see docs/performance.md)
YIELD_AFTER_POST = False
#: called before every message is posted while set (None otherwise, costing one test): a layer
#: above that holds work back (gpumsg.array_api's pending element-wise results) sends it first,
#: so that no later message can overtake it; see set_before_post
before_post: Any = None


def set_before_post(hook: Any) -> None:
    """Install (a callable taking the message) or remove (None) the hook run before each
    post."""
    global before_post
    before_post = hook


def _yield_gil() -> None:
    time.sleep(0)

#: buffer ids are unique across the process's devices, so a device recognizes a foreign or
#: stale reference by a single lookup
_buffer_ids = itertools.count(1)
_open_devices: weakref.WeakSet[Device] = weakref.WeakSet()
#: client namespace name -> class (``dev.cublas``, ``dev.linalg``, ...), from the libraries
_NAMESPACES = namespaces()
#: isolation name -> factory of the worker a Device talks to (besides "thread"); the
#: supervision package registers "process"
_ISOLATIONS: dict[str, Any] = {}


def register_isolation(name: str, factory: Any) -> None:
    """Offer ``isolation=name``: ``factory(backend, state, memory, trace, allow_fault_injection,
    shutdown_timeout, pinned_staging_limit, watchdog, max_restarts, restart_window, standby)``
    returns a worker with ``submit``, ``stop``, ``join``, ``props``, ``kind`` and
    ``host_pool(device)``."""
    _ISOLATIONS[name] = factory


def _buffer_of(buffer: GpuBuffer | BufferFuture) -> GpuBuffer:
    return buffer.buffer if isinstance(buffer, BufferFuture) else buffer


def _flat_bytes(arr: np.ndarray, order: str) -> np.ndarray:
    """The array's elements in ``order`` as contiguous bytes (a view when already laid out so)."""
    if arr.ndim == 1 and arr.flags.c_contiguous:  # any order: the common case, one view
        return arr.view(np.uint8)
    flat = np.ravel(arr, order=order)  # type: ignore[call-overload]
    if not flat.flags.c_contiguous:
        flat = np.ascontiguousarray(flat)
    return flat.view(np.uint8)


def same_layout(a: BufRef, b: BufRef) -> bool:
    """Whether two buffers of one shape lay their elements out alike: the same order, or a
    shape with at most one dimension above 1 (where C and F orders coincide)."""
    return a.order == b.order or sum(1 for d in a.shape if d > 1) <= 1


def _checked_copy(dst: Any, src: Any) -> CopyDevice:
    """The CopyDevice of ``Device.copy``: whole buffers of one dtype, shape and layout."""
    rd, rs = as_ref(dst, "dst"), as_ref(src, "src")
    if rd.dtype != rs.dtype:
        raise InvalidMessage(f"dst: {rd.describe()} and src {rs.describe()} differ in dtype; "
                             "copy converts nothing (copy_bytes copies raw bytes)", field="dst")
    if rd.shape != rs.shape:
        raise InvalidMessage(f"dst: {rd.describe()} and src {rs.describe()} differ in shape",
                             field="dst")
    if not same_layout(rd, rs):
        raise InvalidMessage(f"dst: {rd.describe()} is in {rd.order} order and src "
                             f"{rs.describe()} in {rs.order} order; copy does not transpose "
                             f"(allocate dst with order='{rs.order}', or copy through the host)",
                             field="order")
    return CopyDevice(rd, rs)


#: the options that only a supervised worker process has, with their defaults
_PROCESS_OPTIONS = (("watchdog", None), ("max_restarts", 3), ("restart_window", 60.0),
                    ("standby", True))


def _refuse_process_options(watchdog: Any, max_restarts: Any, restart_window: Any,
                            standby: Any) -> None:
    """Thread isolation has no supervisor: an option of one (a watchdog, restarts, a standby
    worker) other than its default would do nothing, so it is refused."""
    given = {"watchdog": watchdog, "max_restarts": max_restarts,
             "restart_window": restart_window, "standby": standby}
    for name, default in _PROCESS_OPTIONS:
        if given[name] != default:
            raise InvalidMessage(
                f"{name}={given[name]!r} needs isolation='process': a device thread in this "
                "process has no supervisor to watch, restart or stand in for it", field=name)


def _is_main_test(node: Any) -> bool:
    """Whether ``node`` is the test ``__name__ == "__main__"`` (either way round)."""
    import ast

    if not isinstance(node, ast.Compare) or len(node.ops) != 1 or \
            not isinstance(node.ops[0], ast.Eq):
        return False
    sides = (node.left, node.comparators[0])
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


def _unguarded_main() -> str | None:
    """Why a worker process cannot be started from here, or None. A worker process imports
    the main script again (spawn and forkserver both do): a script that opens a
    process-isolated device at import time, outside ``if __name__ == "__main__":``, would
    open one again in every worker, which dies. Found by reading the script: the line of the
    main module running now must lie inside such a block."""
    import ast
    import sys
    import tokenize

    frame = sys._getframe(1)
    outer = None
    while frame is not None:  # the main module's top-level frame, outermost
        if frame.f_code.co_name == "<module>" and \
                frame.f_globals.get("__name__") in ("__main__", "__mp_main__"):
            outer = frame
        frame = frame.f_back
    if outer is None:
        return None
    hint = ("put the code that opens a device with isolation='process' under "
            "`if __name__ == \"__main__\":` (worker processes import the main script again)")
    if outer.f_globals.get("__name__") == "__mp_main__":
        return f"this is a worker process importing the main script: {hint}"
    path = outer.f_globals.get("__file__")
    if not path:
        return None
    try:
        with tokenize.open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    line = outer.f_lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test) and \
                node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
            return None
    return f"{path}, line {line}: {hint}"


def _host_array(value: Any, field: str) -> np.ndarray:
    """``np.asarray(value)``; a value NumPy cannot make an array of (a ragged list, ...)
    raises InvalidMessage naming ``field``."""
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"{field}: cannot be made a NumPy array ({exc})",
                             field=field) from None


class Device:
    """A client of one device service. Create it with :func:`open_device`.

    Besides the methods below, each registered library adds its raw namespace, named after it
    (``dev.cublas``, ``dev.cublaslt``, ``dev.cusolver``, ``dev.cufft``, ``dev.curand``,
    ``dev.cusparse``, ``dev.cudnn``, ``dev.nvrtc``), and the NumPy-level namespaces
    ``dev.linalg``, ``dev.fft``, ``dev.random``, ``dev.sparse`` (SciPy's names) and ``dev.nn``
    (torch.nn.functional's names) sit on top of them (gpumsg/libs/_namespace.py)."""

    cublas: Any
    cublaslt: Any
    cusolver: Any
    cufft: Any
    curand: Any
    cusparse: Any
    cudnn: Any
    nvrtc: Any
    linalg: Any
    fft: Any
    random: Any
    sparse: Any
    nn: Any
    #: copy_peer's implementation, set by gpumsg.multi._peer (a layer above the client)
    _peer_copy: Any = None
    #: this device counts in the GIL switch interval's open devices (client/gil.py)
    _switch_held = False

    def __init__(self, ordinal: int = 0, backend: str | Backend = "auto",
                 isolation: str = "thread", memory: MemorySpec = "pool",
                 trace: KernelTrace | None = None, allow_fault_injection: bool = False,
                 pinned_staging_limit: int = 256 << 20,
                 shutdown_timeout: float | None = 60.0, watchdog: float | None = None,
                 max_restarts: int = 3, restart_window: float = 60.0,
                 standby: bool = True) -> None:
        if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 0:
            raise InvalidMessage(f"ordinal must be a non-negative int, got {ordinal!r}",
                                 field="ordinal")
        if isolation != "thread" and isolation not in _ISOLATIONS:
            raise InvalidMessage(f"isolation must be one of {['thread', *_ISOLATIONS]}, got "
                                 f"{isolation!r}", field="isolation")
        if trace is not None and not isinstance(trace, KernelTrace):
            raise InvalidMessage("trace must be a KernelTrace", field="trace")
        checked_flag(allow_fault_injection, "allow_fault_injection")
        checked_flag(standby, "standby")
        if isolation == "thread":
            _refuse_process_options(watchdog, max_restarts, restart_window, standby)
        else:
            why = _unguarded_main()
            if why:
                raise InvalidMessage(why, field="isolation")
            if isinstance(backend, str):  # checked here: the worker process would only die
                from ..backends import resolve_backend

                backend = resolve_backend(backend, ordinal)
        # the switch interval (client/gil.py); a bad value is refused before a start. In
        # process isolation the device thread runs under the worker's GIL
        interval = configured_interval(shares_the_gil=isolation == "thread")
        self._state = DeviceState(ordinal, next(_tokens))
        self._lock = threading.Lock()
        self._closed = False
        self.isolation = isolation
        #: live buffers by id (process isolation: a restart may move them to a new generation)
        self._live: weakref.WeakValueDictionary[int, GpuBuffer] | None = None
        if isolation == "thread":
            be = make_backend(backend, ordinal)
            self._worker: Any = DeviceWorker(be, self._state, memory, trace,
                                             allow_fault_injection, shutdown_timeout,
                                             pinned_staging_limit)
            self.backend = be.kind
            host_pool = DevicePinnedPool(self, self._worker.pinned)
        else:
            if isinstance(memory, str):
                from ..memory._config import MemoryConfig

                MemoryConfig(resource=memory)  # validate here, not in the worker
            self._worker = _ISOLATIONS[isolation](
                backend, self._state, memory, trace, allow_fault_injection, shutdown_timeout,
                pinned_staging_limit, watchdog, max_restarts, restart_window, standby)
            self.backend = self._worker.kind
            self._live = weakref.WeakValueDictionary()
            self._worker.rebase = self._rebase_buffer
            host_pool = self._worker.host_pool(self)
        self.props = self._worker.props
        self._max_bytes = min(self.props.total_bytes, MAX_NBYTES)
        self._sgemm_memo: dict[tuple, tuple] = {}
        #: the device's own repeated calls (copies, fills), as the libraries keep theirs
        self._memo = MessageMemo()
        self._staging = HostStaging(self, host_pool)
        self._next_id = _buffer_ids.__next__
        self._submit = submit = self._worker.submit
        # thread isolation: put (message, reply) in the mailbox with no call in between
        mailbox = self._worker.mailbox if isolation == "thread" else None
        self._put = mailbox.put if mailbox is not None else lambda item: submit(*item)
        #: a new buffer and the message that writes it go as one AllocThen (thread isolation:
        #: its reply learns the pointer from the device thread; see _send_new)
        self._fuse_alloc = mailbox is not None
        if mailbox is not None:
            self._post = self._post_thread  # type: ignore[method-assign]
            self._run_inline = self._worker.run_inline
            self._qsize = mailbox.qsize
            self._backpressure = self._worker.backpressure
        self._stream_handle: int | None = None
        #: the Graph being recorded (client/graph.py), or None; see _set_recorder
        self._recorder: Any = None
        self._post_direct = self._post
        #: ``with stream:`` blocks open on this device, and the post they wrap (client/_stream.py)
        self._pins = 0
        self._post_unpinned = self._post
        #: the protocol library clients use (gpumsg/libs); applications use the methods here
        self.port = Port(self, check_open=self._check_open, send=self.send,
                         send_writing=self.send_writing, send_new=self._send_new,
                         mint=self._mint, send_memo=self._send_entry, state=self._state,
                         submit=self._submit)
        # the library namespaces: ``dev.cublas.gemm(...)``, ``dev.linalg.solve(...)``, ...
        for name, cls in _NAMESPACES.items():
            setattr(self, name, cls(self))
        _open_devices.add(self)
        # the GIL switch interval while devices are open (client/gil.py says why)
        SWITCH.enter(interval)
        self._switch_held = True

    def _rebase_buffer(self, ref: BufRef) -> None:
        """A buffer whose allocation had not started when the worker was replaced now belongs
        to the new generation."""
        buf = self._live.get(ref.id) if self._live is not None else None
        if buf is not None:
            buf._ref = ref

    def _new_buffer(self, ref: BufRef) -> GpuBuffer:
        buf = GpuBuffer(self, ref)
        if self._live is not None:
            self._live[ref.id] = buf
        return buf

    # -- identity ----------------------------------------------------------------------------------
    @property
    def ordinal(self) -> int:
        return self._state.ordinal

    @property
    def name(self) -> str:
        return self.props.name

    @property
    def generation(self) -> int:
        return self._state.generation

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"<gpumsg.Device {self.ordinal} {self.name!r} backend={self.backend} "
                f"isolation={self.isolation} gen={self.generation}"
                f"{' closed' if self._closed else ''}>")

    # -- sending -----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        state = self._state
        if not state.accepting:
            raise state.refusal

    def _post_thread(self, msg: Any, reply: Any) -> None:
        """Thread isolation's post, without a lock: a post that races close() sees the refusal
        after its put, and the worker makes sure that a message left behind STOP is failed."""
        if before_post is not None:
            before_post(msg)
        state = self._state
        if not state.accepting:
            raise state.refusal
        if self._run_inline(msg, reply):  # the device was idle: run here (service/executor.py)
            return
        self._put((msg, reply))
        if not state.accepting:
            self._worker.late_post()
        bp = self._backpressure
        if bp.high and self._qsize() >= bp.high:
            bp.pause()  # a full mailbox: let the device thread run (service/backpressure.py)
        if YIELD_AFTER_POST:
            _yield_gil()

    def _post(self, msg: Any, reply: Any) -> None:
        if before_post is not None:
            before_post(msg)
        # the lock orders posts against close(): nothing is put behind the STOP message
        with self._lock:
            state = self._state
            if not state.accepting:
                raise state.refusal
            self._put((msg, reply))
        if YIELD_AFTER_POST:
            _yield_gil()

    def _post_recording(self, msg: Any, reply: Any) -> None:
        """``_post`` while a ``dev.graph()`` block records: the recording thread's messages go
        into the graph (client/graph.py), every other thread's are sent as usual."""
        recorder = self._recorder
        if recorder is not None and recorder.take(msg, reply):
            return
        self._post_direct(msg, reply)

    def _set_recorder(self, recorder: Any) -> None:
        """Start (a Graph) or stop (None) recording; outside a recording ``_post`` pays nothing."""
        self._recorder = recorder
        self._post_unpinned = self._post_direct if recorder is None else self._post_recording
        if not self._pins:
            self._post = self._post_unpinned  # type: ignore[method-assign]

    def _request(self, msg: Any, timeout: float | None = None) -> Any:
        fut = GpuFuture()
        self._post(msg, fut)
        return fut.result(timeout)

    def _check_refs(self, msg: Message) -> None:
        token, gen = self._state.token, self._state.generation
        for ref in msg.refs():
            if ref.owner != token:
                raise InvalidMessage(f"{type(msg).__name__}: {ref.describe()} belongs to "
                                     "another device")
            if ref.generation != gen:
                raise GpuRefStale(f"{type(msg).__name__}: {ref.describe()} is from generation "
                                  f"{ref.generation}; the device is at {gen}")

    def send(self, msg: Message) -> Future:
        """Send any message; returns the future of its reply. Host arrays in ``CopyFromHost``
        are staged here, and ``CopyToHost`` without a host destination answers a NumPy array."""
        self._screen(msg)
        t = type(msg)
        if t is CopyFromHost and isinstance(msg.src, np.ndarray):
            return self._staging.upload(msg.dst, _flat_bytes(msg.src, msg.dst.order),
                                        msg.dst_offset)
        if t is CopyToHost and msg.dst is None:
            return self._download(msg.src, msg.src_offset, msg.nbytes, None)
        fut = GpuFuture()
        self._post(msg, fut)
        return fut

    def send_writing(self, msg: Message, buffer: Any) -> BufferFuture:
        """Send ``msg``, an operation that writes ``buffer`` (a GpuBuffer or its future): the
        future resolves to the buffer once the operation has completed, or fails with its
        error. The same as ``buffer_after(send(msg), buffer)``, in one future instead of two
        and a callback."""
        if not isinstance(buffer, (GpuBuffer, BufferFuture)):
            raise InvalidMessage(f"buffer must be a GpuBuffer or its future, got "
                                 f"{type(buffer).__name__}", field="buffer")
        self._screen(msg)
        if type(msg) in (CopyFromHost, CopyToHost):
            return buffer_after(self.send(msg), _buffer_of(buffer))
        fut = BufferFuture(_buffer_of(buffer))
        self._post(msg, fut)
        return fut

    def _send_new(self, ref: BufRef, msg: Message) -> BufferFuture:
        """Allocate the buffer ``ref`` names (minted by :meth:`_mint`, not sent yet) and send
        ``msg``, which writes it: the future resolves to the new buffer once ``msg`` has
        completed, or fails with the allocation's error or ``msg``'s. ``msg`` is screened
        first: nothing is allocated for a message refused here. In thread isolation the two go
        as one message (``AllocThen``); while a graph records, and in process isolation, as
        ``Alloc`` then ``msg``."""
        self._screen(msg)
        buf = self._new_buffer(ref)
        fut = BufferFuture(buf)
        if self._fuse_alloc and self._recorder is None:
            buf._named = False  # only its producer names it yet
            self._post(_ALLOC_THEN(ref, msg), fut)
        else:
            self._post(_ALLOC(ref), PointerSink(buf))
            self._post(msg, fut)
        return fut

    def _send_entry(self, entry: list, writing: Any = None) -> Future:
        """:meth:`send` (or :meth:`send_writing` with ``writing``) for an entry
        ``[message, stamp]`` of a :class:`~gpumsg.messages._memo.MessageMemo`. The stamp is
        the generation the message was screened for: a repeated call at that generation, with
        no graph recording, goes straight to the mailbox. The screening's verdict cannot have
        changed: a kept message holds the same references (owner and generation are theirs
        for life), and a freed or stale buffer already raised when the memo took its ``ref``."""
        state = self._state
        if entry[1] == state.generation and self._recorder is None:
            if writing is None:
                fut = GpuFuture()
            elif type(writing) is GpuBuffer:
                fut = BufferFuture(writing)
            else:
                return self.send_writing(entry[0], writing)
            self._post(entry[0], fut)
            return fut
        generation = state.generation  # before the screening: a rebuild meanwhile fails it
        fut = self.send(entry[0]) if writing is None else self.send_writing(entry[0], writing)
        entry[1] = generation
        return fut

    def _screen(self, msg: Message) -> None:
        """What every message sent is checked for on the caller's thread: a message of the
        public protocol, an open device, references of this device and generation, and what
        a graph being recorded refuses."""
        if not isinstance(msg, Message):
            raise InvalidMessage(f"send() takes a gpumsg message, got {type(msg).__name__}")
        t = type(msg)
        if t in _INTERNAL:
            raise InvalidMessage(f"{t.__name__} is the client's own host-memory protocol; "
                                 "use dev.alloc_pinned() and PinnedHostBuffer.free()",
                                 field="msg")
        state = self._state
        if not state.accepting:
            raise state.refusal
        token, gen = state.token, state.generation
        for name in t.__buffers__:  # the common case inline; _check_refs says what is wrong
            ref = getattr(msg, name)
            if type(ref) is BufRef:
                if ref.owner == token and ref.generation == gen:
                    continue
            elif ref is None:
                continue
            self._check_refs(msg)
            break
        else:
            if t.refs is not _FIELD_REFS:  # buffers inside other fields (a launch's args)
                for ref in msg.refs():  # as for the fields: _check_refs says what is wrong
                    if ref.owner != token or ref.generation != gen:
                        self._check_refs(msg)
                        break
        if self._recorder is not None:
            self._recorder.screen(msg)  # refuse before staging host data

    # -- buffers -----------------------------------------------------------------------------------
    @staticmethod
    def buffer_after(done: Future, buffer: Any) -> BufferFuture:
        """A future of ``buffer`` (a GpuBuffer or its BufferFuture) that resolves to it once
        ``done``, the operation writing it, has; or fails with ``done``'s error."""
        if not isinstance(done, Future):
            raise InvalidMessage(f"done must be a future, got {type(done).__name__}",
                                 field="done")
        if not isinstance(buffer, (GpuBuffer, BufferFuture)):
            raise InvalidMessage(f"buffer must be a GpuBuffer or its future, got "
                                 f"{type(buffer).__name__}", field="buffer")
        return buffer_after(done, _buffer_of(buffer))

    def _mint(self, shape: Any, dtype: Any, order: str) -> BufRef:
        # the common case first: an int or a tuple of ints, a dtype seen before
        try:
            name, itemsize = _DTYPE_CACHE[dtype]
        except (KeyError, TypeError):
            name, itemsize = self._dtype_entry(dtype)
        if type(order) is str and (order == "F" or order == "C"):
            size = -1
            if type(shape) is int:
                if shape >= 0:
                    shape, size = (shape,), shape
            elif type(shape) is tuple:
                size = 1
                for d in shape:
                    if type(d) is not int or d < 0:
                        size = -1
                        break
                    size *= d
            if size >= 0:
                nbytes = size * itemsize
                if nbytes <= self._max_bytes:
                    state = self._state
                    # every field checked above, and the size derived: no __post_init__
                    return _MINTED(state.token, self._next_id(), state.generation, name, shape,
                                   order, nbytes, size)
        return self._mint_checked(shape, name, order)

    @staticmethod
    def _dtype_entry(dtype: Any) -> tuple[str, int]:
        name = dtype_name(dtype)
        entry = (name, as_dtype(name).itemsize)
        try:
            if len(_DTYPE_CACHE) < 256:
                _DTYPE_CACHE[dtype] = entry
        except TypeError:  # unhashable: not cached
            pass
        return entry

    def _mint_checked(self, shape: Any, dtype: Any, order: str) -> BufRef:
        """:meth:`_mint` with every check spelled out (and its errors)."""
        if not isinstance(order, str) or order not in ("C", "F"):
            raise InvalidMessage(f"order must be 'C' or 'F', got {order!r}", field="order")
        name = dtype_name(dtype)
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (int(shape),)
        if not isinstance(shape, (tuple, list)) or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in shape):
            raise InvalidMessage(f"shape must be a tuple of ints, got {shape!r}", field="shape")
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise InvalidMessage(f"shape must not have negative sizes, got {shape}",
                                 field="shape")
        nbytes = math.prod(shape) * as_dtype(name).itemsize
        if nbytes > min(self.props.total_bytes, MAX_NBYTES):
            raise OutOfMemory(f"{nbytes} bytes requested but device {self.ordinal} has "
                              f"{self.props.total_bytes} bytes in all", nbytes, None,
                              self.props.total_bytes)
        return BufRef(self._state.token, self._next_id(), self._state.generation, name, shape,
                      order, nbytes)

    def alloc(self, shape: Any, dtype: Any = np.float32, order: str = "C") -> BufferFuture:
        """Allocate an uninitialized buffer; C order (row-major) by default, as NumPy's."""
        # _check_open and _new_buffer written out: a pipelined allocation is mostly call
        # overhead on the client (docs/performance.md)
        state = self._state
        if not state.accepting:
            raise state.refusal
        ref = self._mint(shape, dtype, order)
        buf = GpuBuffer(self, ref)
        buf._named = False  # only the Alloc names it yet
        if self._live is not None:
            self._live[ref.id] = buf
        fut = BufferFuture(buf)
        # the reference was minted (and so checked) just now: the message is built without
        # validating it again
        self._post(_ALLOC(ref), fut)
        return fut

    def to_device(self, array: Any, order: str | None = None) -> BufferFuture:
        """A new buffer holding ``array``: its shape, dtype and (unless ``order`` is given) its
        memory order ('F' for Fortran-ordered arrays, else 'C'). Resolves once the data is on
        the device."""
        self._check_open()
        arr = _host_array(array, "array")
        if order is None:
            order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
        ref = self._mint(arr.shape, arr.dtype, order)
        buf = self._new_buffer(ref)
        raw = _flat_bytes(arr, order)
        if self._fuse_alloc and self._recorder is None:  # one message: AllocThen + the copy
            fut = self._staging.upload_new(buf, raw)
            if fut is not None:
                return fut
        self._post(Alloc(ref), PointerSink(buf))
        copied = self._staging.upload(ref, raw, 0)
        return buffer_after(copied, buf)

    def from_dlpack(self, obj: Any) -> BufferFuture:
        """Adopt a DLPack producer's memory (a torch/CuPy/JAX array on this GPU; a NumPy array
        on the simulator) as a buffer, zero copy; the producer stays alive until the buffer is
        freed. See :func:`gpumsg.client._dlpack.from_dlpack`."""
        from ._dlpack import from_dlpack

        # the classes handed over: dlpack.py imports nothing of buffers.py, which imports it
        return from_dlpack(self, obj, future=BufferFuture, sink=PointerSink, buffer=GpuBuffer)

    def free(self, buffer: Any) -> Future:
        """Free a buffer (the same as ``buffer.free()``)."""
        if isinstance(buffer, BufferFuture):
            buffer = buffer.buffer
        if not isinstance(buffer, GpuBuffer):
            raise InvalidMessage(f"free() takes a GpuBuffer, got {type(buffer).__name__}")
        return buffer.free()

    def _free(self, ref: BufRef) -> Future:
        fut = GpuFuture()
        self._post(Free(ref), fut)
        return fut

    def _post_free(self, ref: BufRef, named: bool = True) -> None:
        """From a finalizer: no lock (the finalizer may run inside ``_post``), no reply.
        Where nothing posted can still name the buffer (service/worker.py: ``drop``), it is
        handed to the executor instead, which frees it at its next turn's start or end."""
        state = self._state
        if state.accepting and ref.generation == state.generation:
            if not self._fuse_alloc or not self._worker.drop(ref, named):
                self._submit(_FREE(ref), None)  # a BufRef, its own: nothing to check

    def copy_from_host(self, dst: Any, array: Any, offset: int = 0) -> Future:
        """Copy ``array`` into ``dst``. An array of ``dst``'s shape is copied whole (any memory
        order); a 1-D array is copied flat to element ``offset``. Resolves to None."""
        state = self._state
        if not state.accepting:
            raise state.refusal
        ref = getattr(dst, "ref", None)  # a live buffer's reference (raises if stale or freed)
        # the common case checked here, without building the message: a whole live buffer of
        # this device from an array of its dtype (seen before) and size, nothing recording
        if type(ref) is BufRef and type(array) is np.ndarray and type(offset) is int and \
                offset == 0 and ref.owner == state.token and \
                ref.generation == state.generation and self._recorder is None and \
                array.nbytes == ref.nbytes and (array.ndim == 1 or array.shape == ref.shape) \
                and accepted_array_dtype(array.dtype) == ref.dtype:
            return self._staging.upload(ref, _flat_bytes(array, ref.order), 0)
        arr = _host_array(array, "array")
        msg = CopyFromHost(dst, arr, self._byte_offset(dst, offset))
        return self.send(msg)

    def copy_to_host(self, src: Any, out: np.ndarray | None = None) -> Future:
        """Copy a whole buffer to host memory; resolves to ``out`` or to a new array of the
        buffer's shape, dtype and order. ``out`` must match them and be contiguous."""
        state = self._state
        if not state.accepting:
            raise state.refusal
        ref = getattr(src, "ref", None)  # a live buffer's reference (raises if stale or freed)
        if type(ref) is not BufRef or ref.owner != state.token or \
                ref.generation != state.generation:
            msg = CopyToHost(src)  # says what is wrong with ``src``
            self._check_refs(msg)
            ref = msg.src
        if out is None:
            return self._download(ref, 0, ref.nbytes, None)
        if not isinstance(out, np.ndarray):
            raise InvalidMessage("out must be a NumPy array", field="out")
        if dtype_name(out.dtype, "out") != ref.dtype or out.shape != ref.shape:
            raise InvalidMessage(f"out is {out.dtype}{list(out.shape)} but {ref.describe()} "
                                 "needs the same dtype and shape", field="out")
        contiguous = out.flags.f_contiguous if ref.order == "F" else out.flags.c_contiguous
        if not contiguous or not out.flags.writeable:
            raise InvalidMessage(f"out must be a writable {ref.order}-contiguous array",
                                 field="out")
        return self._staging.download(ref, 0, _flat_bytes(out, ref.order), out)

    def _download(self, ref: BufRef, offset: int, nbytes: int, out: np.ndarray | None) -> Future:
        dtype = as_dtype(ref.dtype)
        if offset == 0 and nbytes == ref.nbytes:
            if nbytes < NEW_ARRAY_LIMIT:  # the common case: made from the staging block
                return self._staging.download_new(ref, dtype)
            result = np.empty(ref.shape, dtype, order=ref.order)  # type: ignore[call-overload]
        elif nbytes % dtype.itemsize == 0 and offset % dtype.itemsize == 0:
            result = np.empty(nbytes // dtype.itemsize, dtype)
        else:
            result = np.empty(nbytes, np.uint8)
        return self._staging.download(ref, offset, _flat_bytes(result, ref.order), result,
                                      fresh=True)

    @staticmethod
    def _byte_offset(buf: Any, offset: int) -> int:
        if type(offset) is int and offset == 0:
            return 0
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
            raise InvalidMessage(f"offset must be a non-negative element count, got {offset!r}",
                                 field="offset")
        ref = as_ref(buf, "dst")
        return int(offset) * as_dtype(ref.dtype).itemsize

    def copy(self, dst: Any, src: Any) -> Future:
        """Copy buffer ``src`` into buffer ``dst`` (device to device), checked: the two must
        have the same dtype, the same shape and the same memory layout. Buffers of different
        orders are refused (InvalidMessage naming both orders), never silently transposed: a
        reordering copy would be a transpose, which this call does not do (copy through the
        host, or compute the transpose, e.g. with ``blas.matmul`` or ``blas.gemm``).
        Orders are the same layout, and accepted, where at most one dimension exceeds 1. A
        raw byte copy is :meth:`copy_bytes`. Resolves to None; a repeated copy posts the
        message it built and checked the first time."""
        self._check_open()
        return self._send_entry(self._memo.entry(
            "copy", (dst, src), (), lambda refs: _checked_copy(refs[0], refs[1]),
            ("dst", "src")))

    def copy_bytes(self, dst: Any, src: Any, nbytes: int | None = None, dst_offset: int = 0,
                   src_offset: int = 0) -> Future:
        """Raw device-to-device copy of ``nbytes`` bytes (default: all of ``src`` from
        ``src_offset``), byte offsets. Nothing but the byte ranges is checked: dtype, shape
        and order are not (a f32 buffer copied into a f64 one holds reinterpreted bits; a
        C-ordered one copied into an F-ordered one holds the transpose). Use :meth:`copy` for
        arrays. Resolves to None."""
        self._check_open()
        return self._send_entry(self._memo.entry(CopyDevice, (dst, src),
                                                 (dst_offset, src_offset, nbytes)))

    def copy_peer(self, dst: Any = None, src: Any = None, nbytes: int | None = None,
                  dst_offset: int = 0, src_offset: int = 0, timeout: float = 60.0) -> Future:
        """Copy ``src``, a buffer of another device of this process, into ``dst`` on this device
        (``dst=None``: a new buffer like ``src``; the future resolves to it). Ordered after
        ``src``'s last write by an event of the source device that this device's stream waits
        on; peer to peer, or staged through pinned host memory when the devices are not peers.
        Byte counts and offsets. See :func:`gpumsg.multi._peer.copy_peer` (raises, timeout)."""
        # the implementation lives a layer up (gpumsg.multi._peer sets it when imported)
        return Device._peer_copy(self, dst, src, nbytes, dst_offset, src_offset, timeout)

    def memset(self, dst: Any, value: int, offset: int = 0, nbytes: int | None = None,
               width: int = 1) -> Future:
        """Fill bytes of ``dst`` with a 1-, 2- or 4-byte pattern (byte offset and count). A
        repeated fill posts the message it built and checked the first time."""
        self._check_open()
        return self._send_entry(self._memo.entry(Memset, (dst,), (value, offset, nbytes, width)))

    # -- user kernels and graphs (libs/nvrtc, client/graph.py) -------------------------------------
    def compile(self, source: str, name: str, options: Any = (), headers: Any = None,
                name_expressions: Any = (), signature: Any = None, cache: bool = True) -> Future:
        """Compile a CUDA C++ kernel for this device: ``dev.nvrtc.compile``."""
        return self.nvrtc.compile(source, name, options, headers, name_expressions, signature,
                                    cache)

    def load_module(self, image: bytes, kernels: dict[str, Any]) -> Future:
        """Load a precompiled CUBIN/PTX image: ``dev.nvrtc.load_module``."""
        return self.nvrtc.load_module(image, kernels)

    def launch(self, kernel: Any, grid: Any, block: Any, args: Any = (), shared: int = 0,
               reads: Any = None, writes: Any = None) -> Future:
        """Launch a compiled kernel on the compute stream: ``dev.nvrtc.launch``."""
        return self.nvrtc.launch(kernel, grid, block, args, shared, reads, writes)

    def graph(self, **named: Any) -> Graph:
        """``with dev.graph() as g:`` records the messages sent inside; ``g.launch()`` replays
        them as one CUDA graph. Buffers passed by name can be re-pointed: ``g.update(a=a2)``."""
        return Graph(self, named)

    # -- BLAS -------------------------------------------------------------------------------------
    def sgemm(self, a: Any, b: Any, c: Any, m: int | None = None, n: int | None = None,
              k: int | None = None, alpha: float = 1.0, beta: float = 0.0, transa: Any = "N",
              transb: Any = "N", lda: int | None = None, ldb: int | None = None,
              ldc: int | None = None) -> Future:
        """C = alpha op(A) op(B) + beta C in float32 (cuBLAS's sgemm). Each buffer is read in
        its own order: a 2-D buffer is the matrix its shape and order say (a C-ordered C is
        computed as the column-major C^T = op(B)^T op(A)^T); ``m``, ``n``, ``k`` and the leading
        dimensions default from the shapes, and an explicit one contradicting a buffer is
        refused naming the field and the order. Flat buffers are column-major storage with
        explicit dimensions (:mod:`gpumsg.libs.cublas._order`). Resolves to None."""
        state = self._state
        if not state.accepting:
            raise state.refusal
        # the buffers' ``ref`` raises if one is freed or stale; the message checks the rest
        ra, rb, rc = getattr(a, "ref", a), getattr(b, "ref", b), getattr(c, "ref", c)
        # A repeated call reuses its (immutable) message: validating and building one is half
        # the client's time. Only plain arguments are memoized, so that the key's equality
        # (1 == 1.0 == True) cannot stand in for a check; the references by identity.
        plain = ((m is None or type(m) is int) and (n is None or type(n) is int)
                 and (k is None or type(k) is int) and type(alpha) is float
                 and alpha != 0.0 and type(beta) is float and type(transa) is str
                 and type(transb) is str and (lda is None or type(lda) is int)
                 and (ldb is None or type(ldb) is int) and (ldc is None or type(ldc) is int))
        if plain:
            key = (id(ra), id(rb), id(rc), m, n, k, alpha, beta, transa, transb, lda, ldb, ldc)
            kept = self._sgemm_memo.get(key)
            if kept is None or kept[1] is not ra or kept[2] is not rb or kept[3] is not rc:
                msg = self._new_sgemm(ra, rb, rc, m, n, k, alpha, beta, transa, transb, lda,
                                      ldb, ldc)
                memo = self._sgemm_memo
                if len(memo) >= _MEMO_SIZE:
                    memo.clear()
                # holds ra, rb, rc: their ids are not reused while it lives
                memo[key] = (msg, ra, rb, rc)
            else:
                msg = kept[0]
        else:
            msg = self._new_sgemm(ra, rb, rc, m, n, k, alpha, beta, transa, transb, lda, ldb,
                                  ldc)
        fut = GpuFuture()
        self._post(msg, fut)
        return fut

    def _new_sgemm(self, a: Any, b: Any, c: Any, m: Any, n: Any, k: Any, alpha: Any,
                   beta: Any, transa: Any, transb: Any, lda: Any, ldb: Any, ldc: Any) -> Sgemm:
        a, b, c, m, n, k, transa, transb, lda, ldb, ldc = gemm_args(
            a, b, c, m, n, k, transa, transb, lda, ldb, ldc)
        msg = Sgemm(a, b, c, m, n, k, alpha, beta, transa, transb, lda, ldb, ldc)
        token = self._state.token
        if msg.a.owner != token or msg.b.owner != token or msg.c.owner != token:
            self._check_refs(msg)
        return msg

    # -- introspection ----------------------------------------------------------------------------
    def stats(self) -> Future:
        """Resolves to a :class:`~gpumsg.service._stats.DeviceLoad`."""
        fut = GpuFuture()
        self._post(_STATS, fut)  # messages are immutable: one Stats serves every call
        return fut

    def synchronize(self, stream: Stream | None = None) -> Future:
        """Resolves once everything sent before has completed (on ``stream`` only, if given:
        a :meth:`stream` of this device)."""
        if stream is not None:
            if type(stream) is not Stream or stream.device is not self:
                raise InvalidMessage(f"synchronize: stream: expected a stream of this device "
                                     f"(dev.stream()), got {type(stream).__name__}",
                                     field="stream")
            return stream.synchronize()
        return self.send(Synchronize())

    def stream(self, priority: int = 0) -> Stream:
        """A compute stream of the caller's own (``with dev.stream() as s:`` runs what this
        thread sends there; ordering against other streams stays automatic). ``priority``
        as CUDA's: lower runs first, 0 the default. See :class:`~gpumsg.client._stream.Stream`."""
        return Stream(self, priority)

    def snapshot_context(self) -> Future:
        return self.send(SnapshotContext())

    def snapshot_stream(self, stream: str = "compute") -> Future:
        return self.send(SnapshotStream(stream))

    def snapshot_children(self) -> Future:
        return self.send(SnapshotChildren())

    def open_libraries(self, *names: str) -> Future:
        """Make this device's handles of the named libraries now rather than at their first
        call (``"cublas"``, ``"cublaslt"``, ``"cudnn"``, ``"cufft"``, ...; cuBLAS's handle takes
        150-190 ms on the H100). Resolves to the names of every library open on the device,
        in opening order; with no names it only asks. Raises InvalidMessage for a name gpumsg
        does not know."""
        for name in names:
            if not isinstance(name, str):
                raise InvalidMessage(f"open_libraries: names: expected library names (str), got "
                                     f"{type(name).__name__}", field="names")
            if name not in LIBRARIES:
                raise InvalidMessage(f"open_libraries: no library {name!r}; known: "
                                     f"{', '.join(LIBRARIES)}", field="names")
        return self.send(OpenLibraries(tuple(names)))

    def _compute_stream_handle(self) -> int:
        if self._stream_handle is None:
            self._stream_handle = self._request(SnapshotStream("compute"))
        return self._stream_handle

    def watch_generation(self, after: int | None = None) -> Future:
        """Resolves with the generation once it is greater than ``after`` (default: now)."""
        if after is None:
            after = self._state.generation
        return self.send(WatchGeneration(after))

    def trim(self) -> Future:
        """Release cached device and pinned memory; resolves to the bytes still reserved."""
        return self.send(TrimMemory())

    def inject_fault(self, kind: str, stream: str = "compute", seconds: float | None = None,
                     count: int = 1) -> Future:
        """See :class:`~gpumsg.messages.device.InjectFault` (needs allow_fault_injection)."""
        return self.send(InjectFault(kind, stream, seconds, count))

    # -- pinned host memory -----------------------------------------------------------------------
    def alloc_pinned(self, shape: Any, dtype: Any = np.float32, order: str = "C") -> GpuFuture:
        """A future of page-locked host memory, a :class:`PinnedHostBuffer`, resolved at once
        (one future per call, like every method). Copies from and to it need no staging."""
        self._check_open()
        ref = self._mint(shape, dtype, order)
        pool = self._staging.pool
        self._staging.user_blocks = True
        nbytes = max(ref.nbytes, 1)
        block = pool.take_cached(nbytes) or pool.grow(nbytes, staging=False)
        fut = GpuFuture()
        fut.set_result(PinnedHostBuffer(self, block, ref.shape, as_dtype(ref.dtype), order))
        return fut

    def _free_pinned(self, block: Any) -> Future:
        fut = ReleasingFuture(self._staging.pool, block)
        self._post(FreePinned(block.id), fut)
        return fut

    def _post_free_pinned(self, block: Any) -> None:
        """From a finalizer: no lock, the block goes back when the device has answered."""
        if self._state.accepting:
            self._submit(FreePinned(block.id), ReleaseOnReply(self._staging.pool, block))

    # -- shutdown ---------------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Finish the work already sent, free everything and stop the device thread. Idempotent.
        Later calls raise :class:`~gpumsg.errors.DeviceClosed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._state.refuse(DeviceClosed(f"device {self.ordinal} is closed"))
            self._worker.stop()
        if threading.current_thread().name.startswith("gpumsg-"):
            # from a future's done-callback, which runs on the service thread that answered
            # it: joining would wait for this very thread. The device winds down by itself.
            threading.Thread(target=self._finish_close, args=(timeout,), daemon=True,
                             name="gpumsg-close").start()
            return
        self._finish_close(timeout)

    def _finish_close(self, timeout: float | None) -> None:
        try:
            self._worker.join(timeout)
        finally:
            _open_devices.discard(self)
            if self._switch_held:
                self._switch_held = False
                SWITCH.exit()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_device(ordinal: int = 0, backend: str | Backend = "auto", isolation: str = "thread",
                memory: MemorySpec = "pool", trace: KernelTrace | None = None,
                allow_fault_injection: bool = False, **options: Any) -> Device:
    """Open a device service.

    ``backend``: ``"auto"`` (the GPU when a CUDA driver and device are present, else the NumPy
    simulator), ``"cuda"``, ``"sim"``, or a Backend instance (thread isolation). ``isolation``:
    ``"thread"`` (the device thread runs in this process) or ``"process"`` (in a supervised
    worker process that is replaced after a fatal error: a poisoned context, a dead worker, an
    operation past ``watchdog`` seconds; at most ``max_restarts`` within ``restart_window``
    seconds; with ``standby`` a spare worker is kept ready so that recovery is immediate).
    ``memory``: ``"pool"``, ``"direct"``, a :class:`~gpumsg.memory._config.MemoryConfig`
    or (thread isolation) a factory. ``trace``: a KernelTrace (thread isolation).
    """
    return Device(ordinal, backend, isolation, memory, trace, allow_fault_injection, **options)


def devices(backend: str = "auto") -> list[dict[str, Any]]:
    """The devices a backend offers: ``[{"ordinal", "name", "backend"}]``, without opening
    a service. ``"auto"``: the GPUs where a driver and a GPU are present, else the simulated
    devices (as many as configured: ``gpumsg.backends.sim._device.SIM_DEVICES``, or the
    ``GPUMSG_SIM_DEVICES`` environment variable); ``"cuda"``: the GPUs (none without a
    driver); ``"sim"``: the simulated devices. The ordinals listed are those open_device
    accepts, and what open_devices() opens."""
    from ..backends import cuda_available

    if backend not in ("auto", "cuda", "sim"):
        raise InvalidMessage(f"backend must be 'auto', 'cuda' or 'sim', got {backend!r}",
                             field="backend")
    if backend in ("auto", "cuda"):
        ok, why = cuda_available()
        if ok:
            from cuda.bindings import driver as cu

            count = cu.cuDeviceGetCount()[1]
            out = []
            for i in range(count):
                dev = cu.cuDeviceGet(i)[1]
                name = cu.cuDeviceGetName(256, dev)[1].split(b"\0", 1)[0].decode()
                out.append({"ordinal": i, "name": name, "backend": "cuda"})
            return out
        if backend == "cuda":
            return []
    from ..backends.sim._device import sim_device_count

    return [{"ordinal": i, "name": "gpumsg simulator", "backend": "sim"}
            for i in range(sim_device_count())]


def _close_all() -> None:
    for dev in list(_open_devices):
        try:
            dev.close(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_close_all)
