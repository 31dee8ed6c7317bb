"""GraphReplays (backends/cuda/replays.py), the CUDA-graph replays of repeated library calls,
against a stand-in driver: when a call is captured, launched or issued as usual. The libraries'
own tests check on the GPU that replayed calls compute what the calls would."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.cuda._replays import GraphReplays, direct, direct_bound, enabled
from tests.conftest import need_backend
from tests.libs.harness import FakeGraphDriver


class _Calls:
    """A library call that records whether it ran under capture, and can be made to fail."""

    def __init__(self, cu: FakeGraphDriver) -> None:
        self.cu, self.under_capture, self.fail = cu, [], False

    def __call__(self, stream, *args) -> None:
        self.under_capture.append(self.cu.capturing)
        if self.fail:
            raise ValueError("bad argument")


def test_second_call_is_captured_then_launched_alone() -> None:
    cu = FakeGraphDriver()
    r, call = GraphReplays(cu, capacity=2), _Calls(cu)
    for _ in range(4):
        r.call("gemm", call, 7, 1, 2.0, "N")
    assert call.under_capture == [False, True]  # as usual, captured, then launches only
    assert cu.launched == [(("exec", 1), 7)] * 3
    assert r.info() == {"graphs": 1, "captures": 1, "launches": 3, "refused": "",
                        "with_memory_nodes": 0}
    r.call("gemm", call, 8, 1, 2.0, "N")  # another stream, tag or argument: a key of its own
    r.call("gemv", call, 7, 1, 2.0, "N")
    r.call("gemm", call, 7, 1, 3.0, "N")
    assert call.under_capture[-3:] == [False] * 3 and len(cu.launched) == 3


def test_a_bound_launcher_shares_the_key_of_its_call() -> None:
    """``bound`` builds the key once: its launcher runs, captures and launches as ``call``
    would, under the same key (a call with the same arguments finds the same graph); while a
    ``dev.graph`` records, it issues as usual. ``direct_bound`` (replays off) just calls."""
    cu = FakeGraphDriver()
    recording = [False]
    r, call = GraphReplays(cu, recording=lambda: recording[0]), _Calls(cu)
    launch = r.bound("gemm", call, 7, 1, 2.0, "N")
    launch(7)
    launch(7)
    assert call.under_capture == [False, True] and r.captures == 1
    r.call("gemm", call, 7, 1, 2.0, "N")  # the same key: the same graph
    launch(7)
    assert r.captures == 1 and r.launches == 3 and cu.launched == [(("exec", 1), 7)] * 3
    recording[0] = True
    launch(7)
    assert call.under_capture[-1] is False and r.launches == 3
    seen = []
    direct_bound("gemm", lambda s, *a: seen.append((s, a)), 3, 1, 2)(3)
    assert seen == [(3, (1, 2))]


def test_a_failing_call_is_not_captured_next_time() -> None:
    """Only a call that succeeded is captured: a bad call fails as usual every time and does not
    turn the replays off for the good ones."""
    cu = FakeGraphDriver()
    r, call = GraphReplays(cu), _Calls(cu)
    call.fail = True
    for _ in range(3):
        with pytest.raises(ValueError):
            r.call("gemm", call, 1, 5)
    assert call.under_capture == [False] * 3 and r.captures == 0 and r.reason == ""
    call.fail = False
    for _ in range(3):
        r.call("gemm", call, 1, 5)
    assert r.captures == 1 and r.launches == 2


def test_captures_holding_memory_nodes_are_counted() -> None:
    """A graph that allocates or frees memory does so at every launch: ``info`` counts the
    captures that hold such nodes (a library that made its own workspace under capture)."""
    from gpumsg.backends.cuda._replays import node_types

    cu = FakeGraphDriver()
    r, call = GraphReplays(cu), _Calls(cu)
    r.call("gemm", call, 7, 1)
    r.call("gemm", call, 7, 1)
    assert r.info()["captures"] == 1 and r.info()["with_memory_nodes"] == 0
    cu.node_types = ["CU_GRAPH_NODE_TYPE_MEM_ALLOC", "CU_GRAPH_NODE_TYPE_MEMSET",
                     "CU_GRAPH_NODE_TYPE_KERNEL", "CU_GRAPH_NODE_TYPE_MEM_FREE"]
    assert node_types(cu, 1) == cu.node_types
    r.call("gemm", call, 7, 2)
    r.call("gemm", call, 7, 2)
    r.call("gemm", call, 7, 2)
    assert r.info()["captures"] == 2 and r.info()["with_memory_nodes"] == 1
    assert r.launches == 3  # a graph with memory nodes is still replayed: it computes right


def test_refused_capture_falls_back_for_good() -> None:
    cu = FakeGraphDriver()
    cu.refuse = True
    r, call = GraphReplays(cu), _Calls(cu)
    for _ in range(4):
        r.call("gemm", call, 1, 5)
    # as usual, captured (refused) then as usual right after, as usual: 4 + 1 captured
    assert call.under_capture == [False, True, False, False, False]
    assert "cuStreamEndCapture" in r.reason and cu.launched == []


def test_recording_a_dev_graph_issues_as_usual() -> None:
    """While the device records a ``dev.graph`` the call itself must be recorded: no capture of
    its own inside that capture, no launch."""
    cu = FakeGraphDriver()
    recording = [True]
    call = _Calls(cu)
    r = GraphReplays(cu, recording=lambda: recording[0])
    for _ in range(3):
        r.call("gemm", call, 1, 5)
    assert call.under_capture == [False] * 3 and r.captures == 0 and cu.launched == []
    recording[0] = False
    for _ in range(3):
        r.call("gemm", call, 1, 5)
    assert r.captures == 1


def test_capacity_destroys_least_recently_launched_and_close_destroys_the_rest() -> None:
    cu = FakeGraphDriver()
    call = _Calls(cu)
    r = GraphReplays(cu, capacity=2)
    for key, times in ((1, 2), (2, 2), (1, 1), (3, 2)):  # 1 is launched again: 2 is the oldest
        for _ in range(times):
            r.call("gemm", call, 0, key)
    assert r.captures == 3 and r.launches == 4
    assert cu.destroyed == [("exec", 2)]
    r.close()
    assert sorted(cu.destroyed) == [("exec", 1), ("exec", 2), ("exec", 3)] and not r.execs


def test_more_recurring_calls_than_graphs_grow_the_capacity_instead_of_recapturing() -> None:
    """Ten calls that recur in turn through replays of capacity 4: each graph would be evicted
    before its call came again, so every other call of each would be a capture. A key
    captured again after its eviction doubles the capacity (4 -> 8 -> 16), after which every
    call launches its graph; past ``max_capacity`` capturing stops instead."""
    cu = FakeGraphDriver()
    call = _Calls(cu)
    r = GraphReplays(cu, capacity=4)
    for _ in range(30):
        for key in range(10):
            r.call("gemm", call, 0, key)
    assert r.capacity == 16 and r.reason == ""
    assert r.captures <= 30  # ten, and a few more while the capacity grew (300 calls in all)
    before = (r.captures, r.launches)
    for key in range(10):
        r.call("gemm", call, 0, key)
    assert r.captures == before[0] and r.launches == before[1] + 10  # launches only now
    capped = GraphReplays(FakeGraphDriver(), capacity=4, max_capacity=8)
    for _ in range(30):
        for key in range(10):
            capped.call("gemm", _Calls(cu), 0, key)
    assert capped.capacity == 8 and "recur" in capped.reason
    assert capped.captures <= 20  # no more captures once it stopped
    one_off = GraphReplays(FakeGraphDriver(), capacity=4)
    for key in range(100):  # calls made twice each and never again: no growth
        for _ in range(2):
            one_off.call("gemm", call, 0, key)
    assert one_off.capacity == 4 and one_off.reason == ""


def test_direct_and_the_environment_switch(monkeypatch) -> None:
    seen = []
    direct("gemm", lambda s, *a: seen.append((s, a)), 3, 1, 2)
    assert seen == [(3, (1, 2))]
    monkeypatch.setenv("GPUMSG_FFT_REPLAY", "off")
    assert not enabled("GPUMSG_FFT_REPLAY")
    monkeypatch.setenv("GPUMSG_FFT_REPLAY", "1")
    monkeypatch.delenv("GPUMSG_SPARSE_REPLAY", raising=False)
    assert enabled("GPUMSG_FFT_REPLAY") and enabled("GPUMSG_SPARSE_REPLAY")


def test_a_raw_launcher_takes_the_handles_as_ints_and_its_errors_raise() -> None:
    """``raw_launch`` (the ctypes cuGraphLaunch) replaces the binding's launch: it gets the
    executable graph and the stream as ints; a nonzero CUresult raises CudaError."""

    class IntHandles(FakeGraphDriver):
        def cuGraphInstantiate(self, graph, flags):
            return 0, 1000 + graph

    cu, raw = IntHandles(), []
    status = [0]

    def launch(exec_: int, stream: int) -> int:
        raw.append((exec_, stream))
        return status[0]

    r, call = GraphReplays(cu, raw_launch=launch), _Calls(cu)
    for _ in range(3):
        r.call("gemm", call, 7, 1)
    assert raw == [(1001, 7)] * 2 and cu.launched == [] and r.launches == 2
    status[0] = 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(gpumsg.CudaError, match="cuGraphLaunch"):
        r.call("gemm", call, 7, 1)


def test_a_launch_holds_the_gil_only_while_little_is_in_flight() -> None:
    """The default launcher (GPUMSG_RAW_LAUNCH=hold) calls the GIL-holding cuGraphLaunch while
    the stream has fewer than the bound in flight, the releasing one from the bound on."""
    from gpumsg.backends.cuda._driver import HOLD_IN_FLIGHT, guarded_launch

    calls, depth = [], [0]
    hold = lambda e, s: calls.append(("hold", e, s)) or 0  # noqa: E731
    release = lambda e, s: calls.append(("release", e, s)) or 0  # noqa: E731
    launch = guarded_launch(release, hold, lambda: depth[0])
    for d in (0, HOLD_IN_FLIGHT - 1, HOLD_IN_FLIGHT, 10 * HOLD_IN_FLIGHT, 3):
        depth[0] = d
        assert launch(11, 22) == 0
    assert [c[0] for c in calls] == ["hold", "hold", "release", "release", "hold"]
    assert {c[1:] for c in calls} == {(11, 22)}
    # release alone without a holding call or a depth; nothing at all without either call
    assert guarded_launch(release, None, lambda: 0) is release
    assert guarded_launch(release, hold, None) is release
    assert guarded_launch(None, hold, lambda: 0) is None


@pytest.mark.parametrize("mode", ["hold", "release", "0", ""])
def test_the_launch_mode_comes_from_the_environment(monkeypatch, mode: str) -> None:
    """GPUMSG_RAW_LAUNCH: hold (default), release or 0; another value is refused by name. On a
    machine without libcuda every mode answers None (the binding's launch)."""
    from gpumsg.backends.cuda import _driver as driver

    monkeypatch.setattr(driver, "_RAW_LAUNCH", [])
    monkeypatch.setenv("GPUMSG_RAW_LAUNCH", mode)
    launch = driver.raw_graph_launch(lambda: 0)
    try:
        ctypes.CDLL("libcuda.so.1")
        found = True
    except OSError:
        found = False
    if mode == "0" or not found:
        assert launch is None
    else:
        assert callable(launch)
    monkeypatch.setattr(driver, "_RAW_LAUNCH", [])
    monkeypatch.setenv("GPUMSG_RAW_LAUNCH", "sometimes")
    with pytest.raises(gpumsg.InvalidMessage, match="GPUMSG_RAW_LAUNCH"):
        driver.raw_graph_launch()


@pytest.mark.gpu
def test_launches_behind_a_hung_kernel_leave_the_interpreter_running() -> None:
    """Replayed GEMMs posted behind a kernel that spins for 2 s: once the GPU's queue is full a
    launch waits in the driver. Past HOLD_IN_FLIGHT operations in flight the launch releases
    the GIL, so another Python thread keeps running meanwhile (measured on the H100 with every
    launch holding the GIL: the interpreter froze for 2.98 s behind a 3 s hang,
    tools/hang_launch_check.py); every GEMM is answered, and right."""
    need_backend("cuda")
    rng = np.random.default_rng()
    ah, bh = (rng.standard_normal((64, 64), dtype=np.float32) for _ in range(2))
    with gpumsg.open_device(0, backend="cuda", allow_fault_injection=True) as dev:
        a, b = dev.to_device(np.asfortranarray(ah)), dev.to_device(np.asfortranarray(bh))
        c = dev.alloc((64, 64), np.float32)
        for _ in range(3):  # run, capture, launch: the rest are replays
            dev.sgemm(a, b, c, 64, 64, 64).result()
        gap, stop = [0.0], threading.Event()

        def tick() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                time.sleep(0.001)
                now = time.perf_counter()
                gap[0] = max(gap[0], now - last)
                last = now

        ticker = threading.Thread(target=tick)
        ticker.start()
        try:
            hang = dev.inject_fault("hang", seconds=2.0)
            futures = [dev.sgemm(a, b, c, 64, 64, 64) for _ in range(30000)]
            for f in futures[::1000] + [futures[-1]]:
                f.result(timeout=120)
            hang.result(timeout=120)
        finally:
            stop.set()
            ticker.join()
        assert gap[0] < 0.5, f"the interpreter stood still for {gap[0]:.2f} s"
        ref = ah.astype(np.float64) @ bh.astype(np.float64)
        assert np.abs(dev.copy_to_host(c).result() - ref).max() < 1e-4 * np.abs(ref).max()
        assert dev.cublas.replay_info().result()["cublas"]["launches"] >= 30000


class _RecordingCublas:
    """A stand-in cuBLAS library: every function records (name, args) and succeeds."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        def fn(*args):
            self.calls.append((name, *args))
            return 0
        return fn


def test_the_cublas_workspace_is_set_again_after_every_stream(monkeypatch) -> None:
    """cublasSetStream resets cuBLAS's workspace to its own pool (cuBLAS documentation), so the
    handle sets ours again after each, on the GEMM handle and on the reduction handle: without
    it a call captured for a replay allocates a workspace inside its graph (the GPU test below
    sees that graph)."""
    from types import SimpleNamespace

    from gpumsg.libs.cublas._bindings import WORKSPACE_BYTES
    from gpumsg.libs.cublas._handle import CublasHandle

    monkeypatch.setenv("GPUMSG_BLAS_REPLAY", "0")  # no driver here

    class Stream:
        def __int__(self) -> int:
            return 0x77

    lib = _RecordingCublas()
    ctx = SimpleNamespace(memory=SimpleNamespace(allocate=lambda n, s: 0x5000),
                          compute=SimpleNamespace(obj=Stream()))
    h = CublasHandle(ctx, lib)
    assert h._ws == 0x5000
    made = len(lib.calls)
    s1 = Stream()
    h.bind(s1)
    assert [c[0] for c in lib.calls[made:]] == ["cublasSetStream_v2", "cublasSetWorkspace_v2"]
    assert lib.calls[-1][1:] == (h.raw_handle, 0x5000, WORKSPACE_BYTES)
    h.bind(s1)  # the same stream: nothing to set
    assert len(lib.calls) == made + 2
    h.dot(s1, "f32", 8, 0x100, 1, 0x200, 1, False, 0x300)
    names = [c[0] for c in lib.calls[made + 2:]]
    assert names[names.index("cublasSetStream_v2") + 1] == "cublasSetWorkspace_v2"
    assert names[-1] == "cublasSdot_v2"


@pytest.mark.gpu
def test_replayed_cublas_graphs_allocate_no_memory() -> None:
    """A strided-batched 512 x 128^3 bf16 GEMM and a 1M-element dot, each repeated until
    replayed: their captured graphs hold the kernels (and the GEMM's memset) but no memory
    alloc or free node, which cuBLAS puts in when it makes its own workspace under capture (it
    did for both before the handle set its workspace after cublasSetStream). Both
    results are checked."""
    need_backend("cuda")
    batch, s, n = 512, 128, 1 << 20
    rng = np.random.default_rng()
    host = rng.standard_normal((batch, s, s), dtype=np.float32).astype(gpumsg.as_dtype("bf16"))
    xh = rng.standard_normal(n, dtype=np.float32)
    with gpumsg.open_device(0, backend="cuda") as dev:
        a = dev.to_device(host).result()
        c = dev.alloc((batch, s, s), "bf16", order="C").result()
        x = dev.to_device(xh).result()
        for _ in range(3):  # as usual, captured, replayed
            dev.cublas.gemm_strided_batched(a, a, c, s, s, s, batch, s * s, s * s, s * s)
            dot = dev.cublas.dot(x, x).result()
        info = dev.cublas.replay_info().result()["cublas"]
        # column-major C = A A on row-major storage: c = a @ a per matrix
        ref = host[:2].astype(np.float64) @ host[:2].astype(np.float64)
        got = np.asarray(dev.copy_to_host(c).result()[:2], np.float64)
    for kind in (info, info["reductions"]):
        assert kind["captures"] >= 1 and kind["launches"] >= 1, info
        assert kind["with_memory_nodes"] == 0, info
    assert np.linalg.norm(got - ref) <= 2e-2 * np.linalg.norm(ref)
    want = float(np.dot(xh.astype(np.float64), xh))
    assert abs(dot - want) <= 1e-5 * want


@pytest.mark.gpu
def test_bursts_of_reductions_keep_their_graphs() -> None:
    """Bursts of 200 dots of one pair of vectors, each burst held in flight behind a hung
    kernel, spread over more than 64 result slots, so more than 64 graphs (each copies into
    its own slot). Slots come back last-given first, so every burst reuses the slots of the
    ones before: every graph is kept and none is captured twice (with room for 64 graphs,
    bursts of more than 64 evicted graphs and captured them again at every burst). Every
    result is checked."""
    need_backend("cuda")
    n, burst = 1 << 16, 200
    xh = np.random.default_rng().standard_normal(n, dtype=np.float32)
    want = float(np.dot(xh.astype(np.float64), xh))
    with gpumsg.open_device(0, backend="cuda", allow_fault_injection=True) as dev:
        x = dev.to_device(xh).result()
        # the handles and the fault's kernel made first: making a handle may wait for the GPU
        dev.inject_fault("hang", seconds=0.01).result()
        assert abs(dev.cublas.dot(x, x).result() - want) <= 1e-5 * want
        for _ in range(4):
            dev.inject_fault("hang", seconds=0.5)
            dots = [dev.cublas.dot(x, x) for _ in range(burst)]
            assert all(abs(d.result(timeout=30) - want) <= 1e-5 * want for d in dots)
        red = dev.cublas.replay_info().result()["cublas"]["reductions"]
    assert red["graphs"] > 64 and red["launches"] > burst, red
    assert red["captures"] == red["graphs"], red  # none evicted, none captured again


@pytest.mark.gpu
def test_every_replay_switch_turns_its_replays_off(monkeypatch) -> None:
    """GPUMSG_FFT_REPLAY, GPUMSG_SPARSE_REPLAY, GPUMSG_BLAS_LEVEL_REPLAY and
    GPUMSG_DRIVER_REPLAY at 0: repeated FFT executions, SpMVs, axpys and copies run as usual
    (nothing captured) and stay right; the GEMM replays, switched apart, still capture."""
    import scipy.sparse as sp

    need_backend("cuda")
    for name in ("GPUMSG_FFT_REPLAY", "GPUMSG_SPARSE_REPLAY", "GPUMSG_BLAS_LEVEL_REPLAY",
                 "GPUMSG_DRIVER_REPLAY"):
        monkeypatch.setenv(name, "0")
    rng = np.random.default_rng()
    with gpumsg.open_device(0, backend="cuda") as dev:
        xh = (rng.standard_normal((2, 64)) + 1j * rng.standard_normal((2, 64))).astype(
            np.complex64)
        x = dev.to_device(xh).result()
        out = dev.alloc((2, 64), np.complex64, order="C").result()
        plan = dev.cufft.plan((64,), 2, "c2c", "c64")
        a = sp.random(50, 40, density=0.2, format="csr", dtype=np.float32, random_state=1)
        m = dev.cusparse.csr(a)
        vh, wh = rng.standard_normal(40).astype(np.float32), rng.standard_normal(50).astype(
            np.float32)
        v, y = dev.to_device(vh).result(), dev.alloc(50, np.float32).result()
        w, z = dev.to_device(wh).result(), dev.alloc(50, np.float32).result()
        for _ in range(3):
            dev.cufft.execute(plan, x, out)
            dev.cusparse.spmv(m, v, y)
            dev.cublas.axpy(w, y, 0.5)  # y = A v + 0.5 w, each round
            dev.copy(z, y)
        dev.synchronize().result()
        ref_fft = np.fft.fft(xh.astype(np.complex128), axis=-1)
        assert np.abs(dev.copy_to_host(out).result().reshape(2, 64) - ref_fft).max() < 1e-4 * \
            np.abs(ref_fft).max()
        ref_y = a.astype(np.float64) @ vh + 0.5 * wh
        np.testing.assert_allclose(dev.copy_to_host(z).result(), ref_y, rtol=1e-4, atol=1e-4)
        assert dev.cufft.replay_info().result() == {"enabled": False}
        assert dev.cusparse.replay_info().result() == {"enabled": False}
        levels = dev.cublas.replay_info().result()["cublas"]["levels"]
        assert not levels["enabled"] and levels["captures"] == 0, levels
        assert dev._worker.ctx.driver_replay_info() == {"enabled": False}
        g = dev.to_device(rng.standard_normal((8, 8)).astype(np.float32, order="F")).result()
        c = dev.alloc((8, 8), np.float32).result()
        for _ in range(3):
            dev.sgemm(g, g, c, 8, 8, 8)
        dev.synchronize().result()
        assert dev.cublas.replay_info().result()["cublas"]["captures"] >= 1  # not switched off
