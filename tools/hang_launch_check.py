"""Diagnostic (GPU): what a replayed launch does behind a hung kernel, with the GIL held.

A kernel spins for a few seconds on the compute stream (``inject_fault("hang")``); behind it the
caller posts many replayed 64^3 SGEMMs. A ticker thread notes the longest gap between its ticks
(1 ms apart): a gap of seconds means the interpreter was frozen, as it would be if a launch
blocked on a full GPU queue with the GIL held. Run once with the bound of
``backends/cuda/driver.HOLD_IN_FLIGHT`` as it is and once with the bound lifted (``--unbounded``,
every launch holds the GIL), each in a fresh process.

    python3 tools/hang_launch_check.py [--unbounded] [--posts 20000] [--hang 3]
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import numpy as np

import gpumsg
from gpumsg.backends.cuda import driver


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unbounded", action="store_true")
    ap.add_argument("--posts", type=int, default=20000)
    ap.add_argument("--hang", type=float, default=3.0)
    opts = ap.parse_args()
    if opts.unbounded:
        driver.HOLD_IN_FLIGHT = 1 << 60
        # guarded_launch takes the bound as a default argument: rebind it
        plain = driver.guarded_launch
        driver.guarded_launch = lambda r, h, f, limit=1 << 60: plain(r, h, f, limit)
    rng = np.random.default_rng()
    with gpumsg.open_device(0, allow_fault_injection=True) as dev:
        a, b, c = (dev.to_device(rng.standard_normal((64, 64), dtype=np.float32)).result()
                   for _ in range(3))
        for _ in range(5):
            dev.sgemm(a, b, c, 64, 64, 64).result()
        gaps, stop = [0.0], threading.Event()

        def tick() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                time.sleep(0.001)
                now = time.perf_counter()
                gaps[0] = max(gaps[0], now - last)
                last = now

        ticker = threading.Thread(target=tick)
        ticker.start()
        hang = dev.inject_fault("hang", seconds=opts.hang)
        t0 = time.perf_counter()
        last = None
        for _ in range(opts.posts):
            last = dev.sgemm(a, b, c, 64, 64, 64)
        t_posted = time.perf_counter() - t0
        stats_t0 = time.perf_counter()
        stats = dev.stats().result(timeout=120)
        t_stats = time.perf_counter() - stats_t0
        last.result(timeout=120)
        hang.result(timeout=120)
        t_all = time.perf_counter() - t0
        stop.set()
        ticker.join()
        info = dev.cublas.replay_info().result()
    print(json.dumps({"unbounded": opts.unbounded, "posts": opts.posts, "hang_s": opts.hang,
                      "posting_s": round(t_posted, 3), "stats_round_trip_s": round(t_stats, 3),
                      "stats_in_flight": stats.ops_in_flight, "all_done_s": round(t_all, 3),
                      "longest_tick_gap_s": round(gaps[0], 3),
                      "launches": info["cublas"].get("launches")}), flush=True)


if __name__ == "__main__":
    main()
