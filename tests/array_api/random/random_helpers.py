"""Shared checks of the random tests: a Kolmogorov-Smirnov test and a chi-square test at
p > 1e-6, sample moments within 6 standard errors, and the seed of a test's generator taken
from the suite's seeded ``rng`` fixture (reproducible with the suite seed).

Not a ``conftest.py`` (the folder's modules are imported by bare name)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

#: samples per statistical test (the simulator's twins run them in well under a second)
N = 100_000
P_MIN = 1e-6


def seed_of(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2 ** 63))


def ks_ok(x, cdf) -> None:
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    assert np.all(np.isfinite(x))
    p = stats.kstest(x, cdf).pvalue
    assert p > P_MIN, f"KS p-value {p:.3g}"


def moments_ok(x, mean: float, var: float, kurt: float | None = None) -> None:
    """The sample mean within 6 standard errors of ``mean``; the sample variance within 6
    standard errors of ``var`` given the law's excess kurtosis ``kurt`` (not checked where the
    fourth moment is infinite; within 15% where ``kurt`` is not given)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    xm = float(x.mean())
    assert abs(xm - mean) < 6 * math.sqrt(var / x.size) + 1e-12, (xm, mean)
    xv = float(x.var())
    if kurt is None:
        assert abs(xv - var) < 0.15 * var + 1e-12, (xv, var)
    elif math.isfinite(kurt):
        # the sample variance is the mean square about the sample mean: besides its first-order
        # spread it is low by (xm - mean)**2, under (6 standard errors)**2 once the mean check
        # holds. That term dominates where kurt + 2 is near 0 (a two-point law near p = 1/2:
        # hypergeometric(400, 1, 200)), where the first-order bound alone failed 1 run in 100
        # (0 in 4000 with the term)
        assert abs(xv - var) < 6 * var * math.sqrt((kurt + 2.0) / x.size) + \
            36 * var / x.size + 1e-12, (xv, var)


def chi2_ok(x, pmf, support_max: int | None = None, min_expected: float = 20.0) -> None:
    """Chi-square of integer samples ``x`` against ``pmf(k)``: the support cut where the
    expected counts fall below ``min_expected``, the tails pooled into end bins."""
    x = np.asarray(x).reshape(-1).astype(np.int64)
    n = x.size
    lo = int(x.min())
    hi = int(x.max()) if support_max is None else support_max
    hi = min(hi, lo + 100_000)  # a heavy tail: the bins that can hold min_expected are early
    ks = np.arange(lo, hi + 1)
    expected = pmf(ks) * n
    keep = expected >= min_expected
    assert keep.any(), "no bin has enough expected samples"
    ks, expected = ks[keep], expected[keep]
    inside = (x >= lo) & (x <= hi)
    counts = np.bincount(x[inside] - lo, minlength=hi - lo + 1)
    observed = counts[ks - lo].astype(np.float64)
    rest_obs = n - observed.sum()
    rest_exp = n - expected.sum()
    if rest_exp >= min_expected:
        observed = np.append(observed, rest_obs)
        expected = np.append(expected, rest_exp)
    else:
        assert rest_obs <= max(5 * rest_exp, 30), ("too many samples outside the bins",
                                                   rest_obs, rest_exp)
        expected = expected * (observed.sum() / expected.sum())
    p = stats.chisquare(observed, expected).pvalue
    assert p > P_MIN, f"chi-square p-value {p:.3g}"
