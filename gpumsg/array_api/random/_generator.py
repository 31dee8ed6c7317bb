"""``Generator``: NumPy's ``numpy.random.Generator`` on gpumsg arrays.

Every method has NumPy's name and signature and answers a gpumsg Array at once (the kernels
queue behind the work already sent); ``size=None`` with scalar parameters gives a 0-d array
where NumPy gives a scalar. Parameters are Python numbers, sequences, NumPy arrays or gpumsg
arrays, broadcast together and against ``size`` as NumPy broadcasts them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import InvalidMessage
from .. import _dtypes as D
from .._array import Array, new_array, resolve_device
from ._bitgen import PhiloxStreams, seed_sequence
from ._kernels import launch_integers, launch_sample, launch_uniform
from ._params import (
    Param,
    check,
    float_dtype,
    materialize,
    out_shape,
    param,
    size_shape,
)

__all__ = ["Generator", "default_rng"]

#: NumPy's largest Poisson mean (beyond it the counts no longer fit int64)
POISSON_LAM_MAX = 9.223372006484771e18
#: scalar Poisson means up to this one are drawn by cuRAND; larger ones by the PTRS kernel
CURAND_POISSON_MAX = 1000.0

_NONNEG = (lambda v: v >= 0, "must be >= 0")
_POS = (lambda v: v > 0, "must be > 0")


def _int_dtype(dtype: Any) -> np.dtype:
    try:
        dt = D.check_dtype(dtype)
    except Exception as exc:  # noqa: BLE001
        raise InvalidMessage(f"dtype: {exc}", field="dtype") from None
    if D.kind_of(dt) not in "biu":
        raise InvalidMessage(f"dtype: expected an integer or bool dtype, got {dt}",
                             field="dtype")
    return dt


class Generator:
    """NumPy's ``Generator`` on a gpumsg device (see the package docstring). ``seed``: None,
    an int, a sequence of ints or a :class:`numpy.random.SeedSequence`; ``device``: a gpumsg
    Device (default: the array namespace's default device)."""

    def __init__(self, seed: Any = None, *, device: Any = None,
                 bit_generator: PhiloxStreams | None = None) -> None:
        self._dev = resolve_device(device) if bit_generator is None else bit_generator._dev
        self._bits = bit_generator or PhiloxStreams(self._dev, seed_sequence(seed))

    def __repr__(self) -> str:
        return f"Generator(PhiloxStreams) on {self._dev!r}"

    @property
    def bit_generator(self) -> PhiloxStreams:
        """The bit source (its seed sequence, Philox key and launch counter, cuRAND
        generator)."""
        return self._bits

    @property
    def device(self) -> Any:
        return self._dev

    def spawn(self, n_children: int) -> list[Generator]:
        """``n_children`` independent generators (NumPy's ``Generator.spawn``)."""
        return [Generator(bit_generator=b) for b in self._bits.spawn(n_children)]

    # -- the machinery -----------------------------------------------------------------------
    def _params(self, *pairs: tuple[str, Any]) -> list[Param]:
        return [param(self._dev, name, value) for name, value in pairs]

    def _target(self, shape: tuple[int, ...], dt: np.dtype, out: Any) -> tuple[Array, Any]:
        """(the array the kernel writes, the ``out`` to copy it into afterwards or None)."""
        if out is None:
            return new_array(self._dev, shape, dt), None
        if out._is_contiguous():
            return out, None
        return new_array(self._dev, shape, dt), out

    def _out(self, out: Any, size: Any, dt: np.dtype) -> tuple[int, ...] | None:
        """Check ``out`` (an Array of ``dt`` on this device matching ``size``); its shape."""
        if out is None:
            return size_shape(size)
        if not isinstance(out, Array):
            raise InvalidMessage(f"out: expected a gpumsg Array, got {type(out).__name__}",
                                 field="out")
        if out.device is not self._dev:
            raise InvalidMessage("out: the array is on another device than the generator",
                                 field="out")
        if out.dtype != dt:
            raise InvalidMessage(f"out: expected an array of {dt}, got {out.dtype}",
                                 field="out")
        shape = size_shape(size)
        if shape is not None and shape != out.shape:
            raise InvalidMessage(f"size: {shape} does not match out's shape {out.shape}",
                                 field="size")
        return out.shape

    def _finish(self, res: Array, copy_to: Any) -> Array:
        if copy_to is None:
            return res
        copy_to[...] = res
        return copy_to

    def _sample(self, name: str, pairs: list[tuple[str, Any]], checks: list[Any], size: Any,
                dt: np.dtype = D.float64, out: Any = None) -> Array:
        ps = self._params(*pairs)
        for p, rule in zip(ps, checks):
            if rule is not None:
                check(p, *rule)
        return self._launch(name, ps, self._out(out, size, dt), dt, out)

    def _launch(self, name: str, ps: list[Param], size: tuple[int, ...] | None, dt: np.dtype,
                out: Any = None) -> Array:
        shape = out_shape(size, ps)
        res, copy_to = self._target(shape, dt, out)
        launch_sample(res, name, [materialize(p, shape) for p in ps], self._bits.key,
                      self._bits.next_launch())
        return self._finish(res, copy_to)

    def _curand_array(self, fut: Any, shape: tuple[int, ...], dt: np.dtype) -> Array:
        return Array(fut, shape, dt, self._dev)

    # -- uniform and integers ------------------------------------------------------------------
    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> Array:
        """Uniform values in [0.0, 1.0): NumPy's mapping of 53 (float64) or 24 (float32)
        random bits, four float32 or two float64 per Philox call."""
        dt = float_dtype(dtype)
        shape = self._out(out, size, dt) or ()
        res, copy_to = self._target(shape, dt, out)
        launch_uniform(res, self._bits.key, self._bits.next_launch())
        return self._finish(res, copy_to)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Array:
        """Uniform values in [low, high) (float64); ``high - low`` must be finite and
        >= 0."""
        ps = self._params(("low", low), ("high", high))
        width = self._combine(ps, lambda lo, hi: hi - lo, "high")
        check(width, lambda v: v >= 0, "high - low < 0")
        check(width, lambda v: v < math.inf, "high - low range exceeds valid bounds")
        if ps[0].scalar and ps[1].scalar:
            shape = size_shape(size) or ()
            res = new_array(self._dev, shape, D.float64)
            launch_uniform(res, self._bits.key, self._bits.next_launch(), ps[0].value,
                           ps[1].value)
            return res
        return self._launch("uniform", ps, size_shape(size), D.float64)

    def _combine(self, ps: list[Param], fn: Any, name: str) -> Param:
        """``fn(*ps)`` as a Param named ``name`` (computed on the host when every parameter
        came from there, else on the device), to check a condition between parameters."""
        if all(p.host is not None for p in ps):
            with np.errstate(all="ignore"):
                return Param(name, None, (), fn(*(np.asarray(p.host) for p in ps)))
        shape = out_shape(None, ps)
        vals = [materialize(p, shape) for p in ps]
        return Param(name, fn(*vals), shape, None)

    def integers(self, low: Any, high: Any = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> Array:
        """Integers in [low, high) (``endpoint``: [low, high]); ``high=None`` draws from
        [0, low). Exactly uniform (masked rejection). ``dtype``: any integer dtype or bool.
        ``low``/``high`` may be arrays (host or device), broadcast with ``size``."""
        dt = _int_dtype(dtype)
        if not isinstance(endpoint, bool):
            raise InvalidMessage(f"endpoint: expected True or False, got {endpoint!r}",
                                 field="endpoint")
        if high is None:
            low, high = 0, low
        info = (0, 1) if dt == D.bool else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        bounds = []
        for name, v in (("low", low), ("high", high)):
            if isinstance(v, Array):
                if D.kind_of(v.dtype) not in "biu":
                    raise InvalidMessage(f"{name}: expected integers, got {v.dtype}",
                                         field=name)
                bounds.append(v)
                continue
            host = np.asarray(v)
            if host.dtype.kind not in "biu" and not (host.dtype == object):
                raise InvalidMessage(f"{name}: expected integers, got {host.dtype}",
                                     field=name)
            bounds.append(host)
        lo, hi = bounds
        shape = out_shape(size_shape(size),
                          [Param("low", None, tuple(lo.shape), None),
                           Param("high", None, tuple(hi.shape), None)])
        if isinstance(lo, Array) or isinstance(hi, Array):
            return self._integers_dev(lo, hi, endpoint, shape, dt, info)
        lo_i = np.asarray(lo, dtype=object)
        hi_i = np.asarray(np.asarray(hi, dtype=object) - (0 if endpoint else 1), dtype=object)
        if np.any(lo_i < info[0]):
            raise InvalidMessage(f"low: out of bounds for {dt}", field="low")
        if np.any(hi_i > info[1]):
            raise InvalidMessage(f"high: out of bounds for {dt}", field="high")
        if np.any(lo_i > hi_i):
            raise InvalidMessage("high: low > high" if endpoint else "high: low >= high",
                                 field="high")
        res = new_array(self._dev, shape, dt)
        args = []
        for v in (lo_i, hi_i):
            if v.ndim == 0:
                args.append(int(v))
            else:
                from .._array import asarray_host
                from .._elementwise import astype
                from .._manipulation import broadcast_to

                wrapped = np.array([int(x) & 0xFFFFFFFFFFFFFFFF for x in v.reshape(-1)],
                                   np.uint64).reshape(v.shape)
                # the bounds as given go up, the output's shape of them is made on the device
                # (a host copy of that shape would cost host memory in the output's size)
                args.append(astype(broadcast_to(asarray_host(self._dev, wrapped, D.uint64),
                                                shape), D.uint64))
        launch_integers(res, args[0], args[1], self._bits.key, self._bits.next_launch())
        return res

    def _integers_dev(self, lo: Any, hi: Any, endpoint: bool, shape: tuple[int, ...],
                      dt: np.dtype, info: tuple[int, int]) -> Array:
        from .._creation import asarray
        from .._elementwise import astype, subtract
        from .._manipulation import broadcast_to
        from .._reductions import all as all_

        def dev_int(v: Any) -> Array:
            a = v if isinstance(v, Array) else asarray(np.asarray(v, np.int64),
                                                      device=self._dev)
            return astype(broadcast_to(astype(a, D.int64), shape), D.int64)

        lo_a = dev_int(lo)
        hi_a = dev_int(hi) if endpoint else subtract(dev_int(hi), 1)
        info = (max(info[0], -(1 << 63)), min(info[1], (1 << 63) - 1))  # int64 bounds
        if not bool(all_(lo_a >= info[0])):
            raise InvalidMessage(f"low: out of bounds for {dt}", field="low")
        if not bool(all_(hi_a <= info[1])):
            raise InvalidMessage(f"high: out of bounds for {dt}", field="high")
        if not bool(all_(lo_a <= hi_a)):
            raise InvalidMessage("high: low > high" if endpoint else "high: low >= high",
                                 field="high")
        res = new_array(self._dev, shape, dt)
        launch_integers(res, lo_a, hi_a, self._bits.key, self._bits.next_launch())
        return res

    def bytes(self, length: int) -> bytes:  # noqa: A003 - NumPy's name
        """``length`` random bytes (waits for them)."""
        from ._params import int_value

        n = int_value(length, "length")
        if n < 0:
            raise InvalidMessage(f"length: must be >= 0, got {n}", field="length")
        words = self.integers(0, 1 << 32, size=(n + 3) // 4, dtype=np.uint32)
        # one host copy of the words and the bytes made from it: n bytes cost 2n of host memory
        # at the peak (a cast, a copy and a slice of the bytes took 4n, past 8 GiB for 2 GiB)
        host = np.asarray(words).astype("<u4", copy=False)
        return host.view(np.uint8)[:n].tobytes()

    # -- the normal family (cuRAND) --------------------------------------------------------------
    def standard_normal(self, size: Any = None, dtype: Any = np.float64,
                        out: Any = None) -> Array:
        """Standard normal values (cuRAND's Philox normal generator)."""
        dt = float_dtype(dtype)
        shape = self._out(out, size, dt) or ()
        gen = self._bits.curand
        name = D.storage_name(dt)
        if out is not None and out._is_whole():
            if out.size:
                out._wrote(gen.normal(None, out=out.buffer))
            return out
        res = self._curand_array(gen.normal(shape, name), shape, dt)
        return self._finish(res, out)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Array:
        """Normal values of mean ``loc`` and standard deviation ``scale`` >= 0."""
        ps = self._params(("loc", loc), ("scale", scale))
        check(ps[1], *_NONNEG)
        if ps[0].scalar and ps[1].scalar and ps[1].value > 0:
            shape = out_shape(size_shape(size), ps)
            fut = self._bits.curand.normal(shape, "f64", mean=ps[0].value, std=ps[1].value)
            return self._curand_array(fut, shape, D.float64)
        return self._launch("normal", ps, size_shape(size), D.float64)

    def lognormal(self, mean: Any = 0.0, sigma: Any = 1.0, size: Any = None) -> Array:
        """exp(N(mean, sigma**2)) values, ``sigma`` >= 0."""
        ps = self._params(("mean", mean), ("sigma", sigma))
        check(ps[1], *_NONNEG)
        if ps[0].scalar and ps[1].scalar and ps[1].value > 0:
            shape = out_shape(size_shape(size), ps)
            fut = self._bits.curand.lognormal(shape, "f64", mean=ps[0].value, std=ps[1].value)
            return self._curand_array(fut, shape, D.float64)
        return self._launch("lognormal", ps, size_shape(size), D.float64)

    def poisson(self, lam: Any = 1.0, size: Any = None) -> Array:
        """Poisson counts (int64) of mean ``lam`` (0 <= lam <= about 9.2e18): cuRAND's
        generator for a scalar mean up to 1000, the kernel (multiplication below 10, PTRS
        above) otherwise."""
        (p,) = self._params(("lam", lam))
        check(p, lambda v: v >= 0, "must be >= 0")
        check(p, lambda v: v <= POISSON_LAM_MAX, "value too large")
        if p.scalar and 0 < p.value <= CURAND_POISSON_MAX:
            from .._elementwise import astype

            shape = out_shape(size_shape(size), [p])
            if math.prod(shape) == 0:
                return new_array(self._dev, shape, D.int64)
            raw = self._curand_array(self._bits.curand.poisson(shape, lam=p.value), shape,
                                     D.uint32)
            return astype(raw, D.int64)
        return self._launch("poisson", [p], size_shape(size), D.int64)

    # -- continuous distributions (the sampling kernels) ------------------------------------
    def standard_exponential(self, size: Any = None, dtype: Any = np.float64,
                             method: str = "zig", out: Any = None) -> Array:
        """Exp(1) values. ``method`` is NumPy's ('zig' or 'inv'); both give the same
        distribution, here by inversion."""
        if not isinstance(method, str) or method not in ("zig", "inv"):
            raise InvalidMessage(f"method: expected 'zig' or 'inv', got {method!r}",
                                 field="method")
        dt = float_dtype(dtype)
        return self._sample("exponential", [("scale", 1.0)], [None], size, dt, out)

    def exponential(self, scale: Any = 1.0, size: Any = None) -> Array:
        """Exponential values of mean ``scale`` >= 0."""
        return self._sample("exponential", [("scale", scale)], [_NONNEG], size)

    def standard_gamma(self, shape: Any, size: Any = None, dtype: Any = np.float64,
                       out: Any = None) -> Array:
        """Gamma(shape, 1) values (Marsaglia-Tsang), ``shape`` >= 0."""
        dt = float_dtype(dtype)
        return self._sample("gamma", [("shape", shape)], [_NONNEG], size, dt, out)

    def gamma(self, shape: Any, scale: Any = 1.0, size: Any = None) -> Array:
        """Gamma values of ``shape`` >= 0 and ``scale`` >= 0."""
        ps = self._params(("shape", shape), ("scale", scale))
        check(ps[0], *_NONNEG)
        check(ps[1], *_NONNEG)
        res = self._launch("gamma", ps[:1], out_shape(size_shape(size), ps), D.float64)
        if ps[1].scalar and ps[1].value == 1.0:
            return res
        from .._elementwise import multiply

        return multiply(res, materialize(ps[1], res.shape))

    def beta(self, a: Any, b: Any, size: Any = None) -> Array:
        """Beta(a, b) values, ``a`` > 0, ``b`` > 0 (Jöhnk's method when both are at most
        1, a ratio of gammas otherwise)."""
        return self._sample("beta", [("a", a), ("b", b)], [_POS, _POS], size)

    def chisquare(self, df: Any, size: Any = None) -> Array:
        """Chi-square values with ``df`` > 0 degrees of freedom (twice a gamma of shape
        df/2)."""
        return self._sample("chisquare", [("df", df)], [_POS], size)

    def noncentral_chisquare(self, df: Any, nonc: Any, size: Any = None) -> Array:
        """Noncentral chi-square values: ``df`` > 0, ``nonc`` >= 0."""
        return self._sample("noncentral_chisquare", [("df", df), ("nonc", nonc)],
                            [_POS, _NONNEG], size)

    def f(self, dfnum: Any, dfden: Any, size: Any = None) -> Array:
        """F (Fisher-Snedecor) values: ``dfnum`` > 0, ``dfden`` > 0."""
        return self._sample("f", [("dfnum", dfnum), ("dfden", dfden)], [_POS, _POS], size)

    def noncentral_f(self, dfnum: Any, dfden: Any, nonc: Any, size: Any = None) -> Array:
        """Noncentral F values: ``dfnum`` > 0, ``dfden`` > 0, ``nonc`` >= 0."""
        return self._sample("noncentral_f", [("dfnum", dfnum), ("dfden", dfden),
                                             ("nonc", nonc)], [_POS, _POS, _NONNEG], size)

    def standard_t(self, df: Any, size: Any = None) -> Array:
        """Student's t values with ``df`` > 0."""
        return self._sample("standard_t", [("df", df)], [_POS], size)

    def standard_cauchy(self, size: Any = None) -> Array:
        """Standard Cauchy values (a ratio of normals)."""
        return self._sample("standard_cauchy", [], [], size)

    def gumbel(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Array:
        """Gumbel values of location ``loc`` and ``scale`` >= 0."""
        return self._sample("gumbel", [("loc", loc), ("scale", scale)], [None, _NONNEG], size)

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Array:
        """Laplace values of location ``loc`` and ``scale`` >= 0."""
        return self._sample("laplace", [("loc", loc), ("scale", scale)], [None, _NONNEG],
                            size)

    def logistic(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Array:
        """Logistic values of location ``loc`` and ``scale`` >= 0."""
        return self._sample("logistic", [("loc", loc), ("scale", scale)], [None, _NONNEG],
                            size)

    def pareto(self, a: Any, size: Any = None) -> Array:
        """Pareto II (Lomax) values of shape ``a`` > 0, as NumPy's (``expm1(E / a)``)."""
        return self._sample("pareto", [("a", a)], [_POS], size)

    def power(self, a: Any, size: Any = None) -> Array:
        """Power-law values in [0, 1] of exponent ``a`` > 0."""
        return self._sample("power", [("a", a)], [_POS], size)

    def rayleigh(self, scale: Any = 1.0, size: Any = None) -> Array:
        """Rayleigh values of ``scale`` >= 0."""
        return self._sample("rayleigh", [("scale", scale)], [_NONNEG], size)

    def weibull(self, a: Any, size: Any = None) -> Array:
        """Weibull values of shape ``a`` >= 0 (``a = 0`` gives 0)."""
        return self._sample("weibull", [("a", a)], [_NONNEG], size)

    def triangular(self, left: Any, mode: Any, right: Any, size: Any = None) -> Array:
        """Triangular values: ``left <= mode <= right``, ``left < right``."""
        ps = self._params(("left", left), ("mode", mode), ("right", right))
        check(self._combine(ps, lambda a, m, b: m - a, "mode"), lambda v: v >= 0, "left > mode")
        check(self._combine(ps, lambda a, m, b: b - m, "right"), lambda v: v >= 0,
              "mode > right")
        check(self._combine(ps, lambda a, m, b: b - a, "right"), lambda v: v > 0,
              "left == right")
        return self._launch("triangular", ps, size_shape(size), D.float64)

    def vonmises(self, mu: Any, kappa: Any, size: Any = None) -> Array:
        """Von Mises values on [-pi, pi] of mode ``mu`` and concentration ``kappa`` >= 0
        (Best-Fisher rejection)."""
        return self._sample("vonmises", [("mu", mu), ("kappa", kappa)], [None, _NONNEG], size)

    def wald(self, mean: Any, scale: Any, size: Any = None) -> Array:
        """Wald (inverse Gaussian) values: ``mean`` > 0, ``scale`` > 0."""
        return self._sample("wald", [("mean", mean), ("scale", scale)], [_POS, _POS], size)

    # -- discrete distributions -------------------------------------------------------------------
    def binomial(self, n: Any, p: Any, size: Any = None) -> Array:
        """Binomial counts (int64): ``n`` >= 0 (truncated to an integer), 0 <= p <= 1."""
        return self._sample("binomial", [("n", n), ("p", p)],
                            [_NONNEG, (lambda v: (v >= 0) & (v <= 1), "must be in [0, 1]")],
                            size, D.int64)

    def negative_binomial(self, n: Any, p: Any, size: Any = None) -> Array:
        """Negative binomial counts (int64): ``n`` > 0, 0 < p <= 1 (Poisson of a gamma)."""
        return self._sample("negative_binomial", [("n", n), ("p", p)],
                            [_POS, (lambda v: (v > 0) & (v <= 1), "must be in (0, 1]")],
                            size, D.int64)

    def geometric(self, p: Any, size: Any = None) -> Array:
        """Geometric counts >= 1 (int64), 0 < p <= 1 (inversion)."""
        return self._sample("geometric", [("p", p)],
                            [(lambda v: (v > 0) & (v <= 1), "must be in (0, 1]")], size,
                            D.int64)

    def logseries(self, p: Any, size: Any = None) -> Array:
        """Logarithmic series counts >= 1 (int64), 0 <= p < 1 (Kemp's method)."""
        return self._sample("logseries", [("p", p)],
                            [(lambda v: (v >= 0) & (v < 1), "must be in [0, 1)")], size,
                            D.int64)

    def zipf(self, a: Any, size: Any = None) -> Array:
        """Zipf counts >= 1 (int64), ``a`` > 1 (rejection)."""
        return self._sample("zipf", [("a", a)], [(lambda v: v > 1, "must be > 1")], size,
                            D.int64)

    def hypergeometric(self, ngood: Any, nbad: Any, nsample: Any, size: Any = None) -> Array:
        """Hypergeometric counts (int64): ``ngood``, ``nbad`` in [0, 10**9), ``nsample`` in
        [0, ngood + nbad]."""
        ps = self._params(("ngood", ngood), ("nbad", nbad), ("nsample", nsample))
        for p in ps:
            check(p, lambda v: v >= 0, "must be >= 0")
            check(p, lambda v: v == np.floor(v) if not isinstance(v, Array) else v == v // 1,
                  "must be an integer")
        for p in ps[:2]:
            check(p, lambda v: v < 1e9, "must be less than 1000000000")
        total = self._combine(ps, lambda g, b, n: g + b - n, "nsample")
        check(total, lambda v: v >= 0, "ngood + nbad < nsample")
        return self._launch("hypergeometric", ps, size_shape(size), D.int64)

    # -- permutations, choice and the multivariate distributions ----------------------------
    def permutation(self, x: Any, axis: int = 0) -> Array:
        """A permutation of ``arange(x)`` (an int), or a shuffled copy of the array ``x``
        along ``axis``."""
        from ._shuffle import permutation

        return permutation(self, x, axis)

    def shuffle(self, x: Array, axis: int = 0) -> None:
        """Shuffle the gpumsg array ``x`` in place along ``axis``."""
        from ._shuffle import shuffle

        shuffle(self, x, axis)

    def permuted(self, x: Any, *, axis: int | None = None, out: Any = None) -> Array:
        """``x`` with each slice along ``axis`` shuffled independently (``axis=None``: the
        flattened array), into ``out`` when given."""
        from ._shuffle import permuted

        return permuted(self, x, axis, out)

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None,
               axis: int = 0, shuffle: bool = True) -> Array:
        """A random sample from ``arange(a)`` (an int) or from the array ``a`` along
        ``axis``; with or without replacement, weighted by ``p``."""
        from ._shuffle import choice

        return choice(self, a, size, replace, p, axis, shuffle)

    def dirichlet(self, alpha: Any, size: Any = None) -> Array:
        """Dirichlet points of shape ``size + (k,)`` for the concentrations ``alpha`` >=
        0."""
        from ._multivariate import dirichlet

        return dirichlet(self, alpha, size)

    def multinomial(self, n: Any, pvals: Any, size: Any = None) -> Array:
        """Multinomial counts (int64) of shape ``broadcast(size or n, pvals[..., :-1]) +
        (k,)``."""
        from ._multivariate import multinomial

        return multinomial(self, n, pvals, size)

    def multivariate_hypergeometric(self, colors: Any, nsample: int, size: Any = None,
                                    method: str = "marginals") -> Array:
        """Counts per colour (int64) of ``nsample`` items drawn without replacement from
        ``colors``; shape ``size + (k,)``."""
        from ._multivariate import multivariate_hypergeometric

        return multivariate_hypergeometric(self, colors, nsample, size, method)

    def multivariate_normal(self, mean: Any, cov: Any, size: Any = None,
                            check_valid: str = "warn", tol: float = 1e-8, *,
                            method: str = "svd") -> Array:
        """Multivariate normal points (float64) of shape ``size + (k,)``; ``check_valid``
        ('warn', 'raise', 'ignore') and ``tol`` judge the covariance, ``method`` ('svd',
        'eigh', 'cholesky') factors it."""
        from ._multivariate import multivariate_normal

        return multivariate_normal(self, mean, cov, size, check_valid, tol, method)


def default_rng(seed: Any = None, *, device: Any = None) -> Generator:
    """A new :class:`Generator` (``numpy.random.default_rng``); a Generator passed as ``seed``
    is returned as it is."""
    if isinstance(seed, Generator):
        return seed
    return Generator(seed, device=device)
