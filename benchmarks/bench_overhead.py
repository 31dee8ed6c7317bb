"""Per-message overhead: gpumsg beside a bare service making the same calls, in one run.

The bare service (``BareService`` below) is the floor of this architecture under the GIL: one
client thread posts ``(fn, args, Future)`` on a ``SimpleQueue``; one device thread calls
``fn(stream, *args)`` for each (the same ctypes ``cublasSgemm_v2``, ``cuMemAllocFromPoolAsync``,
``cublasSdot_v2``, ``cuMemcpy*Async`` that gpumsg makes), records one event per batch, waits for
it and resolves the batch's futures itself. gpumsg adds validated messages, buffer tracking,
cross-stream ordering, typed errors and completion that never blocks the device thread; the
ratio gpumsg / bare is what that costs per message.

Cases: 64^3 SGEMM pipelined and round trip, ``Stats``, alloc+free round trip, alloc pipelined,
1M ``dot`` round trip, 1 KiB host-to-device and device-to-host round trips, and 8 client threads
sharing one device (aggregate ops/s beside one thread). torch and CuPy are measured beside them.
Each gpumsg/bare pair is measured ``ROUNDS`` times alternately; medians.
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from queue import SimpleQueue
from typing import Any

import numpy as np
from _common import api, median_us, rate_us, write_results

import gpumsg

N_RT = 1500
N_PIPE = 2000
ROUNDS = 3
THREADS = 8
THREAD_OPS = 8000  # operations in all, split among the threads
#: the thread rows: one thread and eight alternate, this many times each; each row reports the
#: median of the rounds' ratios (a round's two measurements share the host's state of the moment)
THREAD_ROUNDS = 5


class BareService:
    """One device thread draining a SimpleQueue of ``(fn, args, future)``; one event per batch,
    waited for on that thread, which then answers the batch (a callable result is called first:
    a host read after the copy that fed it)."""

    def __init__(self, cu: Any, ctx: Any) -> None:
        self.q: SimpleQueue = SimpleQueue()
        self.stream: Any = None
        ready = threading.Event()

        def run() -> None:
            cu.cuCtxSetCurrent(ctx)
            stream = self.stream = cu.cuStreamCreate(1)[1]
            event = cu.cuEventCreate(2)[1]
            get, get_nowait, qsize = self.q.get, self.q.get_nowait, self.q.qsize
            ready.set()
            while True:
                batch = [get()]
                for _ in range(min(qsize(), 63)):
                    batch.append(get_nowait())
                values = []
                for fn, args, _fut in batch:
                    if fn is None:
                        return
                    values.append(fn(stream, *args))
                cu.cuEventRecord(event, stream)
                cu.cuEventSynchronize(event)
                for (_fn, _args, fut), value in zip(batch, values):
                    fut.set_result(value() if callable(value) else value)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait()

    def post(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        self.q.put((fn, args, fut))
        return fut

    def close(self) -> None:
        self.q.put((None, (), None))
        self.thread.join()


def start_bare(cu: Any, host: list[np.ndarray], x: np.ndarray,
               y: np.ndarray) -> tuple[BareService, BareOps]:
    """The bare service on device 0's primary context, and its buffers."""
    ctx = cu.cuCtxGetCurrent()[1]
    if not int(ctx):
        ctx = cu.cuDevicePrimaryCtxRetain(cu.cuDeviceGet(0)[1])[1]
    cu.cuCtxSetCurrent(ctx)
    svc = BareService(cu, ctx)
    return svc, BareOps(cu, svc, host, x, y)


def _ok(status: int) -> None:
    if status:
        raise RuntimeError(f"status {status}")


class BareOps:
    """The device-thread side of each case for the bare service, and its buffers."""

    def __init__(self, cu: Any, service: BareService, host: list[np.ndarray], x: np.ndarray,
                 y: np.ndarray) -> None:
        from gpumsg.libs._loader import load

        self.cu = cu
        self.svc = service
        lib = load("cublas")
        s = service.stream
        self.handles = []
        for mode in (0, 1):  # host pointer mode (GEMM), device pointer mode (dot)
            h = ctypes.c_void_p()
            _ok(lib.cublasCreate_v2(ctypes.byref(h)))
            _ok(lib.cublasSetStream_v2(h.value, int(s)))
            _ok(lib.cublasSetPointerMode_v2(h.value, mode))
            self.handles.append(h.value)
        self.lib = lib
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.a, self.b = (self._upload(h) for h in host)
        self.c = int(cu.cuMemAlloc(64 * 64 * 4)[1])
        self.x, self.y = self._upload(x), self._upload(y)
        self.n = x.size
        self.slot = int(cu.cuMemAlloc(16)[1])
        self.pinned = int(cu.cuMemHostAlloc(1 << 12, 1)[1])
        self.pinned_view = np.ctypeslib.as_array(
            ctypes.cast(self.pinned, ctypes.POINTER(ctypes.c_uint8)), shape=(1 << 12,))
        self.kib = int(cu.cuMemAlloc(1024)[1])
        props = cu.CUmemPoolProps()
        props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = 0
        self.pool = cu.cuMemPoolCreate(props)[1]
        cu.cuMemPoolSetAttribute(self.pool,
                                 cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                 cu.cuuint64_t((1 << 64) - 1))
        self.batches = 0

    def _upload(self, arr: np.ndarray) -> int:
        ptr = int(self.cu.cuMemAlloc(arr.nbytes)[1])
        self.cu.cuMemcpyHtoD(ptr, arr.ctypes.data, arr.nbytes)
        return ptr

    # each runs on the bare device thread: fn(stream, *args)
    def sgemm(self, stream: Any) -> None:
        _ok(self.lib.cublasSgemm_v2(self.handles[0], 0, 0, 64, 64, 64, ctypes.byref(self.one),
                                    self.a, 64, self.b, 64, ctypes.byref(self.zero), self.c, 64))

    def stats(self, stream: Any) -> tuple:
        return (self.svc.q.qsize(), self.batches)

    def alloc(self, stream: Any, nbytes: int) -> int:
        err, ptr = self.cu.cuMemAllocFromPoolAsync(nbytes, self.pool, stream)
        _ok(int(err))
        return int(ptr)

    def free(self, stream: Any, ptr: int) -> None:
        _ok(int(self.cu.cuMemFreeAsync(ptr, stream)[0]))

    def dot(self, stream: Any) -> Callable[[], float]:
        _ok(self.lib.cublasSdot_v2(self.handles[1], self.n, self.x, 1, self.y, 1, self.slot))
        _ok(int(self.cu.cuMemcpyDtoHAsync(self.pinned, self.slot, 4, stream)[0]))
        view = self.pinned_view
        return lambda: float(view[:4].view(np.float32)[0])

    def h2d(self, stream: Any, nbytes: int) -> None:
        _ok(int(self.cu.cuMemcpyHtoDAsync(self.kib, self.pinned, nbytes, stream)[0]))

    def d2h(self, stream: Any, nbytes: int) -> Callable[[], np.ndarray]:
        _ok(int(self.cu.cuMemcpyDtoHAsync(self.pinned, self.kib, nbytes, stream)[0]))
        view = self.pinned_view
        return lambda: view[:nbytes].view(np.float32).copy()

    def close(self) -> None:
        for h in self.handles:
            self.lib.cublasDestroy_v2(h)


def paired(ours: Callable[[], float], bare: Callable[[], float]) -> tuple[float, float]:
    """Median of ROUNDS alternating measurements of each."""
    a, b = [], []
    for _ in range(ROUNDS):
        b.append(bare())
        a.append(ours())
    return statistics.median(a), statistics.median(b)


def pipelined(issue: Callable[[], Future], n: int = N_PIPE) -> float:
    """µs per operation: n issued back to back, then the last awaited."""
    last: list[Future] = [issue()]

    def one() -> None:
        last[0] = issue()

    return rate_us(one, lambda: last[0].result(), n, repeats=3)


def alloc_pipelined(alloc: Callable[[], Future], release: Callable[[list], None],
                    n: int = N_PIPE) -> float:
    """µs per allocation issued back to back (the last awaited); freed after the clock."""
    runs = []
    for _ in range(4):
        keep = []
        t0 = time.perf_counter_ns()
        for _ in range(n):
            keep.append(alloc())
        keep[-1].result()
        runs.append((time.perf_counter_ns() - t0) / n / 1e3)
        release(keep)
    return statistics.median(runs[1:])


def operands(dev: Any, host: list[np.ndarray], xh: np.ndarray, yh: np.ndarray) -> tuple:
    """gpumsg's buffers for the cases, made and awaited: ``(a, b, c, x, y, buf)``: the two 64^3
    SGEMM inputs and its output, the two ``dot`` vectors, and a 1 KiB buffer."""
    a, b = (dev.to_device(h).result() for h in host)
    c = dev.alloc((64, 64), np.float32, order="F").result()
    x, y = dev.to_device(xh).result(), dev.to_device(yh).result()
    buf = dev.alloc(256, np.float32).result()
    return a, b, c, x, y, buf


@contextlib.contextmanager
def side_by_side(vector: int = 1 << 20) -> Iterator[tuple[Any, BareService, BareOps, tuple]]:
    """For the diagnostics in tools/: gpumsg's device 0 and the bare service beside it, with
    random operands, closed on exit. Yields ``(dev, service, ops, operands)``, the last being
    :func:`operands`'s six buffers (``vector`` elements in the two ``dot`` vectors)."""
    from cuda.bindings import driver as cu

    rng = np.random.default_rng()
    host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
    xh, yh = (rng.standard_normal(vector).astype(np.float32) for _ in range(2))
    dev = gpumsg.open_device(0)
    try:
        svc, ops = start_bare(cu, host, xh, yh)
        try:
            yield dev, svc, ops, operands(dev, host, xh, yh)
        finally:
            ops.close()
            svc.close()
    finally:
        dev.close()


def aggregate(make_op: Callable[[], Callable[[], Future]], threads: int, total: int,
              wait_each: bool) -> float:
    """Operations per second of ``threads`` client threads issuing ``total`` in all (each
    awaits every operation with ``wait_each``, else only its last)."""
    per_thread = total // threads
    start = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            op = make_op()
            start.wait()
            last = None
            for _ in range(per_thread):
                last = op()
                if wait_each:
                    last.result()
            last.result()  # type: ignore[union-attr]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return per_thread * threads / elapsed


def main() -> None:
    from cuda.bindings import driver as cu

    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    rng = np.random.default_rng()
    host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
    xh, yh = (rng.standard_normal(1 << 20).astype(np.float32) for _ in range(2))
    kib = rng.standard_normal(256).astype(np.float32)  # 1 KiB
    dev = gpumsg.open_device(0)
    try:
        svc, ops = start_bare(cu, host, xh, yh)
        post = svc.post

        a, b, c, x, y, buf = operands(dev, host, xh, yh)
        sgemm = api(dev, "sgemm", "cublas.sgemm")
        dot = api(dev, "cublas.dot", "cublas.dot")

        def row(case: str, ours: float, bare: float, target: float | None,
                note: str = "") -> dict[str, Any]:
            r = {"case": case, "gpumsg_us": ours, "bare_us": bare, "ratio": ours / bare,
                 "target": f"<= {target}x" if target else "", "met": "",
                 "torch_us": "", "cupy_us": "", "note": note}
            if target:
                r["met"] = "yes" if ours / bare <= target else "no"
            rows.append(r)
            return r

        # -- 64^3 SGEMM ------------------------------------------------------------------------
        sg_pipe = row("64^3 SGEMM pipelined (per op)", *paired(
            lambda: pipelined(lambda: sgemm(a, b, c, 64, 64, 64)),
            lambda: pipelined(lambda: post(ops.sgemm))), 1.15)
        sg_rt = row("64^3 SGEMM round trip", *paired(
            lambda: median_us(lambda: sgemm(a, b, c, 64, 64, 64).result(), N_RT),
            lambda: median_us(lambda: post(ops.sgemm).result(), N_RT)), 1.15)
        ref = host[0].astype(np.float64) @ host[1]
        err_ours = np.abs(dev.copy_to_host(c).result() - ref).max()
        out = np.empty((64, 64), np.float32, order="F")
        cu.cuMemcpyDtoH(out.ctypes.data, ops.c, out.nbytes)
        err_bare = np.abs(out - ref).max()
        notes.append(f"64^3 SGEMM checked against NumPy float64: max abs error gpumsg "
                     f"{err_ours:.2e}, bare {err_bare:.2e}")
        assert err_ours < 1e-3 and err_bare < 1e-3

        # -- Stats ------------------------------------------------------------------------------
        row("Stats round trip", *paired(
            lambda: median_us(lambda: dev.stats().result(), N_RT),
            lambda: median_us(lambda: post(ops.stats).result(), N_RT)), 1.15,
            "bare: answers a tuple of its counters")
        row("Stats pipelined (per op)", *paired(
            lambda: pipelined(dev.stats), lambda: pipelined(lambda: post(ops.stats))), None)

        # -- alloc and free ---------------------------------------------------------------------
        def ours_af() -> None:
            dev.alloc(256, np.float32).result().free().result()

        def bare_af() -> None:
            post(ops.free, post(ops.alloc, 1024).result()).result()

        af = row("alloc+free round trip (1 KiB; two round trips)", *paired(
            lambda: median_us(ours_af, N_RT), lambda: median_us(bare_af, N_RT)), 1.15)

        def release_ours(keep: list) -> None:
            keep.clear()  # the finalizers post the frees
            dev.synchronize().result()

        def release_bare(keep: list) -> None:
            for f in keep:
                post(ops.free, f.result())
            post(ops.stats).result()

        ap = row("alloc pipelined (per alloc)", *paired(
            lambda: alloc_pipelined(lambda: dev.alloc(256, np.float32), release_ours),
            lambda: alloc_pipelined(lambda: post(ops.alloc, 1024), release_bare)), None,
            "target: <= 10 us per alloc")
        ap["target"] = "<= 10 us"
        ap["met"] = "yes" if ap["gpumsg_us"] <= 10 else "no"

        # -- dot --------------------------------------------------------------------------------
        dt = row("dot 1M f32 round trip", *paired(
            lambda: median_us(lambda: dot(x, y).result(), N_RT),
            lambda: median_us(lambda: post(ops.dot).result(), N_RT)), 1.3)
        ref_dot = float(np.dot(xh.astype(np.float64), yh))
        got = (dot(x, y).result(), post(ops.dot).result())
        notes.append(f"dot checked against NumPy float64 ({ref_dot:.4f}): gpumsg {got[0]:.4f}, "
                     f"bare {got[1]:.4f}")
        assert all(abs(g - ref_dot) < 1e-3 * np.sqrt(xh.size) for g in got)

        # -- 1 KiB copies -----------------------------------------------------------------------
        def bare_h2d() -> None:
            np.copyto(ops.pinned_view[:1024], kib.view(np.uint8))  # the caller's array, staged
            post(ops.h2d, 1024).result()

        h2d = row("1 KiB H2D round trip", *paired(
            lambda: median_us(lambda: dev.copy_from_host(buf, kib).result(), N_RT),
            lambda: median_us(bare_h2d, N_RT)), 1.3)
        d2h = row("1 KiB D2H round trip", *paired(
            lambda: median_us(lambda: dev.copy_to_host(buf).result(), N_RT),
            lambda: median_us(lambda: post(ops.d2h, 1024).result(), N_RT)), 1.3)
        assert np.array_equal(dev.copy_to_host(buf).result(), kib)
        assert np.array_equal(post(ops.d2h, 1024).result(), kib)

        # -- 8 client threads -------------------------------------------------------------------
        def ours_gemm_op() -> Callable[[], Future]:
            mine = dev.alloc((64, 64), np.float32, order="F").result()
            return lambda: sgemm(a, b, mine, 64, 64, 64)

        def bare_gemm_op() -> Callable[[], Future]:
            return lambda: post(ops.sgemm)

        threads: dict[str, Any] = {}
        for wait_each, label in ((False, "pipelined"), (True, "round trips")):
            for name, make in (("gpumsg", ours_gemm_op), ("bare", bare_gemm_op)):
                ones, manys = [], []
                for _ in range(THREAD_ROUNDS):
                    ones.append(aggregate(make, 1, THREAD_OPS, wait_each))
                    manys.append(aggregate(make, THREADS, THREAD_OPS, wait_each))
                threads[f"{name} {label}"] = {
                    "one_ops_per_s": ones, f"{THREADS}_ops_per_s": manys,
                    "ratio": statistics.median(m / o for m, o in zip(manys, ones, strict=True))}
            ours, bare = threads[f"gpumsg {label}"], threads[f"bare {label}"]
            o8 = ours["ratio"]
            rows.append({"case": f"{THREADS} threads, 64^3 SGEMM {label}: aggregate / 1 thread",
                         "gpumsg_us": o8, "bare_us": bare["ratio"], "ratio": "",
                         "target": ">= 1 (gpumsg)", "met": "yes" if o8 >= 1 else "no",
                         "note": "ops/s medians gpumsg "
                                 f"{statistics.median(ours['one_ops_per_s']):.0f} -> "
                                 f"{statistics.median(ours[f'{THREADS}_ops_per_s']):.0f}, bare "
                                 f"{statistics.median(bare['one_ops_per_s']):.0f} -> "
                                 f"{statistics.median(bare[f'{THREADS}_ops_per_s']):.0f} "
                                 "(columns hold the ratio, not us)"})

        # -- peers ------------------------------------------------------------------------------
        try:
            import torch

            torch.backends.cuda.matmul.allow_tf32 = False
            ta, tb = (torch.from_numpy(np.ascontiguousarray(h)).cuda() for h in host)
            tc = torch.empty(64, 64, device="cuda")
            tx, ty = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).cuda()
            tk, tkh = torch.empty(256, device="cuda"), torch.from_numpy(kib)
            sync = torch.cuda.synchronize
            sg_pipe["torch_us"] = rate_us(lambda: torch.mm(ta, tb, out=tc), sync, N_PIPE, 3)
            sg_rt["torch_us"] = median_us(lambda: (torch.mm(ta, tb, out=tc), sync()), N_RT)
            af["torch_us"] = median_us(lambda: torch.empty(256, device="cuda"), N_RT)
            dt["torch_us"] = median_us(lambda: torch.dot(tx, ty).item(), N_RT)
            h2d["torch_us"] = median_us(lambda: (tk.copy_(tkh), sync()), N_RT)
            d2h["torch_us"] = median_us(lambda: tk.cpu(), N_RT)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"torch unavailable: {exc!r}")
        try:
            import cupy

            ca, cb = (cupy.asarray(h) for h in host)
            cc = cupy.empty((64, 64), cupy.float32)
            cx, cy = cupy.asarray(xh), cupy.asarray(yh)
            ck = cupy.empty(256, cupy.float32)
            csync = cupy.cuda.Device().synchronize
            sg_pipe["cupy_us"] = rate_us(lambda: cupy.matmul(ca, cb, out=cc), csync, N_PIPE, 3)
            sg_rt["cupy_us"] = median_us(lambda: (cupy.matmul(ca, cb, out=cc), csync()), N_RT)
            af["cupy_us"] = median_us(lambda: cupy.empty(256, cupy.float32), N_RT)
            dt["cupy_us"] = median_us(lambda: float(cupy.dot(cx, cy)), N_RT)
            h2d["cupy_us"] = median_us(lambda: (ck.set(kib), csync()), N_RT)
            d2h["cupy_us"] = median_us(lambda: ck.get(), N_RT)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"CuPy unavailable: {exc!r}")
        try:
            raw_pipe, raw_rt = raw_cublas(cu, ops)
            notes.append(f"the library call alone (ctypes cublasSgemm_v2 64^3 on a stream of its "
                         f"own): {raw_pipe:.1f} us/op issue rate, {raw_rt:.1f} us issue + sync")
        except Exception as exc:  # noqa: BLE001
            notes.append(f"raw cuBLAS unavailable: {exc!r}")
        replays = api(dev, "cublas.replay_info", "cublas.replay_info")().result()
        notes.append("gpumsg's GEMMs replayed as CUDA graphs (GPUMSG_BLAS_REPLAY=0 turns it "
                     f"off; the bare service calls cuBLAS): {replays}")
        ops.close()
        svc.close()
    finally:
        dev.close()
    notes.append(f"medians; gpumsg and bare measured alternately {ROUNDS} times each; round "
                 f"trips over {N_RT} calls, pipelined = {N_PIPE} issued then the last awaited "
                 f"(median of 3); torch/CuPy alloc+free: their caching allocators (no round "
                 f"trip); threads: {THREAD_OPS} ops in all over 1 or {THREADS} threads, the two "
                 f"alternating {THREAD_ROUNDS} times, the median of the rounds' ratios")
    write_results("overhead", rows, notes,
                  ["case", "gpumsg_us", "bare_us", "ratio", "target", "met", "torch_us",
                   "cupy_us"], extra={"threads_ops_per_s": threads})


def raw_cublas(cu: Any, ops: BareOps) -> tuple[float, float]:
    """The bare library call through ctypes, no queue: the floor for any Python front end."""
    stream = cu.cuStreamCreate(1)[1]
    lib, h = ops.lib, ops.handles[0]
    _ok(lib.cublasSetStream_v2(h, int(stream)))
    fn = lib.cublasSgemm_v2
    pa, pb = ctypes.byref(ops.one), ctypes.byref(ops.zero)
    A, B, C = ops.a, ops.b, ops.c

    def issue() -> None:
        fn(h, 0, 0, 64, 64, 64, pa, A, 64, B, 64, pb, C, 64)

    def sync() -> None:
        cu.cuStreamSynchronize(stream)

    out = (rate_us(issue, sync, N_PIPE, 3), median_us(lambda: (issue(), sync()), N_RT))
    _ok(lib.cublasSetStream_v2(h, int(ops.svc.stream)))
    cu.cuStreamDestroy(stream)
    return out


if __name__ == "__main__":
    main()
