"""Repeated cuRAND draws into ``out``: one message reused while the arguments stay, a new one
when they change, every refusal kept (a stale buffer included), a kept launcher that follows a
replaced generator, the launcher's bound call on a stand-in library, and a draw of a new shape
copying its checked message. Seeds come
from the ``rng`` fixture, fresh every run."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.messages import curand as msgs
from tests.libs.curand._helpers import PSEUDO, QUASI, host, make, moments_ok, seed_of

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

        from gpumsg.libs.curand._bindings import SPEC

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

    from gpumsg.libs.curand._handle import CurandHandle, _Generator

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
