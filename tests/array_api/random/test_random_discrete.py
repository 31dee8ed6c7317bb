"""The discrete distributions of ``xp.random.Generator`` against SciPy's probability mass
functions: a chi-square test and the first two moments on 1e5 samples, on every backend;
Poisson through cuRAND and through the kernel (multiplication and PTRS), binomial through
inversion and BTRS (and the flipped side p > 1/2), hypergeometric near its limits."""

from __future__ import annotations

import numpy as np
import pytest
from random_helpers import N, chi2_ok, moments_ok, seed_of
from scipy import stats


@pytest.fixture
def gen(xp, rng):
    return xp.random.default_rng(seed_of(rng))


def _check(h, law) -> None:
    assert h.dtype == np.int64
    chi2_ok(h, law.pmf)
    moments_ok(h, law.mean(), law.var(), float(law.stats(moments="k")))


@pytest.mark.parametrize("lam", [4.5, 300.0, 5e4, 2e12])
def test_poisson_scalar(xp, gen, lam):
    """Up to 1000 through cuRAND's generator, above it through the PTRS kernel."""
    h = np.asarray(gen.poisson(lam, N))
    law = stats.poisson(lam)
    if lam > 1e9:  # counts too spread for bins: the normal limit is exact enough
        z = (h - lam) / np.sqrt(lam)
        assert stats.kstest(z, stats.norm.cdf).pvalue > 1e-6
        return
    _check(h, law)


def test_poisson_array_and_zero(xp, gen):
    lam = xp.asarray(np.array([0.0, 3.0, 40.0]))
    h = np.asarray(gen.poisson(lam, size=(N // 2, 3)))
    assert np.all(h[:, 0] == 0)
    _check(h[:, 1], stats.poisson(3.0))
    _check(h[:, 2], stats.poisson(40.0))


@pytest.mark.parametrize("n,p", [(20, 0.3), (7, 0.9), (1000, 0.4), (5000, 0.97),
                                 (40, 0.5)])
def test_binomial(xp, gen, n, p):
    h = np.asarray(gen.binomial(n, p, N))
    assert h.min() >= 0 and h.max() <= n
    _check(h, stats.binom(n, p))


def test_binomial_arrays_and_edges(xp, gen):
    n = xp.asarray(np.array([0, 10, 10, 300]))
    p = np.array([0.5, 0.0, 1.0, 0.2])
    h = np.asarray(gen.binomial(n, p, size=(N // 4, 4)))
    assert np.all(h[:, 0] == 0) and np.all(h[:, 1] == 0) and np.all(h[:, 2] == 10)
    _check(h[:, 3], stats.binom(300, 0.2))
    # NumPy truncates a fractional n
    assert np.asarray(gen.binomial(2.7, 1.0, 5)).tolist() == [2] * 5


@pytest.mark.parametrize("args", [(30, 20, 15), (5, 500, 40), (10 ** 6, 2 * 10 ** 6, 5000),
                                  (7, 3, 10), (400, 1, 200)])
def test_hypergeometric(xp, gen, args):
    h = np.asarray(gen.hypergeometric(*args, size=N))
    g, b, ns = args
    assert h.min() >= max(0, ns - b) and h.max() <= min(ns, g)
    if max(0, ns - b) == min(ns, g):  # one possible count
        assert np.all(h == min(ns, g))
        return
    _check(h, stats.hypergeom(g + b, g, ns))


@pytest.mark.parametrize("name,args,law", [
    ("negative_binomial", (3.0, 0.4), stats.nbinom(3, 0.4)),
    ("negative_binomial", (0.5, 0.05), stats.nbinom(0.5, 0.05)),
    ("geometric", (0.2,), stats.geom(0.2)),
    ("geometric", (0.95,), stats.geom(0.95)),
    ("logseries", (0.6,), stats.logser(0.6)),
    ("logseries", (0.99,), stats.logser(0.99)),
    ("zipf", (2.5,), stats.zipf(2.5)),
    ("zipf", (1.7,), stats.zipf(1.7)),
])
def test_discrete(xp, gen, name, args, law):
    h = np.asarray(getattr(gen, name)(*args, size=N))
    assert h.dtype == np.int64 and h.shape == (N,)
    chi2_ok(h, law.pmf)
    if np.isfinite(law.var()):
        moments_ok(h, law.mean(), law.var(), float(law.stats(moments="k")))


def test_geometric_one_and_logseries_zero(xp, gen):
    assert np.all(np.asarray(gen.geometric(1.0, 100)) == 1)
    assert np.all(np.asarray(gen.logseries(0.0, 100)) == 1)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8", "uint64", "bool"])
def test_integers_dtypes(xp, gen, dtype):
    dt = getattr(xp, dtype)
    info = np.iinfo(dtype) if dtype != "bool" else None
    lo, hi = (0, 2) if dtype == "bool" else (int(info.min), int(info.max))
    if dtype in ("int64", "uint64", "int32"):
        lo, hi = (lo // 2 + 3, lo // 2 + 3 + 37)  # a range inside the type
    x = gen.integers(lo, hi, size=N, dtype=dt)
    assert x.dtype == dt
    h = np.asarray(x).astype(np.int64) if dtype != "uint64" else np.asarray(x)
    span = hi - lo
    assert int(h.min()) >= lo and int(h.max()) < hi
    if span <= 300:
        chi2_ok(h.astype(np.int64) - lo, lambda k: np.full(k.shape, 1.0 / span), span - 1)


def test_integers_full_range_and_endpoint(xp, gen):
    h = np.asarray(gen.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=N,
                                endpoint=True))
    assert (h < 0).mean() == pytest.approx(0.5, abs=0.01)
    h = np.asarray(gen.integers(0, 2 ** 64 - 1, size=N, dtype=xp.uint64, endpoint=True))
    assert (h >> np.uint64(63)).mean() == pytest.approx(0.5, abs=0.01)
    h = np.asarray(gen.integers(5, 9, size=N, endpoint=True))
    assert set(np.unique(h).tolist()) == {5, 6, 7, 8, 9}
    assert np.all(np.asarray(gen.integers(7, 8, size=100)) == 7)


def test_integers_array_bounds(xp, gen):
    low = np.array([-10, 0, 1000])
    high = xp.asarray(np.array([-5, 1, 1010]))
    h = np.asarray(gen.integers(low, high, size=(N // 4, 3)))
    for j in range(3):
        col = h[:, j]
        assert col.min() >= low[j] and col.max() < int(np.asarray(high)[j])
        span = int(np.asarray(high)[j]) - low[j]
        if span > 1:
            chi2_ok(col - low[j], lambda k, s=span: np.full(k.shape, 1.0 / s), span - 1)
    h = np.asarray(gen.integers([0, 10], [3, 20], endpoint=True))
    assert h.shape == (2,) and 0 <= h[0] <= 3 and 10 <= h[1] <= 20
    # host bounds broadcast to a larger output (on the device), past int64 for uint64
    top = 2 ** 64 - 1
    low = np.array([0, 2 ** 63 + 5], np.uint64)
    h = np.asarray(gen.integers(low, np.array([4, top], np.uint64), size=(N // 4, 2),
                                dtype=xp.uint64, endpoint=True))
    assert h.shape == (N // 4, 2) and h.dtype == np.uint64
    assert set(np.unique(h[:, 0]).tolist()) == {0, 1, 2, 3, 4}
    assert int(h[:, 1].min()) >= 2 ** 63 + 5
    assert (h[:, 1] >> np.uint64(62)).mean() == pytest.approx(2.5, abs=0.02)  # bit 62 even


def test_integers_single_argument_and_bytes(xp, gen):
    h = np.asarray(gen.integers(6, size=N))
    assert h.min() == 0 and h.max() == 5
    b = gen.bytes(10_001)
    assert isinstance(b, bytes) and len(b) == 10_001
    counts = np.bincount(np.frombuffer(b, np.uint8), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-6
    assert gen.bytes(0) == b""


def test_zipf_of_a_huge_exponent_draws_ones(xp, gen):
    """From a = 1025 on, P(2) / P(1) = 2^-a is below double precision: every draw is 1 (as
    NumPy's), including a = inf; the rejection loop would not accept there (2^(a-1) is inf)."""
    for a in (1025.0, 2.0 ** 31 + 1, np.inf):
        assert np.all(np.asarray(gen.zipf(a, size=1000)) == 1)
    h = np.asarray(gen.zipf(xp.asarray(np.array([1.5, np.inf, 1e300, 1024.0] * 500))))
    assert np.all(h.reshape(500, 4)[:, 1:3] == 1)
    assert h.reshape(500, 4)[:, 0].max() > 1  # the small exponent still draws a tail
