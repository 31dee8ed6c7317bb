"""Random DAGs of messages over shared buffers, on a pool of compute streams, checked against a
sequential NumPy replay in float64.

Each client thread issues a random sequence of uploads, AXPYs, scalings, device copies, fills,
GEMMs (in place and into new buffers, whose old buffers are then freed), dot products and
downloads over a few buffers of its own and weights that every thread reads. Nothing is waited
for until the end, so dependent and independent messages mix in flight: the pool places
independent ones on other streams, and every read-after-write, write-after-read and
write-after-write between streams must be ordered by events. On the simulator every stream
operation is delayed at random (each stream is a thread), so a missing wait shows as a wrong
value; the last test removes the waits and checks that the check would then fail.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.sim import SimBackend

OPS = ("upload", "axpy", "scal", "copy", "fill", "gemm", "matmul", "dot", "download")


def _shape(backend: str) -> tuple[int, int]:
    return (8, 8) if backend == "sim" else (384, 384)


class Client:
    """One thread's buffers (device and NumPy) and its checks."""

    def __init__(self, dev, rng, weights, shape, nbufs: int) -> None:
        self.dev, self.rng, self.weights, self.shape = dev, rng, weights, shape
        self.ref = [rng.standard_normal(shape) for _ in range(nbufs)]
        self.buf = [dev.to_device(x) for x in self.ref]
        self.checks: list[tuple[str, object, object]] = []

    def pick(self, k: int) -> list[int]:
        return [int(i) for i in self.rng.choice(len(self.buf), size=k, replace=False)]

    def step(self, op: str) -> None:
        dev, rng, ref, buf = self.dev, self.rng, self.ref, self.buf
        if op == "upload":
            (i,) = self.pick(1)
            ref[i] = rng.standard_normal(self.shape)
            dev.copy_from_host(buf[i], ref[i])
        elif op == "axpy":
            i, j = self.pick(2)
            alpha = float(rng.uniform(-1, 1))
            dev.cublas.axpy(buf[i], buf[j], alpha)
            ref[j] = ref[j] + alpha * ref[i]
        elif op == "scal":
            (i,) = self.pick(1)
            s = float(rng.uniform(-1, 1))
            dev.cublas.scal(buf[i], s)
            ref[i] = ref[i] * s
        elif op == "copy":
            i, j = self.pick(2)
            dev.copy(buf[j], buf[i])
            ref[j] = ref[i].copy()
        elif op == "fill":
            (i,) = self.pick(1)
            dev.memset(buf[i], 0)
            ref[i] = np.zeros(self.shape)
        elif op == "gemm":  # C = A B / n + C / 2, A a weight or a buffer of this thread
            i, j = self.pick(2)
            w = int(rng.integers(len(self.weights) + 1))
            if w < len(self.weights):
                a, ra = self.weights[w]
            else:
                (k,) = [x for x in self.pick(3) if x not in (i, j)][:1]
                a, ra = buf[k], ref[k]
            n = self.shape[0]
            dev.cublas.gemm(a, buf[i], buf[j], alpha=1.0 / n, beta=0.5)
            ref[j] = ra @ ref[i] / n + 0.5 * ref[j]
        elif op == "matmul":  # a new buffer takes the old one's place; the old one is freed
            i, j = self.pick(2)
            a, ra = self.weights[int(rng.integers(len(self.weights)))]
            buf[j] = dev.linalg.matmul(a, buf[i])
            ref[j] = ra @ ref[i]
        elif op == "dot":
            i, j = self.pick(2)
            self.checks.append(("dot", dev.cublas.dot(buf[i], buf[j]),
                                float(np.vdot(ref[i], ref[j]))))
        else:
            (i,) = self.pick(1)
            self.checks.append(("download", dev.copy_to_host(buf[i]), ref[i].copy()))

    def run(self, ops: int) -> None:
        try:
            for _ in range(ops):
                self.step(OPS[int(self.rng.integers(len(OPS)))])
            for i in range(len(self.buf)):
                self.checks.append(("final", self.dev.copy_to_host(self.buf[i]), self.ref[i]))
        except gpumsg.GpuError as exc:  # a poisoned device (a use after free), reported below
            self.error = exc

    error: BaseException | None = None

    def wrong(self) -> list[str]:
        out = [] if self.error is None else [f"error: {self.error!r}"]
        for what, fut, want in self.checks:
            try:
                got = fut.result(timeout=300)
            except gpumsg.GpuError as exc:
                out.append(f"{what}: {exc!r}")
                continue
            scale = max(1.0, float(np.max(np.abs(want))))
            if not np.allclose(got, want, rtol=1e-9, atol=1e-9 * scale):
                out.append(what)
        return out


def run_dags(dev, rng, backend: str, threads: int, ops: int, nbufs: int = 5) -> list[str]:
    """Run ``threads`` clients of ``ops`` random messages each; the checks that failed."""
    shape = _shape(backend)
    weights = []
    for _ in range(2):
        w = rng.standard_normal(shape)
        weights.append((dev.to_device(w), w))
    clients = [Client(dev, np.random.default_rng(rng.integers(1 << 63)), weights, shape, nbufs)
               for _ in range(threads)]
    workers = [threading.Thread(target=c.run, args=(ops,)) for c in clients]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=600)
    return [w for c in clients for w in c.wrong()]


@pytest.fixture(autouse=True)
def _pool_as_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests configure the pool themselves (``configured(streams=...)``); the
    environment variable, which overrides a configured value, is taken out."""
    monkeypatch.delenv("GPUMSG_STREAMS", raising=False)


def _open(backend: str, streams: int = 4):
    with gpumsg.config.configured(streams=streams):
        if backend == "sim":
            return gpumsg.open_device(0, backend=SimBackend(jitter=300e-6))
        return gpumsg.open_device(0, backend=backend)


@pytest.mark.parametrize("threads", [1, 4])
def test_random_dags_match_a_sequential_replay(backend, rng, threads) -> None:
    ops = 400 if backend == "sim" else 600
    with _open(backend) as dev:
        wrong = run_dags(dev, rng, backend, threads, ops)
        counts = dev.stats().result().streams
    assert not wrong, f"{len(wrong)} checks wrong: {wrong[:8]}"
    assert len(counts) == 4 and sum(1 for c in counts if c) >= 2, counts  # it did spread


def test_random_dags_with_one_stream_match_too(backend, rng) -> None:
    with _open(backend, streams=1) as dev:
        wrong = run_dags(dev, rng, backend, 4, 100 if backend == "sim" else 300)
        assert dev.stats().result().streams == ()
    assert not wrong, f"{len(wrong)} checks wrong: {wrong[:8]}"


def test_the_dag_check_detects_missing_waits(rng) -> None:
    # the same DAGs with the cross-stream waits switched off must go wrong
    with _open("sim") as dev:
        dev._worker.ctx._wait = lambda *args: None
        wrong = run_dags(dev, rng, "sim", 4, 150)
    assert wrong, "without waits the DAGs should have read reordered data"


def test_array_chains_of_several_threads_match_numpy(backend, rng) -> None:
    # the array layer's kernels (Launch, unfused: one per operation) and reductions from four
    # threads on a pool (the layer allocates each output with its own Alloc, which goes where
    # the last message went and pulls its writer there: the chains may share a stream)
    import gpumsg.array_api as xp

    with gpumsg.config.configured(streams=4):
        dev = gpumsg.open_device(0, backend=SimBackend(jitter=300e-6) if backend == "sim"
                                 else backend, allow_fault_injection=True)
    with dev, gpumsg.config.configured(array_fusion=False):
        old = xp.set_default_device(dev)
        try:
            inputs = [rng.standard_normal(4096) for _ in range(4)]
            got: list = [None] * 4
            start = threading.Barrier(4)

            def client(t: int) -> None:
                try:
                    x = xp.asarray(inputs[t])
                    start.wait()
                    for _ in range(20):
                        x = xp.tanh(x) * 1.5 + 0.25
                    got[t] = (np.asarray(x), float(xp.sum(x)))
                except Exception as exc:  # noqa: BLE001 - reported below
                    got[t] = exc

            dev.inject_fault("hang", seconds=0.2)
            threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(300)
            counts = dev.stats().result().streams
        finally:
            xp.set_default_device(old)
    assert not [g for g in got if isinstance(g, BaseException)], got
    assert len(counts) == 4 and sum(counts) >= 4 * 60, counts  # every kernel was placed
    for x0, (x, total) in zip(inputs, got):
        for _ in range(20):
            x0 = np.tanh(x0) * 1.5 + 0.25
        assert np.allclose(x, x0, rtol=1e-12, atol=1e-12) and abs(total - x0.sum()) < 1e-9
