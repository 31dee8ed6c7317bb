"""Does the eight-thread row of ``bench_overhead`` depend on how long a round runs? (diagnostic,
GPU; stop 32).

The row times ``THREAD_OPS`` = 8000 pipelined 64^3 SGEMMs over one thread and over eight,
alternating, and reports the median of the rounds' ratios. If eight threads paid a fixed cost
per round (their start, their first calls, the last answers), longer rounds would move the
ratio towards its steady state. Here the same measurement (``bench_overhead.aggregate``) runs
at several totals, gpumsg and the bare service, ``rounds`` rounds each, totals interleaved.

Usage: python tools/threads_length.py [rounds] [total ...]   (JSON lines; $OUT/threads_length.json)
"""

from __future__ import annotations

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
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    totals = [int(v) for v in sys.argv[2:]] or [8000, 32000]
    with bo.side_by_side() as (dev, svc, ops, (a, b, *_)):
        def ours() -> Any:
            mine = dev.alloc((64, 64), np.float32).result()
            return lambda: dev.sgemm(a, b, mine, 64, 64, 64)

        def bare() -> Any:
            return lambda: svc.post(ops.sgemm)

        got: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for _ in range(rounds):
            for total in totals:
                for name, make in (("gpumsg", ours), ("bare", bare)):
                    one = bo.aggregate(make, 1, total, False)
                    many = bo.aggregate(make, bo.THREADS, total, False)
                    got.setdefault((name, total), []).append((one, many))
    rows = []
    for (name, total), pairs in got.items():
        row = {"side": name, "total_ops": total, "rounds": rounds,
               "ratio_median": statistics.median(m / o for o, m in pairs),
               "one_ops_per_s": statistics.median(o for o, _ in pairs),
               "eight_ops_per_s": statistics.median(m for _, m in pairs),
               "ratios": [m / o for o, m in pairs]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    save("threads_length.json", rows)


if __name__ == "__main__":
    main()
