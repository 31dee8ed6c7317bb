"""Diagnostic (GPU): does the eight-thread collapse come from waking threads on other CPUs?

Every thread of the process (the callers, the device thread, the completion threads, CUDA's
own) is confined in turn to 1, 2 or 4 CPUs, or left on all of them, switched in place round
by round. In each setting: a two-thread lock ping-pong (the cost of one wake-up, twice), and
64^3 SGEMMs from one and from eight client threads, pipelined and as round trips, for gpumsg
and for the bare service of ``benchmarks/bench_overhead.py``.

If a GIL handover to a thread sleeping on another CPU is what eight threads pay for, confining
the threads to fewer CPUs makes the handovers cheaper and lifts the eight-thread rates toward
one thread's.

    python3 tools/affinity_ab.py [--rounds 5] [--total 2000] [--sets all,1,2,4]

Writes ``$OUT/affinity_ab.json`` and ``.md`` when OUT is set.
"""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, save_diagnostic  # noqa: E402
from bench_overhead import aggregate, operands, start_bare  # noqa: E402

import gpumsg  # noqa: E402


def confine(cpus: set[int]) -> None:
    """Every thread of this process on ``cpus`` (threads started later inherit the caller's)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def ping_pong_us(n: int = 2000) -> float:
    """µs per round trip of two Python threads that wake each other through bare locks."""
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def other() -> None:
        for _ in range(n):
            ping.acquire()
            pong.release()

    t = threading.Thread(target=other)
    t.start()
    t0 = time.perf_counter()
    for _ in range(n):
        ping.release()
        pong.acquire()
    elapsed = time.perf_counter() - t0
    t.join()
    return elapsed / n * 1e6


def main() -> None:
    from cuda.bindings import driver as cu

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--total", type=int, default=2000)
    ap.add_argument("--sets", default="all,1,2,4", help="CPU counts to confine to (all: none)")
    opts = ap.parse_args()
    env = environment()
    everything = sorted(os.sched_getaffinity(0))
    sets = {s: set(everything if s == "all" else everything[:int(s)])
            for s in opts.sets.split(",")}
    rng = np.random.default_rng()
    host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
    xh, yh = (rng.standard_normal(1 << 10).astype(np.float32) for _ in range(2))
    total = opts.total
    with gpumsg.open_device(0) as dev:
        svc, ops = start_bare(cu, host, xh, yh)
        post = svc.post
        a, b, c = operands(dev, host, xh, yh)[:3]
        ours = lambda: (lambda: dev.sgemm(a, b, c, 64, 64, 64))
        bare = lambda: (lambda: post(ops.sgemm))
        cases: dict[str, Any] = {"ping-pong (µs)": ping_pong_us}
        for who, make in (("gpumsg", ours), ("bare", bare)):
            for wait_each, how in ((False, "pipelined"), (True, "round trips")):
                for threads in (1, 8):
                    cases[f"{who} {how}, {threads} thread(s) (kops/s)"] = (
                        lambda make=make, threads=threads, wait_each=wait_each:
                        aggregate(make, threads, total, wait_each) / 1e3)
        seen: dict[str, dict[str, list[float]]] = {s: {k: [] for k in cases} for s in sets}
        names = list(sets)
        try:
            for r in range(opts.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for s in order:
                    confine(sets[s])
                    for case, fn in cases.items():
                        seen[s][case].append(fn())
                confine(set(everything))
                print(f"round {r + 1}/{opts.rounds}", flush=True)
            ref = host[0].astype(np.float64) @ host[1]
            assert np.abs(dev.copy_to_host(c).result() - ref).max() < 1e-3
        finally:
            confine(set(everything))
            svc.close()
            ops.close()
    med = {s: {k: statistics.median(v) for k, v in seen[s].items()} for s in sets}
    lines = ["# the eight-thread rates with the process confined to fewer CPUs", "",
             f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
             f"Python {env['python']} · {len(everything)} CPUs", "",
             f"medians of {opts.rounds} rounds; settings rotate in place; every thread of the "
             f"process confined; {total} 64^3 SGEMMs per rate", "",
             "| case | " + " | ".join(f"{s} CPUs" for s in sets) + " |",
             "|---|" + "---|" * len(sets)]
    for case in cases:
        lines.append(f"| {case} | " + " | ".join(f"{med[s][case]:.1f}" for s in sets) + " |")
    for who in ("gpumsg", "bare"):
        for how in ("pipelined", "round trips"):
            one, eight = (f"{who} {how}, {t} thread(s) (kops/s)" for t in (1, 8))
            lines.append(f"| {who} {how}: 8 threads / 1 | " + " | ".join(
                f"**{med[s][eight] / med[s][one]:.2f}**" for s in sets) + " |")
    text = "\n".join(lines)
    print(text)
    save_diagnostic("affinity_ab", {"environment": env, "medians": med, "rounds": seen}, text)


if __name__ == "__main__":
    main()
