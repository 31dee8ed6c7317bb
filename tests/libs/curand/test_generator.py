"""dev.random: NumPy's Generator API on the device. Each method is checked against its
distribution at a fixed seed (moments within a few standard errors and a Kolmogorov-Smirnov
test), for NumPy's ranges ([0, 1), [low, high)), dtypes and ``out=``; bad arguments are refused
at the call site."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tests.libs.harness import BadArg, check_bad_args

N = 200_000
SEED = 20261127
#: a KS p-value below this fails (the seeds are fixed: a pass is reproducible)
P_MIN = 1e-3


def host(dev, fut):
    return dev.copy_to_host(fut.result(60)).result(60)


def moments_close(x: np.ndarray, mean: float, var: float) -> None:
    n = x.size
    assert abs(x.mean() - mean) < 5 * np.sqrt(var / n), (x.mean(), mean)
    # the sample variance's standard error, for a distribution of moderate kurtosis
    assert abs(x.var() - var) < 8 * var * np.sqrt(2 / n) + 1e-12, (x.var(), var)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_random(dev, dtype) -> None:
    rng = dev.random.default_rng(SEED)
    x = host(dev, rng.random(N, dtype=dtype))
    assert x.dtype == dtype and x.shape == (N,)
    assert x.min() >= 0.0 and x.max() < 1.0
    moments_close(x.astype(np.float64), 0.5, 1 / 12)
    assert stats.kstest(x, "uniform").pvalue > P_MIN


def test_random_into_out(dev) -> None:
    rng = dev.random.default_rng(SEED)
    out = dev.alloc((300, 200), np.float64, order="C")
    assert rng.random(out=out).result(60) is out.result(60)
    x = dev.copy_to_host(out).result(60).ravel()
    assert x.min() >= 0.0 and x.max() < 1.0 and stats.kstest(x, "uniform").pvalue > P_MIN


def test_uniform(dev) -> None:
    rng = dev.random.default_rng(SEED + 1)
    x = host(dev, rng.uniform(-3.0, 5.0, size=(400, 500)))
    assert x.shape == (400, 500) and x.dtype == np.float64
    assert x.min() >= -3.0 and x.max() < 5.0
    moments_close(x.ravel(), 1.0, 64 / 12)
    assert stats.kstest(x.ravel(), "uniform", args=(-3.0, 8.0)).pvalue > P_MIN


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_standard_normal(dev, dtype) -> None:
    rng = dev.random.default_rng(SEED + 2)
    x = host(dev, rng.standard_normal(N, dtype=dtype))
    assert x.dtype == dtype
    moments_close(x.astype(np.float64), 0.0, 1.0)
    assert stats.kstest(x, "norm").pvalue > P_MIN


def test_standard_normal_into_out(dev) -> None:
    rng = dev.random.default_rng(SEED + 3)
    out = dev.alloc((N,), np.float32, order="C")
    rng.standard_normal(dtype=np.float32, out=out).result(60)
    x = dev.copy_to_host(out).result(60)
    assert stats.kstest(x, "norm").pvalue > P_MIN


def test_normal(dev) -> None:
    rng = dev.random.default_rng(SEED + 4)
    x = host(dev, rng.normal(2.5, 0.75, N))
    moments_close(x, 2.5, 0.75 ** 2)
    assert stats.kstest(x, stats.norm(2.5, 0.75).cdf).pvalue > P_MIN
    # scale 0: NumPy answers loc everywhere
    np.testing.assert_array_equal(host(dev, rng.normal(-1.25, 0.0, 7)), np.full(7, -1.25))


def test_lognormal(dev) -> None:
    rng = dev.random.default_rng(SEED + 5)
    x = host(dev, rng.lognormal(0.3, 0.5, N))
    assert x.min() > 0
    assert stats.kstest(np.log(x), stats.norm(0.3, 0.5).cdf).pvalue > P_MIN
    moments_close(np.log(x), 0.3, 0.25)


@pytest.mark.parametrize("lam", [0.7, 12.0])
def test_poisson(dev, lam) -> None:
    rng = dev.random.default_rng(SEED + 6)
    k = host(dev, rng.poisson(lam, N))
    assert k.dtype == np.int64 and k.min() >= 0
    moments_close(k.astype(np.float64), lam, lam)
    # chi-square over the bins that expect at least 20 values
    values = np.arange(0, int(lam * 4 + 20))
    expected = stats.poisson.pmf(values, lam) * N
    keep = expected >= 20
    observed = np.bincount(k, minlength=values.size)[:values.size]
    chi2 = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    assert stats.chi2.sf(chi2, keep.sum() - 1) > P_MIN
    np.testing.assert_array_equal(host(dev, rng.poisson(0.0, 5)), np.zeros(5, np.int64))


@pytest.mark.parametrize("low, high, endpoint, dtype", [
    (0, 10, False, np.int64), (-7, 7, True, np.int64), (5, None, False, np.int32),
    (-(2 ** 40), 2 ** 41, False, np.int64)])
def test_integers(dev, low, high, endpoint, dtype) -> None:
    rng = dev.random.default_rng(SEED + 7)
    k = host(dev, rng.integers(low, high, size=N, dtype=dtype, endpoint=endpoint))
    lo, hi = (0, low) if high is None else (low, high)
    hi = hi + 1 if endpoint else hi  # the exclusive bound
    assert k.dtype == dtype and k.min() >= lo and k.max() < hi
    span = hi - lo
    if span <= 64:  # every value drawn, each about equally often
        counts = np.bincount(k - lo, minlength=span)
        assert counts.size == span and stats.chisquare(counts).pvalue > P_MIN
    else:
        u = (k.astype(np.float64) - lo) / span
        assert stats.kstest(u, "uniform").pvalue > P_MIN


def test_seeds_repeat_and_differ(dev) -> None:
    a = host(dev, dev.random.default_rng(7).standard_normal(64))
    b = host(dev, dev.random.default_rng(7).standard_normal(64))
    c = host(dev, dev.random.default_rng(8).standard_normal(64))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    rng = dev.random.default_rng(7)
    first, second = host(dev, rng.random(64)), host(dev, rng.random(64))
    assert not np.array_equal(first, second)  # the stream moves on


def test_module_level_draws(dev) -> None:
    x = host(dev, dev.random.normal(1.0, 2.0, size=N))
    moments_close(x, 1.0, 4.0)
    u = host(dev, dev.random.random(1000))
    assert u.min() >= 0 and u.max() < 1
    assert host(dev, dev.random.uniform(size=None)).shape == ()
    assert not hasattr(dev.random, "integers")  # a Generator's method only, as in NumPy


BAD = [
    BadArg("dtype int", lambda d: d.random.default_rng(1).random(4, dtype=np.int32),
           field="dtype"),
    BadArg("scale < 0", lambda d: d.random.default_rng(1).normal(0.0, -1.0, 4), field="scale"),
    BadArg("sigma < 0", lambda d: d.random.default_rng(1).lognormal(0.0, -1.0, 4),
           field="sigma"),
    BadArg("lam < 0", lambda d: d.random.default_rng(1).poisson(-2.0, 4), field="lam"),
    BadArg("empty interval", lambda d: d.random.default_rng(1).integers(5, 5), field="high"),
    BadArg("int32 overflow", lambda d: d.random.default_rng(1).integers(0, 2 ** 40,
                                                                         dtype=np.int32),
           field="high"),
    BadArg("integers dtype", lambda d: d.random.default_rng(1).integers(0, 4, dtype=np.uint8),
           field="dtype"),
    BadArg("float low", lambda d: d.random.default_rng(1).integers(0.5, 4), field="low"),
    BadArg("size", lambda d: d.random.default_rng(1).random((2, -1)), field="size"),
    BadArg("seed", lambda d: d.random.default_rng(-1), field="seed"),
    BadArg("out dtype", lambda d: d.random.default_rng(1).random(
        out=d.alloc((4,), np.float32, order="C")), field="out"),
    BadArg("inf", lambda d: d.random.default_rng(1).uniform(0.0, np.inf, 3), field="high"),
    BadArg("high < low", lambda d: d.random.default_rng(1).uniform(2.0, 1.0, 3), field="high"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)
