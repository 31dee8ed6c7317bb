"""Device groups: open/close together, placement from Stats, and collectives that fail with
CollectiveError on every rank instead of hanging (a member that never joins, a closed member,
a poisoned member, an asynchronous error, a member restarted in process mode), with the
communicator rebuilt for the next collective. On groups of 2, 3 and 4 simulated devices."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import CollectiveError
from tests.conftest import gpu_count

SIZES = [2, 3, 4]


@pytest.fixture(params=SIZES, ids=lambda n: f"n{n}")
def group(request):
    g = gpumsg.open_devices(list(range(request.param)), backend="sim",
                            allow_fault_injection=True)
    yield g
    g.close()


def _bufs(group, rng, size=16):
    xs = [rng.standard_normal(size).astype(np.float32) for _ in group]
    bufs = [d.to_device(x) for d, x in zip(group, xs)]
    for b in bufs:
        b.result(30)
    return xs, bufs


def _check_sum(group, bufs, xs):
    ref = sum(x.astype(np.float64) for x in xs)
    for d, b in zip(group, bufs):
        np.testing.assert_allclose(d.copy_to_host(b).result(30), ref, rtol=1e-5, atol=1e-6)


def _no_monitor_left():
    time.sleep(0.3)
    return not [t for t in threading.enumerate()
                if t.name.startswith("gpumsg-collective") and t.is_alive()]


def test_open_devices_and_stats(group):
    n = len(group)
    assert [d.ordinal for d in group] == list(range(n))
    stats = group.stats()
    assert [s.ordinal for s in stats] == list(range(n))
    group.close()
    assert all(d.closed for d in group)
    with pytest.raises(gpumsg.GpuError):
        group.least_loaded()


def test_least_loaded_avoids_busy_devices(group, rng):
    n = len(group)
    idle = n - 1 if n > 2 else 0
    for i in range(n):
        if i != idle:  # in-flight work behind a held-back stream
            group[i].inject_fault("hang", seconds=1.0)
            for _ in range(3):
                group[i].to_device(rng.standard_normal(8).astype(np.float32))
    assert group.least_loaded() is group[idle]
    assert group.submit(lambda d: d.ordinal) == idle


def test_least_loaded_ranks_a_stuck_device_thread_last(group):
    group[0].inject_fault("stall", seconds=1.5)  # queue depth it cannot even report
    group[0].stats()
    t0 = time.monotonic()
    assert group.least_loaded(timeout=0.3) is not group[0]
    assert time.monotonic() - t0 < 1.2


def test_least_loaded_prefers_free_memory_when_equally_idle(group):
    n = len(group)
    keep = [d.alloc((8 << 20,), np.uint8) for i, d in enumerate(group) if i != 1]
    for b in keep:
        b.result(30)
    assert group.least_loaded() is group[1]
    loads = group.stats()
    assert max(range(n), key=lambda i: loads[i].free_bytes) == 1


def test_member_that_never_joins_fails_every_rank(group, rng):
    xs, bufs = _bufs(group, rng)
    comm = group.nccl(timeout=1.0)
    first = comm.comm_id
    group[-1].inject_fault("hang", seconds=2.5)  # the last rank's stream never joins in time
    t0 = time.monotonic()
    fut = comm.all_reduce(bufs)
    for r, f in enumerate(fut.ranks):
        with pytest.raises(CollectiveError) as info:
            f.result(timeout=10)
        assert info.value.rank == r and info.value.comm == first
    with pytest.raises(CollectiveError, match="within"):
        fut.result(timeout=1)
    assert time.monotonic() - t0 < 2.0
    # the communicator was aborted: the next collective builds a new one and works
    time.sleep(1.0)
    comm.timeout = 10.0
    comm.all_reduce(bufs).result(10)
    assert comm.comm_id != first
    _check_sum(group, bufs, xs)
    assert _no_monitor_left()


def test_closed_member_fails_every_rank(group, rng):
    _, bufs = _bufs(group, rng, 4)
    comm = group.nccl(timeout=5.0)
    refs = [b.ref for b in bufs]
    group[1].close()
    with pytest.raises(gpumsg.GpuRefStale):  # its buffers are stale at the call site
        comm.all_reduce(bufs)
    fut = comm.all_reduce(refs)  # plain refs reach the closed member: every rank fails
    for f in fut.ranks:
        with pytest.raises(CollectiveError):
            f.result(timeout=10)
    assert _no_monitor_left()


def test_communicator_build_needs_no_stream(group):
    group[1].inject_fault("hang", seconds=1.5)  # the device thread still serves CommInit...
    comm = group.nccl(timeout=5.0)  # ...which needs no stream: the build succeeds
    assert comm.comm_id > 0
    comm.close()
    assert comm.comm_id == 0


def test_build_fails_when_a_member_thread_is_stuck(group):
    group[-1].inject_fault("stall", seconds=2.0)  # its device thread cannot even join
    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match="did not join"):
        group.nccl(timeout=0.5)
    assert time.monotonic() - t0 < 1.8


def test_poisoned_member_fails_outstanding_batches_at_once(group, rng):
    _, bufs = _bufs(group, rng, 4)
    comm = group.nccl(timeout=30.0)
    refs = [b.ref for b in bufs]
    group[-1].inject_fault("hang", seconds=3.0)  # keeps the batch outstanding
    fut = comm.all_reduce(refs)
    t0 = time.monotonic()
    group[0].inject_fault("illegal_address", stream="h2d")  # poisons member 0
    for f in fut.ranks:
        with pytest.raises(CollectiveError, match="generation|failed"):
            f.result(timeout=10)
    assert time.monotonic() - t0 < 2.5  # the generation watcher, not the 30 s deadline
    fut = comm.all_reduce(refs)  # the rebuild cannot include the poisoned member
    for f in fut.ranks:
        with pytest.raises(CollectiveError):
            f.result(timeout=10)


def test_async_error_fails_every_rank_fast(group, rng):
    from gpumsg.libs.nccl._sim import COMMS

    _, bufs = _bufs(group, rng, 4)
    comm = group.nccl(timeout=30.0)
    group[1].inject_fault("hang", seconds=1.0)  # keeps the batch outstanding
    COMMS[comm.comm_id].async_error = 6  # what ncclCommGetAsyncError would report
    t0 = time.monotonic()
    fut = comm.all_reduce(bufs)
    for f in fut.ranks:
        with pytest.raises(CollectiveError, match="asynchronous"):
            f.result(timeout=10)
    assert time.monotonic() - t0 < 1.0


RESTART = [("sim", 2), ("sim", 3), ("sim", 4), pytest.param(("cuda", 2), marks=pytest.mark.gpu)]


@pytest.mark.parametrize("where", RESTART, ids=lambda p: f"{p[0]}{p[1]}")
def test_restarted_member_rebuilds_the_communicator(where, rng):
    """Process isolation: the simulated members meet at the client's rendezvous server (GPUs:
    NCCL with a unique id); a member that dies fails the outstanding batch on every rank at
    once, comes back at a new generation, and the next collective (on a rebuilt communicator)
    computes the sum."""
    backend, n = where
    if backend == "cuda" and gpu_count() < n:
        pytest.skip(f"needs {n} GPUs")
    with gpumsg.open_devices(list(range(n)), backend=backend, isolation="process",
                             allow_fault_injection=True, standby=False) as g:
        comm = g.nccl(timeout=60.0)
        first = comm.comm_id
        assert not comm.refresh()  # nothing changed
        xs, bufs = _bufs(g, rng, 8)
        comm.all_reduce(bufs).result(60)
        _check_sum(g, bufs, xs)
        victim = n - 1
        gen = g[victim].generation
        if backend == "sim":  # an outstanding batch when the member dies
            g[0].inject_fault("hang", seconds=3.0)  # rank 0 holds the next batch back
            fut = comm.all_reduce(bufs)
            t0 = time.monotonic()
            g[victim].inject_fault("exit")
            for f in fut.ranks:
                with pytest.raises(CollectiveError):
                    f.result(timeout=30)
            assert time.monotonic() - t0 < 2.5  # at once, not at the 60 s deadline
        else:
            g[victim].inject_fault("exit")
        assert g[victim].watch_generation(gen).result(60) > gen
        xs2 = [rng.standard_normal(8).astype(np.float32) for _ in range(n)]
        bufs2 = [d.to_device(x) for d, x in zip(g, xs2)]
        for b in bufs2:
            b.result(60)
        comm.all_reduce(bufs2).result(60)
        assert comm.comm_id not in (0, first) and comm.rebuilds >= 2
        _check_sum(g, bufs2, xs2)


def test_a_build_does_not_block_reply_callbacks(rng):
    """Process isolation delivers a member's replies on one thread, in order: a rebuild waiting
    for CommInit must not hold what the callbacks of that member's earlier replies need (here
    rank 0's reply of an aborted batch arrives while the rebuild waits for rank 0's CommInit)."""
    with gpumsg.open_devices([0, 1], backend="sim", isolation="process",
                             allow_fault_injection=True) as g:
        comm = g.nccl(timeout=20.0)
        _, bufs = _bufs(g, rng, 8)
        gen = g[1].generation
        g[0].inject_fault("hang", seconds=1.5)  # rank 0's part of the next batch answers late
        fut = comm.all_reduce(bufs)
        g[1].inject_fault("exit")  # the batch fails at once; rank 0's part is still queued
        with pytest.raises(CollectiveError):
            fut.result(30)
        g[0].inject_fault("stall", seconds=2.5)  # rank 0's CommInit is answered after that reply
        assert g[1].watch_generation(gen).result(60) > gen
        t0 = time.monotonic()
        assert comm.refresh()
        assert time.monotonic() - t0 < 10.0
