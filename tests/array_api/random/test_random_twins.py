"""The GPU's kernels against their simulator twins: each element of a launch draws the same
Philox words on both, so integer laws agree exactly and continuous ones to the rounding of the
math functions (a rejection test sitting on an ulp may rarely go the other way: a few
elements in 10**4 are allowed to differ). cuRAND's draws (the normal family with scalar
parameters, small scalar Poisson means) are not twinned bit for bit and are left out."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
import gpumsg.array_api as xpm
from tests.conftest import need_backend

SIZE = 20_000
LAWS = [
    ("random", (), {}), ("random", (), {"dtype": np.float32}), ("uniform", (-1.0, 3.0), {}),
    ("uniform", ([0.0, 1.0], 2.0), {}), ("integers", (-7, 1000), {}),
    ("integers", (0, 2 ** 64 - 1), {"dtype": np.uint64, "endpoint": True}),
    ("normal", ([0.0, 1.0], 2.0), {}), ("lognormal", ([0.0], 0.5), {}),
    ("standard_exponential", (), {}), ("standard_gamma", (0.4,), {}),
    ("standard_gamma", (3.0,), {}), ("beta", (0.5, 0.5), {}), ("beta", (2.0, 3.0), {}),
    ("chisquare", (3.0,), {}), ("noncentral_chisquare", (0.5, 2.0), {}),
    ("noncentral_chisquare", (3.0, 2.0), {}), ("f", (3.0, 4.0), {}),
    ("noncentral_f", (3.0, 4.0, 1.0), {}), ("standard_t", (5.0,), {}),
    ("standard_cauchy", (), {}), ("gumbel", (0.0, 1.0), {}), ("laplace", (0.0, 1.0), {}),
    ("logistic", (0.0, 1.0), {}), ("pareto", (2.0,), {}), ("power", (2.0,), {}),
    ("rayleigh", (1.0,), {}), ("weibull", (1.5,), {}), ("triangular", (0.0, 1.0, 3.0), {}),
    ("vonmises", (0.5, 2.0), {}), ("wald", (1.0, 2.0), {}), ("poisson", ([3.0, 40.0],), {}),
    ("poisson", (5e4,), {}), ("binomial", (20, 0.3), {}), ("binomial", (1000, 0.7), {}),
    ("hypergeometric", (30, 20, 15), {}), ("negative_binomial", (3.0, 0.4), {}),
    ("geometric", (0.2,), {}), ("logseries", (0.9,), {}), ("zipf", (2.0,), {}),
    ("zipf", ([1.5, 2000.0],), {}),
]


@pytest.fixture(scope="module")
def devices():
    need_backend("cuda")
    sim = gpumsg.open_device(0, backend="sim")
    gpu = gpumsg.open_device(0, backend="cuda")
    yield sim, gpu
    sim.close()
    gpu.close()


@pytest.mark.gpu
@pytest.mark.parametrize("name,args,kw", LAWS, ids=[f"{n}{i}" for i, (n, _, _) in
                                                    enumerate(LAWS)])
def test_gpu_kernels_match_their_twins(devices, name, args, kw):
    out = []
    for dev in devices:
        gen = xpm.random.default_rng(1234, device=dev)
        gen.random(3)  # a launch before, so that the launch counter is not 0
        shape = (SIZE // 2, 2) if any(isinstance(a, list) for a in args) else SIZE
        out.append(np.asarray(getattr(gen, name)(*args, size=shape, **kw)))
    sim, gpu = out
    assert sim.dtype == gpu.dtype and sim.shape == gpu.shape
    if sim.dtype.kind in "iub":
        same = sim == gpu
    else:
        same = np.isclose(sim, gpu, rtol=1e-5 if sim.dtype == np.float32 else 1e-9,
                          atol=0.0, equal_nan=True)
    assert np.count_nonzero(~same) <= SIZE // 5000, np.flatnonzero(~same)[:10]


@pytest.mark.gpu
@pytest.mark.parametrize("n,mean", [(1000, 2048), (3000, 2048), (100_003, 2048),
                                    (600_000, 2048), (20_000, 12_000), (9000, 10**9)])
def test_gpu_permutation_matches_its_twin(devices, n, mean):
    """Labels, the radix passes over them and the buckets' shuffle (one block of the identity,
    small and past a block's size; one and two passes; buckets past a block's size) give the
    same permutation."""
    from gpumsg.array_api.random._permute import permutation_order

    sim, gpu = (np.asarray(permutation_order(dev, n, 0x1234_5678_9ABC_DEF0, (7, 8), mean))
                for dev in devices)
    assert np.array_equal(np.sort(gpu), np.arange(n))
    assert np.array_equal(sim, gpu), np.flatnonzero(sim != gpu)[:10]


@pytest.mark.gpu
@pytest.mark.parametrize("start,stop", [(0, 20_002), (1, 20_003), (4, 20_001)])
def test_gpu_float32_uniforms_into_slices_match_their_twin(devices, start, stop):
    """random(dtype=float32, out=) into a slice: whole aligned float4 groups, a partial last
    group, and an output not 16-byte aligned (every group stored element by element)."""
    out = []
    for dev in devices:
        gen = xpm.random.default_rng(99, device=dev)
        buf = xpm.zeros((20_004,), dtype=xpm.float32, device=dev)
        gen.random(dtype=xpm.float32, out=buf[start:stop])
        out.append(np.asarray(buf))
    sim, gpu = out
    assert np.array_equal(sim, gpu)
    assert np.all(sim[:start] == 0) and np.all(sim[stop:] == 0) and sim[start:stop].min() >= 0


@pytest.mark.parametrize("name,args,kw", [
    ("integers", (-7, 2 ** 40), {}), ("gamma", (0.7,), {}), ("binomial", (30, 0.4), {}),
    ("zipf", (1.6,), {}), ("random", (), {"dtype": np.float32}), ("uniform", (-2.0, 5.0), {})])
def test_twins_draw_alike_in_any_slices(monkeypatch, name, args, kw):
    """The simulator's twins draw a launch in slices (bounded host memory): each element's
    stream is keyed by its index in the launch, so the slicing changes no value."""
    from gpumsg.array_api.random import _philox

    out = []
    with gpumsg.open_device(0, backend="sim") as dev:
        for width in (_philox.TWIN_SLICE, 777):
            monkeypatch.setattr(_philox, "TWIN_SLICE", width)
            gen = xpm.random.default_rng(99, device=dev)
            out.append(np.asarray(getattr(gen, name)(*args, size=5001, **kw)))
    np.testing.assert_array_equal(out[0], out[1])
