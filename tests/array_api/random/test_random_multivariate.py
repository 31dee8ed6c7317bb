"""The multivariate laws: multinomial and multivariate hypergeometric counts (the totals, each
category's binomial or hypergeometric marginal), Dirichlet points (on the simplex, beta
marginals, both the gamma and the stick-breaking paths), multivariate normal points (mean,
covariance, and each factorisation)."""

from __future__ import annotations

import numpy as np
import pytest
from random_helpers import chi2_ok, ks_ok, seed_of
from scipy import stats

N = 40_000


@pytest.fixture
def gen(xp, rng):
    return xp.random.default_rng(seed_of(rng))


def test_multinomial(xp, gen):
    p = [0.2, 0.3, 0.1, 0.4]
    h = np.asarray(gen.multinomial(50, p, size=N))
    assert h.shape == (N, 4) and h.dtype == np.int64 and np.all(h.sum(axis=1) == 50)
    for j, pj in enumerate(p):
        chi2_ok(h[:, j], stats.binom(50, pj).pmf)
    # a count and probability vector per row, broadcast
    h = np.asarray(gen.multinomial(xp.asarray(np.array([10, 1000])),
                                   [[0.5, 0.5], [0.1, 0.9]], size=(N // 4, 2)))
    assert h.shape == (N // 4, 2, 2)
    assert np.all(h[:, 0].sum(axis=-1) == 10) and np.all(h[:, 1].sum(axis=-1) == 1000)
    chi2_ok(h[:, 1, 0], stats.binom(1000, 0.1).pmf)
    assert np.asarray(gen.multinomial(7, [0.3, 0.7])).shape == (2,)


@pytest.mark.parametrize("method", ["marginals", "count"])
def test_multivariate_hypergeometric(xp, gen, method):
    colors = [16, 8, 25, 2]
    h = np.asarray(gen.multivariate_hypergeometric(colors, 20, size=N, method=method))
    assert h.shape == (N, 4) and np.all(h.sum(axis=1) == 20)
    assert np.all(h <= np.array(colors))
    total = sum(colors)
    for j, c in enumerate(colors):
        chi2_ok(h[:, j], stats.hypergeom(total, c, 20).pmf)
    assert np.asarray(gen.multivariate_hypergeometric([3, 4], 7, size=3)).tolist() == \
        [[3, 4]] * 3


@pytest.mark.parametrize("alpha", [[1.0, 2.0, 3.5], [0.05, 0.02, 0.08], [0.0, 2.0, 1.0]])
def test_dirichlet(xp, gen, alpha):
    h = np.asarray(gen.dirichlet(alpha, size=N))
    assert h.shape == (N, 3) and np.allclose(h.sum(axis=1), 1.0)
    assert np.all(h >= 0)
    a0 = sum(alpha)
    for j, a in enumerate(alpha):
        if a == 0:
            assert np.all(h[:, j] == 0)
        elif a >= 0.5:
            ks_ok(h[:, j], stats.beta(a, a0 - a).cdf)
        else:  # tiny shapes: many values round to 0; compare the mean only
            assert abs(h[:, j].mean() - a / a0) < 6 * np.sqrt(
                a * (a0 - a) / (a0 * a0 * (a0 + 1)) / N)


@pytest.mark.parametrize("method", ["svd", "eigh", "cholesky"])
def test_multivariate_normal(xp, gen, method):
    mean = np.array([1.0, -2.0, 0.5])
    a = np.array([[2.0, 0.3, 0.1], [0.0, 1.0, -0.4], [0.0, 0.0, 0.5]])
    cov = a.T @ a
    h = np.asarray(gen.multivariate_normal(mean, cov, size=(N // 2, 2), method=method))
    assert h.shape == (N // 2, 2, 3)
    flat = h.reshape(-1, 3)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(flat.mean(axis=0) - mean) < 6 * sd / np.sqrt(N))
    assert np.allclose(np.cov(flat.T), cov, atol=0.05 * sd.max() ** 2)
    for j in range(3):
        ks_ok(flat[:, j], stats.norm(mean[j], sd[j]).cdf)


def test_multivariate_normal_singular_warns(xp, gen):
    cov = np.array([[1.0, 1.0], [1.0, 1.0]])
    h = np.asarray(gen.multivariate_normal([0.0, 0.0], cov, size=1000))
    assert np.allclose(h[:, 0], h[:, 1], atol=1e-6)
    with pytest.warns(RuntimeWarning):
        gen.multivariate_normal([0.0, 0.0], [[1.0, 2.0], [2.0, 1.0]], size=3)
