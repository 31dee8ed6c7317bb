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
from scipy import stats

import gpumsg
from gpumsg.messages import rng as msgs
from tests.libs.harness import BadArg, check_bad_args

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


# -- lifetime -------------------------------------------------------------------------------------
def _gen_msg(g, out, n=16, kind=None):
    return msgs.Generate(g.id if hasattr(g, "id") else g, kind or g.kind, g.dimensions
                         if hasattr(g, "dimensions") else 1, "uniform", out, n)


def test_generator_lifetime(dev, rng) -> None:
    g = dev.curand.generator("xorwow", seed=seed_of(rng))
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
    h = dev.curand.generator("philox", seed=1)
    h.ready.result(timeout=30)
    hid = h.id
    del h
    gc.collect()
    with pytest.raises(gpumsg.InvalidMessage, match="no generator"):
        dev.send(msgs.Generate(hid, "philox", 1, "uniform", out, 16)).result(timeout=30)
    # a generator used from a `with` block
    with dev.curand.generator("mrg32k3a", seed=seed_of(rng)) as m:
        assert host(dev, m.uniform((8,))).shape == (8,)
    assert m.closed


def test_device_close_destroys_generators(backend, rng) -> None:
    dev = gpumsg.open_device(0, backend=backend)
    gens = [dev.curand.generator(k, seed=seed_of(rng)) if k in PSEUDO else
            dev.curand.generator(k) for k in KINDS]
    outs = [g.uniform((64,)) for g in gens]
    for o in outs:
        o.result(timeout=60)
    dev.close()
    with pytest.raises(gpumsg.GpuError):
        gens[0].uniform((4,))


def test_pipelined_before_creation(dev, rng) -> None:
    """Draws sent before the creation is answered run after it (message order)."""
    gs = [dev.curand.generator("philox", seed=seed_of(rng)) for _ in range(8)]
    outs = [g.normal((1000,)) for g in gs]
    for g, o in zip(gs, outs):
        assert np.all(np.isfinite(host(dev, o)))
        assert g.ready.done()


def test_process_isolation_same_numbers(rng) -> None:
    """Generators work through a worker process (messages are plain data), with the numbers of
    a thread-isolated device; closing one there destroys it in the worker."""
    seed = seed_of(rng)
    with gpumsg.open_device(0, backend="sim") as local:
        ref = host(local, local.curand.generator("xorwow", seed=seed, offset=9).normal((999,)))
    with gpumsg.open_device(0, backend="sim", isolation="process", standby=False) as dev:
        g = dev.curand.generator("xorwow", seed=seed, offset=9)
        assert np.array_equal(host(dev, g.normal((999,))), ref)
        gid = g.id
        g.close()
        out = dev.alloc((4,), "f32", order="C")
        with pytest.raises(gpumsg.InvalidMessage, match="no generator"):
            dev.send(msgs.Generate(gid, "xorwow", 1, "uniform", out, 4)).result(timeout=30)


def test_generator_repr_and_defaults(dev) -> None:
    g = dev.curand.generator()
    assert g.kind == "philox" and g.seed == 0 and g.ordering == "default" and g.dimensions == 1
    q = dev.curand.generator("scrambled_sobol64", dimensions=5)
    assert "dimensions=5" in repr(q) and q.seed is None


# -- repeated draws into ``out`` -----------------------------------------------------------------
#: (distribution, out dtype, the keyword arguments of the draw), one row per client method
DRAWS = [("normal", "f32", {"mean": 0.5, "std": 2.0}), ("uniform", "f64", {}),
         ("lognormal", "f64", {"mean": -0.25, "std": 0.5}), ("poisson", "u32", {"lam": 3.5}),
         ("integers", None, {})]


@pytest.mark.parametrize("kind", ["philox", "xorwow", "mtgp32", "sobol32", "scrambled_sobol64"])
def test_repeated_draws_into_out_reuse_their_message(dev, rng, posted, kind: str) -> None:
    """Each distribution drawn three times into the same ``out`` with the same arguments posts
    one message three times (the memo), and the device thread keeps one launcher for it. The
    draws still advance the generator: they differ from one another, and equal, bit for bit,
    the draws of a twin generator (same kind, seed and dimensions) into new buffers."""
    ctx = dev._worker.ctx
    seed = seed_of(rng) if kind in PSEUDO else None
    dims = 2 if kind in QUASI else None
    g, twin = (dev.curand.generator(kind, seed=seed, dimensions=dims) for _ in range(2))
    n = 2 * int(rng.integers(500, 3000))
    sent = posted(dev, msgs.Generate)
    before = len(ctx.derived)
    for dist, dtype, kw in DRAWS:
        dtype = dtype or msgs.bits_dtype(kind)
        out = dev.alloc((n,), dtype, order="C").result()
        first = len(sent)
        got = [host(dev, getattr(g, dist)(out=out, **kw)) for _ in range(3)]
        ref = [host(dev, getattr(twin, dist)((n,), **({} if dist in ("poisson", "integers")
                                                     else {"dtype": dtype}), **kw))
               for _ in range(3)]
        mine = sent[first:first + 3]
        assert mine[0] is mine[1] is mine[2], dist
        for a, b in zip(got, ref, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), dist
        assert not np.array_equal(got[0], got[1]) and not np.array_equal(got[1], got[2]), dist
    # one launcher kept per message of g; none for the twin's draws into new buffers (each
    # an AllocThen's message, never sent again)
    assert len(ctx.derived) == before + len(DRAWS)


def test_a_repeated_draw_changes_with_its_arguments(dev, rng, posted) -> None:
    """Another mean or shape is another message, with its own effect; the first call again is
    the first message again. A partial fill keeps the rest of ``out``."""
    seed = seed_of(rng)
    g, twin = (dev.curand.generator("philox", seed=seed) for _ in range(2))
    fill = rng.standard_normal(4096).astype(np.float32) + 100
    out = dev.to_device(fill).result()
    sent = posted(dev, msgs.Generate)
    a = host(dev, g.normal(out=out))
    b = host(dev, g.normal(out=out, mean=50.0))
    c = host(dev, g.normal((100,), out=out))
    d = host(dev, g.normal(out=out))
    assert sent[1] is not sent[0] and sent[1].mean == 50.0
    assert sent[2] is not sent[0] and sent[2].n == 100
    assert sent[3] is sent[0]
    ref = [host(dev, twin.normal((4096,))), host(dev, twin.normal((4096,), mean=50.0)),
           host(dev, twin.normal((100,))), host(dev, twin.normal((4096,)))]
    assert np.array_equal(a, ref[0]) and np.array_equal(b, ref[1])
    assert np.array_equal(c[:100], ref[2]) and np.array_equal(c[100:], b[100:])
    assert np.array_equal(d, ref[3])
    assert abs(float(np.mean(b)) - 50.0) < 1 and abs(float(np.mean(a))) < 1


def test_a_repeated_draw_keeps_every_refusal(backend: str, rng, posted) -> None:
    """After draws into ``out`` were memoized: a bad argument is refused at every call; a
    closed generator, a freed ``out`` and a closed device are refused at the call site. The
    kept message, sent again by hand after its generator was destroyed, fails on the device
    with the generator named (the launcher it keeps does not keep the generator)."""
    dev = gpumsg.open_device(0, backend=backend)
    try:
        g = dev.curand.generator("philox", seed=seed_of(rng))
        out, other = (dev.alloc((256,), "f32", order="C").result() for _ in range(2))
        sent = posted(dev, msgs.Generate)
        for _ in range(2):
            g.normal(out=out).result(timeout=30)
            g.uniform(out=other).result(timeout=30)
        for _ in range(2):
            with pytest.raises(gpumsg.InvalidMessage) as info:
                g.normal(out=out, std=0.0)
            assert info.value.field == "std"
            with pytest.raises(gpumsg.InvalidMessage) as info:
                g.poisson(out=out)  # an f32 buffer
            assert info.value.field == "out"
        other.free().result(timeout=30)
        with pytest.raises(gpumsg.GpuRefStale, match="freed"):
            g.uniform(out=other)
        kept = sent[0]
        g.close()
        with pytest.raises(gpumsg.InvalidMessage) as info:
            g.normal(out=out)
        assert info.value.field == "generator"
        with pytest.raises(gpumsg.InvalidMessage, match="no generator") as info:
            dev.send(kept).result(timeout=30)
        assert info.value.field == "generator"
        h = dev.curand.generator("xorwow", seed=1)
        h.normal(out=out).result(timeout=30)
        h.normal(out=out).result(timeout=30)
    finally:
        dev.close()
    with pytest.raises(gpumsg.GpuError):
        h.normal(out=out)


def test_a_repeated_draw_refuses_a_stale_buffer(backend: str, rng) -> None:
    """After the worker was replaced (a new generation), a draw repeated into an ``out`` of the
    old generation is refused at the call site; a generator made since draws as usual."""
    dev = gpumsg.open_device(0, backend=backend, isolation="process", allow_fault_injection=True,
                             watchdog=2.0, max_restarts=2, standby=False)
    try:
        g = dev.curand.generator("philox", seed=seed_of(rng))
        out = dev.alloc((64,), "f32", order="C").result(timeout=60)
        for _ in range(2):
            g.uniform(out=out).result(timeout=60)
        with pytest.raises(gpumsg.ContextPoisoned):
            dev.inject_fault("illegal_address").result(timeout=60)
        dev.watch_generation(0).result(timeout=60)
        assert out.is_stale()
        with pytest.raises(gpumsg.GpuRefStale):
            g.uniform(out=out)
        fresh = dev.alloc((64,), "f32", order="C").result(timeout=60)
        h = dev.curand.generator("philox", seed=seed_of(rng))
        for _ in range(2):
            x = host(dev, h.uniform(out=fresh))
            assert np.all((x > 0) & (x <= 1))
    finally:
        dev.close(timeout=60)


def test_a_kept_launcher_follows_a_replaced_generator(dev, rng) -> None:
    """A Mersenne Twister's reseed replaces its generator on the device (it takes no offset):
    the launcher kept for a repeated draw looks the generator up at every call, so the draw
    after the reseed restarts the stream."""
    g = dev.curand.generator("mt19937", seed=seed_of(rng))
    out = dev.alloc((1024,), "f32", order="C").result()
    first = host(dev, g.uniform(out=out))
    second = host(dev, g.uniform(out=out))
    g.reseed()
    assert np.array_equal(host(dev, g.uniform(out=out)), first)
    assert not np.array_equal(first, second)


class _StubCurand:
    """A cuRAND stand-in for the CUDA handle without a GPU: each function records its name and
    arguments (ctypes values as Python values) and answers ``status``."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.status = 0

    def __getattr__(self, name: str):
        import ctypes

        from gpumsg.libs.curand.bindings import SPEC

        types = {f.name: f.argtypes for f in SPEC.functions}

        def fn(*args):
            self.calls.append((name, *(a.value if isinstance(a, ctypes._SimpleCData) else a
                                       for a in args)))
            return self.status

        fn.argtypes = list(types[name])  # type: ignore[attr-defined]
        return fn


def test_a_draw_launcher_issues_its_bound_call() -> None:
    """CurandHandle.generate_bound on a stand-in library (what the GPU path runs, checked
    here): the function of the distribution and dtype with typed ctypes arguments, the
    generator's stream set only when it changed, an odd normal count as n - 1 values plus a
    pair in a pool block whose first value is copied behind them, no call for n = 0, a status
    raised as LibraryError naming the function; the generator is the one passed at each
    call."""
    from types import SimpleNamespace

    from gpumsg.libs.curand.handle import CurandHandle, _Generator

    class Stream:
        def __int__(self) -> int:
            return 0x77

    events: list[tuple] = []
    memory = SimpleNamespace(allocate=lambda n, s: events.append(("alloc", n)) or 0x9000,
                             deallocate=lambda p, n, s: events.append(("free", p, n)))
    backend = SimpleNamespace(copy_dtod=lambda s, dst, src, n: events.append(
        ("copy", dst, src, n)))
    lib = _StubCurand()
    h = CurandHandle(SimpleNamespace(memory=memory, backend=backend), lib)
    g1, g2 = _Generator(0x100, "philox", 1, 5, "default"), _Generator(0x200, "philox", 1, 5,
                                                                       "default")
    s1 = Stream()
    launch = h.generate_bound("philox", "normal", "f32", 0x4000, 8, 0.5, 2.0, 1.0)
    launch(s1, g1)
    launch(s1, g1)
    launch(s1, g2)
    assert [c[:2] for c in lib.calls] == [
        ("curandSetStream", 0x100), ("curandGenerateNormal", 0x100),
        ("curandGenerateNormal", 0x100), ("curandSetStream", 0x200),
        ("curandGenerateNormal", 0x200)]
    assert lib.calls[1][2:] == (0x4000, 8, 0.5, 2.0)
    lib.calls.clear()
    odd = h.generate_bound("philox", "lognormal", "f64", 0x4000, 7, 0.0, 1.0, 1.0)
    odd(s1, g1)
    assert [c[:4] for c in lib.calls] == [("curandGenerateLogNormalDouble", 0x100, 0x4000, 6),
                                          ("curandGenerateLogNormalDouble", 0x100, 0x9000, 2)]
    assert events == [("alloc", 16), ("copy", 0x4000 + 6 * 8, 0x9000, 8), ("free", 0x9000, 16)]
    lib.calls.clear()
    h.generate_bound("sobol32", "normal", "f32", 0x4000, 7, 0.0, 1.0, 1.0)(s1, g1)  # quasi:
    assert [c[:4] for c in lib.calls] == [("curandGenerateNormal", 0x100, 0x4000, 7)]  # whole
    lib.calls.clear()
    s2 = Stream()
    h.generate_bound("philox", "uniform", "f32", 0x4000, 0, 0.0, 1.0, 1.0)(s2, g1)
    assert lib.calls == [("curandSetStream", 0x100, 0x77)] and g1.stream is s2
    lib.calls.clear()
    poisson = h.generate_bound("philox", "poisson", "u32", 0x4000, 9, 0.0, 1.0, 3.5)
    poisson(s2, g1)
    assert lib.calls == [("curandGeneratePoisson", 0x100, 0x4000, 9, 3.5)]
    lib.status = 104
    with pytest.raises(gpumsg.LibraryError, match="curandGeneratePoisson"):
        poisson(s2, g1)


# -- bad arguments --------------------------------------------------------------------------------
def _g(dev, kind="philox", **kw):
    return dev.curand.generator(kind, **kw)


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


def test_repeated_draw_of_a_new_shape_copies_its_checked_message(dev, rng, posted) -> None:
    """``normal(shape)`` repeated: each call posts one AllocThen whose Generate is the first
    call's message with its own new output; the draws differ and follow the law; other
    arguments get their own message; a bad dtype is refused at every call."""
    g = make(dev, rng, "philox")
    sent = posted(dev, gpumsg.messages.AllocThen)
    draws = [g.normal(1 << 16) for _ in range(3)]
    xs = [host(dev, d) for d in draws]
    gens = [m.then for m in sent]
    assert len(gens) == 3 and [m.out for m in gens] == [d.result().ref for d in draws]
    assert all(m.n == 1 << 16 and m.distribution == "normal" for m in gens)
    assert not np.array_equal(xs[0], xs[1]) and not np.array_equal(xs[1], xs[2])
    for x in xs:
        moments_ok(x, 0.0, 1.0, 3.0)
    y = host(dev, g.normal(1 << 16, mean=5.0))
    assert sent[-1].then.mean == 5.0
    moments_ok(y, 5.0, 1.0, 3.0)
    for _ in range(2):
        with pytest.raises(gpumsg.InvalidMessage, match="dtype"):
            g.normal(16, dtype="i32")
