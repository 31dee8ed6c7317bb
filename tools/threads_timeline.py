"""Diagnostic (GPU or simulator): what the device thread and the callers do when eight client
threads share a device, beside one thread: 64^3 SGEMMs, round trips and pipelined.

Per case: ops/s; the process's CPU time and context switches per op (every thread, callers
included: ``getrusage``); callers' pauses on a full mailbox per op; batches answered on the
device thread and handed to the completion watcher; ``settle`` calls and their time; event
queries; the device thread's CPU time and context switches per op (``/proc``) and its time
runnable but waiting for a CPU (``schedstat``: the host's CPUs, not the GIL); for round trips,
the time from an answer (``set_result``) to its caller's ``result()`` returning (the caller's
wake-up and its wait for the GIL).

    PYTHONPATH=$PWD python3 tools/threads_timeline.py [--total 2000] [--rounds 3]

Writes ``$OUT/threads_timeline.json`` and ``.md`` when OUT is set.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, save_diagnostic  # noqa: E402
from bench_overhead import aggregate  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.client.buffers import GpuFuture  # noqa: E402
from gpumsg.service import context  # noqa: E402

_now = time.perf_counter_ns
COUNTS = {"settle calls": 0, "settle µs": 0.0, "event queries": 0}
WAKES: list[float] = []


def _patch(ctx: Any) -> None:
    settle, set_result, result = context.DeviceContext.settle, GpuFuture.set_result, \
        GpuFuture.result
    query = ctx.backend.event_query

    def settle_(self: Any, waiting: Any) -> None:
        t0 = _now()
        settle(self, waiting)
        COUNTS["settle calls"] += 1
        COUNTS["settle µs"] += (_now() - t0) / 1e3

    def query_(event: Any) -> bool:
        COUNTS["event queries"] += 1
        return query(event)

    def set_result_(self: Any, value: Any) -> None:
        self._t_answer = _now()
        set_result(self, value)

    def result_(self: Any, timeout: float | None = None) -> Any:
        out = result(self, timeout)
        t = getattr(self, "_t_answer", None)
        if t is not None:
            WAKES.append((_now() - t) / 1e3)
        return out

    context.DeviceContext.settle = settle_  # type: ignore[method-assign]
    ctx.backend.event_query = query_
    GpuFuture.set_result = set_result_  # type: ignore[method-assign]
    GpuFuture.result = result_  # type: ignore[method-assign]


def _task(tid: int) -> tuple[float, int, int]:
    """(CPU seconds, voluntary, involuntary context switches) of one thread of this process."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    vol = invol = 0
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol = int(line.split()[1])
    return cpu, vol, invol


def _runqueue_s(tid: int) -> float:
    """Seconds one thread of this process has spent runnable, waiting for a CPU."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def _process() -> tuple[float, int, int]:
    """(CPU seconds, voluntary, involuntary context switches) of the whole process, threads
    that have ended included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw, r.ru_nivcsw


def _slots(ctx: Any) -> tuple[int, int, int]:
    """(operations answered on the device thread, batches handed to watchers, batches the
    watchers answered)."""
    s = ctx.streams
    return (sum(x.answered for x in s), sum(x.handed for x in s),
            sum(x.watcher.batches for x in s))


def measure(dev: Any, threads: int, wait_each: bool, total: int) -> dict[str, float]:
    ctx = dev._worker.ctx
    tid = dev._worker._thread.native_id
    a = dev.to_device(np.ones((64, 64), np.float32)).result()
    c = dev.alloc((64, 64), np.float32).result()
    for k in COUNTS:
        COUNTS[k] = 0
    WAKES.clear()
    cpu0, vol0, inv0 = _task(tid)
    rq0, (pcpu0, pvol0, pinv0) = _runqueue_s(tid), _process()
    bp = dev._worker.backpressure
    pauses0, timeouts0 = bp.pauses, bp.timeouts
    s0 = _slots(ctx)
    t0 = time.perf_counter()
    rate = aggregate(lambda: (lambda: dev.sgemm(a, a, c, 64, 64, 64)), threads, total,
                     wait_each)
    wall = time.perf_counter() - t0
    dev.synchronize().result()
    cpu1, vol1, inv1 = _task(tid)
    rq1, (pcpu1, pvol1, pinv1) = _runqueue_s(tid), _process()
    pauses, timeouts = bp.pauses - pauses0, bp.timeouts - timeouts0
    s1 = _slots(ctx)
    n = total
    out = {"kops/s": rate / 1e3,
           "process CPU µs per op (all threads)": (pcpu1 - pcpu0) / n * 1e6,
           "process CPU / wall": (pcpu1 - pcpu0) / wall,
           "process blocks per op (voluntary switches)": (pvol1 - pvol0) / n,
           "process preemptions per op": (pinv1 - pinv0) / n,
           "callers' pauses on a full mailbox per op": pauses / n,
           "pauses that ended at their bound, per op": timeouts / n,
           "device thread µs per op waiting for a CPU": (rq1 - rq0) / n * 1e6,
           "device thread busy (CPU / wall)": (cpu1 - cpu0) / wall,
           "device thread CPU µs per op": (cpu1 - cpu0) / n * 1e6,
           "device thread blocks per op (voluntary switches)": (vol1 - vol0) / n,
           "device thread preemptions per op": (inv1 - inv0) / n,
           "ops answered on the device thread, per op": (s1[0] - s0[0]) / n,
           "batches handed to the watcher per op": (s1[1] - s0[1]) / n,
           "settle calls per op": COUNTS["settle calls"] / n,
           "settle µs per op": COUNTS["settle µs"] / n,
           "event queries per op": COUNTS["event queries"] / n}
    if WAKES:
        w = sorted(WAKES)
        out["answer -> result() returned, median µs"] = statistics.median(w)
        out["answer -> result() returned, p90 µs"] = w[int(0.9 * (len(w) - 1))]
    a.free()
    c.free()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--total", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--pause-bounds", default="",
                    help="comma-separated bounds of a caller's pause on a full mailbox "
                         "(seconds), switched in place round by round; default: gpumsg's")
    opts = ap.parse_args()
    env = environment()
    base = {"1 thread, round trips": (1, True), "8 threads, round trips": (8, True),
            "1 thread, pipelined": (1, False), "8 threads, pipelined": (8, False)}
    bounds = [float(v) for v in opts.pause_bounds.split(",") if v]
    cases = base if not bounds else {
        f"{case} @ {b * 1e3:g} ms": spec for b in bounds for case, spec in base.items()
        if case.endswith("pipelined")}
    seen: dict[str, list[dict[str, float]]] = {k: [] for k in cases}
    with gpumsg.open_device(0, backend=opts.backend) as dev:
        _patch(dev._worker.ctx)
        bp = dev._worker.backpressure
        default_bound = bp.timeout
        for r in range(opts.rounds):
            for case, (threads, wait_each) in cases.items():
                bp.timeout = float(case.split(" @ ")[1][:-3]) / 1e3 if " @ " in case \
                    else default_bound
                seen[case].append(measure(dev, threads, wait_each, opts.total))
            print(f"round {r + 1}/{opts.rounds}", flush=True)
        bp.timeout = default_bound
    med = {case: {k: statistics.median(d[k] for d in rounds) for k in rounds[0]}
           for case, rounds in seen.items()}
    keys = list(next(iter(med.values())))
    lines = ["# eight client threads beside one: what the device thread does", "",
             f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
             f"Python {env['python']}", "",
             f"64^3 SGEMMs, {opts.total} per case; medians of {opts.rounds} rounds", "",
             "| | " + " | ".join(cases) + " |", "|---|" + "---|" * len(cases)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(
            f"{med[c].get(k, float('nan')):.3g}" for c in cases) + " |")
    text = "\n".join(lines)
    print(text)
    save_diagnostic("threads_timeline", {"environment": env, "medians": med, "rounds": seen},
                    text)


if __name__ == "__main__":
    main()
