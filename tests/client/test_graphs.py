"""Graphs of messages: recorded GEMMs (cuBLAS and cuBLASLt), device copies, memsets and kernel
launches replayed as one message give what eager execution gives; update() re-points buffers; a
graph keeps the buffers it uses alive; messages that cannot be captured are refused naming
themselves, and the device keeps serving."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpumsg
from tests.libs.harness import assert_close, device_still_serves, wide
from tests.libs.kernels import SAXPY

N = 48


def _rand(rng, shape) -> np.ndarray:
    return np.asfortranarray(rng.standard_normal(shape).astype(np.float32) + 0.1)


def _sequence(dev, k, x, w, h1, h2, out, lt_out) -> None:
    """x -> h1 = x @ w0 (cuBLAS/Lt GEMM) -> h2 = h1 (device copy) -> h2 += 2 h1 (kernel)
    -> out = h2 @ w1 (GEMM) -> lt_out = relu(h2 @ w1) (cuBLASLt epilogue), with a memset first
    (h2 is overwritten by the copy, so every replay computes the same function of x)."""
    dev.memset(h2, 0)
    dev.cublas.gemm(x, w[0], h1, N, N, N)
    dev.copy(h2, h1)
    dev.launch(k, (N * N + 255) // 256, 256, (2.0, h1, h2, N * N), reads=(h1, h2), writes=(h2,))
    dev.cublas.gemm(h2, w[1], out, N, N, N)
    dev.cublaslt.matmul(h2, w[1], lt_out, N, N, N, epilogue="relu")


def _reference(x, w):
    h = 3.0 * (wide(x) @ wide(w[0]))
    return h @ wide(w[1]), np.maximum(h @ wide(w[1]), 0)


def test_replayed_100_times_equals_eager(dev, rng) -> None:
    k = dev.compile(SAXPY, "saxpy").result(timeout=60)
    w = [dev.to_device(_rand(rng, (N, N))) for _ in range(2)]
    x0 = _rand(rng, (N, N))
    x = dev.to_device(x0)
    bufs = [dev.alloc((N, N), np.float32, order="F") for _ in range(4)]
    _sequence(dev, k, x, w, *bufs)  # eager
    eager = [dev.copy_to_host(b).result() for b in bufs[2:]]
    for b in bufs:
        dev.memset(b, 0xFF)  # NaN: a replay that does nothing cannot pass
    with dev.graph() as g:
        recorded = _sequence(dev, k, x, w, *bufs)
    assert recorded is None and g.ready.result(timeout=60) == 6
    futures = [g.launch() for _ in range(100)]
    for f in futures:
        assert f.result(timeout=60) is None
    for b, e in zip(bufs[2:], eager):
        np.testing.assert_allclose(dev.copy_to_host(b).result(), e, rtol=1e-5, atol=1e-5)
    ref = _reference(x0, [dev.copy_to_host(v).result() for v in w])
    for b, r in zip(bufs[2:], ref):
        assert_close(dev.copy_to_host(b).result(), r, "tf32")
    # new input between replays (an h2d copy outside the graph): replays follow it
    for _ in range(3):
        x1 = _rand(rng, (N, N))
        dev.copy_from_host(x, x1)
        g.launch()
        ref = _reference(x1, [dev.copy_to_host(v).result() for v in w])
        assert_close(dev.copy_to_host(bufs[2]).result(), ref[0], "tf32")


def test_update_repoints_a_buffer(dev, rng) -> None:
    a0, a1, b0 = _rand(rng, (N, N)), _rand(rng, (N, N)), _rand(rng, (N, N))
    a, a_new, b = dev.to_device(a0), dev.to_device(a1), dev.to_device(b0)
    c, c_new = dev.alloc((N, N), np.float32, order="F"), dev.alloc((N, N), np.float32, order="F")
    with dev.graph(a=a) as g:
        dev.cublas.gemm(a, b, c, N, N, N)
    g.launch().result(timeout=60)
    assert_close(dev.copy_to_host(c).result(), wide(a0) @ wide(b0), "tf32")
    g.update(a=a_new).result(timeout=60)
    g.update({c: c_new}).result(timeout=60)
    g.launch().result(timeout=60)
    assert_close(dev.copy_to_host(c_new).result(), wide(a1) @ wide(b0), "tf32")
    with pytest.raises(gpumsg.InvalidMessage, match="dtype, shape and size"):
        g.update(a=dev.alloc((N, N + 1), np.float32, order="F"))
    with pytest.raises(gpumsg.InvalidMessage, match="no buffer of that name"):
        g.update(z=a)


def test_graph_keeps_dropped_buffers_alive(dev, rng) -> None:
    x0 = _rand(rng, (N, N))
    out = dev.alloc((N, N), np.float32, order="F")

    def record():
        x = dev.to_device(x0)
        tmp = dev.alloc((N, N), np.float32, order="F")
        with dev.graph() as g:
            dev.copy(tmp, x)
            dev.cublas.gemm(tmp, x, out, N, N, N)
        return g

    g = record()  # x and tmp are garbage once record() returns
    gc.collect()
    g.ready.result(timeout=60)
    # the freed memory must not be handed to new buffers while the graph lives
    junk = [dev.to_device(np.full((N, N), 7.0, np.float32)) for _ in range(4)]
    for _ in range(3):
        g.launch()
    assert_close(dev.copy_to_host(out).result(), wide(x0) @ wide(x0), "tf32")
    del junk
    g.close()
    device_still_serves(dev)


REFUSED = [
    ("Dot", lambda dev, x: dev.cublas.dot(x, x)),
    ("Nrm2", lambda dev, x: dev.cublas.nrm2(x)),
    ("CopyToHost", lambda dev, x: dev.copy_to_host(x)),
    ("CopyFromHost", lambda dev, x: dev.copy_from_host(x, np.ones(8, np.float32))),
    ("Alloc", lambda dev, x: dev.alloc(8, np.float32)),
    ("Free", lambda dev, x: dev.free(dev_buf(dev))),
    ("Stats", lambda dev, x: dev.stats()),
    ("Synchronize", lambda dev, x: dev.synchronize()),
]


def dev_buf(dev):
    return dev.alloc(8, np.float32).result()


@pytest.mark.parametrize("name,call", REFUSED, ids=[r[0] for r in REFUSED])
def test_refusals_name_the_message(dev, name, call) -> None:
    x = dev.to_device(np.ones(8, np.float32)).result()
    arg = dev_buf(dev) if name == "Free" else None
    with pytest.raises(gpumsg.GraphCaptureError, match=name) as info:
        with dev.graph():
            dev.memset(x, 0)
            if arg is not None:
                dev.free(arg)
            else:
                call(dev, x)
    assert info.value.message == name
    device_still_serves(dev)


def test_graph_cannot_nest_or_be_empty(dev) -> None:
    with pytest.raises(gpumsg.InvalidMessage, match="nothing was recorded"):
        with dev.graph():
            pass
    x = dev.to_device(np.ones(8, np.float32))
    with pytest.raises(gpumsg.InvalidMessage, match="do not nest"):
        with dev.graph():
            dev.memset(x, 0)
            with dev.graph():
                pass


def test_launch_of_destroyed_graph_is_refused(dev) -> None:
    x = dev.to_device(np.ones(8, np.float32))
    with dev.graph() as g:
        dev.memset(x, 0)
    g.ready.result(timeout=30)
    g.close()
    with pytest.raises(gpumsg.InvalidMessage, match="closed"):
        g.launch()


def test_other_threads_are_not_recorded(dev) -> None:
    import threading

    x = dev.to_device(np.arange(8, dtype=np.float32))
    seen = []
    with dev.graph() as g:
        dev.memset(x, 0)
        t = threading.Thread(target=lambda: seen.append(dev.copy_to_host(x).result(timeout=30)))
        t.start()
        t.join()
    assert np.array_equal(seen[0], np.arange(8, dtype=np.float32))  # ran eagerly, before memset
    g.launch().result(timeout=30)
    assert not dev.copy_to_host(x).result().any()


def test_graph_in_a_worker_process(rng) -> None:
    """Graph messages are plain data: they cross to a worker process and replay there."""
    a0, b0 = _rand(rng, (N, N)), _rand(rng, (N, N))
    with gpumsg.open_device(0, backend="sim", isolation="process", standby=False) as dev:
        a, b = dev.to_device(a0), dev.to_device(b0)
        c, d = dev.alloc((N, N), np.float32, order="F"), dev.alloc((N, N), np.float32, order="F")
        with dev.graph() as g:
            dev.memset(d, 0)
            dev.cublas.gemm(a, b, c, N, N, N)
            dev.copy(d, c)
        for _ in range(5):
            g.launch()
        assert_close(dev.copy_to_host(d).result(timeout=60), wide(a0) @ wide(b0), "f32")
