"""Is gpumsg's extra GPU time per strided-batched GEMM its graphs, its stream or its launch path?
(diagnostic, H100; no profiler).

512 x 128^3 bf16. Every way is timed the same way: a ``torch.cuda._sleep`` holds the stream,
a start event is recorded behind it, ``n`` calls are enqueued, and an end event is recorded
right behind the last one, all before the sleep ends; (end - start) / n is the GPU's time per
call. For gpumsg the stream is its compute stream (``torch.cuda.ExternalStream``), the sleep and
the events are torch's on it, and the end event is recorded once a ``Stats`` round trip says
the device thread has issued the n calls. Ways:

- ``torch direct`` / ``torch graph`` on torch's default stream, on a stream torch made, and on
  gpumsg's compute stream (gpumsg idle meanwhile);
- ``gpumsg``: ``dev.cublas.gemm_strided_batched`` (replayed as a graph unless
    ``GPUMSG_BLAS_REPLAY=0``).

Ways rotate, ``rounds`` times; medians. A way whose enqueue outlasted the sleep is flagged.

Usage: python tools/graph_stream_gap.py [n] [rounds]   (JSON lines; $OUT/graph_stream_gap*.json)
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from conv_timeline import save
from strided_gap import probe_setup

import gpumsg


def timed(torch: Any, stream: Any, enqueue: Callable[[], None], settle: Callable[[], None],
          cycles: int, sleep_s: float, n: int) -> tuple[float, bool]:
    """(GPU µs per call, whether the host may have outrun the sleep) of ``enqueue`` (n calls)
    on ``stream`` behind a sleep of ``cycles`` (``sleep_s`` seconds when measured alone);
    ``settle`` returns once the calls are on the stream."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(cycles)
        start.record(stream)
    enqueue()
    settle()
    with torch.cuda.stream(stream):
        end.record(stream)
    outran = time.perf_counter() - t0 > 0.9 * sleep_s  # the GPU may have waited for the host
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n, outran


def main() -> None:
    import torch
    n, rounds, batch, s, hosts, (ta, tb, tc), replay = probe_setup(torch, 5)
    cycles = 2_000 * 40 * n  # ~40 µs per call at ~2 GHz: longer than any way takes to enqueue
    with gpumsg.open_device(0) as dev:
        prelude = os.environ.get("GAP_PRELUDE", "")
        if prelude == "open":  # the cuBLAS handle (and its workspace) made ahead, then idle
            dev.open_libraries("cublas").result()
            dev.synchronize().result()
        elif prelude == "sgemm":  # another GEMM captured first on the handle
            x = dev.to_device(np.ones((64, 64), np.float32)).result()
            y = dev.alloc((64, 64), np.float32).result()
            for _ in range(3):
                dev.sgemm(x, x, y, 64, 64, 64)
            dev.synchronize().result()
        a, b = (dev.to_device(h).result() for h in hosts)
        c = dev.alloc((batch, s, s), "bf16", order="C").result()
        ours_stream = torch.cuda.ExternalStream(dev._compute_stream_handle())
        streams = {"default": torch.cuda.default_stream(), "made": torch.cuda.Stream(),
                   "gpumsg's": ours_stream}
        graphs: dict[str, Any] = {}
        for name, st in streams.items():
            with torch.cuda.stream(st):
                torch.bmm(ta, tb, out=tc)  # the library's first call outside the capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            with torch.cuda.graph(g, stream=side):
                torch.bmm(ta, tb, out=tc)
            graphs[name] = g
        torch.cuda.synchronize()

        def ours() -> Any:
            return dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s)

        for _ in range(300):
            ours()
        dev.synchronize().result()

        def torch_way(st: Any, graph: Any) -> tuple[Callable[[], float], Any]:
            def enqueue() -> None:
                with torch.cuda.stream(st):
                    if graph is None:
                        for _ in range(n):
                            torch.bmm(ta, tb, out=tc)
                    else:
                        for _ in range(n):
                            graph.replay()
            return enqueue, st

        ways: dict[str, tuple[Callable[[], None], Any, Callable[[], None]]] = {}
        for name, st in streams.items():
            ways[f"torch direct, {name} stream"] = (*torch_way(st, None), lambda: None)
            ways[f"torch graph, {name} stream"] = (*torch_way(st, graphs[name]), lambda: None)

        def gpumsg_enqueue() -> None:
            for _ in range(n):
                ours()

        # graphs of the same bmm captured the way gpumsg captures (the driver's stream capture,
        # thread-local, on the stream they are launched on) and variations, launched on
        # gpumsg's stream with the driver's cuGraphLaunch
        from cuda.bindings import driver as cu

        def driver_graph(capture_on: Any, flags: int, upload: bool) -> Any:
            handle = capture_on.cuda_stream
            with torch.cuda.stream(capture_on):
                torch.bmm(ta, tb, out=tc)  # torch's workspace for this stream, made outside
            torch.cuda.synchronize()
            mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            assert not cu.cuStreamBeginCapture(handle, mode)[0]
            with torch.cuda.stream(capture_on):
                torch.bmm(ta, tb, out=tc)
            err, graph = cu.cuStreamEndCapture(handle)
            assert not err, err
            err, exec_ = cu.cuGraphInstantiate(graph, flags)
            assert not err, err
            if upload:
                assert not cu.cuGraphUpload(exec_, ours_stream.cuda_stream)[0]
            torch.cuda.synchronize()
            return exec_

        def launching(exec_: Any) -> Callable[[], None]:
            handle = ours_stream.cuda_stream

            def enqueue() -> None:
                for _ in range(n):
                    cu.cuGraphLaunch(exec_, handle)
            return enqueue

        side = torch.cuda.Stream()
        for label, capture_on, flags, upload in (
                ("captured on gpumsg's stream, flags 0", ours_stream, 0, False),
                ("captured on a side stream, flags 0", side, 0, False),
                ("captured on gpumsg's stream, flags 0, uploaded", ours_stream, 0, True),
                ("captured on gpumsg's stream, auto-free flag", ours_stream, 1, False)):
            ways[f"driver graph, {label}"] = (
                launching(driver_graph(capture_on, flags, upload)), ours_stream, lambda: None)
        # gpumsg with its cuBLAS workspace moved elsewhere (set on its handle from this thread
        # while the device thread is idle), each on a new output buffer so that its graph is
        # captured anew with that workspace: torch's caching allocator (cudaMalloc), cuMemAlloc,
        # the device's default pool (cuMemAllocAsync) and a second pool of gpumsg's kind
        from cuda.bindings import driver as cu_

        h = dev._worker.ctx.libraries["cublas"]
        ws_bytes = 32 << 20
        keep: list[Any] = []

        def ws_torch() -> int:
            t = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda")
            keep.append(t)
            return t.data_ptr()

        def ws_mem_alloc() -> int:
            err, ptr = cu_.cuMemAlloc(ws_bytes)
            assert not err
            return int(ptr)

        def ws_default_pool() -> int:
            err, ptr = cu_.cuMemAllocAsync(ws_bytes, ours_stream.cuda_stream)
            assert not err
            torch.cuda.synchronize()
            return int(ptr)

        def ws_new_pool() -> int:
            pool = dev._worker.ctx.backend.pool_create(1 << 62)
            keep.append(pool)
            ptr = dev._worker.ctx.backend.pool_alloc(pool, ws_bytes, ours_stream.cuda_stream)
            torch.cuda.synchronize()
            return ptr

        def on_workspace(ptr: int, operands: Any = None) -> Callable[[], None]:
            ga, gb = (a, b) if operands is None else operands[:2]
            gc = (dev.alloc((batch, s, s), "bf16", order="C").result() if operands is None
                  else operands[2])
            dev.synchronize().result()
            assert not h.lib.cublasSetWorkspace_v2(h.raw_handle, ptr, ws_bytes)

            def call() -> Any:
                return dev.cublas.gemm_strided_batched(gb, ga, gc, s, s, s, batch, s * s, s * s,
                                                       s * s)
            for _ in range(5):
                call()
            dev.synchronize().result()

            def enqueue() -> None:
                for _ in range(n):
                    call()
            return enqueue

        if os.environ.get("GAP_WORKSPACES", "1") == "1":
            for label, make in (("torch's caching allocator", ws_torch),
                                ("cuMemAlloc", ws_mem_alloc),
                                ("the default pool", ws_default_pool),
                                ("a second pool of gpumsg's", ws_new_pool)):
                ways[f"gpumsg, cuBLAS workspace from {label}"] = (
                    on_workspace(make()), ours_stream, lambda: dev.stats().result())
            tops = [dev.from_dlpack(t).result() for t in (ta, tb, tc)]
            ways["gpumsg, workspace and operands in torch's memory"] = (
                on_workspace(ws_torch(), tops), ours_stream, lambda: dev.stats().result())
            # the handle's own workspace back: on a new output buffer, and on the first one
            # with the graphs made so far destroyed (captured again)
            ways["gpumsg, its own workspace again, new output"] = (
                on_workspace(h._ws), ours_stream, lambda: dev.stats().result())
            if os.environ.get("GAP_RECAPTURE") == "1":  # every graph made again, now
                h.replays.close()
                for _ in range(5):
                    ours()
                dev.synchronize().result()
        ways[f"gpumsg (replays {'on' if replay != '0' else 'off'})"] = (
            gpumsg_enqueue, ours_stream, lambda: dev.stats().result())
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        torch.cuda._sleep(cycles)
        e1.record()
        e1.synchronize()
        sleep_s = e0.elapsed_time(e1) * 1e-3
        print(json.dumps({"sleep_ms": sleep_s * 1e3, "cycles": cycles}), flush=True)
        got: dict[str, list[float]] = {k: [] for k in ways}
        outran: dict[str, int] = {k: 0 for k in ways}
        names = list(ways)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                enqueue, st, settle = ways[name]
                us, late = timed(torch, st, enqueue, settle, cycles, sleep_s, n)
                got[name].append(us)
                outran[name] += late
        dev.synchronize().result()
        if os.environ.get("GAP_PROFILE") == "1":  # each gpumsg way's timeline, once
            from strided_gap import busiest, profiled, split

            for name, (enqueue, _st, settle) in ways.items():
                if name.startswith("gpumsg"):
                    def body(enqueue: Any = enqueue, settle: Any = settle) -> None:
                        enqueue()
                        settle()
                        dev.synchronize().result()
                    print(json.dumps({"profiled": name, **split(busiest(profiled(torch, body)))}),
                          flush=True)
    rows = [{"way": k, "gpu_us_per_call": statistics.median(v), "all": v,
             "outran_sleep": outran[k], "n": n, "rounds": rounds} for k, v in got.items()]
    for row in rows:
        print(json.dumps(row), flush=True)
    save(f"graph_stream_gap_replay{replay}.json", rows)


if __name__ == "__main__":
    main()
