"""Device groups: open/close together, placement from Stats, and collectives that fail with
CollectiveError on every rank instead of hanging (a member that never joins, a closed member),
with the communicator rebuilt for the next collective."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import CollectiveError


@pytest.fixture
def group3():
    g = gpumsg.open_devices([0, 1, 2], backend="sim", allow_fault_injection=True)
    yield g
    g.close()


def test_open_devices_and_stats(group3):
    assert len(group3) == 3 and [d.ordinal for d in group3] == [0, 1, 2]
    stats = group3.stats()
    assert [s.ordinal for s in stats] == [0, 1, 2]
    group3.close()
    assert all(d.closed for d in group3)


def test_least_loaded_avoids_a_busy_device(group3, rng):
    # devices 0 and 2 get a queue of work behind a stalled stream; 1 is idle
    for i in (0, 2):
        group3[i].inject_fault("hang", seconds=1.0)
        for _ in range(3):
            group3[i].to_device(rng.standard_normal(8).astype(np.float32))
    assert group3.least_loaded() is group3[1]
    out = group3.submit(lambda d: d.ordinal)
    assert out == 1


def test_member_that_never_joins_fails_every_rank(group3, rng):
    xs = [rng.standard_normal(16).astype(np.float32) for _ in group3]
    bufs = [d.to_device(x) for d, x in zip(group3, xs)]
    comm = group3.nccl(timeout=1.0)
    for b in bufs:
        b.result()
    first = comm.comm_id
    group3[2].inject_fault("hang", seconds=2.5)  # rank 2's stream is stuck: it never joins
    t0 = time.monotonic()
    fut = comm.all_reduce(bufs)
    for r, f in enumerate(fut.ranks):
        with pytest.raises(CollectiveError) as info:
            f.result(timeout=10)
        assert info.value.rank == r and info.value.comm == first
    with pytest.raises(CollectiveError):
        fut.result(timeout=1)
    assert time.monotonic() - t0 < 4.0
    # the communicator was aborted: the next collective builds a new one and works
    time.sleep(2.0)
    comm.timeout = 10.0
    comm.all_reduce(bufs).result(10)
    assert comm.comm_id != first
    ref = sum(x.astype(np.float64) for x in xs)
    for d, b in zip(group3, bufs):
        np.testing.assert_allclose(d.copy_to_host(b).result(), ref, rtol=1e-5)
    time.sleep(0.3)
    # no hung thread: the monitor leaves once nothing is outstanding
    assert not [t for t in threading.enumerate()
                if t.name.startswith("gpumsg-collective") and t.is_alive()]


def test_closed_member_fails_every_rank(group3, rng):
    bufs = [d.to_device(rng.standard_normal(4).astype(np.float32)) for d in group3]
    comm = group3.nccl(timeout=5.0)
    for b in bufs:
        b.result()
    refs = [b.ref for b in bufs]
    group3[1].close()
    with pytest.raises(gpumsg.GpuRefStale):  # its buffers are stale at the call site
        comm.all_reduce(bufs)
    fut = comm.all_reduce(refs)  # plain refs reach the closed member: every rank fails
    for f in fut.ranks:
        with pytest.raises(CollectiveError):
            f.result(timeout=10)


def test_communicator_build_times_out(group3):
    group3[1].inject_fault("hang", seconds=1.5)  # the device thread still serves CommInit...
    comm = group3.nccl(timeout=5.0)  # ...which needs no stream: the build succeeds
    assert comm.comm_id > 0
    comm.close()
    assert comm.comm_id == 0


def test_poisoned_member_fails_every_rank(group3, rng):
    bufs = [d.to_device(rng.standard_normal(4).astype(np.float32)) for d in group3]
    comm = group3.nccl(timeout=5.0)
    refs = [b.result().ref for b in bufs]
    group3[1].inject_fault("illegal_address")
    group3[1].watch_generation(0).result(10)  # poisoned: generation 1, refusing work
    fut = comm.all_reduce(refs)  # the rebuild cannot include the poisoned member
    for f in fut.ranks:
        with pytest.raises(CollectiveError):
            f.result(timeout=10)


def test_restarted_member_rebuilds_the_communicator():
    with gpumsg.open_devices([0, 1], backend="sim", isolation="process",
                             allow_fault_injection=True, standby=False) as g:
        comm = g.nccl(timeout=30.0)
        first = comm.comm_id
        assert not comm.refresh()  # nothing changed
        g[1].inject_fault("exit")
        g[1].watch_generation(0).result(60)
        assert comm.refresh() and comm.comm_id != first and comm.rebuilds == 2


def test_async_error_fails_every_rank_fast(group3, rng):
    from gpumsg.libs.nccl.sim import COMMS

    bufs = [d.to_device(rng.standard_normal(4).astype(np.float32)) for d in group3]
    comm = group3.nccl(timeout=30.0)
    for b in bufs:
        b.result()
    group3[1].inject_fault("hang", seconds=1.0)  # keeps the batch outstanding
    COMMS[comm.comm_id].async_error = 6  # what ncclCommGetAsyncError would report
    t0 = time.monotonic()
    fut = comm.all_reduce(bufs)
    for f in fut.ranks:
        with pytest.raises(CollectiveError, match="asynchronous"):
            f.result(timeout=10)
    assert time.monotonic() - t0 < 1.0
