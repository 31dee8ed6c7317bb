"""The generator kinds of the cuRAND tests, the sample size, and the statistical checks they
share: moments within a few standard errors and a Kolmogorov-Smirnov test at p > 1e-6."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from gpumsg.messages import curand as msgs

PSEUDO = msgs.PSEUDO_KINDS


QUASI = msgs.QUASI_KINDS


KINDS = msgs.RNG_KINDS


N = 1 << 20  # samples per statistical test


P_MIN = 1e-6


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=120)


def seed_of(rng) -> int:
    return int(rng.integers(0, 2 ** 63))


def make(dev, rng, kind: str, **kw):
    if kind in PSEUDO and "seed" not in kw:
        kw["seed"] = seed_of(rng)
    return dev.curand.generator(kind, **kw)


def moments_ok(x: np.ndarray, mean: float, var: float, mu4: float) -> None:
    """The sample mean and variance lie within 6 standard errors of the law's."""
    n = x.size
    xm = float(np.mean(x, dtype=np.float64))
    xv = float(np.var(x, dtype=np.float64))
    assert abs(xm - mean) < 6 * math.sqrt(var / n) + 1e-12, (xm, mean)
    assert abs(xv - var) < 6 * math.sqrt(max(mu4 - var * var, 1e-30) / n) + 1e-12, (xv, var)


def ks_ok(x: np.ndarray, cdf) -> None:
    p = stats.kstest(x.astype(np.float64), cdf).pvalue
    assert p > P_MIN, f"KS p-value {p:.3g}"
