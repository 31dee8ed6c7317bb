"""cuRAND on the simulator: deterministic NumPy/SciPy streams with cuRAND's semantics.

The numbers are not cuRAND's bit for bit (nothing promises them); what carries over is the
contract: the same generator kind, seed, ordering and offset give the same numbers; a stream
has a position that each call advances, so ``n`` values then ``m`` values equal ``n + m``
values for uniform and raw draws (and normal ones in even counts); quasi-random output is laid
out dimension after dimension, ``n`` a multiple of the dimensions.

* Pseudo-random kinds: one counter-based Philox4x64 stream of 32-bit words per generator, keyed
  by a hash of (kind, ordering, seed): word ``p`` is found without generating the ones before
  it, so an offset costs nothing. One word per f32 uniform, normal, raw or Poisson value, two
  per f64 value. Uniforms are (k + 1) 2^-32 (f32) or (k + 1) 2^-53 (f64): in (0, 1] as cuRAND's.
  Normals by Box-Muller over pairs; an odd count uses one value more (as the CUDA handle does).
* Quasi-random kinds: Sobol' points from SciPy's direction numbers (``scipy.stats.qmc.Sobol``,
  32 or 64 bits; the scrambled kinds with a fixed scramble, as cuRAND's constants are fixed),
  point ``i`` made directly by its Gray code, so an offset skips points. Uniforms are the
  points' midpoints (k + 1/2) 2^-bits, normals their inverse normal CDF, Poisson values the
  inverse Poisson CDF.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ...backends.sim._device import SimBackend
from ...errors import InvalidMessage
from ...messages.curand import SOBOL64_KINDS, is_quasi
from ._handle import PAIRED, lookup, unknown_generator

__all__ = ["SimCurand", "pseudo_words", "sobol_points"]

_NP = {"f32": np.float32, "f64": np.float64, "u32": np.uint32, "u64": np.uint64}
#: the fixed scramble of the simulator's scrambled Sobol kinds (cuRAND's constants are fixed)
_SCRAMBLE_SEED = 0x5EED


def _key(kind: str, ordering: str, seed: int) -> int:
    digest = hashlib.blake2b(f"{kind}/{ordering}/{seed}".encode(), digest_size=16).digest()
    return int.from_bytes(digest, "little")


def pseudo_words(key: int, pos: int, count: int) -> np.ndarray:
    """Words ``pos .. pos + count - 1`` (uint32) of the Philox stream keyed by ``key``."""
    block, skip = divmod(pos, 8)  # one Philox4x64 block = 4 x 64 bits = 8 words
    bitgen = np.random.Philox(key=key, counter=block)
    raw = bitgen.random_raw((skip + count + 1) // 2)
    return raw.view(np.uint32)[skip:skip + count]


def sobol_points(sv: np.ndarray, shift: np.ndarray, start: int, count: int) -> np.ndarray:
    """Points ``start .. start + count - 1`` of a Sobol' sequence as (dimensions, count)
    integers: point i = shift XOR the direction numbers of the bits set in i's Gray code."""
    i = np.arange(start, start + count, dtype=np.uint64)
    gray = i ^ (i >> np.uint64(1))
    out = np.broadcast_to(shift[:, None], (shift.size, count)).copy()
    if count:
        for k in range(int(gray.max()).bit_length()):
            mask = ((gray >> np.uint64(k)) & np.uint64(1)).astype(bool)
            if mask.any():
                out[:, mask] ^= sv[:, k:k + 1]
    return out


def _box_muller(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    r = np.sqrt(-2.0 * np.log(u1))
    theta = 2.0 * np.pi * u2
    out = np.empty(2 * u1.size)
    out[0::2] = r * np.cos(theta)
    out[1::2] = r * np.sin(theta)
    return out


#: above this mean the simulated Poisson draws come from the normal approximation (NumPy
#: refuses means beyond about 9.2e18, where cuRAND still answers)
POISSON_NORMAL = 1e7
_COUNT_MAX = float(np.iinfo(np.uint32).max)


def poisson_counts(x: np.ndarray) -> np.ndarray:
    """Real-valued draws as cuRAND's unsigned 32-bit counts: rounded, and saturated at 0 and
    2**32 - 1 as the GPU's float-to-unsigned conversion saturates (a NaN converts to 0)."""
    with np.errstate(invalid="ignore"):
        x = np.where(np.isnan(x), 0.0, np.rint(x))
    return np.clip(x, 0.0, _COUNT_MAX).astype(np.uint32)


class _SimGenerator:
    __slots__ = ("kind", "dimensions", "ordering", "seed", "key", "pos", "sv", "shift", "bits")

    def __init__(self, kind: str, seed: int | None, offset: int, ordering: str,
                 dimensions: int) -> None:
        self.kind = kind
        self.dimensions = dimensions
        self.ordering = ordering
        self.seed = seed or 0
        self.key = _key(kind, ordering, self.seed)
        self.pos = offset  # words (pseudo) or points (quasi) consumed
        self.sv: Any = None
        self.shift: Any = None
        self.bits = 64 if kind in SOBOL64_KINDS else 32
        if is_quasi(kind):
            from scipy.stats import qmc

            engine = qmc.Sobol(dimensions, scramble=kind.startswith("scrambled"),
                               bits=self.bits, seed=_SCRAMBLE_SEED)
            self.sv = engine._sv.astype(np.uint64)
            self.shift = engine._shift.astype(np.uint64)


class SimCurand:
    """The simulator's cuRAND: the CUDA handle's methods, computed in NumPy on the stream."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.generators: dict[int, _SimGenerator] = {}

    def get(self, generator: int, kind: str | None = None, dimensions: int | None = None
            ) -> _SimGenerator:
        return lookup(self.generators, generator, kind, dimensions)

    def create(self, generator: int, kind: str, seed: int | None, offset: int, ordering: str,
               dimensions: int) -> None:
        if generator in self.generators:
            raise InvalidMessage(f"generator: generator {generator} already exists",
                                 field="generator")
        self.generators[generator] = _SimGenerator(kind, seed, offset, ordering, dimensions)

    def reseed(self, generator: int, kind: str, seed: int | None, offset: int) -> None:
        g = self.get(generator, kind)
        if seed is not None:
            g.seed = seed
            g.key = _key(g.kind, g.ordering, seed)
        g.pos = offset

    def destroy(self, generator: int) -> None:
        if self.generators.pop(generator, None) is None:
            raise unknown_generator(generator)

    def generate_bound(self, kind: str, distribution: str, dtype: str, out: int, n: int,
                       mean: float, std: float, lam: float) -> Callable[[Any, Any], None]:
        """``launch(stream, g)``, as the CUDA handle's: :meth:`generate` from the generator
        ``g`` the caller looked up (nothing to work out ahead here)."""
        def launch(stream: Any, g: _SimGenerator) -> None:
            self._generate(stream, g, distribution, dtype, out, n, mean, std, lam)

        return launch

    def generate(self, stream: Any, generator: int, distribution: str, dtype: str, out: int,
                 n: int, mean: float, std: float, lam: float) -> None:
        self._generate(stream, self.get(generator), distribution, dtype, out, n, mean, std, lam)

    def _generate(self, stream: Any, g: _SimGenerator, distribution: str, dtype: str, out: int,
                  n: int, mean: float, std: float, lam: float) -> None:
        if n == 0:
            return
        # the position advances now, in issue order; the values are computed on the stream
        if is_quasi(g.kind):
            start, points = g.pos, n // g.dimensions
            g.pos += points
            values = lambda: self._quasi(g, start, points, distribution, dtype, mean, std, lam)  # noqa: E731
        else:
            count = n + (n % 2 if distribution in PAIRED else 0)
            words = count * (2 if dtype in ("f64", "u64") else 1)
            start = g.pos
            g.pos += words
            key = g.key
            values = lambda: self._pseudo(key, start, n, count, distribution, dtype, mean, std,  # noqa: E731
                                          lam)
        sim, t = self.sim, np.dtype(_NP[dtype])

        def run() -> None:
            sim.view(out, n * t.itemsize).view(t)[...] = values()

        stream.put(run)

    # -- the streams ---------------------------------------------------------------------------
    @staticmethod
    def _pseudo(key: int, start: int, n: int, count: int, distribution: str, dtype: str,
                mean: float, std: float, lam: float) -> np.ndarray:
        if distribution == "poisson":
            rng = np.random.Generator(np.random.Philox(key=key ^ 1, counter=start))
            if lam <= POISSON_NORMAL:
                return rng.poisson(lam, n).astype(np.uint32)
            return poisson_counts(lam + np.sqrt(lam) * rng.standard_normal(n))
        double = dtype in ("f64", "u64")
        w = pseudo_words(key, start, count * (2 if double else 1))
        if distribution == "bits":
            return w.view(np.uint64) if dtype == "u64" else w
        if double:
            m = w[0::2].astype(np.uint64) << np.uint64(21) | (w[1::2] >> np.uint32(11))
            u = (m.astype(np.float64) + 1.0) * 2.0 ** -53
        else:
            u = (w.astype(np.float64) + 1.0) * 2.0 ** -32
        if distribution == "uniform":
            return u[:n]
        z = _box_muller(u[0::2], u[1::2])[:n] * std + mean
        return np.exp(z) if distribution == "lognormal" else z

    @staticmethod
    def _quasi(g: _SimGenerator, start: int, points: int, distribution: str, dtype: str,
               mean: float, std: float, lam: float) -> np.ndarray:
        x = sobol_points(g.sv, g.shift, start, points).reshape(-1)  # dimension after dimension
        if distribution == "bits":
            return x
        u = (x.astype(np.float64) + 0.5) * 2.0 ** -g.bits
        if distribution == "uniform":
            return u
        from scipy import special, stats

        if distribution == "poisson":
            if lam <= POISSON_NORMAL:
                return poisson_counts(stats.poisson.ppf(u, lam))
            return poisson_counts(lam + np.sqrt(lam) * special.ndtri(u))
        z = special.ndtri(u) * std + mean
        return np.exp(z) if distribution == "lognormal" else z

    def close(self) -> None:
        self.generators.clear()
