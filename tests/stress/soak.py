"""The soak campaign: client threads each run a long random mix of every op family (copies
both ways, memset, device copies, SGEMM and typed GEMM, level-1 BLAS, matmul, cuBLASLt,
solve and Cholesky, convolution and activation, user kernels, graph replays, pinned host
buffers), each result checked against NumPy. Buffers are freed by their thread, by another
thread (through a shared queue) or by the garbage collector. At the end: lost futures (not
answered in time), wrong values and the pool's used bytes against its starting level."""

from __future__ import annotations

import dataclasses
import gc
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np

import gpumsg
from gpumsg.libs.nvrtc import sim_kernel

WAIT_S = 60.0

AXPBY = r"""
extern "C" __global__ void stress_axpby(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


@sim_kernel("stress_axpby")
def _axpby(launch: Any, a: Any, x: Any, y: Any, n: Any) -> None:
    m = min(int(n), launch.grid[0] * launch.block[0])
    y[:m] = a * x[:m] + y[:m]


@dataclasses.dataclass
class SoakReport:
    threads: int = 0
    families: int = 0  # op families this tree offers
    ops: int = 0
    futures: int = 0
    lost: int = 0
    wrong: int = 0
    errors: int = 0
    freed_by_other_thread: int = 0
    freed_by_gc: int = 0
    pool_used_start: int = 0
    pool_used_end: int = 0
    #: pool bytes the warm-up's library handles kept (their scratch on one compute stream)
    scratch_per_stream: int = 0
    #: compute streams of the device: each one's library handles keep their own scratch
    compute_streams: int = 1
    #: page-locked host blocks the device still held after close (checked, not assumed)
    pinned_blocks_after_close: int = -1
    seconds: float = 0.0
    by_family: dict[str, int] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "problems"}


def _rel(out: Any, ref: Any) -> float:
    out = np.asarray(out, dtype=np.complex128 if np.iscomplexobj(ref) else np.float64)
    ref = np.asarray(ref, dtype=out.dtype)
    d = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (d if d else 1.0))


def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Cross-correlation, stride 1, no padding, NCHW / KCRS."""
    win = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), w.shape[2:], (2, 3))
    return np.einsum("ncpqrs,kcrs->nkpq", win, w.astype(np.float64))


class _Client:
    """One soak thread's state and its op mix."""

    def __init__(self, dev: Any, kernel: Any, report: SoakReport, lock: threading.Lock,
                 shared_free: queue.Queue, seed: int) -> None:
        self.dev, self.kernel, self.report, self.lock = dev, kernel, report, lock
        self.shared_free = shared_free
        self.rng = np.random.default_rng(seed)
        self.pending: deque = deque()
        self.keep: list[Any] = []  # buffers whose fate is decided after their check
        self.graph: Any = None
        self.ops: dict[str, Callable[[], tuple[list, Callable[[], float], list]]] = {
            "roundtrip": self.op_roundtrip, "sgemm": self.op_sgemm, "gemm_f64": self.op_gemm,
            "axpy_dot": self.op_axpy_dot, "matmul": self.op_matmul,
            "memset_copy": self.op_memset_copy, "solve": self.op_solve,
            "cholesky": self.op_cholesky, "conv_relu": self.op_conv, "kernel": self.op_kernel,
            "graph": self.op_graph, "pinned": self.op_pinned, "lt_matmul": self.op_lt,
        }
        # the libraries merged later, where this tree has them
        if hasattr(dev, "fft"):
            self.ops["fft"] = self.op_fft
        if hasattr(dev, "sparse"):
            self.ops["spmv"] = self.op_spmv

    # each op: (futures to wait for, check() -> relative error (or 0/1), buffers made)
    def f32(self, *shape: int, order: str = "F") -> np.ndarray:
        return np.asarray(self.rng.standard_normal(shape).astype(np.float32) + 0.25, order=order)

    def op_roundtrip(self) -> tuple:
        x = self.rng.standard_normal(int(self.rng.integers(1, 3000)))
        b = self.dev.to_device(x)
        out = self.dev.copy_to_host(b)
        return [out], lambda: 0.0 if np.array_equal(out.result(), x) else 1.0, [b], 0.0

    def op_sgemm(self) -> tuple:
        m, n, k = (int(v) for v in self.rng.integers(1, 48, 3))
        a, b = self.f32(m, k), self.f32(k, n)
        c = self.dev.alloc((m, n), np.float32)
        self.dev.sgemm(self.dev.to_device(a), self.dev.to_device(b), c, m, n, k)
        out = self.dev.copy_to_host(c)
        return [out], lambda: _rel(out.result(), a.astype(np.float64) @ b), [c], 1e-5

    def op_gemm(self) -> tuple:
        m, n, k = (int(v) for v in self.rng.integers(1, 32, 3))
        a = np.asfortranarray(self.rng.standard_normal((m, k)))
        b = np.asfortranarray(self.rng.standard_normal((k, n)))
        c0 = np.asfortranarray(self.rng.standard_normal((m, n)))
        c = self.dev.to_device(c0)
        self.dev.cublas.gemm(self.dev.to_device(a), self.dev.to_device(b), c, m, n, k,
                             alpha=0.5, beta=2.0)
        out = self.dev.copy_to_host(c)
        return [out], lambda: _rel(out.result(), 0.5 * a @ b + 2.0 * c0), [c], 1e-12

    def op_axpy_dot(self) -> tuple:
        n = int(self.rng.integers(1, 2000))
        x, y = self.rng.standard_normal(n), self.rng.standard_normal(n)
        dx, dy = self.dev.to_device(x), self.dev.to_device(y)
        self.dev.cublas.axpy(dx, dy, 1.5)
        dot = self.dev.cublas.dot(dx, dy)
        out = self.dev.copy_to_host(dy)
        ref = y + 1.5 * x

        def check() -> float:
            return max(_rel(out.result(), ref), abs(dot.result() - x @ ref) / abs(x @ ref))
        return [out, dot], check, [dx, dy], 1e-10

    def op_matmul(self) -> tuple:
        m, k, n = (int(v) for v in self.rng.integers(1, 40, 3))
        a, b = self.f32(m, k, order="C"), self.f32(k, n, order="C")
        c = self.dev.linalg.matmul(self.dev.to_device(a), self.dev.to_device(b))
        out = self.dev.copy_to_host(c)
        return [out], lambda: _rel(out.result(), a.astype(np.float64) @ b), [c], 1e-5

    def op_lt(self) -> tuple:
        m, n, k = (int(v) for v in self.rng.integers(1, 40, 3))
        a, b = self.f32(m, k), self.f32(k, n)
        d = self.dev.alloc((m, n), np.float32, order="F")
        self.dev.cublaslt.matmul(self.dev.to_device(a), self.dev.to_device(b), d, m, n, k,
                                 epilogue="relu")
        out = self.dev.copy_to_host(d)
        return [out], lambda: _rel(out.result(), np.maximum(a.astype(np.float64) @ b, 0)), \
            [d], 1e-5

    def op_memset_copy(self) -> tuple:
        n = int(self.rng.integers(1, 4000))
        a = self.dev.alloc(n, np.float32)
        b = self.dev.alloc(n, np.float32)
        self.dev.memset(a, 0x3F800000, width=4)  # 1.0f
        self.dev.copy(b, a)
        out = self.dev.copy_to_host(b)
        return [out], lambda: 0.0 if np.all(out.result() == 1.0) else 1.0, [a, b], 0.0

    def op_solve(self) -> tuple:
        n = int(self.rng.integers(2, 16))
        a = self.rng.standard_normal((n, n)) + n * np.eye(n)
        x = self.rng.standard_normal(n)
        sol = self.dev.linalg.solve(self.dev.to_device(a), self.dev.to_device(a @ x))
        out = self.dev.copy_to_host(sol)
        return [out], lambda: _rel(out.result(), x), [sol], 1e-9

    def op_cholesky(self) -> tuple:
        n = int(self.rng.integers(2, 16))
        g = self.rng.standard_normal((n, n))
        a = g @ g.T + n * np.eye(n)
        low = self.dev.linalg.cholesky(self.dev.to_device(a))
        out = self.dev.copy_to_host(low)
        return [out], lambda: _rel(out.result(), np.linalg.cholesky(a)), [low], 1e-9

    def op_conv(self) -> tuple:
        n, c, k = (int(v) for v in self.rng.integers(1, 4, 3))
        h = int(self.rng.integers(3, 10))
        x = self.f32(n, c, h, h, order="C")
        w = self.f32(k, c, 3, 3, order="C")
        y = self.dev.cudnn.conv(self.dev.to_device(x), self.dev.to_device(w), activation="relu")
        out = self.dev.copy_to_host(y)
        return [out], lambda: _rel(out.result(), np.maximum(_conv_ref(x, w), 0)), [y], 1e-4

    def op_kernel(self) -> tuple:
        n = int(self.rng.integers(1, 3000))
        x, y = self.f32(n), self.f32(n)
        dx, dy = self.dev.to_device(x), self.dev.to_device(y)
        self.dev.launch(self.kernel, (n + 255) // 256, 256, (2.0, dx, dy, n), reads=(dx, dy),
                        writes=(dy,))
        out = self.dev.copy_to_host(dy)
        return [out], lambda: _rel(out.result(), 2.0 * x.astype(np.float64) + y), [dx, dy], 1e-6

    def op_fft(self) -> tuple:
        n = int(self.rng.integers(1, 300))
        x = self.rng.standard_normal(n) + 1j * self.rng.standard_normal(n)
        y = self.dev.fft.fft(self.dev.to_device(x))
        out = self.dev.copy_to_host(y)
        return [out], lambda: _rel(out.result(), np.fft.fft(x)), [y], 1e-10

    def op_spmv(self) -> tuple:
        import scipy.sparse as sp

        rows, cols = (int(v) for v in self.rng.integers(1, 60, 2))
        a = sp.random(rows, cols, density=0.2, format="csr", random_state=self.rng)
        a.data += 0.5
        x = self.rng.standard_normal(cols)
        m = self.dev.cusparse.csr(a)
        y = self.dev.cusparse.spmv(m, self.dev.to_device(x))
        out = self.dev.copy_to_host(y)

        def check() -> float:
            err = _rel(out.result(), a @ x)
            m.free().result(WAIT_S)
            return err
        return [out], check, [y], 1e-12

    def make_graph(self) -> None:
        n = 257
        self.g_x = self.f32(n)
        self.g_in = self.dev.to_device(self.g_x).result(WAIT_S)
        self.g_out = self.dev.alloc(n, np.float32).result(WAIT_S)
        with self.dev.graph() as g:
            self.dev.copy(self.g_out, self.g_in)
            self.dev.launch(self.kernel, 2, 256, (2.0, self.g_in, self.g_out, n),
                            reads=(self.g_in, self.g_out), writes=(self.g_out,))
        g.ready.result(WAIT_S)
        self.graph = g

    def op_graph(self) -> tuple:
        done = self.graph.launch()
        out = self.dev.copy_to_host(self.g_out)
        ref = 3.0 * self.g_x.astype(np.float64)
        return [done, out], lambda: _rel(out.result(), ref), [], 1e-6

    def op_pinned(self) -> tuple:
        n = int(self.rng.integers(1, 5000))
        pinned = self.dev.alloc_pinned((n,), np.float64).result(WAIT_S)
        pinned.array[:] = self.rng.standard_normal(n)
        x = pinned.array.copy()
        b = self.dev.alloc(n, np.float64)
        self.dev.copy_from_host(b, pinned.array)
        out = self.dev.copy_to_host(b)

        def check() -> float:
            ok = np.array_equal(out.result(), x)
            pinned.free()
            return 0.0 if ok else 1.0
        return [out], check, [b], 0.0

    # -- running
    def settle(self, item: tuple) -> None:
        name, futures, check, bufs, tol = item
        rep = self.report
        try:
            for f in futures:
                f.result(WAIT_S)
            err = check()
        except FutureTimeout:
            with self.lock:
                rep.lost += 1
                rep.problems.append(f"{name}: a future was not answered in {WAIT_S} s")
            return
        except Exception as exc:  # noqa: BLE001 - every valid op must succeed
            with self.lock:
                rep.errors += 1
                rep.problems.append(f"{name}: {type(exc).__name__}: {exc}")
            return
        if not err <= tol:
            with self.lock:
                rep.wrong += 1
                rep.problems.append(f"{name}: relative error {err:.3g} > {tol}")
        for b in bufs:  # who frees: this thread, another thread, or the collector
            fate = random.random()
            if fate < 0.4:
                buf = b.buffer if hasattr(b, "buffer") else b
                buf.free()
            elif fate < 0.7:
                self.shared_free.put(b)
            else:  # dropped here; the finalizer frees it when the last reference goes
                with self.lock:
                    rep.freed_by_gc += 1

    def free_others(self) -> None:
        for _ in range(4):
            try:
                b = self.shared_free.get_nowait()
            except queue.Empty:
                return
            buf = b.buffer if hasattr(b, "buffer") else b
            buf.free()
            with self.lock:
                self.report.freed_by_other_thread += 1

    def run(self, n_ops: int, window: int = 16) -> None:
        names = list(self.ops)
        rep = self.report
        for i in range(n_ops):
            name = names[int(self.rng.integers(len(names)))]
            try:
                futures, check, bufs, tol = self.ops[name]()
            except Exception as exc:  # noqa: BLE001
                with self.lock:
                    rep.errors += 1
                    rep.problems.append(f"{name} (submit): {type(exc).__name__}: {exc}")
                continue
            with self.lock:
                rep.ops += 1
                rep.futures += len(futures)
                rep.by_family[name] = rep.by_family.get(name, 0) + 1
            self.pending.append((name, futures, check, bufs, tol))
            if len(self.pending) >= window:
                self.settle(self.pending.popleft())
            if i % 8 == 0:
                self.free_others()
        while self.pending:
            self.settle(self.pending.popleft())


def campaign(threads: int = 8, ops_per_thread: int = 10_000, backend: str = "sim",
             jitter: float = 20e-6, log: Any = print) -> SoakReport:
    """Run the soak; the simulator gets random per-operation delays up to ``jitter`` s."""
    if backend == "sim":
        from gpumsg.backends.sim import SimBackend

        be: Any = SimBackend(jitter=jitter)
    else:
        be = backend
    report = SoakReport(threads=threads)
    log(f"soak: {threads} threads x {ops_per_thread} ops, backend {backend}"
        + (f", jitter up to {jitter * 1e6:.0f} us" if backend == "sim" else ""))
    dev = gpumsg.open_device(0, backend=be)
    try:
        kernel = dev.compile(AXPBY, "stress_axpby").result(WAIT_S)
        # one op of each family first: library handles keep scratch (a reduction's result
        # slot, workspaces) for the device's life; the baseline is taken after it exists
        dev.synchronize().result(WAIT_S)
        before_warm = dev.stats().result(WAIT_S).pool_used_bytes
        warm = _Client(dev, kernel, SoakReport(), threading.Lock(), queue.Queue(), seed=0)
        warm.make_graph()
        report.families = len(warm.ops)
        for op in warm.ops.values():
            futures, check, bufs, _tol = op()
            for f in futures:
                f.result(WAIT_S)
            check()
            for b in bufs:
                (b.buffer if hasattr(b, "buffer") else b).free()
        warm.graph.close()
        warm.g_in.free()
        warm.g_out.free()
        del warm, futures, check, bufs, op
        dev.synchronize().result(WAIT_S)
        gc.collect()
        load = dev.stats().result(WAIT_S)
        report.pool_used_start = load.pool_used_bytes
        report.scratch_per_stream = report.pool_used_start - before_warm
        report.compute_streams = max(len(load.streams), 1)
        lock = threading.Lock()
        shared: queue.Queue = queue.Queue()
        clients = [_Client(dev, kernel, report, lock, shared, seed=i + int(time.time()))
                   for i in range(threads)]
        for c in clients:
            c.make_graph()
        t0 = time.perf_counter()
        workers = [threading.Thread(target=c.run, args=(ops_per_thread,)) for c in clients]
        for w in workers:
            w.start()
        stop_gc = threading.Event()

        def collector() -> None:  # the garbage collector runs at random moments
            while not stop_gc.wait(random.uniform(0.01, 0.1)):
                gc.collect()

        gct = threading.Thread(target=collector)
        gct.start()
        for w in workers:
            w.join()
        stop_gc.set()
        gct.join()
        report.seconds = time.perf_counter() - t0
        while not shared.empty():
            b = shared.get_nowait()
            (b.buffer if hasattr(b, "buffer") else b).free()
            report.freed_by_other_thread += 1
        for c in clients:
            c.graph.close()
            c.g_in.free()
            c.g_out.free()
        del clients, workers, c
        gc.collect()
        dev.synchronize().result(WAIT_S)
        report.pool_used_end = dev.stats().result(WAIT_S).pool_used_bytes
    finally:
        pinned = dev._worker.pinned
        dev.close()
    report.pinned_blocks_after_close = len(pinned.blocks())
    return report
