"""Stats, snapshots, generation watching and trace hooks."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg


def test_stats_are_real(dev) -> None:
    s0 = dev.stats().result()
    assert isinstance(s0, gpumsg.DeviceLoad)
    assert s0.name and s0.total_bytes > 0 and 0 <= s0.free_bytes <= s0.total_bytes
    assert s0.backend == dev.backend and s0.ordinal == 0 and s0.generation == 0
    assert len(s0.compute_capability) == 2 and s0.compute_capability[0] >= 1
    assert s0.queue_depth == 0 and s0.ops_in_flight == 0  # nothing else was sent yet
    buf = dev.alloc((1 << 20,), np.float32)
    dev.memset(buf, 3).result()
    s1 = dev.stats().result()
    assert s1.ops_completed > s0.ops_completed
    assert s1.pool_used_bytes >= 4 << 20
    assert s1.pool_reserved_bytes >= s1.pool_used_bytes
    assert s1.memory.current_bytes >= 4 << 20


def test_ops_in_flight_counts_pending_work(dev) -> None:
    dev.inject_fault("hang", seconds=0.5)
    buf = dev.alloc((16,), np.float32)
    for _ in range(10):
        dev.memset(buf, 1)
    load = dev.stats().result()
    assert load.ops_in_flight >= 10
    dev.synchronize().result()
    # batches are counted before they are answered: the waiter finds none in flight at once
    assert dev.stats().result().ops_in_flight == 0


def test_snapshots(dev) -> None:
    ctx = dev.snapshot_context().result()
    streams = {s: dev.snapshot_stream(s).result() for s in ("compute", "h2d", "d2h")}
    assert isinstance(ctx, int) and ctx
    assert len(set(streams.values())) == 3 and all(streams.values())
    a = dev.alloc((4, 4), np.float32)
    a.result()  # allocated before the GEMM is sent
    dev.sgemm(a, dev.alloc((4, 4)), dev.alloc((4, 4)), 4, 4, 4).result()
    children = dev.snapshot_children().result()
    assert children["context"] == ctx
    assert children["stream.compute"] == streams["compute"]
    assert children["cublas"] and children["mempool"]  # Sgemm runs cublasSgemm_v2


def test_libraries_open_when_asked(dev) -> None:
    assert dev.open_libraries().result() == ()
    assert dev.open_libraries("cufft", "cublas").result() == ("cufft", "cublas")
    a = dev.to_device(np.ones((4, 4), np.float32, order="F"))
    dev.sgemm(a, a, dev.alloc((4, 4), np.float32), 4, 4, 4).result()
    assert dev.open_libraries().result() == ("cufft", "cublas")  # cuBLAS was open already
    assert set(dev.snapshot_children().result()) >= {"cufft", "cublas"}
    with pytest.raises(gpumsg.InvalidMessage, match="no library 'cuda'"):
        dev.open_libraries("cuda")
    with pytest.raises(gpumsg.InvalidMessage, match="names"):
        gpumsg.messages.device.OpenLibraries(["cublas"])  # a list, not a tuple
    assert dev.stats().result().generation == 0  # refused at the call: the device serves on


def test_cuda_array_interface(dev) -> None:
    buf = dev.alloc((3, 4), np.float64, order="F").result()
    cai = buf.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f8"
    assert cai["strides"] == (8, 24) and cai["data"][0] == buf.raw_device_ptr()
    assert cai["stream"] == dev.snapshot_stream().result()


def test_trace_hooks_see_every_operation(backend) -> None:
    trace = gpumsg.RecordingTrace()
    with gpumsg.open_device(0, backend=backend, trace=trace) as dev:
        a = dev.to_device(np.ones((8, 8), np.float32))
        c = dev.alloc((8, 8), np.float32)
        dev.sgemm(a, a, c, 8, 8, 8).result()
    hooks = [(h, op.name) for h, op, _ in trace.events]
    i = hooks.index(("before_enqueue", "Sgemm"))
    assert hooks[i + 1] == ("after_enqueue", "Sgemm")
    done = [(op, lat) for op, lat in trace.completed() if op.name == "Sgemm"]
    assert len(done) == 1 and done[0][1] > 0 and done[0][0].stream == "compute"
    assert ("before_complete", "Sgemm") in hooks
    assert {op.name for op, _ in trace.completed()} >= {"CopyFromHost", "Sgemm"}


def test_nvtx_trace(backend) -> None:
    pytest.importorskip("nvtx")
    inner = gpumsg.RecordingTrace()
    with gpumsg.open_device(0, backend=backend, trace=gpumsg.NvtxTrace(inner)) as dev:
        dev.memset(dev.alloc((8,), np.uint8), 1).result()
    assert any(op.name == "Memset" for op, _ in inner.completed())
