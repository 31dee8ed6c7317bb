"""``dev.cufft``: explicit cuFFT plans and their execution; ``dev.fft``: NumPy's transforms
(caller's thread). One implementation class serves both namespaces (two views of it).

Explicit: ``plan = dev.cufft.plan(shape=(4096,), batch=64, kind="c2c", dtype="c64")`` describes a
plan (an :class:`~gpumsg.messages.cufft.FftSpec`) and has the device make it now (``plan.result()``
waits for that); ``dev.cufft.execute(plan, x, out, direction="forward")`` runs it (unnormalized,
like cuFFT). The plan lives in the device's plan cache; if it was evicted meanwhile, the
execution makes it again.

NumPy-shaped: ``fft, ifft, rfft, irfft, fft2, ifft2, rfft2, irfft2, fftn, ifftn, rfftn, irfftn``
with NumPy's ``n``/``s``, ``axis``/``axes`` and ``norm`` ("backward", "ortho", "forward") on any
axes of a C-ordered buffer; each returns a future of a new C-ordered buffer and never modifies
its input. The complex transforms take complex buffers (c64, c128) and the real ones real
buffers (f32, f64); a real input to a complex transform (``fft``, ``ifft``, ``irfft``, ...) is
made complex first, as NumPy does (f32 -> c64, f64 -> c128). The precision of the result is the
input's (NumPy would compute in float64). Departure from NumPy: repeated axes are refused.

How a call maps onto cuFFT (worked out once per call signature and memoized): the transformed
axes are grouped into runs of adjacent axes (at most 3 per plan); each run is one cuFFT plan
over the C-ordered buffer with the advanced layout (stride = the elements after the run, dist =
1 or the run's size), repeated over the leading elements when there are both leading and
trailing ones. Innermost axes (``axis=-1``, ``fft2`` of a 2-D buffer, ...) are one plan and one
execution with no copy. ``n``/``s`` pad with zeros or truncate into a new buffer first (one
memset and one cuBLAS ``geam``, or one copy, per resized axis). The normalization is folded into
the last execution's message (one cuBLAS ``scal`` over the output); none is applied where the
norm asks for none (a forward transform with "backward", the default). ``irfft*`` work on a
copy of the input, since cuFFT's C2R overwrites its input.
"""

from __future__ import annotations

import itertools
import math
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ...dtypes import dtype_name
from ...errors import InvalidMessage
from ...messages import cufft as msgs
from ...messages._base import BufRef
from ...messages._memo import MessageMemo
from ...messages.cufft import FftSpec, half_size
from .._namespace import view
from ..nvrtc._elementwise import launch

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["Cufft", "Fft", "FftCalls", "Plan"]

NORMS = ("backward", "ortho", "forward")
#: after posting a transform whose output has at least this many bytes, the caller yields the
#: GIL (``time.sleep(0)``) so that the device thread issues it at once. Without it a caller
#: posting a burst keeps the GIL for up to CPython's 5 ms switch interval, and the GPU idles
#: until the burst is posted (on the simulator: 300 posts, 3.5-7.5 ms before the device thread
#: issued the first). For large transforms the GPU time (~200 µs at 128 MiB on an H100) dwarfs
#: the handover's cost; small ones are host-bound and skip it (a yield per post made small
#: SGEMMs slower, docs/performance.md). None: never yield.
YIELD_BYTES: int | None = 16 << 20
_ITEM = {"f32": 4, "f64": 8, "c64": 8, "c128": 16}
_COMPLEX = {"f32": "c64", "f64": "c128", "c64": "c64", "c128": "c128"}
_REAL = {"c64": "f32", "c128": "f64", "f32": "f32", "f64": "f64"}
#: the FftExec fields that hold execute's buffers, in the memo's order
_EXEC_BUFFERS = ("x", "out")
#: FftExec built without validation: for the NumPy-shaped layer, whose recipe checked the
#: layouts for buffers of exactly the shapes and dtypes it is used with
_UNCHECKED = msgs.FftExec.unchecked  # type: ignore[attr-defined]
#: specs remembered by identity (``FftCalls._spec_ids``) before that map starts again
_SPEC_IDS = 256


class Plan:
    """An explicit cuFFT plan: its :attr:`spec` (plain data, the cache key) and the future of
    its creation on the device (``result()`` answers ``{"workspace": bytes, "hit": bool}``)."""

    __slots__ = ("spec", "created")

    def __init__(self, spec: FftSpec, created: Future) -> None:
        self.spec = spec
        self.created = created

    def result(self, timeout: float | None = None) -> Any:
        return self.created.result(timeout)

    def __repr__(self) -> str:
        s = self.spec
        return (f"<fft.Plan {s.kind} {s.precision} n={s.n} batch={s.batch}"
                f"{' inplace' if s.inplace else ''}>")


class _Pass:
    """One execution of a recipe: its spec and repeat/steps; ``src``/``dst``: 'in' (the
    input or its resized copy), 'out'. ``pad_in``/``pad_out``: the real side's runs are
    ``row`` reals apart, an odd number; cuFFT wants real data aligned to the complex type, so
    the runs go through a scratch buffer with rows of ``row + 1`` (0: not needed)."""

    __slots__ = ("spec", "repeat", "x_step", "out_step", "direction", "src", "dst", "pad_in",
                 "pad_out")

    def __init__(self, spec: FftSpec, repeat: int, x_step: int, out_step: int,
                 direction: str, src: str, dst: str) -> None:
        self.spec = spec
        self.repeat = repeat
        self.x_step = x_step
        self.out_step = out_step
        self.direction = direction
        self.src = src
        self.dst = dst
        self.pad_in = self.pad_out = 0
        if repeat > 1 and spec.kind == "r2c" and x_step % 2:
            self.pad_in, self.x_step = x_step, x_step + 1
        if repeat > 1 and spec.kind == "c2r" and out_step % 2:
            self.pad_out, self.out_step = out_step, out_step + 1


class _Recipe:
    __slots__ = ("resize", "copy_input", "work_shape", "passes", "out_shape", "out_dtype",
                 "scale", "single")

    def __init__(self) -> None:
        self.resize: list[tuple[int, int]] = []  # (axis, new length), in order
        self.copy_input = False  # work on a copy even without resizing (C2R)
        self.work_shape: tuple[int, ...] = ()
        self.passes: list[_Pass] = []
        self.out_shape: tuple[int, ...] = ()
        self.out_dtype = ""
        self.scale = 1.0
        #: the common case (innermost axes, no n/s): one execution from the input into the
        #: new output, nothing else to send (see Fft._run); with ``copy_input`` (a C2R) the
        #: execution reads a copy the device makes (``FftExec.preserve``)
        self.single: _Pass | None = None

    def finish(self) -> _Recipe:
        """Note whether the recipe is one execution from the input into the output."""
        if len(self.passes) == 1 and not self.resize:
            p = self.passes[0]
            if p.src == "in" and p.dst == "out" and not p.pad_in and not p.pad_out:
                self.single = p
        return self


def _runs(axes: list[int], limit: int = 3) -> list[tuple[int, ...]]:
    """Sorted axes grouped into runs of adjacent axes, each at most ``limit`` long."""
    out: list[list[int]] = []
    for a in sorted(axes):
        if out and out[-1][-1] == a - 1 and len(out[-1]) < limit:
            out[-1].append(a)
        else:
            out.append([a])
    return [tuple(r) for r in out]


def _pass(kind: str, precision: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
          run: tuple[int, ...], direction: str, src: str, dst: str) -> _Pass:
    """The cuFFT plan and repetition for transforming axes ``run`` of C-ordered arrays."""
    k0, k1 = run[0], run[-1]
    outer = math.prod(in_shape[:k0])
    inner = math.prod(in_shape[k1 + 1:])
    idims = in_shape[k0:k1 + 1]
    odims = out_shape[k0:k1 + 1]
    n = odims if kind == "c2r" else idims
    isz, osz = math.prod(idims), math.prod(odims)
    inplace = src == dst
    common = dict(n=n, kind=kind, precision=precision, inplace=inplace, inembed=idims,
                  onembed=odims)
    if inner == 1:
        spec = FftSpec(batch=outer, istride=1, idist=isz, ostride=1, odist=osz, **common)
        return _Pass(spec, 1, 0, 0, direction, src, dst)
    if outer == 1 or outer <= inner or kind != "c2c":
        # (a real transform always repeats over the leading elements: the other way round its
        # real data would start at odd element offsets, which cuFFT refuses)
        spec = FftSpec(batch=inner, istride=inner, idist=1, ostride=inner, odist=1, **common)
        return _Pass(spec, outer, isz * inner, osz * inner, direction, src, dst)
    spec = FftSpec(batch=outer, istride=inner, idist=isz * inner, ostride=inner,
                   odist=osz * inner, **common)
    return _Pass(spec, inner, 1, 1, direction, src, dst)


def _ref(x: Any, field: str) -> BufRef:
    r = getattr(x, "ref", x)
    if type(r) is not BufRef:
        raise InvalidMessage(f"{field}: expected a GpuBuffer or its future, got "
                             f"{type(x).__name__}", field=field)
    return r


class FftCalls:
    """The FFT calls of one device: the implementation behind ``dev.cufft`` and ``dev.fft``."""

    def __init__(self, device: Device) -> None:
        self._dev = device
        self._recipes: dict[tuple, _Recipe] = {}
        # a repeated execute (same spec, buffers and arguments) sends the message it built the
        # first time: validating an FftExec is most of the call's cost (messages/memo.py)
        self._memo = MessageMemo()
        # the memo's key names a spec by a token: equal specs share one (they are the same
        # plan), and a token is never given to another spec, so a kept key cannot come to mean
        # another transform. Hashing a spec costs more than the rest of the lookup, so the
        # token of a spec object is found by its identity first: id -> (spec, token), the spec
        # held so that its id is not reused while the entry lives.
        self._tokens: dict[FftSpec, int] = {}
        self._spec_ids: dict[int, tuple[FftSpec, int]] = {}
        self._next_token = itertools.count()

    # -- explicit plans ------------------------------------------------------------------------
    def plan(self, shape: Any, batch: int = 1, kind: str = "c2c", dtype: Any = "c64",
             inplace: bool = False, inembed: Any = None, istride: int = 1,
             idist: int | None = None, onembed: Any = None, ostride: int = 1,
             odist: int | None = None) -> Plan:
        """Describe a cuFFT plan and make it on the device now (a cache hit if it exists).

        ``shape``: the logical transform sizes (rank 1-3, the real sizes for R2C/C2R);
        ``kind``: "c2c", "r2c" or "c2r"; ``dtype``: the precision, as the complex ("c64",
        "c128") or real ("f32", "f64", "f16", "bf16") dtype (halves: power-of-two sizes,
        complex values interleaved in f16/bf16 buffers, no ``scale``); layout fields as cuFFT's
        advanced layout, in elements (see :mod:`gpumsg.messages.cufft`). Raises InvalidMessage
        naming the field."""
        self._dev.port.check_open()
        try:
            name = dtype_name(dtype, "dtype")
        except InvalidMessage as exc:
            raise InvalidMessage(str(exc), field="dtype") from None
        precision = msgs.PRECISION_OF.get(name)
        if precision is None:
            raise InvalidMessage(f"dtype: expected c64, c128, f32, f64, f16 or bf16, got "
                                 f"{name}", field="dtype")
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        spec = FftSpec(_as_tuple(shape), batch, kind,
                       precision, inplace, _as_tuple(inembed), istride, idist,
                       _as_tuple(onembed), ostride, odist)
        return Plan(spec, self._dev.send(msgs.FftPlan(spec)))

    def execute(self, plan: Any, x: Any, out: Any = None, direction: str = "forward",
                scale: float = 1.0, repeat: int = 1, x_step: int = 0, out_step: int = 0,
                x_offset: int = 0, out_offset: int = 0, preserve: bool = False) -> Future:
        """Run ``plan`` (a :class:`Plan` or an FftSpec) from ``x`` into ``out`` (``out`` is
        ``x`` for an in-place plan; leave it None then) on the compute stream. Unnormalized;
        ``scale`` multiplies all of ``out`` afterwards. Out-of-place C2R overwrites ``x``
        unless ``preserve`` (the transform then reads a copy the device makes; not inside a
        ``dev.graph()`` recording). Resolves to None."""
        dev = self._dev
        dev.port.check_open()
        spec = plan.spec if isinstance(plan, Plan) else plan
        if out is None:
            out = x
        args = (direction, repeat, x_step, out_step, x_offset, out_offset, scale, preserve)
        hit = self._spec_ids.get(id(spec))
        token = hit[1] if hit is not None and hit[0] is spec else self._token(spec)
        if token is None:  # not a well-formed FftSpec: the message says what is wrong
            msg = msgs.FftExec(spec, x, out, *args)
            fut = dev.send(msg)
        else:
            # the same spec, buffers and arguments: the message built (and checked) the first
            # time, sent without screening again at this generation (Device._send_entry). The
            # memo takes each buffer's ``ref`` first, which raises for a freed or stale buffer
            entry = self._memo.entry(
                token, (x, out), args,
                lambda refs: msgs.FftExec(spec, refs[0], refs[1], *args), _EXEC_BUFFERS)
            msg = entry[0]
            fut = dev.port.send_memo(entry)
        if YIELD_BYTES is not None and msg.out.nbytes >= YIELD_BYTES:
            time.sleep(0)  # let the device thread issue it now (see YIELD_BYTES)
        return fut

    def _token(self, spec: Any) -> int | None:
        """The memo's token of ``spec`` (the same for equal specs, never reused), or None
        for anything but a hashable FftSpec (such a call is built and checked every time)."""
        if type(spec) is not FftSpec:
            return None
        try:
            token = self._tokens.get(spec)
        except TypeError:  # FftSpec.unchecked with unhashable fields
            return None
        if token is None:
            if len(self._tokens) >= _SPEC_IDS:
                self._tokens.clear()  # tokens are never reused, so kept keys stay right
            token = self._tokens[spec] = next(self._next_token)
        if len(self._spec_ids) >= _SPEC_IDS:
            self._spec_ids.clear()
        self._spec_ids[id(spec)] = (spec, token)
        return token

    def replay_info(self) -> Future:
        """Resolves to how repeated executions were replayed: an execution repeated with the
        same plan, buffers and arguments is captured as a CUDA graph the second time and
        launched from then on. ``enabled`` (``GPUMSG_FFT_REPLAY=0`` turns it off; None: cuFFT
        not used yet; False on the simulator), and the graphs held, captures, launches, and
        why capturing stopped (``refused``)."""
        return self._dev.send(msgs.FftReplayInfo())

    def cache_info(self) -> Future:
        """Resolves to the plan cache's counters: hits, misses, size, capacity, evictions,
        workspace_bytes."""
        return self._dev.send(msgs.FftCacheInfo())

    def cache_config(self, capacity: int | None = None, clear: bool = False) -> Future:
        """Change the plan cache's capacity (evicting beyond it) and/or empty it; resolves to
        the counters after the change."""
        return self._dev.send(msgs.FftCacheConfig(capacity, clear))

    # -- NumPy-shaped --------------------------------------------------------------------------
    def fft(self, x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
        """``numpy.fft.fft`` of a complex C-ordered buffer along ``axis``."""
        return self._numpy("c2c", "forward", x, None if n is None else (n,), (axis,), norm, 1)

    def ifft(self, x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
        return self._numpy("c2c", "inverse", x, None if n is None else (n,), (axis,), norm, 1)

    def rfft(self, x: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Any:
        """``numpy.fft.rfft`` of a real (f32/f64) buffer: complex, ``n // 2 + 1`` long on
        ``axis``."""
        return self._numpy("r2c", "forward", x, None if n is None else (n,), (axis,), norm, 1)

    def irfft(self, x: Any, n: int | None = None, axis: int = -1,
              norm: str | None = None) -> Any:
        """``numpy.fft.irfft``: real output of length ``n`` (default 2 * (m - 1))."""
        return self._numpy("c2r", "inverse", x, None if n is None else (n,), (axis,), norm, 1)

    def fft2(self, x: Any, s: Any = None, axes: Any = (-2, -1), norm: str | None = None) -> Any:
        return self._numpy("c2c", "forward", x, s, axes, norm, 2)

    def ifft2(self, x: Any, s: Any = None, axes: Any = (-2, -1),
              norm: str | None = None) -> Any:
        return self._numpy("c2c", "inverse", x, s, axes, norm, 2)

    def rfft2(self, x: Any, s: Any = None, axes: Any = (-2, -1),
              norm: str | None = None) -> Any:
        return self._numpy("r2c", "forward", x, s, axes, norm, 2)

    def irfft2(self, x: Any, s: Any = None, axes: Any = (-2, -1),
               norm: str | None = None) -> Any:
        return self._numpy("c2r", "inverse", x, s, axes, norm, 2)

    def fftn(self, x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Any:
        return self._numpy("c2c", "forward", x, s, axes, norm, None)

    def ifftn(self, x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Any:
        return self._numpy("c2c", "inverse", x, s, axes, norm, None)

    def rfftn(self, x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Any:
        return self._numpy("r2c", "forward", x, s, axes, norm, None)

    def irfftn(self, x: Any, s: Any = None, axes: Any = None, norm: str | None = None) -> Any:
        return self._numpy("c2r", "inverse", x, s, axes, norm, None)

    # -- the machinery -------------------------------------------------------------------------
    def _numpy(self, kind: str, direction: str, x: Any, s: Any, axes: Any, norm: Any,
               rank: int | None) -> Any:
        dev = self._dev
        dev.port.check_open()
        r = _ref(x, "x")
        upcast = kind != "r2c" and r.dtype in ("f32", "f64") and (r.order == "C" or
                                                                   len(r.shape) <= 1)
        if upcast:  # NumPy transforms real input as complex: f32 -> c64, f64 -> c128
            x = self._as_complex(x, r)
            r = x.ref
        key = (kind, direction, r.shape, r.dtype, r.order, s, axes, norm, rank)
        try:
            recipe = self._recipes.get(key)
        except (TypeError, ValueError):  # unhashable arguments (lists, memoryviews): worked
            # out each time
            recipe, key = None, None
        if recipe is None:
            recipe = self._recipe(kind, direction, r, s, axes, norm, rank)
            if key is not None:
                if len(self._recipes) >= 512:
                    self._recipes.clear()
                self._recipes[key] = recipe
        out = self._run(recipe, x, r)
        if upcast:
            x.buffer.free()  # after the transform's reads (stream-ordered)
        return out

    def _as_complex(self, x: Any, r: BufRef) -> Any:
        """A new C-ordered complex buffer holding the real buffer ``x`` (imaginary parts 0)."""
        dev = self._dev
        xc = dev.alloc(r.shape, _COMPLEX[r.dtype], order="C")
        if r.size:
            launch(dev, f"gm_real_to_complex_{r.dtype}", r.size, (x, xc, r.size), (x,), (xc,))
        return xc

    def _recipe(self, kind: str, direction: str, r: BufRef, s: Any, axes: Any, norm: Any,
                rank: int | None) -> _Recipe:
        one = rank == 1
        afield = "axis" if one else "axes"
        sfield = "n" if one else "s"
        if norm is None:
            norm = "backward"
        if not isinstance(norm, str) or norm not in NORMS:
            raise InvalidMessage(f"norm: must be one of {NORMS} or None, got {norm!r}",
                                 field="norm")
        ndim = len(r.shape)
        if ndim == 0:
            raise InvalidMessage("x: a 0-d buffer has no axis to transform", field="x")
        if r.order != "C" and ndim > 1:
            raise InvalidMessage(f"x: takes C-ordered buffers like NumPy ({r.describe()} is "
                                 "F-ordered)", field="x")
        want = ("f32", "f64") if kind == "r2c" else ("c64", "c128")
        if r.dtype not in want:
            hint = " (an F-ordered real buffer is not made complex)" \
                if kind != "r2c" and r.dtype in _REAL else ""
            raise InvalidMessage(f"x: {r.describe()} has dtype {r.dtype}; this transform takes "
                                 f"{' or '.join(want)}{hint}", field="x")
        if s is not None:
            if isinstance(s, int) and not isinstance(s, bool):
                s = (s,)
            if not isinstance(s, (tuple, list)) or not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in s):
                raise InvalidMessage(f"{sfield}: expected {'an int' if one else 'ints'}, got "
                                     f"{s!r}", field=sfield)
            s = tuple(s)
        if axes is None:
            axes = tuple(range(ndim - len(s), ndim)) if s is not None else tuple(range(ndim))
        if isinstance(axes, int) and not isinstance(axes, bool):
            axes = (axes,)
        if not isinstance(axes, (tuple, list)) or not all(
                isinstance(a, int) and not isinstance(a, bool) for a in axes) or not axes:
            raise InvalidMessage(f"{afield}: expected {'an int' if one else 'a tuple of ints'}, "
                                 f"got {axes!r}", field=afield)
        if s is not None and len(s) != len(axes):
            raise InvalidMessage(f"{sfield}: {len(s)} sizes for {len(axes)} axes", field=sfield)
        norm_axes = []
        for a in axes:
            if not -ndim <= a < ndim:
                raise InvalidMessage(f"{afield}: axis {a} is out of range for a {ndim}-d "
                                     "buffer", field=afield)
            norm_axes.append(a % ndim)
        if len(set(norm_axes)) != len(norm_axes):
            raise InvalidMessage(f"{afield}: repeated axes are not supported, got {axes!r}",
                                 field=afield)
        last = norm_axes[-1]
        shape = r.shape
        # logical sizes along each transformed axis
        if s is None:
            sizes = [shape[a] for a in norm_axes]
            if kind == "c2r":
                sizes[-1] = 2 * (shape[last] - 1)
        else:
            sizes = list(s)
        for a, v in zip(norm_axes, sizes):
            if v < 1:
                raise InvalidMessage(f"{sfield}: invalid number of data points ({v}) along "
                                     f"axis {a}", field=sfield)
        rec = _Recipe()
        work = list(shape)
        for a, v in zip(norm_axes, sizes):
            target = half_size(v) if kind == "c2r" and a == last else v
            if work[a] != target:
                rec.resize.append((a, target))
                work[a] = target
        rec.work_shape = tuple(work)
        out = list(work)
        if kind == "r2c":
            out[last] = half_size(sizes[-1])
        elif kind == "c2r":
            out[last] = sizes[-1]
        rec.out_shape = tuple(out)
        precision = msgs.PRECISION_OF[r.dtype]
        rec.out_dtype = _REAL[r.dtype] if kind == "c2r" else _COMPLEX[r.dtype]
        total = math.prod(sizes)
        if math.prod(rec.work_shape) == 0 or math.prod(rec.out_shape) == 0:
            pass  # nothing to transform: the (empty) output is the answer
        elif kind == "c2c":
            runs = _runs(norm_axes)
            src = "in"
            for run in runs:
                rec.passes.append(_pass("c2c", precision, rec.work_shape, rec.work_shape, run,
                                        direction, src, "out"))
                src = "out"
        else:
            # the real transform takes axis ``last`` and the adjacent transformed axes before
            # it (cuFFT halves the innermost dimension of a plan)
            run = [last]
            others = set(norm_axes) - {last}
            while run[0] - 1 in others and len(run) < 3:
                run.insert(0, run[0] - 1)
            run_t = tuple(run)
            rest = _runs([a for a in norm_axes if a not in run_t])
            if kind == "r2c":
                rec.passes.append(_pass("r2c", precision, rec.work_shape, rec.out_shape, run_t,
                                        "forward", "in", "out"))
                for rr in rest:
                    rec.passes.append(_pass("c2c", precision, rec.out_shape, rec.out_shape, rr,
                                            "forward", "out", "out"))
            else:
                rec.copy_input = True
                for rr in rest:
                    rec.passes.append(_pass("c2c", precision, rec.work_shape, rec.work_shape,
                                            rr, "inverse", "in", "in"))
                rec.passes.append(_pass("c2r", precision, rec.work_shape, rec.out_shape, run_t,
                                        "inverse", "in", "out"))
        if norm == "ortho":
            rec.scale = 1.0 / math.sqrt(total)
        elif (norm == "forward") == (direction == "forward"):
            rec.scale = 1.0 / total
        return rec.finish()

    def _resized(self, src: Any, shape: tuple[int, ...], dtype: str, axis: int,
                 length: int) -> Any:
        """A new C-ordered buffer: ``src`` (shape ``shape``) cut or zero-padded to ``length``
        along ``axis``."""
        dev = self._dev
        new_shape = shape[:axis] + (length,) + shape[axis + 1:]
        new = dev.alloc(new_shape, dtype, order="C")
        old = shape[axis]
        outer = math.prod(shape[:axis])
        inner = math.prod(shape[axis + 1:])
        keep = min(old, length)
        if length > old:
            dev.memset(new, 0)
        if keep * inner and outer:
            if outer == 1:
                dev.copy_bytes(new, src, keep * inner * _ITEM[dtype])
            else:
                # rows of keep*inner elements, old*inner apart in src, length*inner in new
                dev.cublas.raw.geam(src, src, new, keep * inner, outer, 1.0, 0.0, lda=old * inner,
                                    ldb=old * inner, ldc=length * inner)
        return new

    def _run(self, rec: _Recipe, x: Any, r: BufRef) -> Any:
        """Send the recipe's messages for input ``x`` (its reference ``r``, checked live and
        current by the caller); the future of the new output buffer.

        The messages are built without validating them again: the recipe was worked out (and
        its layouts checked) for buffers of exactly these shapes and dtypes. A single
        execution and its new output go as one message (``Device._send_new``). Otherwise the
        last message that writes the output goes through ``send_writing``: its own future
        resolves to the output, where ``buffer_after`` would add a second future, a
        done-callback and its condition on every call (about half of this path's client
        time)."""
        dev = self._dev
        p = rec.single
        port = dev.port
        if p is not None:
            # one execution, input -> new output: one message (AllocThen); a C2R reads a copy
            # made by its handler
            oref = port.mint(rec.out_shape, rec.out_dtype, "C")
            fut = port.send_new(oref, _UNCHECKED(p.spec, r, oref, p.direction, p.repeat,
                                                 p.x_step, p.out_step, 0, 0, rec.scale,
                                                 rec.copy_input))
            if YIELD_BYTES is not None and oref.nbytes >= YIELD_BYTES:
                time.sleep(0)  # let the device thread issue it now (see YIELD_BYTES)
            return fut
        temps = []
        work: Any = x
        shape = r.shape
        for axis, length in rec.resize:
            work = self._resized(work, shape, r.dtype, axis, length)
            shape = work.ref.shape
            temps.append(work)
        if rec.copy_input and not temps:
            work = dev.alloc(shape, r.dtype, order="C")
            dev.copy_bytes(work, x)
            temps.append(work)
        out = dev.alloc(rec.out_shape, rec.out_dtype, order="C")
        done: Future | None = None
        result: Future | None = None  # the output's future, when the last message is an FftExec
        passes = rec.passes
        last = len(passes) - 1
        send = dev.send
        make = _UNCHECKED
        wref = r if work is x else work.ref
        oref = out.ref
        for i, p in enumerate(passes):
            xb = wref if p.src == "in" else oref
            ob = wref if p.dst == "in" else oref
            scale = rec.scale if i == last else 1.0
            if p.pad_in:  # real input rows an odd number apart: through even-spaced rows
                row = p.pad_in
                pad = dev.alloc((p.repeat, row + 1), p.spec.in_dtype, order="C")
                dev.cublas.raw.geam(xb, xb, pad, row, p.repeat, lda=row, ldb=row, ldc=row + 1)
                temps.append(pad)
                xb = pad.ref
            if p.pad_out:  # real output rows an odd number apart: written spaced, then packed
                row = p.pad_out
                pad = dev.alloc((p.repeat, row + 1), p.spec.out_dtype, order="C")
                send(make(p.spec, xb, pad.ref, p.direction, p.repeat, p.x_step, p.out_step, 0,
                          0, 1.0, False))
                done = dev.cublas.raw.geam(pad, pad, ob, row, p.repeat, scale, 0.0, lda=row + 1,
                                           ldb=row + 1, ldc=row)
                temps.append(pad)
                continue
            msg = make(p.spec, xb, ob, p.direction, p.repeat, p.x_step, p.out_step, 0, 0, scale,
                       False)
            if i == last and ob is oref:
                result = dev.send_writing(msg, out)
            else:
                done = send(msg)
        for t in temps:  # stream-ordered behind the transforms that read them
            t.buffer.free()
        if YIELD_BYTES is not None and oref.nbytes >= YIELD_BYTES:
            time.sleep(0)  # let the device thread issue it now (see YIELD_BYTES)
        if result is not None:
            return result
        if done is None:
            return out
        return dev.buffer_after(done, out)


#: ``dev.cufft``: explicit plans, their execution, and the plan cache
Cufft = view("Cufft", "Raw cuFFT (``dev.cufft``): explicit plans (``plan``), their execution "
             "(``execute``, unnormalized) and the plan cache.", (FftCalls,),
             ["plan", "execute", "replay_info", "cache_info", "cache_config"])
#: ``dev.fft``: numpy.fft's names
Fft = view("Fft", "NumPy's ``fft`` (``dev.fft``): numpy.fft names and arguments on C-ordered "
           "buffers.", (FftCalls,),
           ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
            "rfftn", "irfftn"])


def _as_tuple(value: Any) -> Any:
    """A list as a tuple; anything else as it is (the message says what is wrong with it)."""
    return tuple(value) if isinstance(value, list) else value
