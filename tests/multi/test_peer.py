"""Peer copies between devices (``Device.copy_peer``) and the group's topology: values on every
ordered pair of 2, 3 and 4 simulated devices, peer to peer and staged through the host (the
simulator's no-peer-access mode), ordering against earlier and later work on both devices
(streams held back by injected hangs), buffers dropped while a copy is in flight, a side that
does not arrive in time, bad arguments. Marked gpu: the same on two GPUs."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.sim import _device as simdev
from gpumsg.multi import PeerCopyError
from tests.conftest import gpu_count, random_array

GROUPS = [("sim", 2, True), ("sim", 3, True), ("sim", 4, True), ("sim", 2, False),
          ("sim", 3, False), ("sim", 4, False),
          pytest.param(("cuda", 2, True), marks=pytest.mark.gpu)]


@pytest.fixture(params=GROUPS, ids=lambda p: f"{p[0]}{p[1]}-{'p2p' if p[2] else 'staged'}")
def group(request, monkeypatch):
    backend, n, peer = request.param
    if backend == "cuda" and gpu_count() < 2:
        pytest.skip("needs two GPUs")
    monkeypatch.setattr(simdev, "PEER_ACCESS", peer)
    g = gpumsg.open_devices(list(range(n)), backend=backend, allow_fault_injection=True)
    yield g
    g.close()


def test_topology(group):
    n = len(group)
    topo = group.topology()
    assert topo is group.topology()  # discovered once
    peer = group[0].backend == "cuda" or simdev.PEER_ACCESS
    for i in range(n):
        assert topo.kind[i][i] == "self"
        for j in range(n):
            if i != j:
                if group[0].backend == "sim":
                    assert topo.can_access[i][j] is peer
                    assert topo.kind[i][j] == ("p2p" if peer else "host")
                assert (topo.perf_rank[i][j] >= 0) == topo.can_access[i][j]
    enabled = group.enable_peer_access()
    assert [[enabled[i][j] for j in range(n)] for i in range(n)] == \
        [[i == j or topo.can_access[i][j] for j in range(n)] for i in range(n)]
    if group[0].backend == "sim":
        for i, d in enumerate(group):
            want = {j for j in range(n) if j != i and topo.can_access[i][j]}
            assert d._worker.ctx.backend.peers_enabled == want
            granted = {j for j in range(n) if j != i and topo.can_access[j][i]}
            assert d._worker.ctx.backend.pool_peers == granted


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "i8", "c64"])
def test_copy_every_pair(group, rng, dtype):
    n = len(group)
    xs = [random_array(rng, (3, 5), dtype, order="F") for _ in range(n)]
    bufs = [d.to_device(x) for d, x in zip(group, xs)]
    for i in range(n):
        for j in range(n):
            y = group[j].copy_peer(src=bufs[i])  # dst=None: a new buffer on device j
            assert y.buffer.device is group[j]
            assert y.buffer.shape == (3, 5) and y.buffer.ref.order == "F"
            out = group[j].copy_to_host(y).result(30)
            np.testing.assert_array_equal(out, xs[i])


def test_copy_into_existing_with_offsets(group, rng):
    a, b = group[0], group[len(group) - 1]
    x = rng.standard_normal(64).astype(np.float32)
    y0 = rng.standard_normal(64).astype(np.float32)
    src = a.to_device(x)
    dst = b.to_device(y0)
    assert b.copy_peer(dst, src, nbytes=16 * 4, dst_offset=8 * 4, src_offset=32 * 4).result(30) \
        is None
    want = y0.copy()
    want[8:24] = x[32:48]
    np.testing.assert_array_equal(b.copy_to_host(dst).result(30), want)


def test_ordered_after_the_sources_last_write(group, rng):
    a, b = group[0], group[1]
    old, new = rng.standard_normal(1000).astype(np.float32), \
        rng.standard_normal(1000).astype(np.float32)
    x = a.to_device(old)
    x.result(30)
    a.inject_fault("hang", stream="h2d", seconds=0.5)
    a.copy_from_host(x, new)  # queued behind the hang on the source's upload stream
    y = b.copy_peer(src=x)
    np.testing.assert_array_equal(b.copy_to_host(y).result(30), new)


def test_destination_readers_and_writers_are_ordered(group, rng):
    a, b = group[0], group[1]
    old, new = rng.standard_normal(500).astype(np.float32), \
        rng.standard_normal(500).astype(np.float32)
    x = a.to_device(new)
    y = b.to_device(old)
    y.result(30)
    b.inject_fault("hang", stream="d2h", seconds=0.5)
    before = b.copy_to_host(y)  # an earlier read of dst, held back on the download stream
    a.inject_fault("hang", stream="d2h", seconds=0.3)  # holds the copy back on the source
    b.copy_peer(y, x)
    z = b.alloc((500,), np.float32)
    b.copy(z, y)  # a later read of dst on the destination's compute stream
    np.testing.assert_array_equal(before.result(30), old)
    np.testing.assert_array_equal(b.copy_to_host(z).result(30), new)


def test_later_writes_of_the_source_wait_for_the_copy(group, rng):
    a, b = group[0], group[1]
    data = rng.standard_normal(4096).astype(np.float32)
    x = a.to_device(data)
    x.result(30)
    a.inject_fault("hang", stream="d2h", seconds=0.5)  # the copy reads x late
    y = b.copy_peer(src=x)
    a.memset(x, 0)  # a later write of the source on another stream
    np.testing.assert_array_equal(b.copy_to_host(y).result(30), data)
    assert not a.copy_to_host(x).result(30).any()


def test_buffers_dropped_while_the_copy_is_in_flight(group, rng):
    a, b = group[0], group[1]
    data = rng.standard_normal(1 << 14).astype(np.float32)
    x = a.to_device(data)
    x.result(30)
    a.inject_fault("hang", stream="d2h", seconds=0.5)
    y = b.copy_peer(src=x)
    del x
    gc.collect()  # the Free is posted now; the copy still reads the memory
    reuse = a.alloc((1 << 14,), np.float32)
    a.memset(reuse, 0)  # would overwrite the freed block if the free did not wait
    np.testing.assert_array_equal(b.copy_to_host(y).result(30), data)


def test_a_side_that_does_not_arrive_fails_in_time(group, rng):
    a, b = group[0], group[1]
    data = rng.standard_normal(64).astype(np.float32)
    x = a.to_device(data)
    x.result(30)
    group.topology()  # discovered once, before the stall (copy_peer asks it on first use)
    a.inject_fault("stall", seconds=1.5)  # the source's device thread is stuck
    t0 = time.monotonic()
    y = b.copy_peer(src=x, timeout=0.3)
    with pytest.raises(PeerCopyError):
        y.result(30)
    assert time.monotonic() - t0 < 1.4 or b.backend == "cuda"
    with pytest.raises(gpumsg.DependencyFailed):  # dst holds no valid contents
        b.copy_to_host(y.buffer).result(30)
    # both devices keep serving: the next copy works
    z = b.copy_peer(src=x, timeout=30)
    np.testing.assert_array_equal(b.copy_to_host(z).result(30), data)


def test_bad_arguments(group, rng):
    a, b = group[0], group[1]
    x = a.to_device(rng.standard_normal(8).astype(np.float32))
    y = b.alloc((4,), np.float32)
    with pytest.raises(gpumsg.InvalidMessage, match="src"):
        b.copy_peer(y, None)
    with pytest.raises(gpumsg.InvalidMessage, match="src"):
        b.copy_peer(y, np.zeros(4))
    with pytest.raises(gpumsg.InvalidMessage, match="dst"):
        b.copy_peer(x, y)  # dst on another device
    with pytest.raises(gpumsg.InvalidMessage, match="dst"):
        b.copy_peer(y, x)  # 32 bytes do not fit in 16
    with pytest.raises(gpumsg.InvalidMessage, match="src"):
        b.copy_peer(y, x, nbytes=16, src_offset=24)
    with pytest.raises(gpumsg.InvalidMessage, match="nbytes"):
        b.copy_peer(y, x, nbytes=0)
    with pytest.raises(gpumsg.InvalidMessage, match="timeout"):
        b.copy_peer(y, x, nbytes=16, timeout=0)
    freed = a.to_device(np.ones(4, np.float32))
    freed.result(30).free()
    with pytest.raises(gpumsg.GpuRefStale):
        b.copy_peer(y, freed)
    assert b.copy_peer(y, x, nbytes=16).result(30) is None  # still serving
    np.testing.assert_array_equal(b.copy_to_host(y).result(30),
                                  a.copy_to_host(x).result(30)[:4])


def test_a_repeated_copy_is_checked_as_the_first(group, rng):
    """A copy that repeats the last one into the same buffer (same source, arguments and
    their types) skips its checks and moves the source's current bytes; any change is checked
    again (an offset that no longer fits, a bool where an int passed, a freed buffer)."""
    a, b = group[0], group[len(group) - 1]
    src = a.to_device(rng.standard_normal(16).astype(np.float32))
    dst = b.to_device(rng.standard_normal(16).astype(np.float32))
    for _ in range(3):
        x = rng.standard_normal(16).astype(np.float32)
        a.copy_from_host(src, x)
        assert b.copy_peer(dst, src, nbytes=32, dst_offset=32).result(30) is None
        np.testing.assert_array_equal(b.copy_to_host(dst).result(30)[8:16], x[:8])
    with pytest.raises(gpumsg.InvalidMessage, match="dst"):
        b.copy_peer(dst, src, nbytes=32, dst_offset=40)  # 40 + 32 bytes do not fit in 64
    b.copy_peer(dst, src, nbytes=32, dst_offset=32).result(30)
    with pytest.raises(gpumsg.InvalidMessage, match="dst_offset"):
        b.copy_peer(dst, src, nbytes=32, dst_offset=True)
    b.copy_peer(dst, src, nbytes=32, dst_offset=32).result(30)
    b.free(dst)
    with pytest.raises(gpumsg.GpuRefStale):
        b.copy_peer(dst, src, nbytes=32, dst_offset=32)


def test_process_isolation_is_refused_at_the_call_site(rng):
    with gpumsg.open_device(0, backend="sim") as a, \
            gpumsg.open_device(1, backend="sim", isolation="process", standby=False) as b:
        x = a.to_device(rng.standard_normal(4).astype(np.float32))
        with pytest.raises(gpumsg.InvalidMessage, match="thread isolation"):
            b.copy_peer(src=x)


def test_crossing_copies_from_many_threads_do_not_deadlock(group, rng):
    from concurrent.futures import ThreadPoolExecutor

    n = len(group)
    xs = [rng.standard_normal(256).astype(np.float32) for _ in range(n)]
    bufs = [d.to_device(x) for d, x in zip(group, xs)]

    def one(k: int):
        i, j = k % n, (k * 7 + 1) % n
        return j, i, group[j].copy_peer(src=bufs[i], timeout=20)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(40)))
    for j, i, y in results:
        np.testing.assert_array_equal(group[j].copy_to_host(y).result(30), xs[i])


def test_copies_and_collectives_from_many_threads(group, rng):
    """Peer copies and all-reduces issued concurrently from several threads: both rendezvous
    kinds are posted in one global order, so none waits for a peer stuck behind it."""
    from concurrent.futures import ThreadPoolExecutor

    n = len(group)
    comm = group.nccl(timeout=30)
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(n)]
    srcs = [d.to_device(x) for d, x in zip(group, xs)]
    sums = [[d.to_device(np.full(8, float(r + 1), np.float32)) for r, d in enumerate(group)]
            for _ in range(6)]

    def work(k: int):
        if k % 2:
            return ("reduce", k // 2, comm.all_reduce(sums[k // 2]))
        i, j = k % n, (k // 2 + 1) % n
        return ("copy", (i, j), group[j].copy_peer(src=srcs[i], timeout=20))

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(work, range(12)))
    total = n * (n + 1) / 2
    for kind, key, fut in results:
        if kind == "copy":
            i, j = key
            np.testing.assert_array_equal(group[j].copy_to_host(fut).result(30), xs[i])
        else:
            fut.result(30)
            for r, d in enumerate(group):
                np.testing.assert_array_equal(d.copy_to_host(sums[key][r]).result(30),
                                              np.full(8, total, np.float32))
