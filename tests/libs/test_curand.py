"""cuRAND (``dev.random``): every generator and distribution checked against its law on >= 1M
samples (moments, a KS test; chi-square and moments for Poisson), determinism per seed and
offset, different seeds and offsets differ, stream continuation, Sobol's low discrepancy, odd
counts of the pairwise normal family, generator lifetime, and a bad-argument table. Seeds come
from the ``rng`` fixture, fresh every run. Statistical checks use p > 1e-6 or 6-sigma bounds."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from harness import BadArg, check_bad_args
from scipy import stats

import gpumsg
from gpumsg.messages import rng as msgs

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
    return dev.random.generator(kind, **kw)


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
        g = dev.random.generator(kind, seed=seed, offset=offset)
        draws.append((host(dev, g.uniform((4096,))), host(dev, g.normal((4096,), "f64")),
                      host(dev, g.integers((1000,)))))
    for a, b in zip(*draws):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kind", PSEUDO)
def test_different_seeds_differ(dev, rng, kind: str) -> None:
    seed = seed_of(rng)
    a = host(dev, dev.random.generator(kind, seed=seed).integers((4096,)))
    b = host(dev, dev.random.generator(kind, seed=seed + 1).integers((4096,)))
    assert np.mean(a == b) < 0.01


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in msgs.NO_OFFSET_KINDS])
def test_different_offsets_differ(dev, rng, kind: str) -> None:
    seed = seed_of(rng) if kind in PSEUDO else None
    k = int(rng.integers(1, 1 << 16))
    a = host(dev, dev.random.generator(kind, seed=seed).integers((4096,)))
    b = host(dev, dev.random.generator(kind, seed=seed, offset=k).integers((4096,)))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["philox", "xorwow", "mrg32k3a"])
def test_stream_continues(dev, rng, kind: str) -> None:
    """n values then m values from one generator are the first n + m values of a fresh one, and
    offset k starts at value k (uniform f32 and raw integers)."""
    seed = seed_of(rng)
    n, m = 4 * int(rng.integers(1, 5000)), 4 * int(rng.integers(1, 5000))
    whole = host(dev, dev.random.generator(kind, seed=seed).uniform((n + m,)))
    g = dev.random.generator(kind, seed=seed)
    first, second = host(dev, g.uniform((n,))), host(dev, g.uniform((m,)))
    assert np.array_equal(np.concatenate([first, second]), whole)
    skipped = host(dev, dev.random.generator(kind, seed=seed, offset=n).uniform((m,)))
    assert np.array_equal(skipped, whole[n:])


@pytest.mark.parametrize("kind", PSEUDO)
def test_reseed_restarts(dev, rng, kind: str) -> None:
    seed = seed_of(rng)
    g = dev.random.generator(kind, seed=seed)
    a = host(dev, g.normal((1000,)))
    g.reseed(seed + 7)
    b = host(dev, g.normal((1000,)))
    g.reseed(seed, offset=0)
    c = host(dev, g.normal((1000,)))
    g.reseed()  # keeps the seed, back to the start
    d = host(dev, g.normal((1000,)))
    assert np.array_equal(a, c) and np.array_equal(a, d) and not np.array_equal(a, b)
    fresh = host(dev, dev.random.generator(kind, seed=seed + 7).normal((1000,)))
    assert np.array_equal(b, fresh)
    assert g.reseed(seed).result(timeout=30) is None


@pytest.mark.parametrize("kind", QUASI)
def test_quasi_reseed_restarts_at_offset(dev, rng, kind: str) -> None:
    k = int(rng.integers(1, 500))
    g = dev.random.generator(kind, dimensions=2)
    whole = host(dev, g.uniform((2 * 1024,)))
    g.reseed(offset=k)
    part = host(dev, g.uniform((2 * 256,)))
    assert np.array_equal(part.reshape(2, -1), whole.reshape(2, -1)[:, k:k + 256])


@pytest.mark.parametrize("kind, ordering", [(k, o) for k in PSEUDO for o in msgs.ORDERINGS[k]])
def test_orderings_deterministic(dev, rng, kind: str, ordering: str) -> None:
    seed = seed_of(rng)
    a = host(dev, dev.random.generator(kind, seed=seed, ordering=ordering).uniform((10000,)))
    b = host(dev, dev.random.generator(kind, seed=seed, ordering=ordering).uniform((10000,)))
    assert np.array_equal(a, b)
    moments_ok(a, 0.5, 1 / 12, 1 / 80)


# -- odd counts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["normal", "lognormal"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("kind", PSEUDO)
def test_odd_counts(dev, rng, kind: str, dtype: str, dist: str) -> None:
    seed = seed_of(rng)
    for n in (1, 3, 1001):
        a = host(dev, getattr(dev.random.generator(kind, seed=seed), dist)((n,), dtype))
        b = host(dev, getattr(dev.random.generator(kind, seed=seed), dist)((n,), dtype))
        assert np.array_equal(a, b) and np.all(np.isfinite(a)), n
        if n > 1:  # the first n - 1 values are those of an even request
            c = host(dev, getattr(dev.random.generator(kind, seed=seed), dist)((n - 1,), dtype))
            assert np.array_equal(a[:-1], c)
    big = host(dev, dev.random.generator(kind, seed=seed).normal((N + 1,), dtype))
    ks_ok(big, stats.norm.cdf)


def test_odd_count_into_out(dev, rng) -> None:
    """A partial fill of ``out`` leaves the rest of the buffer as it was."""
    fill = rng.standard_normal(101).astype(np.float32) + 100
    out = dev.to_device(fill)
    g = dev.random.generator("philox", seed=seed_of(rng))
    res = host(dev, g.normal((77,), out=out))
    assert np.array_equal(res[77:], fill[77:])
    assert np.all(np.abs(res[:77]) < 10)


# -- quasi-random -------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", QUASI)
def test_sobol_low_discrepancy(dev, rng, kind: str) -> None:
    d, k = 3, 16
    pts = host(dev, dev.random.generator(kind, dimensions=d).uniform((d << k,), "f64"))
    pts = pts.reshape(d, 1 << k)  # dimension after dimension
    # each dimension of the first 2^k points is stratified: its mean is 0.5 to ~2^-k
    assert np.all(np.abs(pts.mean(axis=1) - 0.5) < 5e-5), pts.mean(axis=1)
    # a pseudo-random stream of the same size misses by ~1e-3; compare discrepancies too
    pseudo = host(dev, dev.random.generator("philox", seed=seed_of(rng)).uniform(
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
    whole = host(dev, dev.random.generator(kind, dimensions=d).uniform((d * 2048,), "f64"))
    part = host(dev, dev.random.generator(kind, dimensions=d, offset=k).uniform(
        (d * 1024,), "f64"))
    assert np.array_equal(part.reshape(d, -1), whole.reshape(d, -1)[:, k:k + 1024])


# -- lifetime -------------------------------------------------------------------------------------
def _gen_msg(g, out, n=16, kind=None):
    return msgs.Generate(g.id if hasattr(g, "id") else g, kind or g.kind, g.dimensions
                         if hasattr(g, "dimensions") else 1, "uniform", out, n)


def test_generator_lifetime(dev, rng) -> None:
    g = dev.random.generator("xorwow", seed=seed_of(rng))
    assert g.ready.result(timeout=30) is None
    out = dev.alloc((16,), "f32", order="C")
    assert dev.send(_gen_msg(g, out)).result(timeout=30) is None
    gid = g.id
    g.close()
    assert g.closed
    with pytest.raises(gpumsg.InvalidMessage) as info:
        g.uniform((4,))
    assert info.value.field == "generator"
    with pytest.raises(gpumsg.InvalidMessage):
        dev.send(msgs.Generate(gid, "xorwow", 1, "uniform", out, 16)).result(timeout=30)
    # garbage collection destroys it on the device too
    h = dev.random.generator("philox", seed=1)
    h.ready.result(timeout=30)
    hid = h.id
    del h
    gc.collect()
    with pytest.raises(gpumsg.InvalidMessage, match="no generator"):
        dev.send(msgs.Generate(hid, "philox", 1, "uniform", out, 16)).result(timeout=30)
    # a generator used from a `with` block
    with dev.random.generator("mrg32k3a", seed=seed_of(rng)) as m:
        assert host(dev, m.uniform((8,))).shape == (8,)
    assert m.closed


def test_device_close_destroys_generators(backend, rng) -> None:
    dev = gpumsg.open_device(0, backend=backend)
    gens = [dev.random.generator(k, seed=seed_of(rng)) if k in PSEUDO else
            dev.random.generator(k) for k in KINDS]
    outs = [g.uniform((64,)) for g in gens]
    for o in outs:
        o.result(timeout=60)
    dev.close()
    with pytest.raises(gpumsg.GpuError):
        gens[0].uniform((4,))


def test_pipelined_before_creation(dev, rng) -> None:
    """Draws sent before the creation is answered run after it (message order)."""
    gs = [dev.random.generator("philox", seed=seed_of(rng)) for _ in range(8)]
    outs = [g.normal((1000,)) for g in gs]
    for g, o in zip(gs, outs):
        assert np.all(np.isfinite(host(dev, o)))
        assert g.ready.done()


def test_process_isolation_same_numbers(rng) -> None:
    """Generators work through a worker process (messages are plain data), with the numbers of
    a thread-isolated device; closing one there destroys it in the worker."""
    seed = seed_of(rng)
    with gpumsg.open_device(0, backend="sim") as local:
        ref = host(local, local.random.generator("xorwow", seed=seed, offset=9).normal((999,)))
    with gpumsg.open_device(0, backend="sim", isolation="process", standby=False) as dev:
        g = dev.random.generator("xorwow", seed=seed, offset=9)
        assert np.array_equal(host(dev, g.normal((999,))), ref)
        gid = g.id
        g.close()
        out = dev.alloc((4,), "f32", order="C")
        with pytest.raises(gpumsg.InvalidMessage, match="no generator"):
            dev.send(msgs.Generate(gid, "xorwow", 1, "uniform", out, 4)).result(timeout=30)


def test_generator_repr_and_defaults(dev) -> None:
    g = dev.random.generator()
    assert g.kind == "philox" and g.seed == 0 and g.ordering == "default" and g.dimensions == 1
    q = dev.random.generator("scrambled_sobol64", dimensions=5)
    assert "dimensions=5" in repr(q) and q.seed is None


# -- bad arguments --------------------------------------------------------------------------------
def _g(dev, kind="philox", **kw):
    return dev.random.generator(kind, **kw)


def _buf(dev, n, dtype):
    return dev.alloc((n,), dtype, order="C")


BAD = [
    BadArg("unknown generator", lambda dev: _g(dev, "mersenne"), field="kind"),
    BadArg("quasi with a seed", lambda dev: _g(dev, "sobol32", seed=3), field="seed"),
    BadArg("negative seed", lambda dev: _g(dev, seed=-1), field="seed"),
    BadArg("seed over 64 bits", lambda dev: _g(dev, seed=1 << 64), field="seed"),
    BadArg("negative offset", lambda dev: _g(dev, offset=-5), field="offset"),
    BadArg("pseudo with dimensions", lambda dev: _g(dev, dimensions=3), field="dimensions"),
    BadArg("zero dimensions", lambda dev: _g(dev, "sobol64", dimensions=0), field="dimensions"),
    BadArg("too many dimensions", lambda dev: _g(dev, "sobol32", dimensions=20001),
           field="dimensions"),
    BadArg("pseudo ordering on quasi", lambda dev: _g(dev, "sobol32", ordering="seeded"),
           field="ordering"),
    BadArg("unknown ordering", lambda dev: _g(dev, ordering="fastest"), field="ordering"),
    BadArg("seeded ordering is xorwow's", lambda dev: _g(dev, "philox", ordering="seeded"),
           field="ordering"),
    BadArg("mt19937 has no dynamic ordering",
           lambda dev: _g(dev, "mt19937", ordering="dynamic"), field="ordering"),
    BadArg("offset for mtgp32", lambda dev: _g(dev, "mtgp32", offset=10), field="offset"),
    BadArg("reseed offset for mt19937", lambda dev: _g(dev, "mt19937").reseed(1, offset=3),
           field="offset"),
    BadArg("reseed a quasi generator with a seed", lambda dev: _g(dev, "sobol32").reseed(4),
           field="seed"),
    BadArg("normal as u32", lambda dev: _g(dev).normal((10,), "u32"), field="dtype"),
    BadArg("uniform as f16", lambda dev: _g(dev).uniform((10,), "f16"), field="dtype"),
    BadArg("lognormal as i64", lambda dev: _g(dev).lognormal((10,), "i64"), field="dtype"),
    BadArg("64-bit integers from philox", lambda dev: _g(dev).integers((10,), "u64"),
           field="dtype"),
    BadArg("32-bit integers from sobol64", lambda dev: _g(dev, "sobol64").integers((10,), "u32"),
           field="dtype"),
    BadArg("64-bit integers into out from xorwow",
           lambda dev: _g(dev, "xorwow").integers(out=_buf(dev, 10, "u64")), field="out"),
    BadArg("negative size", lambda dev: _g(dev).normal((-4,)), field="shape"),
    BadArg("negative size in 2-D", lambda dev: _g(dev).uniform((3, -1)), field="shape"),
    BadArg("shape not ints", lambda dev: _g(dev).uniform((2.5,)), field="shape"),
    BadArg("no shape nor out", lambda dev: _g(dev).uniform(), field="shape"),
    BadArg("std zero", lambda dev: _g(dev).normal((10,), std=0.0), field="std"),
    BadArg("std negative", lambda dev: _g(dev).lognormal((10,), std=-1.0), field="std"),
    BadArg("std infinite", lambda dev: _g(dev).normal((10,), std=math.inf), field="std"),
    BadArg("mean NaN", lambda dev: _g(dev).normal((10,), mean=math.nan), field="mean"),
    BadArg("lambda zero", lambda dev: _g(dev).poisson((10,), lam=0.0), field="lam"),
    BadArg("lambda negative", lambda dev: _g(dev).poisson((10,), lam=-2.0), field="lam"),
    BadArg("out too small", lambda dev: _g(dev).normal((100,), out=_buf(dev, 50, "f32")),
           field="out"),
    BadArg("out of the wrong dtype", lambda dev: _g(dev).normal(out=_buf(dev, 50, "f16")),
           field="out"),
    BadArg("poisson into f32", lambda dev: _g(dev).poisson(out=_buf(dev, 50, "f32")),
           field="out"),
    BadArg("out not a buffer", lambda dev: _g(dev).uniform(out=np.zeros(4)), field="out"),
    BadArg("quasi count not a multiple of dimensions",
           lambda dev: _g(dev, "sobol32", dimensions=3).uniform((10,)), field="n"),
    BadArg("unknown generator id", lambda dev: dev.send(msgs.Generate(
        987654321, "philox", 1, "uniform", _buf(dev, 4, "f32"), 4)), field="generator",
        deferred=True),
    BadArg("generator of another kind", lambda dev: dev.send(msgs.Generate(
        _g(dev).id, "xorwow", 1, "uniform", _buf(dev, 4, "f32"), 4)), field="generator",
        deferred=True),
    BadArg("generator of other dimensions", lambda dev: dev.send(msgs.Generate(
        _g(dev, "sobol32", dimensions=2).id, "sobol32", 4, "uniform", _buf(dev, 8, "f32"), 8)),
        field="generator", deferred=True),
    BadArg("destroy twice", lambda dev: dev.send(msgs.DestroyGenerator(987654321)),
           field="generator", deferred=True),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case: BadArg) -> None:
    check_bad_args(dev, case)
