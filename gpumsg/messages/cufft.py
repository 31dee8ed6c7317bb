"""cuFFT messages (``dev.fft``): plans described as plain data, their creation, execution,
and the plan cache's counters.

A transform is described by an :class:`FftSpec`: kind (``"c2c"``, ``"r2c"``, ``"c2r"``),
precision (``"f32"``: C2C/R2C/C2R, ``"f64"``: Z2Z/D2Z/Z2D, ``"f16"``/``"bf16"``: cuFFT's
half-precision transforms through ``cufftXtMakePlanMany``, power-of-two sizes only), the
logical sizes ``n`` (rank 1 to 3), ``batch`` and cuFFT's advanced layout for input and
output (``embed``, ``stride``, ``dist``, in elements of the transform: a complex half element is
two elements of its f16/bf16 buffer). Element ``(b, i_1, ..., i_r)`` of the input is at
``b * idist + istride * (((i_1 * inembed[1] + i_2) * inembed[2] + i_3) ...)``; ``inembed[0]``
is not used (as in cuFFT). The spec is the plan cache's key: everything that changes a plan is
in it; the device is the cache's owner.

Sizes on each side: C2C reads and writes ``n`` complex values; R2C reads ``n`` reals and
writes ``n[:-1] + (n[-1] // 2 + 1,)`` complex values; C2R the reverse. Defaults: the embed of
each side is its logical sizes, except for an in-place real transform (``inplace=True``), whose
real side is padded to ``2 * (n[-1] // 2 + 1)`` along the last dimension as cuFFT requires;
stride 1; dist = stride * prod(embed).

Execution (:class:`FftExec`) is unnormalized in both directions, like cuFFT; ``scale`` (not 1)
multiplies the whole ``out`` buffer afterwards (one cuBLAS ``scal`` on the same stream).
**A C2R transform out of place overwrites its input** (cuFFT's documented behaviour; the
simulator fills the input with NaN), so :class:`FftExec` declares its input written then.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._base import (
    BufRef,
    Message,
    _bool,
    _choice,
    _fail,
    _int,
    _real,
    _ref,
    _set,
    check_extent,
    fast_init,
    message,
)

__all__ = ["FftSpec", "FftPlan", "FftExec", "FftCacheInfo", "FftCacheConfig", "FftReplayInfo",
           "FFT_KINDS",
           "FFT_PRECISIONS", "HALF", "COMPLEX_OF", "REAL_OF", "PRECISION_OF", "half_size",
           "layout_span"]

FFT_KINDS = ("c2c", "r2c", "c2r")
#: transform precisions. f16/bf16 data lives in f16/bf16 buffers: real values as they are,
#: complex values interleaved (re, im), so a complex element is two buffer elements (gpumsg has
#: no complex-half dtype)
#: which gpumsg buffers do not have)
FFT_PRECISIONS = ("f32", "f64", "f16", "bf16")
HALF = ("f16", "bf16")
#: the buffer dtype of each side
COMPLEX_OF = {"f32": "c64", "f64": "c128", "f16": "f16", "bf16": "bf16"}
REAL_OF = {"f32": "f32", "f64": "f64", "f16": "f16", "bf16": "bf16"}
#: bytes of one real and one complex element of each precision
REAL_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2}
COMPLEX_BYTES = {"f32": 8, "f64": 16, "f16": 4, "bf16": 4}
#: a buffer dtype -> the precision of its transform
PRECISION_OF = {"f32": "f32", "c64": "f32", "f64": "f64", "c128": "f64", "f16": "f16",
                "bf16": "bf16"}
_MAX = (1 << 62)


def half_size(n: int) -> int:
    """Complex length of a real transform of length ``n`` (n // 2 + 1)."""
    return n // 2 + 1


def layout_span(dims: tuple[int, ...], embed: tuple[int, ...], stride: int, dist: int,
                batch: int) -> int:
    """Elements from the first to one past the last element the layout touches."""
    last = 0
    inner = 1
    for d, e in zip(reversed(dims), reversed(embed)):
        last += (d - 1) * inner
        inner *= e
    return (batch - 1) * dist + stride * last + 1


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class FftSpec:
    """One cuFFT plan as plain data (see the module docstring for the layout)."""

    n: tuple[int, ...]
    batch: int = 1
    kind: str = "c2c"
    precision: str = "f32"
    inplace: bool = False
    inembed: tuple[int, ...] | None = None
    istride: int = 1
    idist: int | None = None
    onembed: tuple[int, ...] | None = None
    ostride: int = 1
    odist: int | None = None

    def __post_init__(self) -> None:
        n = self.n
        if isinstance(n, int) and not isinstance(n, bool):
            n = (n,)
        if not isinstance(n, (tuple, list)) or not 1 <= len(n) <= 3:
            raise _fail(self, "n", f"expected 1 to 3 transform sizes, got {self.n!r}")
        n = tuple(_int(self, "n", v, 1, _MAX) for v in n)
        _set(self, "n", n)
        _int(self, "batch", self.batch, 1, _MAX)
        _choice(self, "kind", self.kind, FFT_KINDS)
        _choice(self, "precision", self.precision, FFT_PRECISIONS)
        if self.precision in HALF and any(v & (v - 1) for v in n):
            raise _fail(self, "n", f"{self.precision} transforms take power-of-two sizes only "
                        f"(cuFFT), got {n}")
        _bool(self, "inplace", self.inplace)
        half = n[:-1] + (half_size(n[-1]),)
        padded = n[:-1] + (2 * half_size(n[-1]),)
        if self.kind == "c2c":
            idims = odims = n
            idef = odef = n
        elif self.kind == "r2c":
            idims, odims = n, half
            idef, odef = (padded if self.inplace else n), half
        else:
            idims, odims = half, n
            idef, odef = half, (padded if self.inplace else n)
        for side, dims, default in (("i", idims, idef), ("o", odims, odef)):
            f = "inembed" if side == "i" else "onembed"
            embed = getattr(self, f)
            if embed is None:
                embed = default
            if not isinstance(embed, (tuple, list)) or len(embed) != len(n):
                raise _fail(self, f, f"expected {len(n)} sizes (one per dimension), got "
                            f"{embed!r}")
            embed = tuple(_int(self, f, v, 1, _MAX) for v in embed)
            for k in range(1, len(n)):
                if embed[k] < dims[k]:
                    raise _fail(self, f, f"{f}[{k}] = {embed[k]} is smaller than the "
                                f"{'input' if side == 'i' else 'output'} size {dims[k]} of "
                                "that dimension")
            _set(self, f, embed)
            stride = _int(self, side + "stride", getattr(self, side + "stride"), 1, _MAX)
            dist = getattr(self, side + "dist")
            if dist is None:
                _set(self, side + "dist", stride * math.prod(embed))
            else:
                _int(self, side + "dist", dist, 1, _MAX)

    # -- derived -----------------------------------------------------------------------------
    @property
    def in_dtype(self) -> str:
        return REAL_OF[self.precision] if self.kind == "r2c" else COMPLEX_OF[self.precision]

    @property
    def out_dtype(self) -> str:
        return REAL_OF[self.precision] if self.kind == "c2r" else COMPLEX_OF[self.precision]

    @property
    def in_dims(self) -> tuple[int, ...]:
        n = self.n
        return n[:-1] + (half_size(n[-1]),) if self.kind == "c2r" else n

    @property
    def out_dims(self) -> tuple[int, ...]:
        n = self.n
        return n[:-1] + (half_size(n[-1]),) if self.kind == "r2c" else n

    @property
    def in_item(self) -> int:
        """Bytes of one input element (a complex one is two reals)."""
        return (REAL_BYTES if self.kind == "r2c" else COMPLEX_BYTES)[self.precision]

    @property
    def out_item(self) -> int:
        return (REAL_BYTES if self.kind == "c2r" else COMPLEX_BYTES)[self.precision]

    @property
    def in_span(self) -> int:
        """Elements of the input one batch of the plan spans."""
        return layout_span(self.in_dims, self.inembed, self.istride, self.idist, self.batch)

    @property
    def out_span(self) -> int:
        return layout_span(self.out_dims, self.onembed, self.ostride, self.odist, self.batch)

    @property
    def size(self) -> int:
        """Logical size of one transform, prod(n) (what normalizations divide by)."""
        return math.prod(self.n)


def _spec(msg: Any) -> FftSpec:
    spec = msg.spec
    if type(spec) is not FftSpec:
        raise _fail(msg, "spec", f"expected an FftSpec (dev.cufft.plan(...)), got "
                    f"{type(spec).__name__}")
    return spec


@message()
class FftPlan(Message):
    """Make sure the plan of ``spec`` exists in the device's plan cache (created on the device
    thread on a miss, with its work area from the device's pool). Answers a dict:
    ``workspace`` (bytes), ``hit`` (it was cached already)."""

    spec: FftSpec

    def __post_init__(self) -> None:
        _spec(self)


DIRECTIONS = {"forward": -1, "inverse": 1, "backward": 1}


@message(buffers=("x", "out"), writes=("out",))
class FftExec(Message):
    """Run the plan of ``spec`` (from the cache, created on a miss) ``repeat`` times: run r
    reads ``x`` from element ``x_offset + r * x_step`` and writes ``out`` from element
    ``out_offset + r * out_step``. ``direction``: "forward" (C2C, R2C) or "inverse" (C2C, C2R;
    "backward" is accepted as its alias). Unnormalized; ``scale`` other than 1 multiplies
    every element of ``out`` afterwards. In place (``x`` is ``out``) exactly when
    ``spec.inplace``. The real side's offset and step must be even (cuFFT wants real data
    aligned to the complex type). Out-of-place C2R overwrites ``x``, unless ``preserve``: the
    transform then reads a copy of ``x`` that the handler makes in memory of the device's pool
    (the size of ``x``'s buffer, freed behind the transform), and ``x`` is left as it was; a
    ``dev.graph()`` recording refuses it. Runs on the compute stream."""

    spec: FftSpec
    x: BufRef
    out: BufRef
    direction: str = "forward"
    repeat: int = 1
    x_step: int = 0
    out_step: int = 0
    x_offset: int = 0
    out_offset: int = 0
    scale: float = 1.0
    preserve: bool = False

    def __post_init__(self) -> None:
        spec = _spec(self)
        x = _ref(self, "x", self.x)
        out = _ref(self, "out", self.out)
        _set(self, "x", x)
        _set(self, "out", out)
        d = _choice(self, "direction", self.direction, tuple(DIRECTIONS))
        if d == "backward":
            _set(self, "direction", "inverse")
        if spec.kind == "r2c" and self.direction != "forward":
            raise _fail(self, "direction", "an R2C transform runs forward only")
        if spec.kind == "c2r" and self.direction != "inverse":
            raise _fail(self, "direction", "a C2R transform runs inverse only")
        _int(self, "repeat", self.repeat, 1, _MAX)
        for f in ("x_step", "out_step", "x_offset", "out_offset"):
            _int(self, f, getattr(self, f), 0, _MAX)
        scale = _real(self, "scale", self.scale)
        _set(self, "scale", scale)
        same = x.id == out.id and x.owner == out.owner
        if same != spec.inplace:
            raise _fail(self, "out", "x and out must be the same buffer exactly when the plan "
                        f"is in place (spec.inplace={spec.inplace})")
        _bool(self, "preserve", self.preserve)
        if self.preserve and (spec.kind != "c2r" or spec.inplace):
            raise _fail(self, "preserve", "only an out-of-place C2R transform overwrites its "
                        "input; this one leaves x as it is without preserve")
        # an in-place real transform reads and writes one buffer as both real and complex
        both = (REAL_OF[spec.precision], COMPLEX_OF[spec.precision])
        if x.dtype != spec.in_dtype and not (same and x.dtype in both):
            raise _fail(self, "x", f"{x.describe()} has dtype {x.dtype}; a {spec.precision} "
                        f"{spec.kind.upper()} transform reads {spec.in_dtype}")
        if out.dtype != spec.out_dtype and not (same and out.dtype in both):
            raise _fail(self, "out", f"{out.describe()} has dtype {out.dtype}; a "
                        f"{spec.precision} {spec.kind.upper()} transform writes "
                        f"{spec.out_dtype}")
        iitem, oitem = spec.in_item, spec.out_item
        if spec.precision in HALF and scale != 1.0:
            raise _fail(self, "scale", f"scaling is not available for {spec.precision} "
                        "transforms (cuBLAS scal has no half-precision form bound here)")
        if spec.kind != "c2c":
            # cuFFT refuses (CUFFT_INVALID_VALUE, seen on an H100) real data that does not start
            # on a complex element's boundary: the real side's offsets and steps must be even
            side, off, step = (("x", self.x_offset, self.x_step) if spec.kind == "r2c"
                               else ("out", self.out_offset, self.out_step))
            for f, v in ((f"{side}_offset", off), (f"{side}_step", step)):
                if v % 2:
                    raise _fail(self, f, f"must be even for the real side of a "
                                f"{spec.kind.upper()} transform (cuFFT needs real data aligned "
                                f"to its complex type), got {v}")
        if same and (self.x_offset * iitem != self.out_offset * oitem
                     or self.x_step * iitem != self.out_step * oitem):
            raise _fail(self, "out_offset", "an in-place transform reads and writes at the "
                        "same byte offsets (x_offset/x_step and out_offset/out_step, each in "
                        "elements of its side's dtype)")
        for f, ref, span, off, step, item in (
                ("x", x, spec.in_span, self.x_offset, self.x_step, iitem),
                ("out", out, spec.out_span, self.out_offset, self.out_step, oitem)):
            check_extent(self, f, ref, off * item, ((self.repeat, step * item), (span * item, 1)),
                         f"the layout ({self.repeat} run(s) {step} elements apart, {span} "
                         f"elements of {item} bytes per run)", unit="bytes")

    def capture_refusal(self) -> str | None:
        """Why a graph cannot record this execution (see ``messages.graph.refusal``)."""
        if self.preserve:
            return ("with preserve it copies x into memory allocated at the call (allocations "
                    "inside a graph are refused): record a copy into a buffer of your own and "
                    "the transform of that")
        return None

    def written(self) -> list[BufRef]:
        if self.spec.kind == "c2r" and not self.spec.inplace and not self.preserve:
            return [self.out, self.x]
        return [self.out]


@message()
class FftCacheInfo(Message):
    """The device's cuFFT plan cache: hits, misses, size, capacity, evictions, and
    ``workspace_bytes`` (work areas the cached plans hold)."""


@message()
class FftCacheConfig(Message):
    """Set the plan cache's capacity (plans beyond it are evicted, least recently used first)
    and/or empty it. Answers the counters after the change."""

    capacity: int | None = None
    clear: bool = False

    def __post_init__(self) -> None:
        if self.capacity is not None:
            _int(self, "capacity", self.capacity, 1, 1 << 20)
        _bool(self, "clear", self.clear)


@message()
class FftReplayInfo(Message):
    """Reply with the replays of repeated executions (CUDA graphs, see ``libs/cufft/handle.py``):
    ``{"enabled"}`` plus, where enabled, ``{"graphs", "captures", "launches", "refused",
    "with_memory_nodes"}``; ``{"enabled": None}`` while the device has not used cuFFT."""
