"""What a CUDA graph launch costs the GPU, beside the same call launched directly (diagnostic,
torch only, H100).

The stream is held by a long ``torch.cuda._sleep`` while the host enqueues ``n`` calls, so the
host's pace is out of it: the time between an event after the sleep and one after the last call,
divided by ``n``, is the GPU's time per call (kernels and the gaps between them). Each case is
measured directly (``torch.bmm``/``torch.mm``) and as one captured call replayed ``n`` times
(``torch.cuda.CUDAGraph.replay``), and each of the two followed by an event record (timing
off, as gpumsg's completion events), alternating, ``rounds`` times; medians. If the host took
longer to enqueue than the sleep lasted, the row says so (its figure would include host time).

Usage: python tools/graph_gap.py [n] [rounds] [json_path]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def gpu_us_per_call(torch: Any, fn: Callable[[], None], n: int, sleep_cycles: int
                    ) -> tuple[float, float]:
    """(GPU µs per call, host µs per call to enqueue) for ``n`` calls queued behind a sleep."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(sleep_cycles)
    start.record()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = time.perf_counter() - t0
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n, host * 1e6 / n


def main() -> None:
    import torch
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    out_path = sys.argv[3] if len(sys.argv) > 3 else None
    torch.manual_seed(0)
    cases: dict[str, Callable[[], None]] = {}
    a = torch.randn(512, 128, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 128, 128, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    cases["bmm 512 x 128^3 bf16"] = lambda: torch.bmm(a, b, out=c)
    x = torch.randn(64, 64, device="cuda")
    y = torch.randn(64, 64, device="cuda")
    z = torch.empty_like(x)
    cases["mm 64^3 fp32"] = lambda: torch.mm(x, y, out=z)
    graphs: dict[str, Any] = {}
    for name, fn in cases.items():
        fn()  # the library's first call (workspace, heuristics) outside the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        graphs[name] = g
    # the sleep must outlast the host's enqueueing: calibrate cycles per µs once
    probe = 10_000_000
    t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t[0].record()
    torch.cuda._sleep(probe)
    t[1].record()
    t[1].synchronize()
    cycles_per_us = probe / (t[0].elapsed_time(t[1]) * 1e3)
    rows = []
    events = [torch.cuda.Event() for _ in range(n)]  # enable_timing=False
    pos = [0]

    def with_event(call: Callable[[], None]) -> Callable[[], None]:
        def both() -> None:
            call()
            events[pos[0] % n].record()
            pos[0] += 1
        return both

    for name, fn in cases.items():
        replay = graphs[name].replay
        ways = {"direct": fn, "graph": replay, "direct+event": with_event(fn),
                "graph+event": with_event(replay)}
        seen: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
        for r in range(rounds):
            order = list(ways)
            for way in order[r % len(order):] + order[:r % len(order)]:
                sleep_us = 3 * n * 25.0  # three times a generous host cost per call
                seen[way].append(gpu_us_per_call(torch, ways[way], n,
                                                 int(sleep_us * cycles_per_us)))
        row: dict[str, Any] = {"case": name, "n": n, "rounds": rounds}
        for way, got in seen.items():
            row[f"{way}_gpu_us"] = statistics.median(g for g, _ in got)
            row[f"{way}_host_us"] = statistics.median(h for _, h in got)
            row[f"{way}_host_outran_sleep"] = any(h * n > 3 * n * 25.0 for _, h in got)
        row["graph_over_direct"] = row["graph_gpu_us"] / row["direct_gpu_us"]
        row["event_costs_direct_us"] = row["direct+event_gpu_us"] - row["direct_gpu_us"]
        row["event_costs_graph_us"] = row["graph+event_gpu_us"] - row["graph_gpu_us"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
