"""The cuFFT plans of one device (device thread).

cuFFT has no library handle: each plan is one. Plans live in an LRU cache
(:class:`~gpumsg.service._plans.PlanCache`) keyed by the :class:`~gpumsg.messages.cufft.FftSpec`,
which holds everything that changes a plan (sizes, kind, precision, batch, layout, in place);
the cache belongs to one device. Each plan is made with ``cufftSetAutoAllocation(0)`` and given a
work area from the device's memory pool (``cufftSetWorkArea``), allocated stream-ordered on the
compute stream. Execution binds the plan to the issuing stream (``cufftSetStream`` whenever that
stream differs from the one it was last bound to).

Eviction never waits on the GPU: the evicted plan's work area goes back to the pool
stream-ordered behind the work already queued, and ``cufftDestroy`` (which frees the plan's own
device memory and may synchronize) is deferred until an event recorded at eviction has
completed; it is retried each time a plan is made, and at close (after the streams drained).
A plan that a CUDA graph recorded is never destroyed before the device closes: the graph's nodes
use its memory.

A repeated execution (the same plan, pointers, direction, repetition and scale on the same
stream) is captured as a CUDA graph the second time and replayed from then on with one
``cuGraphLaunch`` (:class:`~gpumsg.backends.cuda._replays.GraphReplays`; ``GPUMSG_FFT_REPLAY=0``
turns it off). cuFFT supports stream capture of its executions on single-GPU plans (cuFFT
documentation, "CUDA Graphs Support"); what a captured execution reads besides device memory is
fixed here: the plan (its handle and its own device memory), its work area (set once with
``cufftSetWorkArea``; auto-allocation is off, so an execution allocates nothing), the pointers,
the direction, the repetition and steps, the stream, and the cuBLAS ``scal`` of a scale (its
factor read on the host at capture, in host pointer mode). All of it is in the replay key. A
graph must not outlive its plan's memory: every plan that leaves the cache destroys all the
replay graphs first (evictions are rare: a workload that evicts pays a plan creation, which
costs far more than the captures to redo).

The device thread's side of a repeated message is derived once (:class:`ExecCall`, kept in the
device's ``DerivedMemo`` per message and pointers): the plan lookup, the pointers and the
launcher. The cache's ``epoch`` counts the plans that left it: while it is unchanged the plan an
``ExecCall`` holds is still cached (it only counts the hit and keeps the LRU order); otherwise
it looks its plan up again (made on a miss).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from ...backends.cuda._replays import GraphReplays, device_replays, direct_bound, enabled
from ...errors import LibraryError
from ...messages.cufft import HALF, FftExec, FftSpec
from ...service._plans import PlanCache
from .._loader import LoadedLibrary, c_size_t, load
from .._workspace import count, required_workspace
from ._bindings import EXEC, FFT_TYPE, STATUS_NAMES, XT_TYPE

__all__ = ["CufftHandle", "FftPlanObj", "ExecCall", "status_error", "DEFAULT_CAPACITY",
           "REPLAY_CAPACITY"]

#: plans a device keeps by default (dev.cufft.cache_config(capacity=...) changes it)
DEFAULT_CAPACITY = 64
#: CUDA graphs of repeated executions kept per device (a few KiB of device memory each)
REPLAY_CAPACITY = 64


def status_error(status: int, function: str) -> LibraryError:
    return LibraryError("cufft", status, STATUS_NAMES.get(status, str(status)), function)


class FftPlanObj:
    """One plan as the device keeps it: the cuFFT handle, its work area and its bindings."""

    __slots__ = ("spec", "handle", "work", "work_bytes", "stream", "captured", "exec_fn",
                 "c2c", "in_item", "out_item")

    def __init__(self, spec: FftSpec, handle: int, work: int, work_bytes: int,
                 exec_fn: Any) -> None:
        self.spec = spec
        self.handle = handle
        self.work = work
        self.work_bytes = work_bytes
        self.stream: Any = None
        self.captured = False
        self.exec_fn = exec_fn
        #: the execution function takes a direction (C2C/Z2Z, and cufftXtExec for halves)
        self.c2c = spec.kind == "c2c" or spec.precision in HALF
        self.in_item = spec.in_item
        self.out_item = spec.out_item


def _ll(values: tuple[int, ...]) -> Any:
    return (ctypes.c_int64 * len(values))(*values)


class ExecCall:
    """What one :class:`~gpumsg.messages.cufft.FftExec` issues, derived once per message and
    buffer pointers (the handler keeps it in the device's ``DerivedMemo``): the spec, the byte
    pointers and steps, the direction, the scale step, and the launcher bound to its plan.

    ``lib`` is the device's cuFFT handle or the simulator's; both keep ``plans`` (a
    :class:`~gpumsg.service._plans.PlanCache`), ``epoch`` (plans that left the cache so far),
    ``recent`` (the plan last looked up or made: the most recent of the LRU order),
    ``calls`` (ExecCalls kept by value: :func:`exec_call`),
    ``plan(spec)``, ``run(stream, plan, *args)`` (the call itself) and ``launcher(stream,
    plan, *args)`` (its replayed form). :meth:`launcher` answers ``launch(stream)`` for the
    envelope, to be called on the ``stream`` given here (FftExec always runs on the compute
    stream).

    Every execution goes through the handle's replays, which key a call by value: a message
    sent once (the NumPy-shaped layer's, whose output is new at every call) still finds the
    graph of an earlier one where its plan and pointers recur (the pool hands a dropped
    output's address to the next allocation of its size). Where more distinct executions recur
    than the replays hold graphs for, their capacity grows, and past its bound they stop
    capturing (backends/cuda/replays.py), so outputs that cycle through many addresses cannot
    make the calls alternate between runs and captures."""

    __slots__ = ("lib", "spec", "stream", "args", "overwrites_input", "plan", "key", "epoch",
                 "launch")

    def __init__(self, lib: Any, msg: FftExec, x_ptr: int, out_ptr: int, stream: Any) -> None:
        spec = msg.spec
        iitem, oitem = spec.in_item, spec.out_item
        scale = None
        if msg.scale != 1.0:
            # cuBLAS scal over all of ``out`` (its real view) after the executions
            ref = msg.out
            scale = (ref.dtype, out_ptr, ref.size, msg.scale)
        self.lib = lib
        self.spec = spec
        self.stream = stream
        self.args = (-1 if msg.direction == "forward" else 1, x_ptr + msg.x_offset * iitem,
                     out_ptr + msg.out_offset * oitem, msg.repeat, msg.x_step * iitem,
                     msg.out_step * oitem, scale)
        #: an out-of-place C2R overwrites its input (cuFFT), which the message then writes
        self.overwrites_input = spec.kind == "c2r" and not spec.inplace
        self.plan: Any = None
        self.key: Any = None  # the plan's key object in the cache (its LRU entry)
        self.epoch = -1  # no plan yet
        self.launch: Any = None  # the launcher bound to ``plan``

    def launcher(self) -> Callable[[Any], None]:
        """``launch(stream)`` of this call, with its plan: the one bound before while no plan
        has left the cache since (a hit, counted, and made the most recent), else the plan
        looked up again (made on a miss; raises what making it raises)."""
        lib = self.lib
        if self.epoch == lib.epoch:  # our plan is cached still
            plan = self.plan
            if lib.recent is plan:  # the most recent already: nothing to move
                lib.plans.hit()
            else:
                lib.plans.hit(self.key)  # (hashes the spec)
                lib.recent = plan
            return self.launch
        recent = lib.recent
        if recent is not None and recent.spec is self.spec:
            # the plan made or used last, under this very spec object (the NumPy-shaped layer
            # sends its recipe's spec at every call): a hit, found without hashing the spec
            lib.plans.hit()
            plan = recent
        else:
            plan, _ = lib.plan(self.spec)
        self.plan = plan
        self.key = plan.spec  # the very object the cache keys it by
        self.epoch = lib.epoch  # after the lookup: making a plan may evict another
        launch = self.launch = lib.launcher(self.stream, plan, *self.args)
        return launch


#: ExecCalls kept by value per handle (``lib.calls``): at most this many, then it starts again
EXEC_CALLS = 256


def exec_call(lib: Any, msg: FftExec, x_ptr: int, out_ptr: int, stream: Any) -> ExecCall:
    """The :class:`ExecCall` of ``msg`` on these pointers, kept by value in ``lib.calls``: a
    message sent once (the NumPy-shaped layer's, whose output is new at every call) finds the
    call of an earlier message with the same spec object, pointers and arguments (the pool
    hands a dropped output's address to the next allocation of its size), its plan and
    launcher already bound. The entry holds the spec, so the id in its key is not reused."""
    spec = msg.spec
    out = msg.out
    key = (id(spec), msg.direction, x_ptr, out_ptr, msg.x_offset, msg.out_offset, msg.repeat,
           msg.x_step, msg.out_step, msg.scale, out.dtype, out.size)
    calls = lib.calls
    kept = calls.get(key)
    if kept is not None and kept[0] is spec:
        return kept[1]
    call = ExecCall(lib, msg, x_ptr, out_ptr, stream)
    if len(calls) >= EXEC_CALLS:
        calls.clear()
    calls[key] = (spec, call)
    return call


class CufftHandle:
    """The cuFFT plan cache of one device, used only from that device's thread."""

    def __init__(self, ctx: Any, lib: LoadedLibrary | None = None) -> None:
        self.lib = lib or load("cufft")
        self._ctx = ctx
        self.raw_handle = 0  # cuFFT has no library handle (each plan is one)
        self.plans = PlanCache(DEFAULT_CAPACITY, release=self._retire)
        #: plans that left the cache so far (an ExecCall's plan is cached while it is unchanged)
        self.epoch = 0
        #: the plan last looked up or made, the most recent of the cache's LRU order (an
        #: ExecCall of that plan has no entry to move)
        self.recent: FftPlanObj | None = None
        #: ExecCalls by value (:func:`exec_call`)
        self.calls: dict[tuple, tuple[Any, ExecCall]] = {}
        self._retired: list[tuple[Any, FftPlanObj]] = []
        self._kept: list[FftPlanObj] = []  # evicted, but recorded in a graph
        #: repeated executions replayed as CUDA graphs (GPUMSG_FFT_REPLAY=0: off); ``_bound``
        #: is its ``bound`` or, without replays, a plain launcher of the same call
        self.replays: GraphReplays | None = None
        self._bound: Any = direct_bound
        if enabled("GPUMSG_FFT_REPLAY"):
            self.replays = device_replays(ctx, REPLAY_CAPACITY)
            self._bound = self.replays.bound

    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(status, function)

    # -- the cache -----------------------------------------------------------------------------
    def cached(self, spec: FftSpec) -> bool:
        """Whether the plan of ``spec`` is cached (no counting, no LRU change)."""
        return spec in self.plans

    def plan(self, spec: FftSpec) -> tuple[FftPlanObj, bool]:
        """The plan of ``spec`` and whether it was a cache hit; made on a miss."""
        plan = self.plans.get(spec)
        if plan is not None:
            self.recent = plan
            return plan, True
        self._reap()
        plan = self._make(spec)
        self.plans.put(spec, plan)
        self.recent = plan
        return plan, False

    def _make(self, spec: FftSpec) -> FftPlanObj:
        lib = self.lib
        h = ctypes.c_int()
        self._check(lib.cufftCreate(ctypes.byref(h)), "cufftCreate")
        handle = h.value
        work = 0
        ws = c_size_t(0)
        memory = self._ctx.memory
        stream = self._ctx.compute.obj
        try:
            self._check(lib.cufftSetAutoAllocation(handle, 0), "cufftSetAutoAllocation")
            rank = len(spec.n)
            if spec.precision in HALF:
                p = spec.precision
                self._check(lib.cufftXtMakePlanMany(
                    handle, rank, _ll(spec.n), _ll(spec.inembed), spec.istride, spec.idist,
                    XT_TYPE[p, spec.kind != "r2c"], _ll(spec.onembed), spec.ostride, spec.odist,
                    XT_TYPE[p, spec.kind != "c2r"], spec.batch, ctypes.byref(ws),
                    XT_TYPE[p, True]), "cufftXtMakePlanMany")
            else:
                self._check(lib.cufftMakePlanMany64(
                    handle, rank, _ll(spec.n), _ll(spec.inembed), spec.istride, spec.idist,
                    _ll(spec.onembed), spec.ostride, spec.odist,
                    FFT_TYPE[spec.kind, spec.precision], spec.batch, ctypes.byref(ws)),
                    "cufftMakePlanMany64")
            if ws.value:
                # the plan's minimum; with the budget full, the idle plans' work areas go first
                work = required_workspace(self._ctx, "cufft", ws.value, stream,
                                          self._make_room)
            self._check(lib.cufftSetWorkArea(handle, work or None), "cufftSetWorkArea")
        except BaseException:
            if work:
                memory.deallocate(work, ws.value, stream)
                count(self._ctx, "cufft", -ws.value)
            lib.cufftDestroy(handle)
            raise
        fn = (lib.cufftXtExec if spec.precision in HALF
              else getattr(lib, EXEC[spec.kind, spec.precision]))
        return FftPlanObj(spec, handle, work, ws.value, fn)

    def _make_room(self) -> None:
        """Retire every cached plan (their work areas go back to the pool, stream-ordered):
        a new plan's work area comes before keeping idle ones when memory is short."""
        self.plans.clear()

    def _retire(self, plan: FftPlanObj) -> None:
        """Called by the cache for each plan that leaves it."""
        self.epoch += 1
        if self.recent is plan:
            self.recent = None
        if self.replays is not None:
            # no replay graph may outlive the memory of the plan it launches (its handle's own
            # buffers, its work area): all go, before either is released. A graph still
            # running is freed by the driver when it completes.
            self.replays.close()
        ctx = self._ctx
        stream = ctx.compute.obj
        if plan.captured:
            self._kept.append(plan)
            return
        if plan.work:
            ctx.memory.deallocate(plan.work, plan.work_bytes, stream)
            count(ctx, "cufft", -plan.work_bytes)
            plan.work = 0
        event = ctx.backend.event_create()
        ctx.backend.event_record(event, stream)
        self._retired.append((event, plan))

    def _reap(self) -> None:
        """Destroy the retired plans whose last work has completed (no waiting)."""
        if not self._retired:
            return
        backend = self._ctx.backend
        left = []
        for event, plan in self._retired:
            if backend.event_query(event):
                backend.event_destroy(event)
                self.lib.cufftDestroy(plan.handle)
            else:
                left.append((event, plan))
        self._retired = left

    def info(self) -> dict[str, int]:
        out = self.plans.info()
        out["workspace_bytes"] = sum(p.work_bytes for p in self.plans.values())
        return out

    def configure(self, capacity: int | None, clear: bool) -> dict[str, int]:
        if clear:
            self.plans.clear()
        if capacity is not None:
            self.plans.resize(capacity)
        return self.info()

    # -- execution -----------------------------------------------------------------------------
    def run(self, stream: Any, plan: FftPlanObj, direction: int, x: int, out: int,
            repeat: int, x_step: int, out_step: int, scale: tuple | None) -> None:
        """:meth:`execute` with these arguments, then :meth:`scale` of ``scale`` (``(dtype,
        ptr, count, factor)``, or None), on ``stream``."""
        self.execute(stream, plan, direction, x, out, repeat, x_step, out_step)
        if scale is not None:
            self.scale(stream, *scale)

    def launcher(self, stream: Any, plan: FftPlanObj, direction: int, x: int, out: int,
                 repeat: int, x_step: int, out_step: int,
                 scale: tuple | None) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`run` with these arguments on ``stream``, a repeated
        launch replayed (where replays are on). The replay key holds the plan with its handle
        and work area, every argument and the stream (see the module docstring)."""
        return self._bound("fft", self._run_keyed, stream, plan, plan.handle, plan.work,
                           direction, x, out, repeat, x_step, out_step, scale)

    def _run_keyed(self, stream: Any, plan: FftPlanObj, handle: int, work: int,
                   direction: int, x: int, out: int, repeat: int, x_step: int, out_step: int,
                   scale: tuple | None) -> None:
        # ``handle`` and ``work`` are the plan's: in the replay key, not read here
        self.run(stream, plan, direction, x, out, repeat, x_step, out_step, scale)

    def replay_info(self) -> dict[str, Any]:
        """The replays: on or off, graphs held, captures, launches, why refused."""
        r = self.replays
        return {"enabled": False} if r is None else {"enabled": True, **r.info()}

    def execute(self, stream: Any, plan: FftPlanObj, direction: int, x: int, out: int,
                repeat: int, x_step: int, out_step: int) -> None:
        """``repeat`` executions of ``plan`` on ``stream``; steps in bytes."""
        if plan.stream is not stream:
            self._check(self.lib.cufftSetStream(plan.handle, int(stream)), "cufftSetStream")
            plan.stream = stream
        fn, h = plan.exec_fn, plan.handle
        for _ in range(repeat):
            status = fn(h, x, out, direction) if plan.c2c else fn(h, x, out)
            if status:
                raise status_error(status, fn.__name__)
            x += x_step
            out += out_step

    def scale(self, stream: Any, dtype: str, ptr: int, count: int, factor: float) -> None:
        """Multiply ``count`` elements of ``dtype`` at ``ptr`` by the real ``factor``: cuBLAS
        ``scal`` on the real view (a complex buffer is twice as many reals), in chunks below
        cuBLAS's 32-bit counts."""
        real = {"c64": "f32", "c128": "f64"}.get(dtype, dtype)
        n = count * (2 if real != dtype else 1)
        item = 4 if real == "f32" else 8
        blas = self._ctx.library("cublas")
        while n > 0:
            k = min(n, 1 << 30)
            blas.scal(stream, real, k, factor, ptr, 1)
            ptr += k * item
            n -= k

    def close(self) -> None:
        """At device shutdown (the streams have drained): destroy the replay graphs, then
        every plan."""
        if self.replays is not None:
            self.replays.close()
        self.plans.clear()
        backend = self._ctx.backend
        for event, plan in self._retired:
            backend.event_destroy(event)
            self.lib.cufftDestroy(plan.handle)
        self._retired = []
        for plan in self._kept:
            if plan.work:
                self._ctx.memory.deallocate(plan.work, plan.work_bytes, self._ctx.compute.obj)
                count(self._ctx, "cufft", -plan.work_bytes)
            self.lib.cufftDestroy(plan.handle)
        self._kept = []
