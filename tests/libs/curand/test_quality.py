"""The quality of cuRAND's streams beyond their marginals, for every generator kind and
distribution: independence (lag-1 serial correlation, correlation within the pairs a
transformation makes, no duplicated adjacent values, a chi-square test of consecutive pairs on
a 2-D grid), resolution (f64 uniforms carry more than 32 random bits: their low-order mantissa
bits take many distinct values), and KS / chi-square goodness of fit.

Every stream here is drawn at a fixed generator seed and size, so each test is deterministic
for a given backend (the thresholds sit at about 5 standard errors / p = 1e-6, so a correct
generator of another backend passes with certainty for practical purposes).

Quasi-random (Sobol') streams are deliberately correlated along the sequence (that is what low
discrepancy means), so for them the independence tests are across dimensions instead."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from gpumsg.messages.curand import PSEUDO_KINDS, QUASI_KINDS

N = 1 << 16
SEED = 20_240_611
P_MIN = 1e-6
Z = 5.0  # standard errors a correct stream's statistic stays within


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=120)


def draw(dev, kind: str, dist: str, dtype: str = "f64", n: int = N, dimensions: int = 1,
         **kw) -> np.ndarray:
    if kind in PSEUDO_KINDS:
        g = dev.curand.generator(kind, seed=SEED)
    else:
        g = dev.curand.generator(kind, dimensions=dimensions)
    if dist == "poisson":
        return host(dev, g.poisson((n,), **kw))
    if dist == "bits":
        return host(dev, g.integers((n,)))
    return host(dev, getattr(g, dist)((n,), dtype, **kw))


def lag_correlation(x: np.ndarray, lag: int = 1) -> float:
    x = np.asarray(x, np.float64)
    return float(np.corrcoef(x[:-lag], x[lag:])[0, 1])


def pair_correlation(x: np.ndarray) -> float:
    """Correlation of x[2i] with x[2i+1]: the two values one transformation step makes
    (a Box-Muller pair, the two words of one f64)."""
    x = np.asarray(x, np.float64)
    m = x.size // 2 * 2
    return float(np.corrcoef(x[0:m:2], x[1:m:2])[0, 1])


def to_uniform(x: np.ndarray, dist: str) -> np.ndarray:
    """Map draws of ``dist`` (mean 0, std 1 for normal/lognormal) to U(0, 1) by the CDF."""
    x = np.asarray(x, np.float64)
    if dist == "normal":
        return stats.norm.cdf(x)
    if dist == "lognormal":
        return stats.lognorm.cdf(x, s=1.0)
    return x


def pairs_chi2_pvalue(u: np.ndarray, bins: int = 16) -> float:
    """Chi-square p-value of the (u[2i], u[2i+1]) pairs over a bins x bins grid."""
    m = u.size // 2 * 2
    h, _, _ = np.histogram2d(u[0:m:2], u[1:m:2], bins=bins, range=[[0, 1], [0, 1]])
    return float(stats.chisquare(h.ravel()).pvalue)


CONTINUOUS = [(kind, dist, dtype) for kind in PSEUDO_KINDS
              for dist in ("uniform", "normal", "lognormal") for dtype in ("f32", "f64")]


@pytest.mark.parametrize("kind,dist,dtype", CONTINUOUS)
def test_pseudo_continuous_independence_and_fit(dev, kind: str, dist: str, dtype: str) -> None:
    x = draw(dev, kind, dist, dtype)
    u = to_uniform(x, dist)
    bound = Z / math.sqrt(N)
    assert abs(lag_correlation(x)) < bound, f"lag-1 correlation {lag_correlation(x):.3g}"
    assert abs(pair_correlation(x)) < 2 * bound, f"pair correlation {pair_correlation(x):.3g}"
    assert abs(lag_correlation(u, 2)) < bound
    # no duplicated adjacent values: a repeat among 2^16 neighbours has probability ~2^-8 for
    # f32's 24-bit mantissas near 1, ~0 for f64
    dup = int(np.sum(x[0::2] == x[1::2]))
    assert dup <= (2 if dtype == "f32" else 0), f"{dup} adjacent pairs are equal"
    p_pairs = pairs_chi2_pvalue(u)
    assert p_pairs > P_MIN, f"pairs chi-square p = {p_pairs:.3g}"
    cdf = {"uniform": stats.uniform.cdf, "normal": stats.norm.cdf,
           "lognormal": lambda v: stats.lognorm.cdf(v, s=1.0)}[dist]
    p_ks = stats.kstest(x.astype(np.float64), cdf).pvalue
    assert p_ks > P_MIN, f"KS p = {p_ks:.3g}"


def low_mantissa_bits(u: np.ndarray, bits: int = 20) -> np.ndarray:
    """The lowest ``bits`` mantissa bits of the f64 values in [0.5, 1) (where the spacing is
    2^-53, so a value with only 32 random bits has them all constant)."""
    top = u[(u >= 0.5) & (u < 1.0)]
    return top.view(np.uint64) & np.uint64((1 << bits) - 1)


#: kinds whose f64 uniforms cuRAND builds with less than 53 random bits (measured on an H100,
#: cuRAND 13: xorwow, philox and mt19937 from one 32-bit word, one kind with its lowest mantissa
#: bit always clear); the simulator gives 53 bits, so on a GPU the test is an expected failure
LIBRARY_32_BIT_DOUBLES = ("xorwow", "philox", "mt19937", "mrg32k3a", "mtgp32")


@pytest.mark.parametrize("kind", PSEUDO_KINDS)
def test_f64_uniforms_have_more_than_32_bits(dev, backend: str, kind: str,
                                             request: pytest.FixtureRequest) -> None:
    """(Sobol' points are exempt: point i < 2^k of an unscrambled sequence has k significant
    bits by construction, whatever the width of the generator.)"""
    if backend == "cuda" and kind in LIBRARY_32_BIT_DOUBLES:
        request.applymarker(pytest.mark.xfail(
            reason=f"cuRAND may build {kind}'s doubles from 32 random bits", strict=False))
    u = draw(dev, kind, "uniform", "f64")
    low = low_mantissa_bits(u)
    assert low.size > N // 4
    distinct = np.unique(low).size
    # 20 random bits over ~N/2 values: nearly all distinct; 32-bit resolution gives 1
    assert distinct > low.size // 2, f"{distinct} distinct low 20-bit patterns in {low.size}"
    # each of those bits is set about half the time
    freq = np.array([np.mean((low >> np.uint64(b)) & np.uint64(1)) for b in range(20)])
    assert np.all(np.abs(freq - 0.5) < Z * 0.5 / math.sqrt(low.size)), freq
    assert np.unique(u).size > N - 4  # no repeats at all worth counting


@pytest.mark.parametrize("kind", PSEUDO_KINDS)
def test_f64_normals_are_distinct_and_unpaired(dev, backend: str, kind: str) -> None:
    z = draw(dev, kind, "normal", "f64")
    # doubles from 32 random bits (cuRAND's, see LIBRARY_32_BIT_DOUBLES) repeat by the birthday
    # bound: about N^2 / 2^33 pairs; 53-bit ones never do at this size
    repeats = z.size - np.unique(z).size
    assert repeats <= (8 if backend == "cuda" and kind in LIBRARY_32_BIT_DOUBLES else 0), repeats
    # Box-Muller's two outputs per pair are independent normals: their squares uncorrelated
    sq = z.astype(np.float64) ** 2
    assert abs(pair_correlation(sq)) < 2 * Z / math.sqrt(N), pair_correlation(sq)


@pytest.mark.parametrize("kind", PSEUDO_KINDS)
def test_poisson_independence_and_fit(dev, kind: str) -> None:
    lam = 3.5
    x = draw(dev, kind, "poisson", lam=lam).astype(np.int64)
    assert abs(lag_correlation(x)) < Z / math.sqrt(N)
    assert abs(pair_correlation(x)) < 2 * Z / math.sqrt(N)
    top = 12
    counts = np.bincount(np.minimum(x, top), minlength=top + 1)
    probs = stats.poisson.pmf(np.arange(top), lam)
    probs = np.append(probs, 1 - probs.sum())
    p = stats.chisquare(counts, probs * x.size).pvalue
    assert p > P_MIN, f"Poisson chi-square p = {p:.3g}"


@pytest.mark.parametrize("kind", PSEUDO_KINDS)
def test_raw_bits_independence(dev, kind: str) -> None:
    x = draw(dev, kind, "bits")
    assert x.dtype == np.uint32
    bits = ((x[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.float64)
    freq = bits.mean(axis=0)
    assert np.all(np.abs(freq - 0.5) < Z * 0.5 / math.sqrt(N)), freq
    assert abs(lag_correlation(x.astype(np.float64))) < Z / math.sqrt(N)
    assert int(np.sum(x[:-1] == x[1:])) == 0
    # the top byte of consecutive words, as pairs on a 16 x 16 grid
    assert pairs_chi2_pvalue(x.astype(np.float64) / 2.0 ** 32) > P_MIN


# -- quasi-random: fit per dimension, independence across dimensions ---------------------------

@pytest.mark.parametrize("dist", ("uniform", "normal", "lognormal"))
@pytest.mark.parametrize("kind", QUASI_KINDS)
def test_quasi_dimensions_fit_and_independent(dev, kind: str, dist: str) -> None:
    d, per = 4, 1 << 14
    x = draw(dev, kind, dist, "f64", n=d * per, dimensions=d).reshape(d, per)
    u = to_uniform(x, dist)
    for i in range(d):
        cdf = {"uniform": stats.uniform.cdf, "normal": stats.norm.cdf,
               "lognormal": lambda v: stats.lognorm.cdf(v, s=1.0)}[dist]
        p = stats.kstest(x[i].astype(np.float64), cdf).pvalue
        assert p > P_MIN, f"dimension {i}: KS p = {p:.3g}"
    corr = np.corrcoef(u)
    off = corr[~np.eye(d, dtype=bool)]
    assert np.all(np.abs(off) < Z / math.sqrt(per)), off
    # a 2-D projection fills the grid evenly (better than random: chi-square far from high)
    h, _, _ = np.histogram2d(u[0], u[1], bins=16, range=[[0, 1], [0, 1]])
    assert stats.chisquare(h.ravel()).pvalue > P_MIN


@pytest.mark.parametrize("kind", QUASI_KINDS)
def test_quasi_points_do_not_repeat(dev, kind: str) -> None:
    per = 1 << 14
    x = draw(dev, kind, "uniform", "f64", n=2 * per, dimensions=2).reshape(2, per)
    assert np.unique(x[0]).size == per and np.unique(x[1]).size == per
    assert not np.array_equal(x[0], x[1])
