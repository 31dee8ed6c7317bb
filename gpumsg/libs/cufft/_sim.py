"""cuFFT on the simulator: the handle's calls with the same signatures and semantics, computed
by ``numpy.fft`` in float64 and stored in the plan's precision. Layouts are read and written
through bounds-checked strided views (a stray layout is an illegal-address fault, as on a GPU);
transforms are unnormalized in both directions; an out-of-place C2R overwrites its input (filled
with NaN here, so a caller that relies on it fails in CI); the plan cache is the same
:class:`~gpumsg.service._plans.PlanCache`, so hits, misses and evictions count as on a GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.sim._device import SimBackend
from ...backends.sim._views import strided
from ...dtypes import dtype_of
from ...messages.cufft import COMPLEX_OF, HALF, REAL_OF, FftSpec, layout_span
from ...service._plans import PlanCache
from ._handle import DEFAULT_CAPACITY, status_error

__all__ = ["SimCufft", "SimPlan", "layout_view"]


def layout_view(sim: SimBackend, ptr: int, dtype: np.dtype, dims: tuple[int, ...],
                embed: tuple[int, ...], stride: int, dist: int, batch: int) -> np.ndarray:
    """A writable (batch, *dims) view of a cuFFT advanced layout at ``ptr``."""
    item = dtype.itemsize
    strides = []
    inner = stride
    for e in reversed(embed):
        strides.append(inner * item)
        inner *= e
    strides.reverse()
    span = layout_span(dims, embed, stride, dist, batch) * item
    return strided(sim, ptr, span, dtype, (batch, *dims), (dist * item, *strides))


def _read(sim: SimBackend, spec: FftSpec, ptr: int, dims: tuple, embed: tuple, stride: int,
          dist: int, real: bool) -> np.ndarray:
    """One side of a transform as float64 / complex128, shape (batch, *dims)."""
    t = dtype_of(REAL_OF[spec.precision] if real else COMPLEX_OF[spec.precision])
    if spec.precision not in HALF:
        v = np.array(layout_view(sim, ptr, t, dims, embed, stride, dist, spec.batch))
        return v.astype(np.float64 if real else np.complex128)
    if real:
        return np.array(layout_view(sim, ptr, t, dims, embed, stride, dist,
                                    spec.batch)).astype(np.float64)
    # a complex half is a 4-byte pair (re, im): read the pairs as 32-bit words, then split
    words = np.array(layout_view(sim, ptr, np.dtype(np.uint32), dims, embed, stride, dist,
                                 spec.batch))
    pairs = words.view(t).reshape(*words.shape, 2).astype(np.float64)
    return pairs[..., 0] + 1j * pairs[..., 1]


def _write(sim: SimBackend, spec: FftSpec, ptr: int, dims: tuple, embed: tuple, stride: int,
           dist: int, real: bool, values: np.ndarray) -> None:
    t = dtype_of(REAL_OF[spec.precision] if real else COMPLEX_OF[spec.precision])
    if spec.precision in HALF and not real:
        pairs = np.stack([values.real, values.imag], axis=-1).astype(t)
        view = layout_view(sim, ptr, np.dtype(np.uint32), dims, embed, stride, dist, spec.batch)
        view[...] = np.ascontiguousarray(pairs).view(np.uint32).reshape(view.shape)
        return
    layout_view(sim, ptr, t, dims, embed, stride, dist, spec.batch)[...] = values.astype(t)


class SimPlan:
    """A simulated plan: its spec and (no) work area."""

    __slots__ = ("spec", "work_bytes", "captured", "in_item", "out_item")

    def __init__(self, spec: FftSpec) -> None:
        self.spec = spec
        self.work_bytes = 0
        self.captured = False
        self.in_item = spec.in_item
        self.out_item = spec.out_item


class SimCufft:
    """The simulator's cuFFT: every execution enqueues the numpy.fft equivalent."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.plans = PlanCache(DEFAULT_CAPACITY, release=self._retire)
        #: plans that left the cache so far (as the GPU handle's: handle.ExecCall reads it)
        self.epoch = 0
        #: the plan last looked up or made (the most recent of the LRU order)
        self.recent: SimPlan | None = None
        #: ExecCalls by value (handle.exec_call)
        self.calls: dict[tuple, tuple[Any, Any]] = {}

    def _retire(self, plan: SimPlan) -> None:
        self.epoch += 1
        if self.recent is plan:
            self.recent = None

    def cached(self, spec: FftSpec) -> bool:
        return spec in self.plans

    def plan(self, spec: FftSpec) -> tuple[SimPlan, bool]:
        plan = self.plans.get(spec)
        if plan is not None:
            self.recent = plan
            return plan, True
        # what cuFFT's plan creation refuses on values a checked FftSpec never holds
        if (min(spec.n) < 1 or spec.batch < 1 or min(spec.istride, spec.ostride) < 1
                or min(spec.idist, spec.odist) < 1):
            raise status_error(8, "cufftMakePlanMany64")
        plan = SimPlan(spec)
        self.plans.put(spec, plan)
        self.recent = plan
        return plan, False

    def info(self) -> dict[str, int]:
        out = self.plans.info()
        out["workspace_bytes"] = 0
        return out

    def configure(self, capacity: int | None, clear: bool) -> dict[str, int]:
        if clear:
            self.plans.clear()
        if capacity is not None:
            self.plans.resize(capacity)
        return self.info()

    def run(self, stream: Any, plan: SimPlan, direction: int, x: int, out: int, repeat: int,
            x_step: int, out_step: int, scale: tuple | None) -> None:
        """:meth:`execute`, then :meth:`scale` of ``scale`` (``(dtype, ptr, count, factor)``
        or None)."""
        self.execute(stream, plan, direction, x, out, repeat, x_step, out_step)
        if scale is not None:
            self.scale(stream, *scale)

    def launcher(self, stream: Any, plan: SimPlan, direction: int, x: int, out: int,
                 repeat: int, x_step: int, out_step: int,
                 scale: tuple | None) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`run` with these arguments. The simulator replays
        nothing: every launch runs the call."""
        run = self.run

        def launch(on: Any) -> None:
            run(on, plan, direction, x, out, repeat, x_step, out_step, scale)

        return launch

    def replay_info(self) -> dict[str, Any]:
        return {"enabled": False}

    def execute(self, stream: Any, plan: SimPlan, direction: int, x: int, out: int,
                repeat: int, x_step: int, out_step: int) -> None:
        sim, spec = self.sim, plan.spec
        axes = tuple(range(1, len(spec.n) + 1))
        real_in, real_out = spec.kind == "r2c", spec.kind == "c2r"

        def run() -> None:
            for r in range(repeat):
                ip, op = x + r * x_step, out + r * out_step
                a = _read(sim, spec, ip, spec.in_dims, spec.inembed, spec.istride, spec.idist,
                          real_in)  # everything is read before anything is written (in place)
                if spec.kind == "c2c":
                    res = (np.fft.fftn(a, axes=axes) if direction < 0
                           else np.fft.ifftn(a, axes=axes, norm="forward"))
                elif spec.kind == "r2c":
                    res = np.fft.rfftn(a, axes=axes)
                else:
                    res = np.fft.irfftn(a, s=spec.n, axes=axes, norm="forward")
                    if not spec.inplace:  # cuFFT's C2R out of place overwrites its input
                        _write(sim, spec, ip, spec.in_dims, spec.inembed, spec.istride,
                               spec.idist, False, np.full(a.shape, np.nan, np.complex128))
                _write(sim, spec, op, spec.out_dims, spec.onembed, spec.ostride, spec.odist,
                       real_out, res)

        stream.put(run)

    def scale(self, stream: Any, dtype: str, ptr: int, count: int, factor: float) -> None:
        """Multiply ``count`` elements of ``dtype`` at ``ptr`` by the real ``factor``."""
        sim, t = self.sim, dtype_of(dtype)

        def run() -> None:
            v = sim.view(ptr, count * t.itemsize).view(t)
            v[...] = (v * factor).astype(t)

        stream.put(run)

    def close(self) -> None:
        self.plans.clear()

