"""The cuFFT plans of one device (device thread).

cuFFT has no library handle: each plan is one. Plans live in an LRU cache
(:class:`~gpumsg.service.plans.PlanCache`) keyed by the :class:`~gpumsg.messages.fft.FftSpec`,
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
"""

from __future__ import annotations

import ctypes
from typing import Any

from ...errors import LibraryError
from ...messages.fft import HALF, FftSpec
from ...service.plans import PlanCache
from ..loader import LoadedLibrary, c_size_t, load
from .bindings import EXEC, FFT_TYPE, STATUS_NAMES, XT_TYPE

__all__ = ["CufftHandle", "FftPlanObj", "status_error", "DEFAULT_CAPACITY"]

#: plans a device keeps by default (dev.fft.cache_config(capacity=...) changes it)
DEFAULT_CAPACITY = 64


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


class CufftHandle:
    """The cuFFT plan cache of one device, used only from that device's thread."""

    def __init__(self, ctx: Any, lib: LoadedLibrary | None = None) -> None:
        self.lib = lib or load("cufft")
        self._ctx = ctx
        self.raw_handle = 0  # cuFFT has no library handle (each plan is one)
        self.plans = PlanCache(DEFAULT_CAPACITY, release=self._retire)
        self._retired: list[tuple[Any, FftPlanObj]] = []
        self._kept: list[FftPlanObj] = []  # evicted, but recorded in a graph

    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(status, function)

    # -- the cache -----------------------------------------------------------------------------
    def cached(self, spec: FftSpec) -> bool:
        """Whether the plan of ``spec`` is cached (no counting, no LRU change)."""
        return spec in self.plans._plans

    def plan(self, spec: FftSpec) -> tuple[FftPlanObj, bool]:
        """The plan of ``spec`` and whether it was a cache hit; made on a miss."""
        plan = self.plans.get(spec)
        if plan is not None:
            return plan, True
        self._reap()
        plan = self._make(spec)
        self.plans.put(spec, plan)
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
                work = memory.allocate(ws.value, stream)
            self._check(lib.cufftSetWorkArea(handle, work or None), "cufftSetWorkArea")
        except BaseException:
            if work:
                memory.deallocate(work, ws.value, stream)
            lib.cufftDestroy(handle)
            raise
        fn = (lib.cufftXtExec if spec.precision in HALF
              else getattr(lib, EXEC[spec.kind, spec.precision]))
        return FftPlanObj(spec, handle, work, ws.value, fn)

    def _retire(self, plan: FftPlanObj) -> None:
        """Called by the cache for each plan that leaves it."""
        ctx = self._ctx
        stream = ctx.compute.obj
        if plan.captured:
            self._kept.append(plan)
            return
        if plan.work:
            ctx.memory.deallocate(plan.work, plan.work_bytes, stream)
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
        out["workspace_bytes"] = sum(p.work_bytes for p in self.plans._plans.values())
        return out

    def configure(self, capacity: int | None, clear: bool) -> dict[str, int]:
        if clear:
            self.plans.clear()
        if capacity is not None:
            self.plans.resize(capacity)
        return self.info()

    # -- execution -----------------------------------------------------------------------------
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
        """At device shutdown (the streams have drained): destroy every plan."""
        self.plans.clear()
        backend = self._ctx.backend
        for event, plan in self._retired:
            backend.event_destroy(event)
            self.lib.cufftDestroy(plan.handle)
        self._retired = []
        for plan in self._kept:
            if plan.work:
                self._ctx.memory.deallocate(plan.work, plan.work_bytes, self._ctx.compute.obj)
            self.lib.cufftDestroy(plan.handle)
        self._kept = []
