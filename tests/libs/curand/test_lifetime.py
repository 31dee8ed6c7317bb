"""cuRAND generators' lifetime (refused once closed, destroyed on the device when closed,
dropped or when their device closes; draws pipelined before their creation is answered; the
same numbers under process isolation; repr and defaults) and a bad-argument table. Seeds come
from the ``rng`` fixture, fresh every run."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

import gpumsg
from gpumsg.messages import curand as msgs
from tests.libs.curand._helpers import KINDS, PSEUDO, host, seed_of
from tests.libs.harness import BadArg, check_bad_args


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
