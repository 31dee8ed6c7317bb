"""gpumsg.ray on a local Ray cluster (``ray.init(num_cpus=2)``) with simulated devices: calls
forwarded by name, typed errors, pipelining through futures, placement by Stats, NCCL's code
path through Ray, and an actor killed with a call in flight (typed error, no hang, later work
correct, old buffers stale). The GPU case runs only where Ray is installed next to a GPU.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from tests.conftest import CUDA_OK, CUDA_WHY, ROOT, random_array

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'gpumsg[ray]'); the "
                                        "GPU machine has no network to install it")
import gpumsg.ray as gray  # noqa: E402
from gpumsg.errors import (  # noqa: E402
    CollectiveError,
    GpuRefStale,
    InvalidMessage,
    WorkerDied,
)
from gpumsg.ray._handles import Handle, pack, unpack  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        # the workers' PYTHONPATH: the repository, then the driver's own (where Ray itself
        # may live, as on the GPU machine, which carries it: setting the repository alone
        # left the workers unable to import Ray, and the CUDA actor never started)
        path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def group(cluster):
    rg = gray.open_devices(num_gpus=2, backend="sim", max_restarts=2,
                           allow_fault_injection=True)
    yield rg
    rg.close()


def test_round_trip_and_gemm(group, rng) -> None:
    rd = group[0]
    assert rd.backend == "sim" and rd.generation == 0
    a = random_array(rng, (6, 4), "f64", order="F")
    b = random_array(rng, (4, 5), "f64", order="F")
    da, db = rd.to_device(a), rd.to_device(b)  # futures, passed on before they resolve
    dc = rd.alloc((6, 5), np.float64)
    done = rd.cublas.gemm(da, db, dc, 6, 5, 4)
    out = rd.copy_to_host(dc).result(timeout=60)
    assert done.result(timeout=60) is None
    assert np.allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    buf = da.result()
    assert isinstance(buf, gray.RemoteBuffer) and buf.shape == (6, 4) and buf.order == "F"
    assert buf.dtype == np.float64 and buf.nbytes == a.nbytes
    big = random_array(rng, (512, 256), "f32")  # through the object store
    assert np.array_equal(rd.copy_to_host(rd.to_device(big)).result(timeout=60), big)


def test_pipelined_chain_keeps_order(group, rng) -> None:
    """Each call names the previous call's buffer before it resolves: the actor must start
    them in the caller's order (Ray does not promise that for threaded actors)."""
    rd = group[0]
    data = random_array(rng, (256,), "f32")
    cur = rd.to_device(data)
    for _ in range(30):
        nxt = rd.alloc((256,), np.float32)
        rd.copy(nxt, cur)
        cur = nxt
    assert np.array_equal(rd.copy_to_host(cur).result(timeout=60), data)


def _in_process_actor(monkeypatch):
    """A DeviceActor in this process (no Ray call), recording the calls in the order they
    post."""
    from gpumsg.ray import _actor

    actor = _actor.DeviceActor(0, "sim", {})
    posted: list[int] = []
    target = actor._target

    def recording(name):
        posted.append(int(name.rsplit("_", 1)[1]) if "_" in name else -1)
        return target("stats")

    monkeypatch.setattr(actor, "_target", recording)
    return _actor, actor, posted


def test_threaded_actor_posts_in_the_callers_order(monkeypatch) -> None:
    """Calls that start on the actor's threads in reverse order post in the caller's order,
    each woken by the one before it."""
    _actor, actor, posted = _in_process_actor(monkeypatch)
    replies: dict[int, object] = {}

    def run(n: int) -> None:
        replies[n] = unpack(actor.call(pack((("c", n, 1), f"stats_{n}", (), {}))))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8, 0, -1)]
    for t in threads:
        t.start()
        time.sleep(0.01)  # n = 8 starts first, and waits for its turn
    for t in threads:
        t.join(timeout=30)
    try:
        assert posted == list(range(1, 9))
        assert sorted(replies) == list(range(1, 9))
        assert all(r[0] == actor.incarnation and r[1].backend == "sim"
                   for r in replies.values())
        assert not any(actor._waiting.get("c", {}))
    finally:
        actor.close()


def test_threaded_actor_skips_a_call_that_never_comes(monkeypatch) -> None:
    """A call whose predecessor was lost (an actor restart) posts after GAP_SECONDS, not
    never; the calls after it keep their order."""
    _actor, actor, posted = _in_process_actor(monkeypatch)
    monkeypatch.setattr(_actor, "GAP_SECONDS", 0.3)
    try:
        actor.call(pack((("c", 1, 1), "stats_1", (), {})))
        t0 = time.monotonic()
        actor.call(pack((("c", 3, 1), "stats_3", (), {})))  # call 2 never comes
        assert 0.25 < time.monotonic() - t0 < 10
        actor.call(pack((("c", 4, 1), "stats_4", (), {})))
        assert posted == [1, 3, 4]
    finally:
        actor.close()


def test_pack_carries_arrays_as_they_are() -> None:
    """A request or reply with a NumPy array stays a tuple (Ray's object store carries the
    array without a copy); one without is bytes; one that plain pickle cannot carry stays a
    tuple for Ray's cloudpickle; unpack gives each back."""
    arr = np.arange(6.0)
    with_array = (("c", 1, 1), "to_device", ([arr],), {})
    assert pack(with_array) is with_array
    plain = (("c", 2, 1), "copy", (Handle(("k", 0), "inc"), Handle(("k", 1))), {"nbytes": 8})
    packed = pack(plain)
    assert type(packed) is bytes and unpack(packed) == plain
    local = (("c", 3, 1), "stats", (lambda: 0,), {})
    assert pack(local) is local and unpack(local) is local


def test_call_floor_is_the_oldest_outstanding_call(rng) -> None:
    """The floor each call carries is the oldest call still unanswered, whichever answers
    arrive first (the actor skips nothing older than it after a restart)."""
    from gpumsg.ray._client import RemoteDevice

    rd = RemoteDevice.__new__(RemoteDevice)  # no actor: only the numbering
    rd._seq, rd._outstanding, rd._oldest = 0, set(), 1
    for _ in range(2000):
        if rd._outstanding and rng.random() < 0.5:
            rd._outstanding.discard(int(rng.choice(sorted(rd._outstanding))))
        _, n, floor = rd._next_seq()
        assert floor == min(rd._outstanding) and n == rd._seq


def test_matmul_returns_a_remote_buffer(group, rng) -> None:
    rd = group[1]
    a, b = random_array(rng, (7, 3), "f32"), random_array(rng, (3, 9), "f32")
    out = rd.linalg.matmul(rd.to_device(a), rd.to_device(b))
    host = rd.copy_to_host(out).result(timeout=60)  # the future as an argument
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(host - ref) / np.linalg.norm(ref) < 2e-5
    assert out.result().shape == (7, 9)


def test_stats_and_least_loaded(group) -> None:
    loads = group.stats()
    assert [s.backend for s in loads] == ["sim", "sim"]
    busy = group[0]
    hang = busy.inject_fault("hang", seconds=4.0)  # long enough for a loaded machine
    queued = [busy.synchronize() for _ in range(3)]
    time.sleep(0.3)
    assert busy.stats().result(timeout=30).ops_in_flight >= 1
    assert group.least_loaded() is group[1]
    hang.result(timeout=30)
    for f in queued:
        f.result(timeout=30)


@pytest.mark.parametrize("case", ["bad field", "foreign buffer", "freed buffer", "no method",
                                  "private method", "forbidden"])
def test_errors_are_gpumsg_types(group, rng, case) -> None:
    rd, other = group[0], group[1]
    x = rd.to_device(random_array(rng, (3,), "f32")).result(timeout=60)
    if case == "bad field":
        with pytest.raises(InvalidMessage) as info:
            rd.memset(x, 0, nbytes=100).result(timeout=60)
        assert info.value.field is None or "offset" in str(info.value)
    elif case == "foreign buffer":
        with pytest.raises(InvalidMessage, match="actor"):
            other.copy_to_host(x)
    elif case == "freed buffer":
        x.free().result(timeout=60)
        with pytest.raises(GpuRefStale):
            rd.copy_to_host(x)
    elif case == "no method":
        with pytest.raises(InvalidMessage, match="no method"):
            rd.cublas.no_such_thing(x).result(timeout=60)
    elif case == "private method":
        with pytest.raises(AttributeError):
            rd._post  # noqa: B018
    else:
        with pytest.raises(InvalidMessage, match="not a remote"):
            rd.graph().result(timeout=60)
    # the device still serves
    y = random_array(rng, (5,), "f32")
    assert np.array_equal(rd.copy_to_host(rd.to_device(y)).result(timeout=60), y)


def test_nccl_code_path_through_ray(group, rng) -> None:
    """A one-rank communicator on each actor: the unique id travels through Ray, CommInit and
    the collective run in the actor. (Simulated ranks in different processes cannot meet: the
    simulator's rendezvous is in-process; across actors it takes GPUs.)"""
    for rd in group:
        comm = gray.RemoteCommunicator([rd], timeout=30)
        data = random_array(rng, (64,), "f32")
        x = rd.to_device(data)
        comm.all_reduce([x]).result(timeout=60)
        assert np.array_equal(rd.copy_to_host(x).result(timeout=60), data)
        z = rd.to_device(random_array(rng, (4,), "c64"))  # no NCCL type: every rank fails
        with pytest.raises(CollectiveError):
            comm.all_reduce([z]).result(timeout=60)
        with pytest.raises(InvalidMessage):
            comm.all_reduce([x, x])
    with pytest.raises(InvalidMessage, match="CUDA"):  # refused, not a rendezvous that hangs
        group.nccl()


def test_actor_killed_mid_flight(cluster, rng) -> None:
    rg = gray.open_devices(num_gpus=1, backend="sim", max_restarts=1,
                           allow_fault_injection=True)
    try:
        rd = rg[0]
        data = random_array(rng, (32,), "f64")
        old = rd.to_device(data).result(timeout=60)
        rd.inject_fault("hang", stream="d2h", seconds=60.0)
        pending = rd.copy_to_host(old)  # waits behind the hang
        time.sleep(0.5)
        assert not pending.done()
        t0 = time.monotonic()
        ray.kill(rd.actor, no_restart=False)
        with pytest.raises(WorkerDied):
            pending.result(timeout=60)
        assert time.monotonic() - t0 < 30  # no hang
        assert rd.generation == 1
        assert rd.wait_ready(timeout=60) == 1  # Ray restarted it: a new life, no new bump
        with pytest.raises(GpuRefStale):  # the old life's buffer is gone
            rd.copy_to_host(old)
        fresh = random_array(rng, (16, 8), "f32")
        assert np.array_equal(rd.copy_to_host(rd.to_device(fresh)).result(timeout=120), fresh)
        assert rd.generation == 1
    finally:
        rg.close()


def test_an_actor_that_cannot_start_fails_typed(cluster) -> None:
    """Device actors Ray cannot place (a GPU each on a cluster without one) fail with
    WorkerDied naming the cluster's GPUs and the causes, after the timeout, not with Ray's
    GetTimeoutError; nothing is left behind."""
    if ray.cluster_resources().get("GPU", 0) >= 1:
        pytest.skip("the cluster has a GPU: a CUDA actor would start")
    t0 = time.monotonic()
    with pytest.raises(WorkerDied, match=r"did not start within 2 s \(the cluster has 0 GPU"):
        gray.open_devices(num_gpus=1, backend="cuda", timeout=2)
    assert time.monotonic() - t0 < 30


@pytest.mark.gpu
def test_cuda_actors(cluster, rng) -> None:
    if not CUDA_OK:
        pytest.skip(f"no CUDA GPU here ({CUDA_WHY})")
    if ray.cluster_resources().get("GPU", 0) < 1:
        pytest.skip("the Ray cluster has no GPU")
    rg = gray.open_devices(num_gpus=1, backend="cuda", timeout=90)  # a cold context: ~1 s
    try:
        a = random_array(rng, (64, 64), "f32")
        out = rg[0].linalg.matmul(rg[0].to_device(a), rg[0].to_device(a))
        host = rg[0].copy_to_host(out).result(timeout=60)
        ref = a.astype(np.float64) @ a.astype(np.float64)
        assert np.linalg.norm(host - ref) / np.linalg.norm(ref) < 5e-3
        comm = rg.nccl()
        comm.all_reduce([out]).result(timeout=60)
    finally:
        rg.close()
