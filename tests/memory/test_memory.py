"""Memory resources and adaptors: budget refusal and recovery, statistics, logging, the direct
resource, out-of-memory failing only its request, trimming."""

from __future__ import annotations

import csv
import gc

import numpy as np
import pytest

import gpumsg
from gpumsg import MemoryConfig

MiB = 1 << 20


def test_budget_refuses_then_recovers(backend) -> None:
    with gpumsg.open_device(0, backend=backend, memory=MemoryConfig(budget=8 * MiB)) as dev:
        assert dev.stats().result().budget_bytes == 8 * MiB
        a = dev.alloc((3 * MiB // 4,), np.float32).result()  # 3 MiB
        b = dev.alloc((3 * MiB // 4,), np.float32).result()  # 6 MiB
        with pytest.raises(gpumsg.OutOfBudget) as info:
            dev.alloc((3 * MiB // 4,), np.float32).result()
        err = info.value
        assert err.requested == 3 * MiB and err.limit == 8 * MiB and err.current >= 6 * MiB
        # the device keeps serving, and freeing makes room (the pool cache is trimmed on demand)
        x = np.arange(100.0)
        np.testing.assert_array_equal(dev.copy_to_host(dev.to_device(x)).result(), x)
        a.free().result()
        c = dev.alloc((3 * MiB // 4,), np.float32).result()
        assert c.raw_device_ptr()
        del b, c


def test_statistics_count_current_and_peak(dev) -> None:
    s0 = dev.stats().result().memory
    bufs = [dev.alloc((256,), np.float64).result() for _ in range(4)]
    s1 = dev.stats().result().memory
    assert s1.current_count == s0.current_count + 4
    assert s1.current_bytes == s0.current_bytes + 4 * 2048
    assert s1.peak_bytes >= s1.current_bytes
    for b in bufs:
        b.free()
    s2 = dev.stats().result().memory
    assert s2.current_count == s0.current_count
    assert s2.peak_count >= s0.current_count + 4
    assert s2.total_frees >= s0.total_frees + 4


def test_logging_writes_csv(backend, tmp_path) -> None:
    path = tmp_path / "mem.csv"
    with gpumsg.open_device(0, backend=backend, allow_fault_injection=True,
                            memory=MemoryConfig(log=str(path))) as dev:
        buf = dev.alloc((1000,), np.float32).result()
        buf.free().result()
        dev.inject_fault("oom", count=2).result()
        with pytest.raises(gpumsg.OutOfMemory):
            dev.alloc((10,), np.float32).result()
    rows = list(csv.DictReader(open(path)))
    ops = [r["op"] for r in rows]
    assert ops[:3] == ["alloc", "free", "fail"]
    assert rows[0]["nbytes"] == "4000" and rows[0]["ptr"] == rows[1]["ptr"]
    assert "OutOfMemory" in rows[2]["detail"]


def test_log_to_callable(backend) -> None:
    events = []
    with gpumsg.open_device(0, backend=backend, memory=MemoryConfig(log=events.append)) as dev:
        dev.alloc((10,), np.float32).result()
    assert events and events[0].op == "alloc" and events[0].nbytes == 40


@pytest.mark.parametrize("resource", ["pool", "direct"])
def test_resources_serve_copies_and_gemm(backend, rng, resource: str) -> None:
    with gpumsg.open_device(0, backend=backend, memory=resource) as dev:
        a = rng.standard_normal((32, 32)).astype(np.float32, order="F")
        da = dev.to_device(a)
        dc = dev.alloc((32, 32), np.float32)
        dev.sgemm(da, da, dc, 32, 32, 32)
        out = dev.copy_to_host(dc).result()
        np.testing.assert_allclose(out, a.astype(np.float64) @ a, rtol=1e-4, atol=1e-4)
        count = dev.stats().result().memory.current_count  # buffers and library workspaces
        for _ in range(20):  # frees are deferred behind their uses, then really happen
            dev.alloc((MiB,), np.uint8)
        dev.synchronize().result()
        gc.collect()
        dev.synchronize().result()
        assert dev.stats().result().memory.current_count == count


def test_oom_fails_only_that_request(dev) -> None:
    keep = dev.to_device(np.arange(64.0))
    dev.inject_fault("oom", count=2).result()
    with pytest.raises(gpumsg.OutOfMemory) as info:
        dev.alloc((64,), np.float64).result()
    assert info.value.requested == 512
    np.testing.assert_array_equal(dev.copy_to_host(keep).result(), np.arange(64.0))
    assert dev.alloc((64,), np.float64).result().raw_device_ptr()


def test_real_out_of_memory_is_typed(backend) -> None:
    if backend == "sim":
        from gpumsg.backends.sim import SimBackend

        backend = SimBackend(total_bytes=64 * MiB)
    with gpumsg.open_device(0, backend=backend) as dev:
        total = dev.stats().result().total_bytes
        # more than is free, less than the total (so it is not refused at the call site)
        bufs = [dev.alloc((total // 3,), np.uint8) for _ in range(4)]
        with pytest.raises(gpumsg.OutOfMemory):
            for b in bufs:
                b.result()
        del bufs, b
        gc.collect()
        x = np.arange(8.0)
        np.testing.assert_array_equal(dev.copy_to_host(dev.to_device(x)).result(), x)


def test_a_stream_ordered_free_is_reusable_by_the_next_allocation_at_once() -> None:
    """The simulator models stream-ordered reuse: memory freed on the compute stream serves
    the next allocation on it even while the stream is still busy with earlier work (as
    ``cuMemAllocFromPoolAsync`` may on a GPU), and that earlier work still sees the freed
    buffer's memory. Before, the allocation failed whenever the simulated stream lagged."""
    from gpumsg.backends.sim import SimBackend

    with gpumsg.open_device(0, backend=SimBackend(total_bytes=64 * MiB),
                            allow_fault_injection=True) as dev:
        big = dev.alloc((40 * MiB,), np.uint8).result()
        hang = dev.inject_fault("hang", seconds=0.5)  # the compute stream stays busy
        filled = dev.memset(big, 7)  # queued behind the hang: writes big after its free
        big.free()
        again = dev.alloc((40 * MiB,), np.uint8)
        assert again.result(timeout=30).nbytes == 40 * MiB
        assert not hang.done()  # served while the stream was still busy
        hang.result(timeout=30)
        assert filled.result(timeout=30) is None  # the memory was still there for it
        assert dev.stats().result().total_bytes == 64 * MiB


def test_trim_releases_pool_cache(dev) -> None:
    bufs = [dev.alloc((MiB,), np.float32).result() for _ in range(4)]
    for b in bufs:
        b.free()
    dev.synchronize().result()
    before = dev.stats().result()
    reserved_after = dev.trim().result()
    assert reserved_after <= before.pool_reserved_bytes
    assert reserved_after == dev.stats().result().pool_reserved_bytes


def test_budget_waits_for_deferred_frees_before_refusing(backend) -> None:
    # with the direct resource a free is only done once the work before it has run; a
    # refused-looking allocation trims (finishing those frees) and then succeeds
    cfg = MemoryConfig(resource="direct", budget=4 * MiB)
    with gpumsg.open_device(0, backend=backend, memory=cfg) as dev:
        for _ in range(10):
            buf = dev.alloc((3 * MiB // 4,), np.float32).result()
            dev.memset(buf, 1)
            buf.free()
            dev.synchronize().result()  # the freed buffer's work has run
        assert dev.stats().result().memory.current_count == 0


@pytest.mark.parametrize("keep", [False, True])
def test_a_refused_allocation_waits_for_the_answers_that_hold_dead_buffers(backend,
                                                                           keep) -> None:
    """A buffer nobody holds is still alive while its producer's reply waits to be answered
    (here behind a kernel that runs 0.3 s). An allocation the budget would refuse answers what
    is pending first, waiting for the work, and frees what died: with ``x`` dropped it gets
    ``x``'s memory; with ``x`` kept, the refusal stands."""
    import gpumsg.array_api as xpm

    n = 3 * MiB // 4  # 3 MiB of float32
    with gpumsg.open_device(0, backend=backend, memory=MemoryConfig(budget=8 * MiB),
                            allow_fault_injection=True) as dev, xpm.fusion(False):
        a = xpm.ones(n, dtype=xpm.float32, device=dev)
        float(a[0])  # a's fill has run
        for _ in range(3):
            slow = dev.inject_fault("hang", seconds=0.3)  # what follows waits on the stream
            x = xpm.exp(a)  # 6 MiB held; x's reply waits behind the slow kernel
            kept = x if keep else None
            del x
            if keep:
                with pytest.raises(gpumsg.OutOfBudget):
                    np.asarray(xpm.exp(a))
            else:
                y = xpm.negative(a)  # needs x's memory
                np.testing.assert_array_equal(np.asarray(y), -np.ones(n, np.float32))
                del y
            slow.result(timeout=30)
            if keep:
                np.testing.assert_allclose(np.asarray(kept), np.full(n, np.e, np.float32),
                                           rtol=1e-6)
            del kept
