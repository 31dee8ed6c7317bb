"""Do eight threads lose to one because each writes its own output? (diagnostic, GPU; stop 34)

``bench_overhead``'s eight-thread row gives each thread an output of its own, so the device
thread alternates among eight SGEMM graphs where one thread replays one. This times 8000
pipelined 64^3 SGEMMs (``bench_overhead.aggregate``) four ways, interleaved round by round:
one thread with one output, one thread cycling through eight outputs, eight threads with an
output each, eight threads sharing one output; the bare service's one and eight threads beside.

Usage: python tools/threads_outputs.py [rounds] [total]   (JSON lines; $OUT/threads_outputs.json)
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import bench_overhead as bo  # noqa: E402
from conv_timeline import save  # noqa: E402


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    total = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
    with bo.side_by_side() as (dev, svc, ops, (a, b, c, *_)):
        outs = [dev.alloc((64, 64), np.float32).result() for _ in range(bo.THREADS)]
        handed = itertools.cycle(outs)

        def shared() -> Any:
            return lambda: dev.sgemm(a, b, c, 64, 64, 64)

        def own() -> Any:
            mine = next(handed)
            return lambda: dev.sgemm(a, b, mine, 64, 64, 64)

        def cycling() -> Any:
            turn = itertools.cycle(outs)
            return lambda: dev.sgemm(a, b, next(turn), 64, 64, 64)

        def bare() -> Any:
            return lambda: svc.post(ops.sgemm)

        cases = {
            "1 thread, 1 output": (shared, 1),
            "1 thread, cycling 8 outputs": (cycling, 1),
            "8 threads, an output each": (own, bo.THREADS),
            "8 threads, 1 shared output": (shared, bo.THREADS),
            "bare, 1 thread": (bare, 1),
            "bare, 8 threads": (bare, bo.THREADS),
        }
        for make, threads in cases.values():  # warm: every graph captured before timing
            bo.aggregate(make, threads, 800, False)
        got: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, (make, threads) in cases.items():
                got[name].append(bo.aggregate(make, threads, total, False))
        print(dev.cublas.replay_info().result(), flush=True)
    base = got["1 thread, 1 output"]
    rows = []
    for name, rates in got.items():
        ref = got["bare, 1 thread"] if name.startswith("bare") else base
        row = {"case": name, "kops_per_s": round(statistics.median(rates) / 1e3, 2),
               "ratio_to_one_thread_paired": round(
                   statistics.median(r / o for r, o in zip(rates, ref)), 3),
               "rates": [round(r) for r in rates]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    save("threads_outputs.json", rows)


if __name__ == "__main__":
    main()
