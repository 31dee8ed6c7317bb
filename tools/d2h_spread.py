"""Why a 1 KiB D2H round trip reads 37-40 µs in some processes and 52-59 µs in others
(diagnostic, GPU): several fresh processes, each measuring gpumsg's and the bare service's 1 KiB
D2H and H2D round trips in alternating rounds, the device streams' answer counts (on the device
thread or handed to a watcher), and the legs of a D2H round trip (``roundtrip_timeline``).

    PYTHONPATH=$PWD python3 tools/d2h_spread.py [processes] [n]     (defaults: 6, 1500)

Writes ``$OUT/d2h_spread.json`` and ``.md`` when OUT is set.
"""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, "tools"))
from _fresh import child_main, in_fresh_processes  # noqa: E402

ROUNDS = 7


def child(n: int) -> dict[str, Any]:
    sys.path.insert(0, os.path.join(HERE, "benchmarks"))
    sys.path.insert(0, os.path.join(HERE, "tools"))
    import numpy as np
    from _common import median_us
    from bench_overhead import side_by_side

    kib = np.random.default_rng().standard_normal(256).astype(np.float32)
    with side_by_side(1 << 10) as (dev, svc, ops, (*_, buf)):  # buf: 1 KiB
        post = svc.post
        dev.copy_from_host(buf, kib).result()
        np.copyto(ops.pinned_view[:1024], kib.view(np.uint8))
        post(ops.h2d, 1024).result()
        ctx = dev._worker.ctx

        def counts() -> list[tuple[int, int, int]]:
            return [(s.answered, s.handed, s.watcher.completed) for s in ctx.streams]

        def bare_h2d() -> None:
            np.copyto(ops.pinned_view[:1024], kib.view(np.uint8))
            post(ops.h2d, 1024).result()

        cases = {
            "bare D2H": lambda: post(ops.d2h, 1024).result(),
            "gpumsg D2H": lambda: dev.copy_to_host(buf).result(),
            "bare H2D": bare_h2d,
            "gpumsg H2D": lambda: dev.copy_from_host(buf, kib).result(),
        }
        for fn in cases.values():
            median_us(fn, 300)
        rounds: dict[str, list[float]] = {k: [] for k in cases}
        before = counts()
        for _ in range(ROUNDS):
            for name, fn in cases.items():
                rounds[name].append(round(median_us(fn, n), 2))
        after = counts()
        assert np.array_equal(dev.copy_to_host(buf).result(), kib)
        streams = {s.name: [a - b for a, b in zip(after[i], before[i])]
                   for i, s in enumerate(ctx.streams)}
        import roundtrip_timeline as rt

        rt.instrument(dev)
        legs: dict[str, list[float]] = {name: [] for name, _, _ in rt.SEGMENTS}
        for _ in range(n):
            rt.MARKS.clear()
            rt.MARKS["call"] = rt._now()
            dev.copy_to_host(buf).result()
            rt.MARKS["returned"] = rt._now()
            for name, a, b in rt.SEGMENTS:
                if a in rt.MARKS and b in rt.MARKS:
                    legs[name].append((rt.MARKS[b] - rt.MARKS[a]) / 1e3)
        return {"rounds": rounds,
                "medians": {k: statistics.median(v) for k, v in rounds.items()},
                "streams (answered, handed, watcher completed)": streams,
                "D2H legs (median)": {k: round(statistics.median(v), 2)
                                      for k, v in legs.items() if v},
                "D2H legs (p90)": {k: round(sorted(v)[int(0.9 * len(v))], 2)
                                   for k, v in legs.items() if v}}


def main() -> None:
    if child_main(child):
        return
    procs = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
    results = []
    for i, r in enumerate(in_fresh_processes(__file__, procs, n, 300)):
        r["process"] = i
        results.append(r)
        m = r["medians"]
        print(f"process {i}: " + ", ".join(f"{k} {v:.1f}" for k, v in m.items())
              + f"; D2H/bare {m['gpumsg D2H'] / m['bare D2H']:.3f}; legs "
              + json.dumps(r["D2H legs (median)"]) + "; streams "
              + json.dumps(r["streams (answered, handed, watcher completed)"]), flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "d2h_spread.json"), "w") as f:
            json.dump(results, f, indent=1)
        sys.path.insert(0, os.path.join(HERE, "benchmarks"))
        from _common import environment

        env = environment()
        lines = [f"# d2h_spread\n\n{env.get('device', '')} · driver {env.get('driver', '')} · "
                 f"{env.get('date', '')}\n",
                 "| process | gpumsg D2H | bare D2H | ratio | gpumsg H2D | bare H2D | ratio |",
                 "|---|---|---|---|---|---|---|"]
        for r in results:
            m = r["medians"]
            lines.append(f"| {r['process']} | {m['gpumsg D2H']:.1f} | {m['bare D2H']:.1f} | "
                         f"{m['gpumsg D2H'] / m['bare D2H']:.3f} | {m['gpumsg H2D']:.1f} | "
                         f"{m['bare H2D']:.1f} | {m['gpumsg H2D'] / m['bare H2D']:.3f} |")
        with open(os.path.join(out, "d2h_spread.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
