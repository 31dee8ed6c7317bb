"""The continuous distributions of ``xp.random.Generator`` against SciPy's laws: a
Kolmogorov-Smirnov test and the first two moments on 1e5 samples, on every backend; each
sampler path (cuRAND or kernel, scalar or array parameters, the branches of the rejection
samplers) is exercised."""

from __future__ import annotations

import numpy as np
import pytest
from random_helpers import N, ks_ok, moments_ok, seed_of
from scipy import stats


@pytest.fixture
def gen(xp, rng):
    return xp.random.default_rng(seed_of(rng))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random(xp, gen, dtype):
    x = gen.random(N, dtype=getattr(xp, dtype))
    assert x.dtype == getattr(xp, dtype) and x.shape == (N,)
    h = np.asarray(x)
    assert h.min() >= 0 and h.max() < 1
    ks_ok(h, stats.uniform.cdf)
    moments_ok(h, 0.5, 1 / 12, -1.2)


def test_uniform_scalar_and_array(xp, gen):
    h = np.asarray(gen.uniform(-2.0, 5.0, N))
    assert h.min() >= -2 and h.max() < 5
    ks_ok(h, stats.uniform(-2, 7).cdf)
    lows = xp.asarray(np.array([-1.0, 3.0]))
    two = np.asarray(gen.uniform(lows, 4.0, size=(N // 2, 2)))
    ks_ok(two[:, 0], stats.uniform(-1, 5).cdf)
    ks_ok(two[:, 1], stats.uniform(3, 1).cdf)
    assert two[:, 1].min() >= 3 and two[:, 1].max() < 4


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_standard_normal(xp, gen, dtype):
    x = gen.standard_normal(N, dtype=getattr(xp, dtype))
    assert x.dtype == getattr(xp, dtype)
    ks_ok(np.asarray(x), stats.norm.cdf)
    moments_ok(np.asarray(x), 0.0, 1.0, 0.0)


def test_normal_cuRAND_and_kernel(xp, gen):
    h = np.asarray(gen.normal(3.0, 2.0, N))
    ks_ok(h, stats.norm(3, 2).cdf)
    loc = np.array([[-1.0], [10.0]])
    two = np.asarray(gen.normal(xp.asarray(loc), [0.5, 3.0], size=(N // 4, 2, 2)))
    assert two.shape == (N // 4, 2, 2)
    for i in range(2):
        for j, s in enumerate([0.5, 3.0]):
            ks_ok(two[:, i, j], stats.norm(loc[i, 0], s).cdf)
    # scale 0 gives loc (the kernel path; cuRAND refuses std 0)
    assert np.all(np.asarray(gen.normal(1.5, 0.0, 10)) == 1.5)


def test_lognormal(xp, gen):
    ks_ok(np.asarray(gen.lognormal(0.3, 0.6, N)), stats.lognorm(0.6, scale=np.exp(0.3)).cdf)
    h = np.asarray(gen.lognormal(xp.asarray(np.array([0.3])), 0.6, N))
    ks_ok(h, stats.lognorm(0.6, scale=np.exp(0.3)).cdf)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exponentials(xp, gen, dtype):
    h = np.asarray(gen.standard_exponential(N, dtype=getattr(xp, dtype), method="inv"))
    ks_ok(h, stats.expon.cdf)
    moments_ok(h, 1.0, 1.0, 6.0)
    h = np.asarray(gen.exponential(2.5, N))
    ks_ok(h, stats.expon(scale=2.5).cdf)
    moments_ok(h, 2.5, 6.25, 6.0)


@pytest.mark.parametrize("shape", [0.05, 0.3, 1.0, 2.5, 40.0])
def test_standard_gamma(xp, gen, shape):
    h = np.asarray(gen.standard_gamma(shape, N))
    assert np.all(h >= 0)
    ks_ok(h, stats.gamma(shape).cdf)
    moments_ok(h, shape, shape, 6.0 / shape)


def test_gamma_scale_and_float32(xp, gen):
    h = np.asarray(gen.gamma(2.5, 3.0, N))
    ks_ok(h, stats.gamma(2.5, scale=3.0).cdf)
    moments_ok(h, 7.5, 22.5, 6.0 / 2.5)
    x = gen.standard_gamma(xp.asarray(np.array([0.7, 7.0])), size=(N // 2, 2),
                           dtype=xp.float32)
    assert x.dtype == xp.float32
    h = np.asarray(x)
    ks_ok(h[:, 0], stats.gamma(0.7).cdf)
    ks_ok(h[:, 1], stats.gamma(7.0).cdf)


@pytest.mark.parametrize("a,b", [(0.5, 0.7), (0.2, 0.3), (2.0, 5.0), (0.4, 3.0)])
def test_beta(xp, gen, a, b):
    h = np.asarray(gen.beta(a, b, N))
    assert np.all((h >= 0) & (h <= 1))
    ks_ok(h, stats.beta(a, b).cdf)
    law = stats.beta(a, b)
    moments_ok(h, law.mean(), law.var(), float(law.stats(moments="k")))


def test_beta_tiny_shapes_against_numpy(xp, gen, rng):
    """Shapes so small that many values round to 0 or 1 (Jöhnk's method in logarithms): the
    values' law equals NumPy's sampler's (two-sample KS; a KS against the continuous CDF
    cannot hold with so many ties)."""
    h = np.asarray(gen.beta(0.05, 0.02, N))
    ref = rng.beta(0.05, 0.02, N)
    assert stats.ks_2samp(h, ref).pvalue > 1e-6


CASES = [
    ("chisquare", (3.0,), stats.chi2(3)),
    ("chisquare", (0.6,), stats.chi2(0.6)),
    ("noncentral_chisquare", (3.0, 2.0), stats.ncx2(3, 2)),
    ("noncentral_chisquare", (0.5, 2.0), stats.ncx2(0.5, 2)),
    ("f", (5.0, 7.0), stats.f(5, 7)),
    ("noncentral_f", (5.0, 7.0, 2.0), stats.ncf(5, 7, 2)),
    ("standard_t", (4.0,), stats.t(4)),
    ("standard_cauchy", (), stats.cauchy()),
    ("gumbel", (1.0, 2.0), stats.gumbel_r(1, 2)),
    ("laplace", (-1.0, 0.5), stats.laplace(-1, 0.5)),
    ("logistic", (2.0, 1.5), stats.logistic(2, 1.5)),
    ("pareto", (3.0,), stats.lomax(3)),
    ("power", (2.5,), stats.powerlaw(2.5)),
    ("rayleigh", (2.0,), stats.rayleigh(scale=2)),
    ("weibull", (1.5,), stats.weibull_min(1.5)),
    ("triangular", (0.0, 1.0, 3.0), stats.triang(1 / 3, loc=0, scale=3)),
    ("triangular", (0.0, 0.0, 2.0), stats.triang(0.0, loc=0, scale=2)),
    ("vonmises", (0.5, 2.0), stats.vonmises(2.0, loc=0.5)),
    ("vonmises", (3.0, 1e-6), stats.vonmises(1e-6, loc=3.0)),
    ("vonmises", (-3.0, 50.0), stats.vonmises(50.0, loc=-3.0)),
    ("wald", (1.5, 2.0), stats.invgauss(1.5 / 2.0, scale=2.0)),
]


@pytest.mark.parametrize("name,args,law", CASES, ids=[f"{c[0]}{c[1]}" for c in CASES])
def test_continuous(xp, gen, name, args, law):
    h = np.asarray(getattr(gen, name)(*args, size=N))
    assert h.shape == (N,) and h.dtype == np.float64
    if name == "vonmises":
        assert np.all(np.abs(h) <= np.pi)
        # SciPy's von Mises CDF is of the angle unwrapped around loc
        h = (h - args[0] + np.pi) % (2 * np.pi) - np.pi + args[0]
    ks_ok(h, law.cdf)
    mean, var = law.mean(), law.var()
    if np.isfinite(var) and name != "vonmises":
        moments_ok(h, mean, var, float(law.stats(moments="k")))


def test_continuous_array_parameters(xp, gen):
    """Array parameters broadcast against each other and ``size``: each column follows its
    own law."""
    df = xp.asarray(np.array([2.0, 9.0]))
    h = np.asarray(gen.standard_t(df, size=(N // 2, 2)))
    ks_ok(h[:, 0], stats.t(2).cdf)
    ks_ok(h[:, 1], stats.t(9).cdf)
    h = np.asarray(gen.beta([0.5, 3.0], xp.asarray(np.array([[0.5], [4.0]])),
                            size=(N // 4, 2, 2)))
    for i, b in enumerate([0.5, 4.0]):
        for j, a in enumerate([0.5, 3.0]):
            ks_ok(h[:, i, j], stats.beta(a, b).cdf)


def test_wald_of_a_huge_or_infinite_scale_is_its_mean(xp, gen) -> None:
    """The inverse Gaussian's spread shrinks as the scale grows (variance mean^3 / scale): an
    infinite scale draws the mean, as NumPy's does (the textbook difference of two large terms
    gave NaN, and -0.0 past an overflow of 4 scale y), and a huge one draws within rounding
    of it; an ordinary one is untouched (the KS test above)."""
    for scale, tol in ((np.inf, 0.0), (1e308, 1e-12), (1e200, 1e-12)):
        got = np.asarray(gen.wald(0.5, scale, 1000))
        assert np.isfinite(got).all(), scale
        np.testing.assert_allclose(got, 0.5, rtol=tol, atol=0)
    got = np.asarray(gen.wald(xp.asarray(np.array([0.5, 3.0])), np.inf, (4, 2)))
    np.testing.assert_array_equal(got, np.broadcast_to([0.5, 3.0], (4, 2)))
