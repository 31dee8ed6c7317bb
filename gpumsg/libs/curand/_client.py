"""``dev.curand``: cuRAND generators as client objects (caller's thread); NumPy's API on top of
them is ``dev.random`` (numpy_random.py).

``dev.curand.generator(kind, seed=..., offset=..., ordering=..., dimensions=...)`` sends one
:class:`~gpumsg.messages.curand.CreateGenerator` and returns a :class:`Generator` at once (its
``ready`` future resolves when the device has made it; later calls may be sent before that).
Each draw (``uniform``, ``normal``, ``lognormal``, ``poisson``, ``integers``) fills a new
C-ordered buffer of ``shape`` (a BufferFuture) or the first values of ``out=`` (a future of
``out``). The generator is destroyed on the device by :meth:`Generator.close`, when it is
garbage collected, or when the device closes.
"""

from __future__ import annotations

import itertools
import marshal
import math
import numbers
import weakref
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ...dtypes import dtype_name
from ...errors import InvalidMessage
from ...messages import curand as msgs
from ...messages._base import BufRef
from ...messages._memo import MessageMemo, OutputTemplates, with_output

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["Curand", "Generator"]

_generator_ids = itertools.count(1)


def _destroy(dev: Device, generator: int, generation: int, ready: Future) -> None:
    if ready.done() and ready.exception() is not None:
        return  # it was never made
    dev.port.post_unanswered(msgs.DestroyGenerator(generator), generation)


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in shape):
        raise InvalidMessage(f"shape: expected an int or a tuple of ints, got {shape!r}",
                             field="shape")
    out = tuple(int(d) for d in shape)
    if any(d < 0 for d in out):
        raise InvalidMessage(f"shape: sizes must be >= 0, got {out}", field="shape")
    return out


class Generator:
    """A cuRAND generator living on the device (see the module docstring). Attributes:
    ``id`` (the handle the messages name it by), ``kind``, ``seed``, ``offset`` (as created),
    ``ordering``, ``dimensions``, ``ready`` (future of its creation)."""

    def __init__(self, dev: Device, kind: str, seed: int | None, offset: int,
                 ordering: str | None, dimensions: int | None) -> None:
        dev.port.check_open()
        self._dev = dev
        self.id = next(_generator_ids)
        msg = msgs.CreateGenerator(self.id, kind, seed, offset, ordering, dimensions)
        self.kind: str = msg.kind
        self.seed: int | None = msg.seed
        self.offset: int = msg.offset
        self.ordering: str = msg.ordering  # type: ignore[assignment]
        self.dimensions: int = msg.dimensions  # type: ignore[assignment]
        self.ready: Future = dev.send(msg)
        #: the messages of repeated draws into an ``out`` buffer (see _draw)
        self._memo = MessageMemo(size=64)
        #: the messages of draws of a new shape, validated once per arguments (_draw_new)
        self._new_outputs = OutputTemplates()
        self._finalizer = weakref.finalize(self, _destroy, dev, self.id, dev.port.generation,
                                           self.ready)

    def __repr__(self) -> str:
        dims = f", dimensions={self.dimensions}" if msgs.is_quasi(self.kind) else ""
        return f"<Generator #{self.id} {self.kind}{dims}>"

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _check(self) -> None:
        if not self._finalizer.alive:
            raise InvalidMessage(f"generator: {self!r} was closed", field="generator")
        self._dev.port.check_open()

    def _draw(self, distribution: str, shape: Any, dtype: Any, out: Any, mean: float = 0.0,
              std: float = 1.0, lam: float = 1.0) -> Any:
        if not self._finalizer.alive:
            raise InvalidMessage(f"generator: {self!r} was closed", field="generator")
        dev = self._dev
        dev.port.check_open()
        if out is None:
            return self._draw_new(distribution, shape, dtype, mean, std, lam)
        # A draw into ``out`` repeated with the same arguments posts the message it built the
        # first time: a Generate holds no position in the stream (the generator's state
        # advances on the device), so the same message draws the next values. The memo takes
        # ``out.ref``, which raises for a freed or stale buffer, before its lookup; the device
        # and the generator were checked above. ``dtype`` is not read when ``out`` is given.
        return dev.port.send_memo(self._memo.entry(
            "generate", (out,), (distribution, shape, mean, std, lam),
            lambda refs: self._into(distribution, out, refs[0], shape, mean, std, lam),
            ("out",)), out)

    def _into(self, distribution: str, out: Any, ref: Any, shape: Any, mean: float,
              std: float, lam: float) -> msgs.Generate:
        """The message of a draw into ``out`` (``ref``: its reference, or ``out`` itself when
        it has none)."""
        if type(ref) is not BufRef:
            raise InvalidMessage(f"out: expected a GpuBuffer or its future, got "
                                 f"{type(out).__name__}", field="out")
        n = ref.size if shape is None else math.prod(_shape(shape))
        return msgs.Generate(self.id, self.kind, self.dimensions, distribution, ref, n, mean,
                             std, lam)

    def _draw_new(self, distribution: str, shape: Any, dtype: Any, mean: float, std: float,
                  lam: float) -> Any:
        """A draw into a new C-ordered buffer of ``shape``. A draw repeated with the same
        arguments copies the message checked the first time with its new output."""
        dev = self._dev
        # the arguments by value and exact type (marshal writes both; ``1`` and ``1.0``
        # differ, a list shape is read as it is now); a call with an object marshal cannot
        # write (a NumPy dtype) is checked every time
        try:
            key: tuple | None = (marshal.dumps((distribution, shape, dtype, mean, std, lam), 2),)
        except ValueError:
            key = None
        kept = self._new_outputs.get(key, ()) if key is not None else None
        if kept is not None:
            ref = dev.port.mint(kept[0], kept[1].out.dtype, "C")
            return dev.port.send_new(ref, with_output(kept[1], "out", ref))
        if shape is None:
            raise InvalidMessage("shape: give a shape or an out buffer", field="shape")
        dims = _shape(shape)
        dt = dtype_name(dtype, "dtype")
        # check everything that does not need the buffer before allocating it
        if distribution in ("uniform", "normal", "lognormal") and dt not in ("f32", "f64"):
            raise InvalidMessage(f"dtype: {distribution} values are f32 or f64, not {dt}",
                                 field="dtype")
        if distribution == "poisson" and dt != "u32":
            raise InvalidMessage(f"dtype: Poisson values are u32, not {dt}", field="dtype")
        if distribution == "bits" and dt != msgs.bits_dtype(self.kind):
            raise InvalidMessage(
                f"dtype: the raw integers of {self.kind} are {msgs.bits_dtype(self.kind)}, "
                f"not {dt} (64-bit integers come only from sobol64 and scrambled_sobol64)",
                field="dtype")
        n = math.prod(dims)
        ref = dev.port.mint(dims, dt, "C")
        msg = msgs.Generate(self.id, self.kind, self.dimensions, distribution, ref, n, mean,
                            std, lam)
        if key is not None:
            self._new_outputs.put(key, (), dims, msg)
        return dev.port.send_new(ref, msg)

    # -- distributions -------------------------------------------------------------------------
    def uniform(self, shape: Any = None, dtype: Any = "f32", out: Any = None) -> Any:
        """Uniform values in (0, 1] (cuRAND's interval) of dtype f32 or f64: a new C-ordered
        buffer of ``shape``, or the first prod(shape) (default: all) elements of ``out``.
        Returns a BufferFuture. Raises InvalidMessage (shape, dtype, out) at the call site."""
        return self._draw("uniform", shape, dtype, out)

    def normal(self, shape: Any = None, dtype: Any = "f32", mean: float = 0.0, std: float = 1.0,
               out: Any = None) -> Any:
        """Normal values N(mean, std^2) (f32/f64), ``std`` > 0; as :meth:`uniform`. Any count,
        odd ones included (a pseudo-random stream then advances by one value more)."""
        return self._draw("normal", shape, dtype, out, mean=mean, std=std)

    def lognormal(self, shape: Any = None, dtype: Any = "f32", mean: float = 0.0,
                  std: float = 1.0, out: Any = None) -> Any:
        """exp(N(mean, std^2)) values (f32/f64), ``std`` > 0; as :meth:`normal`."""
        return self._draw("lognormal", shape, dtype, out, mean=mean, std=std)

    def poisson(self, shape: Any = None, lam: float = 1.0, out: Any = None) -> Any:
        """Poisson values of mean ``lam`` > 0 as u32; as :meth:`uniform`."""
        return self._draw("poisson", shape, "u32", out, lam=lam)

    def integers(self, shape: Any = None, dtype: Any = None, out: Any = None) -> Any:
        """The generator's raw integers: u32 (every generator but the Sobol64 ones), or u64
        (sobol64 and scrambled_sobol64 only; cuRAND's curandGenerateLongLong). ``dtype``
        defaults to the generator's; another one raises InvalidMessage."""
        return self._draw("bits", shape, msgs.bits_dtype(self.kind) if dtype is None else dtype,
                          out)

    # -- state ---------------------------------------------------------------------------------
    def reseed(self, seed: int | None = None, offset: int = 0) -> Future:
        """Restart the stream at ``seed`` (pseudo-random generators; None keeps the seed) and
        the absolute ``offset``; ordered after the draws already sent. A future of None."""
        self._check()
        msg = msgs.SeedGenerator(self.id, self.kind, seed, offset)
        if msg.seed is not None:
            self.seed = msg.seed
        self.offset = msg.offset
        return self._dev.send(msg)

    def close(self) -> None:
        """Destroy the generator on the device now (also done when it is garbage collected
        and when the device closes)."""
        self._finalizer()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Curand:
    """Raw cuRAND (``dev.curand``): device-side generators and their draws into buffers."""

    def __init__(self, device: Device) -> None:
        self._dev = device

    def generator(self, kind: str = "philox", seed: int | None = None, offset: int = 0,
                  ordering: str | None = None, dimensions: int | None = None) -> Generator:
        """A new device-side generator (see :class:`~gpumsg.messages.curand.CreateGenerator`):
        ``kind`` one of xorwow, mrg32k3a, mtgp32, mt19937, philox, sobol32,
        scrambled_sobol32, sobol64, scrambled_sobol64; ``seed`` (pseudo only, default 0),
        ``offset`` (values skipped), ``ordering`` and ``dimensions`` (quasi only). Raises
        InvalidMessage naming the bad field; a status cuRAND returns fails ``ready``."""
        return Generator(self._dev, kind, seed, offset, ordering, dimensions)
