"""DeviceContext: everything the device thread owns, and the envelope every kernel goes through.

The envelope (:meth:`DeviceContext.run`) is the one path for work that touches device memory:

1. the handler has resolved its buffers (:meth:`resolve`: live, this device, this generation, and
   not the output of a failed operation);
2. the target stream waits on exactly the other streams it must: for each buffer read, the
   stream that last wrote it; for each buffer written, the last writer and every stream that read
   it since (read-after-write, write-after-read, write-after-write). Same-stream uses need nothing;
3. the library or driver call enqueues the work (trace hooks around it);
4. the buffers record the use: (stream, sequence number);
5. a completion entry joins the stream's pending list; at the end of the batch one event per
   stream marks them all, and the stream's completion thread answers them and drops their
   keep-alives once that event has completed.

Cross-stream waits use *fences*: an event recorded on the producing stream, lazily, the first time
another stream needs it, and reused while it still covers the sequence number needed. Events are
only ever re-recorded on the stream they belong to, so a reused event can only make a wait more
conservative, never wrong.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..backends._base import Backend as _Backend
from ..config import setting
from ..errors import (
    ContextPoisoned,
    CudaError,
    DependencyFailed,
    DeviceClosed,
    GpuError,
    GpuRefStale,
    InvalidMessage,
)
from ..memory._adaptors import BudgetAdaptor, StatisticsAdaptor
from ..memory._config import build_resource
from ..memory._pinned import PinnedPool
from ..messages._base import BufRef, HostRef
from ._completion import CompletionWatcher, Entry, answer_entries, fail_entries
from ._derived import DerivedMemo
from ._executor import Executor
from ._registry import COMPUTE, LIBRARIES, STREAM_INDEX, library_handle
from ._stats import DeviceLoad
from ._trace import OpRecord

__all__ = ["DeviceContext", "DeviceAllocation", "StreamSlot", "SETTLE_SECONDS", "Verdict",
           "dependency_error"]

_log = logging.getLogger("gpumsg")
#: how long the device thread, about to block on an empty mailbox, keeps asking whether its
#: batches have completed before handing them to the watcher threads (it leaves as soon as a
#: message arrives). Small work completes well within it and is answered with no thread hop.
#: Pipelined 64 Mi array calls timed alike with 0, 50, 150 and 400 µs on an H200.
SETTLE_SECONDS = 150e-6
#: entries a caller's turn leaves pending on a stream before it records their event (see
#: flush): a waiting caller, a nudge and the device thread's look record it sooner
LAZY_EVENT = 16
_perf_counter = time.perf_counter
#: compute streams a device may have: its pool and the explicit streams together
MAX_COMPUTE_STREAMS = 32
#: stream indices a device may have (the copy streams and every compute stream)
MAX_STREAMS = MAX_COMPUTE_STREAMS + 2


#: compute streams of a device's pool when the option ``streams`` is not set: one, until the
#: pool has been checked on a GPU (``GPUMSG_STREAMS=4`` turns it on)
DEFAULT_STREAMS = 1
#: the most compute streams a pool may have
MAX_POOL = 16


def pool_size() -> int:
    """The option ``streams`` (``GPUMSG_STREAMS``): compute streams per device, 1 to 16."""
    text = setting("GPUMSG_STREAMS")
    if text is None or not text.strip():
        return DEFAULT_STREAMS
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_POOL:
        raise InvalidMessage(f"GPUMSG_STREAMS: expected a number of compute streams from 1 to "
                             f"{MAX_POOL}, got {text!r}", field="streams")
    return n


def placement_enabled() -> bool:
    """The option ``stream_placement`` (``GPUMSG_STREAM_PLACEMENT``, on by default)."""
    text = (setting("GPUMSG_STREAM_PLACEMENT") or "1").strip().lower()
    return text not in ("0", "no", "off", "false")


def _index(slot: StreamSlot) -> int:
    return slot.index


class DeviceAllocation:
    """A live (or failed) allocation as the device thread tracks it.

    ``write_stream``/``write_seq``: the stream and sequence number of the last write;
    ``reads``: stream -> sequence number of the last read there since that write.
    ``failed``: the error of the last operation that should have written it (its readers fail
    with :class:`~gpumsg.errors.DependencyFailed`); ``alloc_failed``: the allocation itself failed.
    """

    __slots__ = ("ref", "ptr", "write_stream", "write_seq", "reads", "failed", "alloc_failed",
                 "verdict")
    #: memory adopted from another library (service/interop.py): never the resource's to free
    external = False
    #: an adopted read-only tensor: the envelope refuses to write it
    readonly = False

    def __init__(self, ref: BufRef, ptr: int) -> None:
        self.ref = ref
        self.ptr = ptr
        self.write_stream = -1
        self.write_seq = 0
        self.reads: dict[int, int] = {}
        self.failed: BaseException | None = None
        self.alloc_failed = False
        #: the :class:`Verdict` of the operation that last wrote the buffer when that
        #: operation's success is known only at completion (None: no such doubt)
        self.verdict: Verdict | None = None


_VERDICT_LOCK = threading.Lock()


class Verdict:
    """Whether an operation whose failure is known only at completion succeeded: one whose
    completion runs a check (cuSOLVER's ``info``, a count read back) or that read a buffer
    carrying an undecided verdict. The buffers it wrote carry it (``DeviceAllocation.verdict``);
    an operation that reads such a buffer before the verdict is in is *gated*: its reply waits
    for the verdict and fails with :class:`~gpumsg.errors.DependencyFailed` if the producer
    failed, and its own outputs carry its verdict in turn. So a failure reaches every reader,
    whether it was issued before or after the failure was seen, and no failed output reaches
    the host as data."""

    __slots__ = ("error", "decided", "callbacks", "writes")

    def __init__(self, writes: tuple) -> None:
        self.error: BaseException | None = None
        self.decided = False
        self.callbacks: list[Callable[[BaseException | None], None]] | None = None
        self.writes = writes  # the allocations the operation wrote

    def on_decided(self, fn: Callable[[BaseException | None], None]) -> None:
        """Call ``fn(error or None)`` once decided (at once if it is)."""
        with _VERDICT_LOCK:
            if not self.decided:
                if self.callbacks is None:
                    self.callbacks = []
                self.callbacks.append(fn)
                return
        fn(self.error)

    def decide(self, error: BaseException | None) -> None:
        with _VERDICT_LOCK:
            if self.decided:
                return
            self.decided = True
            self.error = error
            callbacks, self.callbacks = self.callbacks, None
            if error is not None:
                # the buffers it wrote hold no valid contents, unless something rewrote them
                for a in self.writes:
                    if a.verdict is self and a.failed is None:
                        a.failed = error
        self.writes = ()
        for fn in callbacks or ():
            fn(error)


def dependency_error(ref: BufRef, cause: BaseException) -> DependencyFailed:
    """The error of an operation that read ``ref``, whose producer failed with ``cause``
    (named by the first failure of the chain: ``root``; ``__cause__`` is ``cause``)."""
    root = getattr(cause, "root", cause)
    via = "" if root is cause else f" {type(cause).__name__}, caused by"
    exc = DependencyFailed(f"{ref.describe()} has no valid contents: the operation that should "
                           f"have produced it failed with{via} {type(root).__name__}: {root}")
    exc.__cause__ = cause
    exc.root = root  # type: ignore[attr-defined]
    return exc


class _GatedReply:
    """The reply of an operation that has a verdict or read undecided buffers: it decides the
    operation's own verdict and answers the caller's ``reply`` only once every producer's
    verdict is in (a failed producer fails it with DependencyFailed)."""

    __slots__ = ("reply", "verdict", "gates", "lock", "left", "value", "error")

    def __init__(self, reply: Any, verdict: Verdict | None,
                 gates: list[tuple[Verdict, BufRef]]) -> None:
        self.reply = reply
        self.verdict = verdict
        self.gates = gates
        self.lock = threading.Lock()
        self.left = len(gates) + 1  # the gates and the operation's own completion
        self.value: Any = None
        self.error: BaseException | None = None

    def set_result(self, value: Any) -> None:
        self.value = value
        self._arrive(None)
        if self.gates:
            gates, self.gates = self.gates, []
            for verdict, ref in gates:
                verdict.on_decided(lambda err, ref=ref: self._arrive(
                    None if err is None else dependency_error(ref, err)))

    def set_exception(self, exc: BaseException) -> None:
        self.gates = []
        with self.lock:
            self.left = 1
        self._arrive(exc)

    def _arrive(self, error: BaseException | None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            if self.left:
                return
        error = self.error
        if self.verdict is not None:
            self.verdict.decide(error)
        reply = self.reply
        if reply is None:
            return
        if error is None:
            reply.set_result(self.value)
        else:
            reply.set_exception(error)

    def set_pointer(self, ptr: int) -> None:  # AllocThen's reply, passed through
        self.reply.set_pointer(ptr)


class StreamSlot:
    """One of the device's streams with its ordering state and completion thread. A compute
    stream also has the handles of the per-stream libraries made for it, what handlers
    derived for it (launchers bound to it), and how many messages were placed on it."""

    __slots__ = ("index", "name", "obj", "raw", "seq", "fence_event", "fence_seq", "fence_owned",
                 "done_seq", "waited", "spare_events", "pending", "watcher", "local", "handed",
                 "answered", "compute", "priority", "libraries", "derived", "placed", "used",
                 "active")

    def __init__(self, index: int, name: str, obj: Any, raw: int, compute: bool = False,
                 priority: int = 0) -> None:
        self.index = index
        self.name = name
        self.obj = obj
        self.raw = raw
        self.compute = compute
        self.priority = priority
        self.libraries: dict[str, Any] = {}  # per-stream handles made for this stream
        self.derived = DerivedMemo()
        self.placed = 0  # messages placed on this stream (service/_placement.py)
        self.used = 0  # when a message was last placed here (the placement's clock)
        self.active = False  # has had work: the turns look at it (DeviceContext.active)
        self.seq = 0  # operations enqueued so far
        self.fence_event: Any = None  # newest event recorded on this stream
        self.fence_seq = 0  # the sequence number it covers
        self.fence_owned = False  # handed to the completion thread (which gives it back)
        #: operations known complete (a batch event seen done by the device thread or the
        #: watcher): other streams need not wait for them. Only grows; a stale read is safe.
        self.done_seq = 0
        self.waited = [0] * MAX_STREAMS  # per other stream: sequence number already waited for
        self.spare_events: list[Any] = []
        self.pending: list[Entry] = []
        self.watcher: CompletionWatcher | None = None
        #: batches (event, entries, seq) issued and kept by the device thread, oldest first
        self.local: deque[tuple[Any, list[Entry]]] = deque()
        self.handed = 0  # batches handed to the watcher (it counts those it answered)
        self.answered = 0  # entries the device thread answered itself

    def in_flight(self) -> int:
        """Operations issued on this stream and not yet seen complete (an upper bound)."""
        return self.seq - self.done_seq


#: CUDA graphs of the device's own repeated driver calls (copies) kept per device
DRIVER_REPLAY_CAPACITY = 64


class DeviceContext:
    """The device thread's world: backend, streams, buffers, memory, libraries, completion."""

    def __init__(self, backend: Any, state: Any, memory: Any, trace: Any = None,
                 allow_fault_injection: bool = False, queue_depth: Callable[[], int] = lambda: 0,
                 in_worker_process: bool = False, pinned_staging_limit: int = 256 << 20) -> None:
        self.backend = backend
        self.state = state
        self.token = state.token
        self.trace = trace
        self.allow_fault_injection = allow_fault_injection
        self.in_worker_process = in_worker_process
        self.queue_depth = queue_depth
        self.current: Any = None  # the message being handled (names traced operations)
        #: one turn at a time: the device thread's batches, callers' own (service/executor.py)
        self.executor = Executor()
        if backend.kind == "sim":  # the simulator names the message in a fault
            backend.issuer = lambda: self.current
        #: while a graph is recorded: the service.graph.Capture that takes the envelope's calls
        self.capture: Any = None
        #: called once with the ContextPoisoned error (a worker process tells its supervisor)
        self.on_poison: Callable[[BaseException], None] | None = None
        #: called with a library's name when its handle is made (a worker process tells its
        #: supervisor, which has the standby worker open the same)
        self.on_library_opened: Callable[[str], None] | None = None
        self.props = backend.open()
        self.streams: list[StreamSlot] = []
        #: the streams that have had work, the only ones each turn looks at (a pool's unused
        #: streams cost a turn nothing)
        self.active: list[StreamSlot] = []
        self.buffers: dict[int, DeviceAllocation] = {}
        #: the libraries' handles of the first compute stream and the device-wide ones, by
        #: name (the first compute stream's ``StreamSlot.libraries``)
        self.libraries: dict[str, Any] = {}
        self._opened: set[str] = set()  # libraries with a handle on some stream
        self.issued = 0
        self.epoch = 0  # see worker.serve: odd while the device thread waits for messages
        #: inside a turn, after an allocation was refused: answer what the executor keeps and
        #: free the buffers that died meanwhile; whether any was freed (the worker sets it;
        #: None where nothing is kept for later, as in a worker process)
        self.reclaim: Callable[[], bool] | None = None
        self.traced = 0
        self.host_registry: dict[int, Any] = {}  # shm segments (process isolation)
        #: block -> why its RegisterHostMemory failed (named when a copy then uses the block)
        self.host_register_errors: dict[int, str] = {}
        self._scratch: Any = None
        #: what handlers derive from repeated messages (service/derived.py), for the compute
        #: stream of the message being handled (``StreamSlot.derived``)
        self.derived: DerivedMemo = None  # type: ignore[assignment]
        #: the device's own repeated driver calls (device-to-device copies) replayed as CUDA
        #: graphs: made on first use (:meth:`driver_bound`)
        self._driver_replays: Any = None
        self._driver_bound: Any = None
        #: how long :meth:`settle` waits for running batches before it hands them over, in
        #: seconds (a worker process sets its own: supervision/worker.py)
        self.settle_seconds = SETTLE_SECONDS
        # backends whose event query does not give other threads a turn pause while settling
        pause = getattr(type(backend), "event_pause", None)
        self._pause = backend.event_pause if pause is not None and \
            pause is not getattr(_Backend, "event_pause", None) else None
        try:
            for name, index in sorted(STREAM_INDEX.items(), key=lambda kv: kv[1]):
                obj = backend.stream_create()
                self.streams.append(StreamSlot(index, name, obj, backend.stream_handle(obj),
                                               compute=index == COMPUTE))
            #: the first compute stream: where messages run that are not placed, and the one
            #: ``snapshot_stream("compute")`` and ``__cuda_array_interface__`` name
            self.home = self.streams[COMPUTE]
            self.home.libraries = self.libraries
            #: the compute stream of the message being handled (the first one between
            #: messages); handlers reach it as COMPUTE through the envelope
            self.compute = self.home
            self.derived = self.home.derived
            #: the compute streams automatic placement chooses from: the first and the pool's
            self.pool = [self.home]
            for i in range(1, pool_size()):
                self.pool.append(self.add_stream(f"compute.{i}"))
            self.placement: Any = None
            if len(self.pool) > 1:
                from ._placement import Placement

                self.placement = Placement(self, placement_enabled())
            self.memory = build_resource(memory, backend)
            self._budget_limit: int | None = None
            self._statistics: StatisticsAdaptor | None = None
            for r in self.memory.stack():
                if isinstance(r, BudgetAdaptor):
                    self._budget_limit = r.limit
                elif isinstance(r, StatisticsAdaptor) and self._statistics is None:
                    self._statistics = r
            self._driver_view: tuple | None = None
            self.pinned = PinnedPool(backend, staging_limit=pinned_staging_limit)
            for slot in self.streams:
                if slot.watcher is None:
                    slot.watcher = CompletionWatcher(self, slot)
        except BaseException:
            self._release_streams()
            backend.close()
            raise

    # -- compute streams ---------------------------------------------------------------------------
    def add_stream(self, name: str, priority: int = 0) -> StreamSlot:
        """Create one more compute stream (the pool's, or an explicit one) with its watcher."""
        if len(self.streams) >= MAX_STREAMS:
            raise InvalidMessage(f"a device has at most {MAX_COMPUTE_STREAMS} compute streams "
                                 "(its pool and its explicit streams together)", field="stream")
        obj = self.backend.stream_create(priority)
        slot = StreamSlot(len(self.streams), name, obj, self.backend.stream_handle(obj),
                          compute=True, priority=priority)
        self.streams.append(slot)
        if self.streams[0].watcher is not None:  # made after the device opened
            slot.watcher = CompletionWatcher(self, slot)
            # it starts after what the other compute streams have issued: memory they
            # published to every compute stream (ScalarScratch) is ordered for it too
            for other in self.streams:
                if other.compute and other is not slot and other.seq:
                    self._wait(slot, other.index, other.seq)
        return slot

    def _activate(self, slot: StreamSlot) -> None:
        if not slot.active:
            slot.active = True
            self.active = sorted((*self.active, slot), key=_index)

    def enter(self, slot: StreamSlot) -> None:
        """Make ``slot`` the compute stream of the message being handled (COMPUTE, the
        handles of per-stream libraries and the derived launchers are its own)."""
        self.compute = slot
        self.derived = slot.derived

    def publish(self) -> None:
        """Make every other compute stream wait for what the current one has issued so far
        (memory allocated there that every stream will use: the memory pool orders a reuse
        only on the allocating stream)."""
        slot = self.compute
        seq = self.next_seq(COMPUTE)
        for other in self.streams:
            if other.compute and other is not slot:
                self._wait(other, slot.index, seq)

    def compute_indices(self) -> tuple[int, ...]:
        """The index of every compute stream that has had work (the first one's always)."""
        return (COMPUTE, *[slot.index for slot in self.active if slot.compute and slot.index])

    # -- buffers -----------------------------------------------------------------------------------
    def _lookup(self, ref: BufRef, field: str) -> DeviceAllocation:
        # Buffer ids are unique in the client process, so one dict lookup finds the buffer
        # only if it is ours and alive; the reason is worked out when it is not found.
        alloc = self.buffers.get(ref.id)
        if alloc is not None:
            return alloc
        if ref.owner != self.token:
            raise InvalidMessage(f"{field}: {ref.describe()} belongs to another device",
                                 field=field)
        if ref.generation != self.state.generation:
            raise GpuRefStale(f"{field}: {ref.describe()} is from generation {ref.generation}; "
                              f"the device is at generation {self.state.generation}")
        raise GpuRefStale(f"{field}: {ref.describe()} was freed")

    def resolve(self, ref: BufRef, field: str) -> DeviceAllocation:
        """The allocation behind ``ref`` for an operation that reads it."""
        alloc = self._lookup(ref, field)
        if alloc.failed is not None:
            exc = dependency_error(ref, alloc.failed)
            exc.args = (f"{field}: {exc}",)
            raise exc
        return alloc

    def resolve_out(self, ref: BufRef, field: str) -> DeviceAllocation:
        """The allocation behind ``ref`` for an operation that only writes it."""
        alloc = self._lookup(ref, field)
        if alloc.alloc_failed:
            raise DependencyFailed(f"{field}: {ref.describe()} was never allocated: "
                                   f"{alloc.failed}") from alloc.failed
        return alloc

    def host_ptr(self, host: HostRef, nbytes: int, field: str) -> int:
        """The address of ``nbytes`` of DMA-able host memory named by ``host``."""
        if host.pool == "pinned":
            block = self.pinned.get(host.block)
            if block is None or not block.in_use:
                raise InvalidMessage(f"{field}: pinned block {host.block} is not allocated",
                                     field=field)
            size = block.nbytes
            base = block.ptr
        else:
            seg = self.host_registry.get(host.block)
            if seg is None:
                why = self.host_register_errors.get(host.block)
                raise InvalidMessage(f"{field}: shared-memory segment {host.block} is not "
                                     "registered with this worker"
                                     + (f" (its registration failed: {why})" if why else ""),
                                     field=field)
            size = seg.nbytes
            base = seg.ptr
        if host.offset + nbytes > size:
            raise InvalidMessage(f"{field}: {nbytes} bytes at offset {host.offset} exceed the "
                                 f"host block of {size} bytes", field=field)
        return base + host.offset

    def library(self, name: str) -> Any:
        """This device's handle for a CUDA library, created on first use: the compute
        stream's own for a per-stream library (``register_library(per_stream=True)``), else
        the device's."""
        lib = self.compute.libraries.get(name)
        if lib is None:
            lib = self._open_library(name)
        return lib

    def _open_library(self, name: str) -> Any:
        slot = self.compute
        spec = LIBRARIES.get(name)
        if spec is not None and not spec.per_stream and slot is not self.home:
            # one handle for the device, made with the first compute stream current
            lib = self.libraries.get(name)
            if lib is None:
                self.compute = self.home
                try:
                    lib = self._open_library(name)
                finally:
                    self.compute = slot
            slot.libraries[name] = lib
            return lib
        first = self.handles(name)
        lib = library_handle(name, self.backend.kind, self)
        slot.libraries[name] = lib
        plans = getattr(first[0], "plans", None) if first else None
        if plans is not None and getattr(lib, "plans", None) is not None:
            lib.plans.resize(plans.capacity)  # a capacity the caller chose holds on every stream
        if name not in self._opened:
            self._opened.add(name)
            if self.on_library_opened is not None:
                self.on_library_opened(name)
        return lib

    def handles(self, name: str) -> list[Any]:
        """Every handle of library ``name`` made so far, the first compute stream's first
        (none is made here: asking is not using)."""
        return self.over_handles(name, lambda lib: lib)

    def over_handles(self, name: str, fn: Callable[[Any], Any]) -> list[Any]:
        """``fn(handle)`` for every handle of library ``name`` made so far, the first compute
        stream's first, each with its own stream current (what it frees, a plan's work area
        say, is then ordered behind that stream's work); none is made here."""
        out: list[Any] = []
        seen: list[Any] = []
        current = self.compute
        try:
            for slot in self.streams:
                lib = slot.libraries.get(name)
                if lib is None or any(lib is s for s in seen):
                    continue
                seen.append(lib)
                self.enter(slot)
                out.append(fn(lib))
        finally:
            self.enter(current)
        return out

    def stream_libraries(self) -> list[Any]:
        """Every library handle the device made, once each."""
        seen: dict[int, Any] = {}
        for slot in self.streams:
            for lib in slot.libraries.values():
                seen.setdefault(id(lib), lib)
        return list(seen.values())

    def driver_bound(self) -> Callable[..., Callable[[Any], None]]:
        """``bound(tag, fn, stream, *args)``: the launcher of the device's own driver call
        ``fn(stream, *args)`` (a device-to-device copy) for a handler that keeps it per
        message. On CUDA a repeated call is replayed as a CUDA graph (``GraphReplays``: one
        launch through ctypes, holding the GIL, where the binding's call converts its
        arguments and lets a posting caller take the GIL); ``GPUMSG_DRIVER_REPLAY=0``, and the
        simulator, call ``fn`` each time. ``args`` must be plain values that say everything
        ``fn`` issues."""
        bound = self._driver_bound
        if bound is None:
            from ..backends.cuda._replays import device_replays, direct_bound, enabled

            if self.backend.kind == "cuda" and enabled("GPUMSG_DRIVER_REPLAY"):
                self._driver_replays = device_replays(self, DRIVER_REPLAY_CAPACITY)
                bound = self._driver_replays.bound
            else:
                bound = direct_bound
            self._driver_bound = bound
        return bound

    def driver_replay_info(self) -> dict[str, Any]:
        """The driver calls' replays: ``{"enabled": False}`` until made or where off."""
        r = self._driver_replays
        return {"enabled": False} if r is None else {"enabled": True, **r.info()}

    @property
    def scratch(self) -> Any:
        """Result slots for reductions (created on first use)."""
        if self._scratch is None:
            from ._scratch import ScalarScratch

            self._scratch = ScalarScratch(self)
        return self._scratch

    # -- the envelope ------------------------------------------------------------------------------
    def run(self, reply: Any, stream: int, reads: tuple, writes: tuple,
            fn: Callable[..., Any], *args: Any, value: Any = None,
            finish: Callable[[Any, BaseException | None], Any] | None = None) -> None:
        """Issue ``fn(stream_obj, *args)`` on ``stream`` (COMPUTE: the compute stream the
        message was placed on) after the waits ``reads`` and ``writes`` (DeviceAllocations)
        need; answer ``reply`` with ``value`` at completion."""
        if self.capture is not None:  # recording a graph (service/graph.py)
            return self.capture.issue(self, stream, reads, writes, fn, args, finish)
        # reads whose producer's verdict is not in yet gate this operation's answer; one
        # already failed fails it now
        gates = None
        for a in reads:
            v = a.verdict
            if v is not None:
                if v.decided:
                    if v.error is not None:
                        exc = dependency_error(a.ref, v.error)
                        if finish is not None:
                            finish(None, exc)
                        raise exc
                    a.verdict = None
                else:
                    if gates is None:
                        gates = []
                    gates.append((v, a.ref))
        verdict = None
        if gates is not None or (finish is not None and writes):
            if writes:
                verdict = Verdict(writes)
            reply = _GatedReply(reply, verdict, gates or [])
        slot = self.streams[stream] if stream else self.compute
        stream = slot.index
        waited = slot.waited
        for a in reads:  # read after write on another stream
            ws = a.write_stream
            if ws != stream and ws >= 0 and waited[ws] < a.write_seq:
                self._wait(slot, ws, a.write_seq)
        for a in writes:  # write after write or read on another stream (_order_write, inlined)
            if a.readonly:
                self._refuse_readonly(a, finish)
            ws = a.write_stream
            if ws != stream and ws >= 0 and waited[ws] < a.write_seq:
                self._wait(slot, ws, a.write_seq)
            if a.reads:
                for t, seq in a.reads.items():
                    if seq > waited[t] and t != stream:
                        self._wait(slot, t, seq)
        op = None
        if self.trace is not None:
            self.traced += 1
            op = OpRecord(self.traced, type(self.current).__name__, slot.name)
            self.trace.before_enqueue(op)
        try:
            fn(slot.obj, *args)
        except BaseException as exc:
            if op is not None:
                op.error = exc
                self.trace.after_enqueue(op)
            if finish is not None:
                finish(None, exc)
            raise
        if op is not None:
            self.trace.after_enqueue(op)
        seq = slot.seq = slot.seq + 1
        if seq == 1:
            self._activate(slot)
        for a in reads:
            a.reads[stream] = seq
        for a in writes:
            a.write_stream = stream
            a.write_seq = seq
            if a.reads:
                a.reads = {}
            # the verdict first: a failing verdict marks only what still carries it
            a.verdict = verdict
            a.failed = None
        slot.pending.append((reply, value, finish, op))

    def _refuse_readonly(self, a: DeviceAllocation, finish: Callable | None) -> None:
        exc = InvalidMessage(f"{a.ref.describe()} was imported read-only (DLPack): "
                             f"{type(self.current).__name__} would write it")
        if finish is not None:
            finish(None, exc)
        raise exc

    def _order_write(self, slot: StreamSlot, a: DeviceAllocation) -> None:
        """Make ``slot`` wait for every earlier use of ``a`` on other streams."""
        stream = slot.index
        ws = a.write_stream
        if ws != stream and ws >= 0 and slot.waited[ws] < a.write_seq:
            self._wait(slot, ws, a.write_seq)
        for t, seq in list(a.reads.items()):
            if t != stream and seq > slot.waited[t]:
                self._wait(slot, t, seq)

    def _wait(self, slot: StreamSlot, other: int, seq: int) -> None:
        src = self.streams[other]
        if src.done_seq >= seq:  # already complete: the newest fence may cover far more work
            slot.waited[other] = seq
            return
        if src.fence_seq < seq or src.fence_event is None:
            self._record_fence(src, owned=False)
        self.backend.stream_wait_event(slot.obj, src.fence_event)
        slot.waited[other] = src.fence_seq

    def _record_fence(self, slot: StreamSlot, owned: bool) -> Any:
        event = slot.spare_events.pop() if slot.spare_events else self.backend.event_create()
        self.backend.event_record(event, slot.obj)
        old = slot.fence_event
        if old is not None and not slot.fence_owned and old is not event:
            slot.spare_events.append(old)
        slot.fence_event = event
        slot.fence_seq = slot.seq
        slot.fence_owned = owned
        return event

    def complete(self, reply: Any, stream: int, value: Any = None,
                 finish: Callable[[Any, BaseException | None], Any] | None = None) -> None:
        """Answer ``reply`` once the work already on ``stream`` has completed."""
        slot = self.streams[stream] if stream else self.compute
        if not slot.active:
            self._activate(slot)
        slot.pending.append((reply, value, finish, None))

    @staticmethod
    def reply_now(reply: Any, value: Any = None) -> None:
        if reply is not None:
            reply.set_result(value)

    def order_after_uses(self, stream: int, a: DeviceAllocation) -> None:
        """Make ``stream`` wait for every use of ``a`` on other streams (before freeing it)."""
        self._order_write(self.streams[stream] if stream else self.compute, a)

    def next_seq(self, stream: int) -> int:
        """Count a stream-ordered operation issued outside :meth:`run` (an allocation)."""
        slot = self.streams[stream] if stream else self.compute
        slot.seq += 1
        if slot.seq == 1:
            self._activate(slot)
        return slot.seq

    # -- batches -----------------------------------------------------------------------------------
    def flush(self, lazy: bool = False) -> None:
        """End of a batch: one event per stream with pending entries. The device thread keeps
        the batch (:meth:`reap` answers it) unless the stream's watcher still has earlier
        batches, which it must answer first. ``lazy`` (a caller's turn of one message): a
        stream keeps fewer than :data:`LAZY_EVENT` entries pending for a later turn's event
        (a waiting caller's, the device thread's), so that pipelined calls share events as a
        batch's messages do."""
        least = LAZY_EVENT if lazy else 1
        for slot in self.active:
            if len(slot.pending) >= least:
                entries, slot.pending = slot.pending, []
                try:
                    event = self._record_fence(slot, owned=True)
                except CudaError as exc:
                    self.on_async_error(exc, entries)
                    fail_entries(entries, self.state.poisoned or exc)
                    continue
                self.issued += len(entries)
                if slot.handed != slot.watcher.batches:  # type: ignore[union-attr]
                    slot.handed += 1
                    slot.watcher.submit(event, entries, slot.fence_seq)  # type: ignore[union-attr]
                else:
                    slot.local.append((event, entries, slot.fence_seq))

    def reap(self) -> Any:
        """Answer the device thread's batches whose events have completed, oldest first per
        stream. Returns the oldest event still running (of the last stream that has one), or
        None when every kept batch is answered."""
        running = None
        query = self.backend.event_query
        trace = self.trace
        for slot in self.active:
            local = slot.local
            while local:
                event, entries, seq = local[0]
                try:
                    if not query(event):
                        running = event
                        break
                except CudaError as exc:
                    local.popleft()
                    slot.answered += len(entries)
                    fail_entries(entries, self.on_async_error(exc, entries))
                else:
                    local.popleft()
                    if seq > slot.done_seq:
                        slot.done_seq = seq
                    # counted before answering: a waiter the answer wakes reads the count
                    slot.answered += len(entries)
                    answer_entries(entries, trace)
                slot.spare_events.append(event)
        return running

    def keeps_batches(self) -> bool:
        """Whether the executor keeps batches not answered yet (no watcher has them)."""
        for slot in self.active:  # a loop, not any(): asked at the end of every caller's turn
            if slot.local or slot.pending:
                return True
        return False

    def oldest_running(self) -> Any:
        """The event of the oldest batch the executor keeps (None: it keeps none)."""
        for slot in self.active:
            if slot.local:
                return slot.local[0][0]
        return None

    def settle(self, waiting: Callable[[], int]) -> None:
        """Before the device thread blocks on an empty mailbox: answer the batches that complete
        within ``settle_seconds`` (:data:`SETTLE_SECONDS` unless set), leave at once when
        ``waiting()`` (messages arrived), and hand what is still running to the watcher
        threads."""
        running = self.reap()
        if running is None:
            return
        deadline = _perf_counter() + self.settle_seconds
        pause = self._pause
        query = self.backend.event_query
        while not waiting():
            try:
                done = query(running)
            except CudaError:
                done = True  # reap reports it
            if done:
                running = self.reap()
                if running is None:
                    return
            elif _perf_counter() > deadline:
                self.hand_over()
                return
            elif pause is not None:
                pause(running, 20e-6)

    def hand_over(self) -> None:
        """Give every batch the device thread keeps to its stream's watcher (in order)."""
        for slot in self.active:
            local = slot.local
            while local:
                event, entries, seq = local.popleft()
                slot.handed += 1
                slot.watcher.submit(event, entries, seq)  # type: ignore[union-attr]

    def poll(self) -> None:
        """Between batches: finish deferred frees, keep the pinned cache bounded."""
        self.memory.poll()
        self.pinned.enforce_cache_limit()

    def in_flight(self) -> int:
        pending = 0
        for slot in self.active:
            pending += len(slot.pending)
        return self.issued + pending - self.completed()

    def completed(self) -> int:
        done = 0
        for slot in self.active:
            done += slot.watcher.completed + slot.answered  # type: ignore[union-attr]
        return done

    # -- failure -----------------------------------------------------------------------------------
    def on_async_error(self, exc: CudaError, entries: list[Entry]) -> GpuError:
        """An error observed at completion (or at any later call): sticky errors poison the
        device. Returns the error to fail the affected operations with."""
        if not exc.sticky:
            return exc
        names = sorted({op.name for *_, op in entries if op is not None})
        where = f" (pending: {', '.join(names)})" if names else ""
        return self.poison(exc, f"observed at completion{where}")

    def poison(self, exc: CudaError, where: str) -> ContextPoisoned:
        """Fail closed after a sticky error: refuse new work, bump the generation, fail every
        pending answer. Idempotent; callable from any of the device's threads."""
        state = self.state
        with state.lock:
            first = state.poisoned is None
            if first:
                hint = ("the worker process is replaced automatically" if self.in_worker_process
                        else "a CUDA context cannot be repaired inside the process that hit this; "
                             "open the device with isolation='process' to recover automatically")
                state.poisoned = ContextPoisoned(
                    f"device {state.ordinal} context poisoned by {exc.name} ({exc.code}) "
                    f"{where}: {hint} [{exc}]", exc.code, exc.name)
        if first:
            state.refuse(state.poisoned)
            state.bump()
            if self.on_poison is not None:
                self.on_poison(state.poisoned)
        return state.poisoned  # type: ignore[return-value]

    def mark_outputs_failed(self, msg: Any, error: BaseException) -> None:
        """A message failed: the buffers it should have written hold no valid contents."""
        for ref in msg.written():
            if ref.owner != self.token or ref.generation != self.state.generation:
                continue
            alloc = self.buffers.get(ref.id)
            if alloc is not None and not alloc.alloc_failed and not alloc.readonly:
                alloc.failed = error

    def fail_pending(self, error: BaseException) -> None:
        """Fail the work not yet answered: this batch's entries and the batches the device
        thread keeps (batches at a watcher fail there, at their event)."""
        for slot in self.active:
            entries, slot.pending = slot.pending, []
            fail_entries(entries, error)
            while slot.local:
                event, kept, _ = slot.local.popleft()
                slot.answered += len(kept)
                fail_entries(kept, error)

    # -- stats ------------------------------------------------------------------------------------
    def load(self) -> DeviceLoad:
        # The driver's numbers (free memory, pool usage) cost microseconds to ask for: they are
        # re-read whenever this device allocated or freed since, and at most 1 ms later anyway.
        stats = self._statistics
        marker = stats.changes() if stats is not None else None
        now = time.monotonic()
        view = self._driver_view
        if view is None or view[4] != marker or now - view[5] > 1e-3:
            usage = self.memory.usage()
            free, total = self.backend.mem_info()
            view = self._driver_view = (free, total, usage.reserved, usage.used, marker, now)
        p = self.props
        completed = pending = 0
        for slot in self.active:
            completed += slot.watcher.completed + slot.answered  # type: ignore[union-attr]
            pending += len(slot.pending)
        placement = self.placement
        return DeviceLoad(
            p.name, p.ordinal, self.backend.kind, p.compute_capability, self.state.generation,
            view[0], view[1], view[2], view[3], self._budget_limit, self.pinned.reserved,
            self.queue_depth(), self.issued + pending - completed, completed,
            stats.statistics() if stats is not None else None,
            tuple(sorted(getattr(self, "workspace_bytes", {}).items())),
            () if placement is None else placement.counts())

    def forget_driver_view(self) -> None:
        """Make the next Stats ask the driver (after trimming, say)."""
        self._driver_view = None

    # -- shutdown ---------------------------------------------------------------------------------
    def shutdown(self, timeout: float | None) -> None:
        """Wait for the work in flight, free everything, release the context. With a poisoned
        context only host-side resources are released."""
        self.flush()
        self.hand_over()
        for slot in self.streams:
            slot.watcher.stop()
        drained = all(slot.watcher.join(timeout) for slot in self.streams)
        if not drained:  # what is still running will not be answered: fail it, typed
            err = DeviceClosed(f"device {self.props.ordinal} closed while this operation was "
                               f"still running (not finished within {timeout} s)")
            for slot in self.streams:
                slot.watcher.abandon(err)
        if not drained or self.state.poisoned is not None:
            self._release_host_side()
            return
        try:
            external = []
            for a in list(self.buffers.values()):
                if a.external:  # adopted memory goes back to its producer (service/interop)
                    external.append(a)
                elif a.ptr:
                    self.order_after_uses(COMPUTE, a)
                    self.memory.deallocate(a.ptr, a.ref.nbytes, self.compute.obj)
            self.buffers.clear()
            for slot in self.streams:
                self.backend.stream_synchronize(slot.obj)
            for a in external:
                a.drop(self)  # type: ignore[attr-defined]
            for seg in self.host_registry.values():
                seg.close(self.backend)
            self.host_registry.clear()
            if self._scratch is not None:
                self._scratch.close()
            for lib in self.stream_libraries():
                lib.close()
            for slot in self.streams:
                slot.libraries.clear()
            if self._driver_replays is not None:
                self._driver_replays.close()
            self.memory.close()
            self.pinned.close()
            for slot in self.streams:
                for ev in slot.spare_events:
                    self.backend.event_destroy(ev)
                if slot.fence_event is not None and not slot.fence_owned:
                    self.backend.event_destroy(slot.fence_event)
                slot.spare_events.clear()
            self._release_streams()
        except GpuError:
            self._release_host_side()
            return
        self.backend.close()

    def _release_streams(self) -> None:
        for slot in self.streams:
            try:
                self.backend.stream_destroy(slot.obj)
            except GpuError:
                pass
        self.streams.clear()

    def _release_host_side(self) -> None:
        """After a poisoned context or a hang: nothing more can be asked of the GPU. Pinned host
        memory stays mapped until the process exits (freeing it needs the context)."""
        self.buffers.clear()
        for slot in self.streams:
            slot.libraries.clear()
        for seg in self.host_registry.values():
            seg.close()
        self.host_registry.clear()
        _log.warning("device %d closed without releasing its GPU resources (poisoned context or "
                     "work that did not finish)", self.props.ordinal)
