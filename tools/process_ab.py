"""Diagnostic: process isolation's round trips with and without the worker's idle spin
(``GPUMSG_WORKER_SPIN_US``, fixed per worker: one device each way) and with and without callers
reading their answers themselves (``supervision.client.LEAD``, switched in place), beside a
thread-isolated device, all open at once and measured in turn, the order rotating round by
round; medians over the rounds.

    python3 tools/process_ab.py [--backend auto] [--rounds 5] [--n 1500]

Writes ``$OUT/process_ab.json`` and ``.md`` when OUT is set.
"""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, median_us, rate_us, save_diagnostic  # noqa: E402
from bench_overhead import aggregate  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.supervision import client as sup_client  # noqa: E402


def open_process(backend: str, spin_us: str) -> Any:
    os.environ["GPUMSG_WORKER_SPIN_US"] = spin_us  # read when the worker is configured
    try:
        return gpumsg.open_device(0, backend=backend, isolation="process")
    finally:
        del os.environ["GPUMSG_WORKER_SPIN_US"]


def cases(dev: Any, n: int) -> dict[str, Callable[[], float]]:
    rng = np.random.default_rng()
    a = dev.to_device(rng.standard_normal((64, 64), dtype=np.float32)).result()
    c = dev.alloc((64, 64), np.float32).result()
    kib = dev.to_device(rng.standard_normal(256).astype(np.float32)).result()
    host = rng.standard_normal(256).astype(np.float32)
    last = [dev.stats()]

    def stats_issue() -> None:
        last[0] = dev.stats()

    def sgemm_issue() -> None:
        last[0] = dev.sgemm(a, a, c, 64, 64, 64)

    return {
        "Stats round trip": lambda: median_us(lambda: dev.stats().result(), n),
        "64^3 SGEMM round trip": lambda: median_us(
            lambda: dev.sgemm(a, a, c, 64, 64, 64).result(), n),
        "1 KiB H2D round trip": lambda: median_us(
            lambda: dev.copy_from_host(kib, host).result(), n),
        "1 KiB D2H round trip": lambda: median_us(lambda: dev.copy_to_host(kib).result(), n),
        "Stats pipelined (per op)": lambda: rate_us(stats_issue, lambda: last[0].result(),
                                                    2000, repeats=3),
        "64^3 SGEMM pipelined (per op)": lambda: rate_us(
            sgemm_issue, lambda: last[0].result(), 2000, repeats=3),
        "8 threads of Stats round trips (µs per op, all threads)": lambda: 1e6 / aggregate(
            lambda: dev.stats, 8, 2000, wait_each=True),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--spin-us", default="250")
    opts = ap.parse_args()
    env = environment()
    devs = {
        "thread": gpumsg.open_device(0, backend=opts.backend),
        "process": open_process(opts.backend, "0"),
        "process+spin": open_process(opts.backend, opts.spin_us),
    }
    # (label, device, LEAD)
    modes = [("thread", "thread", True), ("process", "process", False),
             ("process+lead", "process", True), ("process+spin", "process+spin", False),
             ("process+spin+lead", "process+spin", True)]
    try:
        per_dev = {name: cases(d, opts.n) for name, d in devs.items()}
        names = list(per_dev["thread"])
        seen: dict[str, dict[str, list[float]]] = {m[0]: {c: [] for c in names} for m in modes}
        for r in range(opts.rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            for label, dev_name, lead in order:
                sup_client.LEAD = lead
                for case in names:
                    seen[label][case].append(per_dev[dev_name][case]())
            print(f"round {r + 1}/{opts.rounds} done", flush=True)
        sup_client.LEAD = True
    finally:
        for d in devs.values():
            d.close()
    rows = []
    for case in names:
        row: dict[str, Any] = {"case": case}
        for label, *_ in modes:
            row[label] = round(statistics.median(seen[label][case]), 2)
        rows.append(row)
    labels = [m[0] for m in modes]
    lines = [f"# process isolation: idle spin and leading callers ({opts.backend})", "",
             f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
             f"Python {env['python']} · {env.get('cpu_count')} cores", "",
             "µs, medians of " + str(opts.rounds) + " rounds (in brackets: x thread mode)", "",
             "| case | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for row in rows:
        base = row["thread"]
        cells = [f"{row[m]}" if m == "thread" else f"{row[m]} ({row[m] / base:.2f}x)"
                 for m in labels]
        lines.append(f"| {row['case']} | " + " | ".join(cells) + " |")
    lines += ["", f"- spin: GPUMSG_WORKER_SPIN_US={opts.spin_us} for the +spin worker, 0 for the "
              "other; lead: supervision.client.LEAD switched in place; every device open "
              "throughout; the order of the modes rotates by round",
              f"- rounds: {json.dumps(seen)}"]
    text = "\n".join(lines)
    print(text)
    save_diagnostic("process_ab", {"environment": env, "rows": rows, "rounds": seen}, text)


if __name__ == "__main__":
    main()
