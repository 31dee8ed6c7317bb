"""Diagnostic (GPU or simulator): where a process-isolation round trip's time goes, leg by
leg, beside thread isolation's, from timestamps of the system's monotonic clock taken in both
processes.

A round trip of :class:`tools._legs_clock.ClockNow` (a ``Stats``-sized message whose handler
answers the device thread's clock), stamped at: the caller's post; the end of the client's send
(process); the handler on the worker's (or the device) thread; the caller's poll returning
(process: the leading caller reads the socket itself); the client starting to answer what it
read; the future's ``set_result``; ``result()`` returning. Medians of each leg over n round
trips, then ``Stats`` round trips in both isolations for reference.

Switched in place, round by round, on one process device: the leading caller spins before it
sleeps (``lead_spin``) or not; the reader thread stays parked between leads (``PARK_SECONDS``)
or returns to the socket after each.

    PYTHONPATH=$PWD python3 tools/process_legs.py [--n 2000] [--rounds 5] [--backend auto]

Writes ``$OUT/process_legs.json`` and ``.md`` when OUT is set.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, median_us, save_diagnostic  # noqa: E402
from bench_overhead import aggregate  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.client.buffers import GpuFuture  # noqa: E402
from gpumsg.supervision import client as sup  # noqa: E402
from gpumsg.supervision import wire  # noqa: E402
from tools._legs_clock import ClockNow  # noqa: E402

_now = time.perf_counter_ns
MARKS: dict[str, int] = {}
_CLOCK = ClockNow()


def _first(name: str) -> None:
    if name not in MARKS:
        MARKS[name] = _now()


class StampedFuture(GpuFuture):
    def set_result(self, result: Any) -> None:
        _first("set_result")
        super().set_result(result)


def _patch() -> None:
    submit, answer, wait = sup.ProcessWorker.submit, sup.ProcessWorker._answer, \
        wire.Receiver.wait

    def submit_(self: Any, msg: Any, reply: Any) -> None:
        submit(self, msg, reply)
        _first("sent")

    def answer_(self: Any, worker: Any, frames: list) -> bool:
        if frames:
            _first("read")
        return answer(self, worker, frames)

    def wait_(self: Any, timeout: float | None) -> bool:
        ok = wait(self, timeout)
        if ok:
            _first("poll returned")
        return ok

    sup.ProcessWorker.submit = submit_  # type: ignore[method-assign]
    sup.ProcessWorker._answer = answer_  # type: ignore[method-assign]
    wire.Receiver.wait = wait_  # type: ignore[method-assign]


def legs(dev: Any, n: int) -> dict[str, float]:
    """Median µs of each leg over ``n`` round trips (the first 200 are warm-up)."""
    seen: dict[str, list[float]] = {}
    post = dev._post
    for i in range(n + 200):
        MARKS.clear()
        fut = StampedFuture()
        t0 = _now()
        post(_CLOCK, fut)
        handled = fut.result()
        end = _now()
        if i < 200:
            continue
        points = [("post", t0)] + sorted(
            [(k, v) for k, v in MARKS.items()] + [("handler", handled)], key=lambda kv: kv[1])
        points.append(("result() returned", end))
        for (a, ta), (b, tb) in zip(points, points[1:]):
            seen.setdefault(f"{a} -> {b}", []).append((tb - ta) / 1e3)
        seen.setdefault("whole round trip", []).append((end - t0) / 1e3)
    return {k: statistics.median(v) for k, v in seen.items() if len(v) > n // 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", default="auto")
    opts = ap.parse_args()
    env = environment()
    _patch()
    rng = np.random.default_rng()
    devs = {"thread": gpumsg.open_device(0, backend=opts.backend),
            "process": gpumsg.open_device(0, backend=opts.backend, isolation="process")}
    spin, park = devs["process"]._worker.lead_spin, sup.PARK_SECONDS
    # (label, device, the leading caller's spin, the reader's park)
    modes = [("thread", "thread", 0.0, park), ("process", "process", spin, park),
             ("process, reader not parked", "process", spin, 0.0),
             ("process, caller not spinning", "process", 0.0, park),
             ("process, neither (stop 27)", "process", 0.0, 0.0)]
    legs_seen: dict[str, list[dict[str, float]]] = {m[0]: [] for m in modes}
    kinds = ("Stats", "64^3 SGEMM", "64^3 SGEMM pipelined (per op)",
             "8 threads of Stats round trips (per op)", "64 MiB H2D from a pinned block",
             "64 MiB D2H into a pinned block")
    rt_seen: dict[str, dict[str, list[float]]] = {m[0]: {k: [] for k in kinds} for m in modes}
    try:
        bufs, big = {}, {}
        for name, dev in devs.items():
            a = dev.to_device(rng.standard_normal((64, 64), dtype=np.float32)).result()
            bufs[name] = (a, dev.alloc((64, 64), np.float32).result())
            pinned = dev.alloc_pinned((16 << 20,), np.float32).result()
            pinned.array[:] = rng.standard_normal(16 << 20, dtype=np.float32)
            big[name] = (dev.alloc(16 << 20, np.float32).result(), pinned)
        for r in range(opts.rounds):
            for label, name, lead_spin, parked in modes[r % 5:] + modes[:r % 5]:
                dev = devs[name]
                sup.PARK_SECONDS = parked
                if name == "process":
                    dev._worker.lead_spin = lead_spin
                a, c = bufs[name]
                legs_seen[label].append(legs(dev, opts.n))
                rt_seen[label]["Stats"].append(
                    median_us(lambda dev=dev: dev.stats().result(), opts.n))
                rt_seen[label]["64^3 SGEMM"].append(median_us(
                    lambda dev=dev, a=a, c=c: dev.sgemm(a, a, c, 64, 64, 64).result(), opts.n))
                rt_seen[label][kinds[2]].append(1e6 / aggregate(
                    lambda dev=dev, a=a, c=c: (lambda: dev.sgemm(a, a, c, 64, 64, 64)), 1,
                    2000, wait_each=False))
                rt_seen[label][kinds[3]].append(1e6 / aggregate(
                    lambda dev=dev: dev.stats, 8, 2000, wait_each=True))
                dst, pinned = big[name]
                rt_seen[label][kinds[4]].append(median_us(
                    lambda dev=dev, d=dst, p=pinned: dev.copy_from_host(d, p.array).result(), 15))
                rt_seen[label][kinds[5]].append(median_us(
                    lambda dev=dev, d=dst, p=pinned: dev.copy_to_host(d, out=p.array).result(),
                    15))
            print(f"round {r + 1}/{opts.rounds}", flush=True)
    finally:
        devs["process"]._worker.lead_spin, sup.PARK_SECONDS = spin, park
        for dev in devs.values():
            dev.close()
    out = {label: {k: statistics.median(d.get(k, float("nan")) for d in rounds)
                   for k in rounds[0]} for label, rounds in legs_seen.items()}
    rts = {label: {k: statistics.median(v) for k, v in cases.items()}
           for label, cases in rt_seen.items()}
    lines = ["# a round trip leg by leg: thread and process isolation", "",
             f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
             f"Python {env['python']}", "",
             f"µs; medians over {opts.rounds} rounds (modes alternate in place) of medians over "
             f"{opts.n} round trips of a clock message; each leg between consecutive stamps "
             f"(legs that most round trips pass); the leading caller's spin {spin * 1e6:.0f} µs, "
             f"the reader parked for {park * 1e6:.0f} µs after a lead",
             "", "| case (µs) | " + " | ".join(rts) + " |", "|---|" + "---|" * len(rts)]
    for case in kinds:
        lines.append(f"| {case} | " + " | ".join(
            f"{v[case]:.1f} ({v[case] / rts['thread'][case]:.2f}x)" for v in rts.values()) + " |")
    for label, rows in out.items():
        lines += ["", f"## {label}", "", "| leg | µs |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in rows.items()]
    text = "\n".join(lines)
    print(text)
    save_diagnostic("process_legs", {"environment": env, "legs": out, "round_trips": rts,
                                     "rounds": {"legs": legs_seen, "round_trips": rt_seen}},
                    text)


if __name__ == "__main__":
    main()
