"""Explicit streams: ``dev.stream()`` pins what a thread sends inside ``with s:`` to a compute
stream of its own, ordered against the other streams by the buffers' uses;
``dev.synchronize(s)``; priorities; closing and reuse."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.sim import SimBackend
from tests.conftest import random_array, rel_err


def _slot(dev, s):
    return dev._worker.ctx.placement.explicit[s.id]


@pytest.mark.parametrize("streams", [1, 4])
def test_work_inside_the_block_runs_on_the_stream_and_stays_ordered(backend, rng,
                                                                     streams) -> None:
    with gpumsg.config.configured(streams=streams):
        dev = gpumsg.open_device(0, backend=SimBackend(jitter=1e-3) if backend == "sim"
                                 else backend)
    with dev:
        n = 16
        a0 = random_array(rng, (n, n), np.float64)
        a = dev.to_device(a0)
        b = dev.alloc((n, n), np.float64)
        s = dev.stream()
        want = a0
        with s:
            dev.linalg.matmul(a, a, out=b)  # on s: waits for the upload on the copy stream
            for _ in range(3):
                dev.cublas.scal(b, 0.5)
        want = a0 @ a0 * 0.125
        c = dev.linalg.matmul(b, a)  # outside: placed, waits for s's writes of b
        dev.synchronize(s).result(timeout=60)
        got_b = dev.copy_to_host(b).result()
        got_c = dev.copy_to_host(c).result()
        assert _slot(dev, s).placed == 4
    assert rel_err(got_b, want) < 1e-12
    assert rel_err(got_c, want @ a0) < 1e-12


def test_threads_in_blocks_of_their_own_streams(rng) -> None:
    with gpumsg.open_device(0, backend=SimBackend(jitter=2e-4)) as dev:
        w0 = random_array(rng, (8, 8), np.float64)
        w = dev.to_device(w0)
        errors: list[str] = []

        def client(t: int) -> None:
            r = np.random.default_rng(t)
            with dev.stream() as s:
                x0 = r.standard_normal((8, 8))
                x = dev.to_device(x0)
                for _ in range(20):
                    x = dev.linalg.matmul(x, w)
                    x0 = x0 @ w0
                got = dev.copy_to_host(x).result(timeout=60)
                if rel_err(got, x0) > 1e-10 or _slot(dev, s).placed < 20:
                    errors.append(f"thread {t}")

        threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
    assert not errors, errors


def test_priorities_are_clamped_to_the_device_range_and_checked_at_the_call(backend) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        hi, lo, mid = dev.stream(priority=-100), dev.stream(priority=7), dev.stream(-2)
        dev.synchronize().result()
        greatest, least = _slot(dev, hi).priority, _slot(dev, lo).priority  # the range's ends
        assert greatest <= 0 <= least and (backend != "sim" or (greatest, least) == (-5, 0))
        assert _slot(dev, mid).priority == max(-2, greatest)
        for bad in (1.5, True, "high"):
            with pytest.raises(gpumsg.InvalidMessage, match="priority"):
                dev.stream(priority=bad)


def test_a_closed_stream_gives_its_slot_to_the_next_one(rng) -> None:
    with gpumsg.config.configured(streams=4):
        dev = gpumsg.open_device(0, backend="sim")
    with dev:
        s1 = dev.stream()
        dev.synchronize().result()
        slot = _slot(dev, s1)
        s1.close()
        s1.close()  # idempotent
        assert s1.closed
        with pytest.raises(gpumsg.InvalidMessage, match="closed"):
            s1.__enter__()
        s2 = dev.stream()
        del s2  # dropped: given back too
        s3 = dev.stream()
        x = dev.to_device(random_array(rng, 64, np.float32))
        with s3:
            dev.cublas.scal(x, 2.0)
        s3.wait(timeout=30)
        assert _slot(dev, s3) is slot
        streams = len(dev._worker.ctx.streams)
    assert streams == 2 + 4 + 1  # the copy streams, the pool, one explicit stream


def test_synchronize_on_a_stream_waits_for_that_stream_only(rng) -> None:
    with gpumsg.open_device(0, backend="sim", allow_fault_injection=True) as dev:
        x = dev.to_device(random_array(rng, 64, np.float32))
        s = dev.stream()
        dev.inject_fault("hang", seconds=0.5)  # on the first compute stream
        with s:
            dev.cublas.scal(x, 2.0)
        t0 = time.perf_counter()
        dev.synchronize(s).result(timeout=30)
        assert time.perf_counter() - t0 < 0.4
        dev.synchronize().result(timeout=30)


def test_streams_and_their_counts_cross_a_process_boundary(rng) -> None:
    with gpumsg.config.configured(streams=4):
        dev = gpumsg.open_device(0, backend="sim", isolation="process")
    with dev:
        x0 = random_array(rng, 64, np.float32)
        x = dev.to_device(x0)
        with dev.stream(priority=-1) as s:
            dev.cublas.scal(x, 2.0)
        dev.synchronize(s).result(timeout=60)
        got = dev.copy_to_host(x).result()
        counts = dev.stats().result().streams  # the packed answer carries them
    assert np.array_equal(got, x0 * 2)
    assert len(counts) == 4


def test_synchronize_refuses_what_is_not_a_stream_of_the_device() -> None:
    with gpumsg.open_device(0, backend="sim") as dev, gpumsg.open_device(1, backend="sim") as other:
        s = other.stream()
        for bad in (float("nan"), lambda: None, "s", s):
            with pytest.raises(gpumsg.InvalidMessage) as info:
                dev.synchronize(bad)
            assert info.value.field == "stream"
        dev.synchronize(None).result()
