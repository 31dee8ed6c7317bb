"""cuRAND (``dev.random``): every generator and distribution checked against its law on >= 1M
samples (moments, a KS test; chi-square and moments for Poisson), determinism per seed and
offset, different seeds and offsets differ, stream continuation, Sobol's low discrepancy, odd
counts of the pairwise normal family. Seeds come from the ``rng`` fixture, fresh every run.
Statistical checks use p > 1e-6 or 6-sigma bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import gpumsg
from gpumsg.messages import curand as msgs
from tests.libs.curand._helpers import (
    KINDS,
    P_MIN,
    PSEUDO,
    QUASI,
    N,
    host,
    ks_ok,
    make,
    moments_ok,
    seed_of,
)


# -- distributions --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("kind", KINDS)
def test_uniform(dev, rng, kind: str, dtype: str) -> None:
    g = make(dev, rng, kind)
    x = host(dev, g.uniform((N,), dtype))
    assert x.dtype == gpumsg.as_dtype(dtype) and x.shape == (N,)
    assert np.all(x > 0) and np.all(x <= 1), "cuRAND's uniforms lie in (0, 1]"
    moments_ok(x, 0.5, 1 / 12, 1 / 80)
    ks_ok(x, stats.uniform.cdf)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("kind", KINDS)
def test_normal(dev, rng, kind: str, dtype: str) -> None:
    g = make(dev, rng, kind)
    mean, std = float(rng.uniform(-3, 3)), float(rng.uniform(0.5, 2))
    x = host(dev, g.normal((N,), dtype, mean=mean, std=std))
    assert x.dtype == gpumsg.as_dtype(dtype) and np.all(np.isfinite(x))
    moments_ok(x, mean, std ** 2, 3 * std ** 4)
    ks_ok(x, stats.norm(mean, std).cdf)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("kind", KINDS)
def test_lognormal(dev, rng, kind: str, dtype: str) -> None:
    g = make(dev, rng, kind)
    mean, std = float(rng.uniform(-1, 1)), float(rng.uniform(0.2, 0.5))
    x = host(dev, g.lognormal((N,), dtype, mean=mean, std=std))
    assert np.all(x > 0)
    ks_ok(x, stats.lognorm(s=std, scale=math.exp(mean)).cdf)
    # the log of the values is N(mean, std^2)
    moments_ok(np.log(x.astype(np.float64)), mean, std ** 2, 3 * std ** 4)


@pytest.mark.parametrize("kind", KINDS)
def test_poisson(dev, rng, kind: str) -> None:
    g = make(dev, rng, kind)
    lam = float(rng.uniform(0.5, 40))
    x = host(dev, g.poisson((N,), lam=lam))
    assert x.dtype == np.uint32
    # mean and variance both lam; fourth central moment lam (1 + 3 lam)
    moments_ok(x, lam, lam, lam * (1 + 3 * lam))
    # chi-square over the values with expected counts >= 20 (tails pooled)
    k = np.arange(int(lam + 12 * math.sqrt(lam) + 12))
    pmf = stats.poisson.pmf(k, lam)
    keep = pmf * N >= 20
    lo, hi = k[keep][0], k[keep][-1]
    # bins: <= lo, lo + 1 .. hi one by one, > hi
    obs = np.bincount(np.clip(x.astype(np.int64), lo, hi + 1) - lo, minlength=hi - lo + 2)
    exp = np.concatenate([[stats.poisson.cdf(lo, lam)], pmf[lo + 1:hi + 1],
                          [stats.poisson.sf(hi, lam)]]) * N
    p = stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    assert p > P_MIN, f"chi-square p-value {p:.3g} (lam={lam:.3g})"


@pytest.mark.parametrize("kind", KINDS)
def test_integers(dev, rng, kind: str) -> None:
    g = make(dev, rng, kind)
    x = host(dev, g.integers((N,)))
    bits = 64 if kind in msgs.SOBOL64_KINDS else 32
    assert x.dtype == (np.uint64 if bits == 64 else np.uint32)
    u = (x.astype(np.float64) + 0.5) / 2.0 ** bits
    ks_ok(u, stats.uniform.cdf)
    moments_ok(u, 0.5, 1 / 12, 1 / 80)
    if kind in PSEUDO:  # every bit is a fair coin
        ones = np.unpackbits(x.view(np.uint8)).reshape(-1, 32).mean(axis=0)
        assert np.all(np.abs(ones - 0.5) < 6 * 0.5 / math.sqrt(N)), ones


# -- determinism ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_and_offset_same_numbers(dev, rng, kind: str) -> None:
    seed = seed_of(rng) if kind in PSEUDO else None
    offset = 0 if kind in msgs.NO_OFFSET_KINDS else int(rng.integers(0, 1 << 20))
    draws = []
    for _ in range(2):
        g = dev.curand.generator(kind, seed=seed, offset=offset)
        draws.append((host(dev, g.uniform((4096,))), host(dev, g.normal((4096,), "f64")),
                      host(dev, g.integers((1000,)))))
    for a, b in zip(*draws):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kind", PSEUDO)
def test_different_seeds_differ(dev, rng, kind: str) -> None:
    seed = seed_of(rng)
    a = host(dev, dev.curand.generator(kind, seed=seed).integers((4096,)))
    b = host(dev, dev.curand.generator(kind, seed=seed + 1).integers((4096,)))
    assert np.mean(a == b) < 0.01


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in msgs.NO_OFFSET_KINDS])
def test_different_offsets_differ(dev, rng, kind: str) -> None:
    seed = seed_of(rng) if kind in PSEUDO else None
    k = int(rng.integers(1, 1 << 16))
    a = host(dev, dev.curand.generator(kind, seed=seed).integers((4096,)))
    b = host(dev, dev.curand.generator(kind, seed=seed, offset=k).integers((4096,)))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["philox", "xorwow", "mrg32k3a"])
def test_stream_continues(dev, rng, kind: str) -> None:
    """n values then m values from one generator are the first n + m values of a fresh one, and
    offset k starts at value k (uniform f32 and raw integers)."""
    seed = seed_of(rng)
    n, m = 4 * int(rng.integers(1, 5000)), 4 * int(rng.integers(1, 5000))
    whole = host(dev, dev.curand.generator(kind, seed=seed).uniform((n + m,)))
    g = dev.curand.generator(kind, seed=seed)
    first, second = host(dev, g.uniform((n,))), host(dev, g.uniform((m,)))
    assert np.array_equal(np.concatenate([first, second]), whole)
    skipped = host(dev, dev.curand.generator(kind, seed=seed, offset=n).uniform((m,)))
    assert np.array_equal(skipped, whole[n:])


@pytest.mark.parametrize("kind", PSEUDO)
def test_reseed_restarts(dev, rng, kind: str) -> None:
    seed = seed_of(rng)
    g = dev.curand.generator(kind, seed=seed)
    a = host(dev, g.normal((1000,)))
    g.reseed(seed + 7)
    b = host(dev, g.normal((1000,)))
    g.reseed(seed, offset=0)
    c = host(dev, g.normal((1000,)))
    g.reseed()  # keeps the seed, back to the start
    d = host(dev, g.normal((1000,)))
    assert np.array_equal(a, c) and np.array_equal(a, d) and not np.array_equal(a, b)
    fresh = host(dev, dev.curand.generator(kind, seed=seed + 7).normal((1000,)))
    assert np.array_equal(b, fresh)
    assert g.reseed(seed).result(timeout=30) is None


@pytest.mark.parametrize("kind", QUASI)
def test_quasi_reseed_restarts_at_offset(dev, rng, kind: str) -> None:
    k = int(rng.integers(1, 500))
    g = dev.curand.generator(kind, dimensions=2)
    whole = host(dev, g.uniform((2 * 1024,)))
    g.reseed(offset=k)
    part = host(dev, g.uniform((2 * 256,)))
    assert np.array_equal(part.reshape(2, -1), whole.reshape(2, -1)[:, k:k + 256])


@pytest.mark.parametrize("kind, ordering", [(k, o) for k in PSEUDO for o in msgs.ORDERINGS[k]])
def test_orderings_deterministic(dev, rng, kind: str, ordering: str) -> None:
    seed = seed_of(rng)
    a = host(dev, dev.curand.generator(kind, seed=seed, ordering=ordering).uniform((10000,)))
    b = host(dev, dev.curand.generator(kind, seed=seed, ordering=ordering).uniform((10000,)))
    assert np.array_equal(a, b)
    moments_ok(a, 0.5, 1 / 12, 1 / 80)


# -- odd counts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["normal", "lognormal"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("kind", PSEUDO)
def test_odd_counts(dev, rng, kind: str, dtype: str, dist: str) -> None:
    seed = seed_of(rng)
    for n in (1, 3, 1001):
        a = host(dev, getattr(dev.curand.generator(kind, seed=seed), dist)((n,), dtype))
        b = host(dev, getattr(dev.curand.generator(kind, seed=seed), dist)((n,), dtype))
        assert np.array_equal(a, b) and np.all(np.isfinite(a)), n
        if n > 1:  # the first n - 1 values are those of an even request
            c = host(dev, getattr(dev.curand.generator(kind, seed=seed), dist)((n - 1,), dtype))
            assert np.array_equal(a[:-1], c)
    big = host(dev, dev.curand.generator(kind, seed=seed).normal((N + 1,), dtype))
    ks_ok(big, stats.norm.cdf)


def test_odd_count_into_out(dev, rng) -> None:
    """A partial fill of ``out`` leaves the rest of the buffer as it was."""
    fill = rng.standard_normal(101).astype(np.float32) + 100
    out = dev.to_device(fill)
    g = dev.curand.generator("philox", seed=seed_of(rng))
    res = host(dev, g.normal((77,), out=out))
    assert np.array_equal(res[77:], fill[77:])
    assert np.all(np.abs(res[:77]) < 10)


# -- quasi-random -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", QUASI)
def test_sobol_low_discrepancy(dev, rng, kind: str) -> None:
    d, k = 3, 16
    pts = host(dev, dev.curand.generator(kind, dimensions=d).uniform((d << k,), "f64"))
    pts = pts.reshape(d, 1 << k)  # dimension after dimension
    # each dimension of the first 2^k points is stratified: its mean is 0.5 to ~2^-k
    assert np.all(np.abs(pts.mean(axis=1) - 0.5) < 5e-5), pts.mean(axis=1)
    # a pseudo-random stream of the same size misses by ~1e-3; compare discrepancies too
    pseudo = host(dev, dev.curand.generator("philox", seed=seed_of(rng)).uniform(
        (d << 12,), "f64")).reshape(4096, d)
    from scipy.stats import qmc

    dq = qmc.discrepancy(pts[:, :4096].T)
    dp = qmc.discrepancy(pseudo)
    assert dq < dp / 4, (dq, dp)
    # the dimensions are different sequences
    assert not np.array_equal(pts[0], pts[1]) and not np.array_equal(pts[1], pts[2])


@pytest.mark.parametrize("kind", QUASI)
def test_sobol_offset_skips_points(dev, rng, kind: str) -> None:
    d = 2
    k = int(rng.integers(1, 1000))
    whole = host(dev, dev.curand.generator(kind, dimensions=d).uniform((d * 2048,), "f64"))
    part = host(dev, dev.curand.generator(kind, dimensions=d, offset=k).uniform(
        (d * 1024,), "f64"))
    assert np.array_equal(part.reshape(d, -1), whole.reshape(d, -1)[:, k:k + 1024])
