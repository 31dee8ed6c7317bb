"""``dev.random``: NumPy's random API on the device (caller's thread).

``rng = dev.random.default_rng(seed)`` is a :class:`Generator` with the signatures of
``numpy.random.Generator``: ``random``, ``uniform``, ``standard_normal``, ``normal``,
``lognormal``, ``poisson`` and ``integers``; ``dev.random.normal(...)`` and the other
module-level names of numpy.random draw from the device's default generator (seeded from the
operating system's entropy, as NumPy's). Each call returns ONE future of a new C-ordered buffer
(``out=`` where NumPy has it: a future of ``out``) holding the values NumPy's method would
return; ``size=None`` gives a 0-d buffer where NumPy gives a scalar.

The streams are cuRAND's Philox4x32-10 (on the simulator: its deterministic stand-in), not
NumPy's PCG64: the same seed gives the same values from run to run on one backend, not NumPy's
values. The distributions are NumPy's, transformed on the device where cuRAND's differ
(cuRAND's uniform lies in (0, 1], NumPy's in [0, 1); cuRAND's Poisson values are u32, NumPy's
int64; ``integers`` maps 64 random bits into [low, high) by a modulo, whose bias is below
(high - low) / 2**64). Floating-point results are float64 by default as in NumPy; ``dtype=``
float32 is accepted by every method that draws floats. Bad arguments raise
:class:`~gpumsg.errors.InvalidMessage` naming the field at the call site.
"""

from __future__ import annotations

import math
import numbers
import secrets
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ...dtypes import dtype_name
from ...errors import InvalidMessage
from ...messages._base import checked_flag
from ..nvrtc._elementwise import launch

if TYPE_CHECKING:
    from ...client._device import Device

__all__ = ["Generator", "Random"]

_FLOATS = ("f32", "f64")
_INTS = {"i64": (-(1 << 63), (1 << 63) - 1), "i32": (-(1 << 31), (1 << 31) - 1)}


def _size(size: Any) -> tuple[int, ...]:
    """NumPy's ``size``: None (one value: a 0-d buffer), an int or a tuple of ints."""
    if size is None:
        return ()
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (int(size),)
    if not isinstance(size, (tuple, list)) or not all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in size):
        raise InvalidMessage(f"size: expected None, an int or a tuple of ints, got {size!r}",
                             field="size")
    out = tuple(int(d) for d in size)
    if any(d < 0 for d in out):
        raise InvalidMessage(f"size: sizes must be >= 0, got {out}", field="size")
    return out


def _float_dtype(dtype: Any) -> str:
    name = dtype_name(dtype, "dtype")
    if name not in _FLOATS:
        raise InvalidMessage(f"dtype: expected float64 or float32, got {name}", field="dtype")
    return name


def _real(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not math.isfinite(float(value)):
        raise InvalidMessage(f"{field}: expected a finite real number, got {value!r}",
                             field=field)
    return float(value)


def _out_buffer(out: Any, dt: str) -> tuple[Any, tuple[int, ...]]:
    ref = getattr(out, "ref", None)
    if ref is None:
        raise InvalidMessage(f"out: expected a GpuBuffer or its future, got "
                             f"{type(out).__name__}", field="out")
    if ref.dtype != dt or ref.order != "C":
        raise InvalidMessage(f"out: expected a C-ordered buffer of {dt}, got {ref.describe()}",
                             field="out")
    return out, tuple(ref.shape)


class Generator:
    """NumPy's ``Generator`` on one device (made by ``dev.random.default_rng(seed)``): a cuRAND
    Philox generator and the transforms that give NumPy's distributions. Thread-safe as the
    device is; draws are taken from the stream in the order they are sent."""

    def __init__(self, dev: Device, seed: int | None = None) -> None:
        if seed is None:
            seed = secrets.randbits(63)
        elif isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise InvalidMessage(f"seed: expected None or a non-negative int, got {seed!r}",
                                 field="seed")
        self._dev = dev
        self.seed = int(seed)
        #: the cuRAND generator the values come from (``dev.curand``'s raw draws)
        self.bit_generator = dev.curand.generator("philox", seed=self.seed)

    def __repr__(self) -> str:
        return f"<gpumsg Generator(Philox) seed={self.seed} on {self._dev!r}>"

    # -- helpers ---------------------------------------------------------------------------
    def _transformed(self, raw: Any, n: int, dt: str, a: float, b: float) -> Future:
        """``raw`` (a buffer being drawn) made a * raw + b on the device; the future of it."""
        if n == 0:
            return raw
        done = launch(self._dev, f"gm_affine_{dt}", n, (raw, n, a, b), (raw,), (raw,))
        return self._dev.buffer_after(done, raw)

    def _uniform(self, raw: Any, n: int, dt: str, low: float, high: float) -> Future:
        """``raw`` (cuRAND's u in (0, 1], being drawn) made [low, high) on the device."""
        if n == 0:
            return raw
        done = launch(self._dev, f"gm_uniform_{dt}", n, (raw, n, low, high), (raw,), (raw,))
        return self._dev.buffer_after(done, raw)

    def _fill(self, shape: tuple[int, ...], dt: str, value: float) -> Future:
        """A new buffer of ``shape`` holding ``value`` everywhere (a degenerate distribution)."""
        raw = self.bit_generator.uniform(shape, dt)
        return self._transformed(raw, math.prod(shape), dt, 0.0, value)

    # -- NumPy's methods -------------------------------------------------------------------
    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Future:
        """Uniform values in [0.0, 1.0) (``numpy.random.Generator.random``)."""
        dt = _float_dtype(dtype)
        if out is not None:
            out, shape = _out_buffer(out, dt)
            raw = self.bit_generator.uniform(None, out=out)
        else:
            shape = _size(size)
            raw = self.bit_generator.uniform(shape, dt)
        return self._uniform(raw, math.prod(shape), dt, 0.0, 1.0)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None,
                dtype: Any = np.float64) -> Future:
        """Uniform values in [low, high) (``numpy.random.Generator.uniform``; ``dtype`` is
        gpumsg's addition)."""
        lo, hi = _real(low, "low"), _real(high, "high")
        if hi < lo:
            raise InvalidMessage(f"high: must not be below low ({low!r}), got {high!r}",
                                 field="high")
        dt, shape = _float_dtype(dtype), _size(size)
        raw = self.bit_generator.uniform(shape, dt)
        return self._uniform(raw, math.prod(shape), dt, lo, hi)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64,
                        out: Any = None) -> Future:
        """Standard normal values (``numpy.random.Generator.standard_normal``)."""
        dt = _float_dtype(dtype)
        if out is not None:
            out, _shape = _out_buffer(out, dt)
            return self.bit_generator.normal(None, out=out)
        return self.bit_generator.normal(_size(size), dt)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None,
               dtype: Any = np.float64) -> Future:
        """Normal values of mean ``loc`` and standard deviation ``scale`` >= 0
        (``numpy.random.Generator.normal``)."""
        mu, sigma = _real(loc, "loc"), _real(scale, "scale")
        if sigma < 0:
            raise InvalidMessage(f"scale: must be >= 0, got {scale!r}", field="scale")
        dt, shape = _float_dtype(dtype), _size(size)
        if sigma == 0:
            return self._fill(shape, dt, mu)
        return self.bit_generator.normal(shape, dt, mean=mu, std=sigma)

    def lognormal(self, mean: float = 0.0, sigma: float = 1.0, size: Any = None,
                  dtype: Any = np.float64) -> Future:
        """exp(N(mean, sigma^2)) values, ``sigma`` >= 0 (``numpy.random.Generator.lognormal``)."""
        mu, s = _real(mean, "mean"), _real(sigma, "sigma")
        if s < 0:
            raise InvalidMessage(f"sigma: must be >= 0, got {sigma!r}", field="sigma")
        dt, shape = _float_dtype(dtype), _size(size)
        if s == 0:
            return self._fill(shape, dt, math.exp(mu))
        return self.bit_generator.lognormal(shape, dt, mean=mu, std=s)

    def poisson(self, lam: float = 1.0, size: Any = None) -> Future:
        """Poisson values of mean ``lam`` >= 0 as int64 (``numpy.random.Generator.poisson``)."""
        rate = _real(lam, "lam")
        if rate < 0:
            raise InvalidMessage(f"lam: must be >= 0, got {lam!r}", field="lam")
        shape = _size(size)
        n = math.prod(shape)
        dev = self._dev
        if rate == 0 or n == 0:
            out = dev.alloc(shape, np.int64, order="C")
            return dev.buffer_after(dev.memset(out, 0), out) if n else out
        raw = self.bit_generator.poisson(shape, lam=rate)
        out = dev.alloc(shape, np.int64, order="C")
        done = launch(dev, "gm_u32_to_i64", n, (raw, out, n), (raw,), (out,))
        raw.buffer.free()  # freed behind the launch (stream-ordered)
        return dev.buffer_after(done, out)

    def integers(self, low: int, high: int | None = None, size: Any = None,
                 dtype: Any = np.int64, endpoint: bool = False) -> Future:
        """Integers in [low, high), or [low, high] with ``endpoint``; ``high=None`` draws from
        [0, low) (``numpy.random.Generator.integers``). ``dtype``: int64 or int32."""
        for field, v in (("low", low), ("high", high)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                raise InvalidMessage(f"{field}: expected an int, got {v!r}", field=field)
        checked_flag(endpoint, "endpoint")
        lo, hi = (0, int(low)) if high is None else (int(low), int(high))
        if endpoint:
            hi += 1
        dt = dtype_name(dtype, "dtype")
        if dt not in _INTS:
            raise InvalidMessage(f"dtype: expected int64 or int32, got {dt}", field="dtype")
        if hi <= lo:
            raise InvalidMessage(f"high: the interval [{lo}, {hi}) is empty", field="high")
        first, last = _INTS[dt]
        if lo < first or hi - 1 > last:
            raise InvalidMessage(f"low/high: [{lo}, {hi}) does not fit {dt}", field="high")
        shape = _size(size)
        n = math.prod(shape)
        dev = self._dev
        out = dev.alloc(shape, dt, order="C")
        if n == 0:
            return out
        bits = self.bit_generator.integers((2 * n,), "u32")
        done = launch(dev, f"gm_integers_{dt}", n, (bits, out, n, lo, hi - lo), (bits,),
                      (out,))
        bits.buffer.free()
        return dev.buffer_after(done, out)

    def close(self) -> None:
        """Destroy the cuRAND generator now (also done when this is garbage collected)."""
        self.bit_generator.close()


class Random:
    """NumPy's ``random`` module on one device (``dev.random``): :meth:`default_rng` and the
    module-level draws of numpy.random's names (``integers`` is a Generator's only, as in
    NumPy) from a default generator made on first use."""

    def __init__(self, device: Device) -> None:
        self._dev = device
        self._default: Generator | None = None
        self._lock = threading.Lock()

    def default_rng(self, seed: int | None = None) -> Generator:
        """A new :class:`Generator` (``numpy.random.default_rng``); ``seed=None`` takes one
        from the operating system's entropy."""
        return Generator(self._dev, seed)

    def _rng(self) -> Generator:
        gen = self._default
        if gen is None:
            with self._lock:
                if self._default is None:
                    self._default = Generator(self._dev)
                gen = self._default
        return gen

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Future:
        """:meth:`Generator.random` of the default generator."""
        return self._rng().random(size, dtype, out)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None,
                dtype: Any = np.float64) -> Future:
        """:meth:`Generator.uniform` of the default generator."""
        return self._rng().uniform(low, high, size, dtype)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64,
                        out: Any = None) -> Future:
        """:meth:`Generator.standard_normal` of the default generator."""
        return self._rng().standard_normal(size, dtype, out)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None,
               dtype: Any = np.float64) -> Future:
        """:meth:`Generator.normal` of the default generator."""
        return self._rng().normal(loc, scale, size, dtype)

    def lognormal(self, mean: float = 0.0, sigma: float = 1.0, size: Any = None,
                  dtype: Any = np.float64) -> Future:
        """:meth:`Generator.lognormal` of the default generator."""
        return self._rng().lognormal(mean, sigma, size, dtype)

    def poisson(self, lam: float = 1.0, size: Any = None) -> Future:
        """:meth:`Generator.poisson` of the default generator."""
        return self._rng().poisson(lam, size)
