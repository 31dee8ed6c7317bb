"""Process isolation: time to recover from a poisoned context (fault -> next successful
operation, median of 12 faults), per-message overhead in process mode beside thread mode, and
host<->device copies through shared memory beside thread mode's pinned and pageable copies."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import api, copy_operands, gbps, median_us, rate_us, write_results

import gpumsg
from gpumsg.supervision._client import configured_start_method

MiB = 1 << 20


def fault_then_round_trip(dev: Any, x: np.ndarray) -> tuple[float, float, int]:
    """Inject an illegal address, then round-trip ``x`` until it comes back right: seconds
    from the injection to the fault's error and to that round trip, and the tries it took."""
    t0 = time.perf_counter()
    try:
        dev.inject_fault("illegal_address").result(timeout=60)
    except gpumsg.ContextPoisoned:
        pass
    error = time.perf_counter() - t0
    tries = 0
    while True:
        tries += 1
        try:
            if np.array_equal(dev.copy_to_host(dev.to_device(x)).result(timeout=60), x):
                return error, time.perf_counter() - t0, tries
        except (gpumsg.GpuRefStale, gpumsg.ContextPoisoned):
            pass


def recovery(faults: int = 12) -> dict[str, Any]:
    """Faults one right after another on a process device: ``recovery_s`` (seconds from
    injecting an illegal address to the next successful round trip, per fault),
    ``supervisor_s`` (the supervisor's own fault-to-new-worker times), ``starts`` (every
    worker's start, ``ProcessWorker.startup_times``) and ``open_s`` (opening the device)."""
    t0 = time.perf_counter()
    dev = gpumsg.open_device(0, isolation="process", allow_fault_injection=True,
                             max_restarts=faults + 2, restart_window=600)
    opened = time.perf_counter() - t0
    x = np.arange(1000.0)
    try:
        dev.copy_to_host(dev.to_device(x)).result()
        out = [fault_then_round_trip(dev, x)[1] for _ in range(faults)]
        supervisor = dev._worker
        return {"recovery_s": out, "supervisor_s": list(supervisor.restart_times),
                "starts": list(supervisor.startup_times), "open_s": opened}
    finally:
        dev.close()


ISOLATIONS = ("process", "thread")


def alternate(cases: dict[str, dict[str, Callable[[], float]]], rounds: int
              ) -> dict[str, dict[str, float]]:
    """Medians of ``rounds`` measurements of every case in each isolation, the two
    isolations measured back to back for each case (their order swapping round by round), so
    that a host's drift falls on both alike. ``cases``: isolation -> case -> measurement."""
    seen: dict[str, dict[str, list[float]]] = {i: {c: [] for c in cases[i]} for i in cases}
    for r in range(rounds):
        order = ISOLATIONS if r % 2 == 0 else ISOLATIONS[::-1]
        for case in cases[ISOLATIONS[0]]:
            for iso in order:
                seen[iso][case].append(cases[iso][case]())
    return {i: {c: statistics.median(v) for c, v in seen[i].items()} for i in seen}


def overhead_cases(dev: Any) -> dict[str, Callable[[], float]]:
    last = [dev.stats()]

    def stats_issue() -> None:
        last[0] = dev.stats()

    a = dev.to_device(np.random.rand(64, 64).astype(np.float32, order="F")).result()
    c = dev.alloc((64, 64), np.float32, order="F").result()
    lastg = [dev.synchronize()]
    sgemm = api(dev, "sgemm", "cublas.sgemm")

    def sg() -> None:
        lastg[0] = sgemm(a, a, c, 64, 64, 64)

    return {
        "stats_rt": lambda: median_us(lambda: dev.stats().result(), 1000),
        "stats_pipe": lambda: rate_us(stats_issue, lambda: last[0].result(), 3000),
        "sgemm_rt": lambda: median_us(lambda: sgemm(a, a, c, 64, 64, 64).result(), 1000),
        "sgemm_pipe": lambda: rate_us(sg, lambda: lastg[0].result(), 3000),
    }


def copy_cases(dev: Any, mib: int, checks: list[Callable[[], bool]]
               ) -> dict[str, Callable[[], float]]:
    nbytes = mib * MiB
    n = nbytes // 4
    host, buf, pinned = copy_operands(dev, nbytes)
    pin = pinned.array
    out = np.empty(n, np.float32)
    checks.append(lambda: bool(np.array_equal(out, host) and np.array_equal(pin, host)))

    def rate(fn: Callable[[], object]) -> float:
        return gbps(fn, nbytes, 5, warmup=1)

    def rate4(issue: Callable[[], Any]) -> float:
        """Four copies in flight, one wait: the fixed cost per copy (a round trip) hides."""
        def fn() -> None:
            for _ in range(3):
                issue()
            issue().result()

        return gbps(fn, 4 * nbytes, 3, warmup=1)

    return {
        "H2D pinned": lambda: rate(lambda: dev.copy_from_host(buf, pin).result()),
        "D2H pinned": lambda: rate(lambda: dev.copy_to_host(buf, out=pin).result()),
        "H2D pageable": lambda: rate(lambda: dev.copy_from_host(buf, host).result()),
        "D2H pageable": lambda: rate(lambda: dev.copy_to_host(buf, out=out).result()),
        "H2D pinned x4": lambda: rate4(lambda: dev.copy_from_host(buf, pin)),
        "D2H pinned x4": lambda: rate4(lambda: dev.copy_to_host(buf, out=pin)),
    }


def main() -> None:
    rows, notes = [], []
    rec = recovery()
    times = rec["recovery_s"]
    rows.append({"case": "recovery: fault -> next successful op (median of 12)",
                 "process": statistics.median(times) * 1e3, "thread": "",
                 "unit": "ms", "ratio": "", "target": "<= 1000 ms"})
    notes.append(f"recovery times (ms): {[round(t * 1e3) for t in times]}; the supervisor's own "
                 f"fault-to-new-worker times (ms): {[round(t * 1e3) for t in rec['supervisor_s']]}")
    later = rec["starts"][1:]
    phases = ", ".join(f"{k} {statistics.median(s[k] for s in later) * 1e3:.0f}"
                       for k in later[0]) if later else "-"
    notes.append(f"a worker's start (ms, medians of the {len(later)} after the first; "
                 f"workers started by {configured_start_method()}): "
                 f"{phases}; the first (with the fork server's own start, if it started it): "
                 + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in rec["starts"][0].items()))
    devs = {i: gpumsg.open_device(0, isolation=i) for i in ISOLATIONS}
    checks: list[Callable[[], bool]] = []
    try:
        med = alternate({i: overhead_cases(d) for i, d in devs.items()}, 3)
        proc, thr = med["process"], med["thread"]
        for key, label, target in (("stats_rt", "Stats round trip", "<= 2"),
                                   ("stats_pipe", "Stats pipelined", ""),
                                   ("sgemm_rt", "64^3 sgemm round trip", ""),
                                   ("sgemm_pipe", "64^3 sgemm pipelined", "<= 1.3")):
            rows.append({"case": label, "process": proc[key], "thread": thr[key], "unit": "us",
                         "ratio": proc[key] / thr[key], "target": target})
        for mib in (64, 512):
            med = alternate({i: copy_cases(d, mib, checks) for i, d in devs.items()}, 3)
            p, t = med["process"], med["thread"]
            for kind in p:
                vs = kind if kind.endswith("x4") else \
                    "H2D pinned" if kind.startswith("H2D") else "D2H pinned"
                rows.append({"case": f"{kind} {mib} MiB", "process": p[kind], "thread": t[kind],
                             "unit": "GB/s", "ratio": p[kind] / t[vs],
                             "target": ">= 0.9 (of thread pinned)" if kind.startswith(
                                 ("H2D pinned", "D2H pinned")) and mib == 64 else ""})
        assert all(check() for check in checks), "a copy did not arrive intact"
    finally:
        for d in devs.values():
            d.close()
    notes.append("overhead and copy rows: both isolations open at once, each case measured in "
                 "both back to back, 3 rounds alternating their order, medians (round trips "
                 "over 1000 calls, pipelined 3000; copies 5 timed per round, x4 3)")
    notes.append("ratio for overhead rows = process / thread time; for copies = process "
                 "bandwidth / thread-mode pinned bandwidth of the same direction (x4 rows: four "
                 "copies in flight, one wait, beside the same in thread mode)")
    notes.append("process mode: host data in shared-memory segments the worker page-locked "
                 "(cuMemHostRegister); pinned = an alloc_pinned buffer (a shared segment)")
    write_results("supervision", rows, notes,
                  ["case", "process", "thread", "unit", "ratio", "target"])


if __name__ == "__main__":
    main()
