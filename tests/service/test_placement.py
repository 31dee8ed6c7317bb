"""The pool of compute streams and the automatic placement of messages on it
(``service/_placement.py``): independent work runs beside long work, a dependent chain stays on
one stream, the off switches, per-stream library handles, graphs recorded after an eager run
on another stream. Randomized ordering checks are in test_placement_dag.py."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.sim import SimBackend
from tests.conftest import random_array, rel_err


@pytest.fixture(autouse=True)
def _pool_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests configure the pool themselves (``configured(streams=...)``); the
    environment variable, which overrides a configured value, is taken out."""
    monkeypatch.delenv("GPUMSG_STREAMS", raising=False)


def _open(backend: str = "sim", **options):
    with gpumsg.config.configured(**options):
        return gpumsg.open_device(0, backend=backend, allow_fault_injection=True)


def _gemm_ready(dev, rng, n: int = 16):
    a = dev.to_device(random_array(rng, (n, n), np.float32))
    c = dev.alloc((n, n), np.float32)
    dev.cublas.gemm(a, a, c).result()  # the library loaded (a GPU's first handle: ~0.2 s)
    return a, c


@pytest.mark.parametrize("streams", [1, 4])
def test_independent_work_runs_beside_a_long_operation(backend, rng, streams) -> None:
    with _open(backend, streams=streams) as dev:
        a, c = _gemm_ready(dev, rng)
        hang = dev.inject_fault("hang", seconds=1.0)  # long work on the first compute stream
        t0 = time.perf_counter()
        dev.cublas.gemm(a, a, c).result(timeout=30)
        took = time.perf_counter() - t0
        hang.result(timeout=30)
        counts = dev.stats().result().streams
    if streams == 1:
        assert took > 0.5 and counts == ()  # queued behind it, as with one stream
    else:
        assert took < 0.5, took  # another stream of the pool ran it
        assert len(counts) == 4 and sum(counts[1:]) >= 1, counts


def test_a_dependent_chain_stays_on_one_stream(backend, rng) -> None:
    with _open(backend, streams=4) as dev:
        x0 = random_array(rng, 256, np.float32)
        x = dev.to_device(x0)
        dev.synchronize().result()
        before = dev.stats().result().streams
        for _ in range(200):  # each reads and writes x: every one follows the one before
            dev.cublas.scal(x, 1.001)
        got = dev.copy_to_host(x).result()
        after = dev.stats().result().streams
    placed = [b - a for a, b in zip(before, after)]
    assert sorted(placed)[-1] == 200 and sum(placed) == 200, placed
    assert rel_err(got, x0.astype(np.float64) * 1.001 ** 200) < 1e-4


@pytest.mark.parametrize("option", [{"stream_placement": False, "streams": 4}, {"streams": 1}])
def test_the_off_switches(backend, rng, option) -> None:
    with _open(backend, **option) as dev:
        a, c = _gemm_ready(dev, rng)
        dev.inject_fault("hang", seconds=0.3)
        t0 = time.perf_counter()
        dev.cublas.gemm(a, a, c).result(timeout=30)
        assert time.perf_counter() - t0 > 0.2  # one compute stream: behind the long work
        counts = dev.stats().result().streams
    assert counts == (() if option["streams"] == 1 else (counts[0], 0, 0, 0)), counts


@pytest.mark.parametrize("value", ["0", "17", "many"])
def test_a_bad_pool_size_is_refused_at_open(monkeypatch, value) -> None:
    monkeypatch.setenv("GPUMSG_STREAMS", value)
    with pytest.raises(gpumsg.InvalidMessage, match="GPUMSG_STREAMS"):
        gpumsg.open_device(0, backend="sim")


def test_each_stream_has_its_own_library_handles_and_the_counters_add_up(backend,
                                                                          rng) -> None:
    with _open(backend, streams=4) as dev:
        x = [dev.to_device(random_array(rng, (4, 64), np.complex64)) for _ in range(8)]
        dev.synchronize().result()
        dev.inject_fault("hang", seconds=0.2)  # the first stream is busy: the pool takes them
        outs = [dev.fft.fft(v) for v in x]
        for v, o in zip(x, outs):
            ref = np.fft.fft(dev.copy_to_host(v).result().astype(np.complex128))
            assert rel_err(dev.copy_to_host(o).result(), ref) < 1e-5
        ctx = dev._worker.ctx
        handles = ctx.handles("cufft")
        info = dev.cufft.cache_info().result()
        capacity = handles[0].plans.capacity
        # a new capacity, and a clear, reach every stream's handle; work on the pool goes on
        dev.cufft.cache_config(capacity=3, clear=True).result()
        capacities = [h.plans.capacity for h in ctx.handles("cufft")]
        dev.inject_fault("hang", seconds=0.2)
        again = [dev.fft.fft(v) for v in x]
        for v, o in zip(x, again):
            ref = np.fft.fft(dev.copy_to_host(v).result().astype(np.complex128))
            assert rel_err(dev.copy_to_host(o).result(), ref) < 1e-5
    assert len(handles) >= 2 and len({id(h) for h in handles}) == len(handles)
    assert info["hits"] + info["misses"] == 8 and info["capacity"] == capacity
    assert capacities == [3] * len(capacities)


def test_a_graph_records_after_an_eager_run_on_another_stream(rng) -> None:
    with _open(streams=4) as dev:
        x0 = random_array(rng, (4, 64), np.complex64)
        x = dev.to_device(x0)
        out = dev.alloc((4, 64), np.complex64)
        plan = dev.cufft.plan((64,), batch=4)
        plan.result()
        spec = plan.spec
        dev.synchronize().result()
        dev._worker.ctx.libraries["cufft"].plans.clear()  # idle: only the eager run has one
        dev.inject_fault("hang", seconds=0.2)  # the eager run (and its plan) lands elsewhere
        dev.cufft.execute(spec, x, out).result(timeout=30)
        with dev.graph() as g:
            dev.cufft.execute(spec, x, out)
        dev.memset(out, 0)
        g.launch().result(timeout=30)
        got = dev.copy_to_host(out).result()
        graphs = dev._worker.ctx.graph_table.graphs.values()
        assert [state.slot is not None for state in graphs] == [True]  # recorded elsewhere
    assert rel_err(got, np.fft.fft(x0.astype(np.complex128))) < 1e-5


def test_frees_wait_for_every_stream(rng) -> None:
    # buffers dropped right after being read on several streams are freed behind those reads
    with gpumsg.config.configured(streams=4):
        dev = gpumsg.open_device(0, backend=SimBackend(jitter=1e-3))
    with dev:
        w = dev.to_device(random_array(rng, (8, 8), np.float64))
        futures, expect = [], []
        for _ in range(12):
            x0 = random_array(rng, (8, 8), np.float64)
            buf = dev.to_device(x0)
            futures.append(dev.linalg.matmul(buf, w))
            expect.append(x0)
            del buf
        w_host = dev.copy_to_host(w).result()
        for f, x0 in zip(futures, expect):
            assert rel_err(dev.copy_to_host(f.result()).result(), x0 @ w_host) < 1e-12
