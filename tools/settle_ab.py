"""A/B of how long the device thread waits for running work before it hands it to a
completion thread (``settle``; gpumsg/service/context.py), in both isolations (GPU).

Devices open at once: one thread-isolated device, its ``settle_seconds`` switched in place
(``thread@US``), and one process-isolated device per worker setting (``process@US``:
``GPUMSG_WORKER_SETTLE_US`` when it opened). Each round measures every configuration in turn
(the order rotating round by round): a pinned host<->device copy of ``--mib`` (and 8 MiB), one
copy per wait (wall µs per copy), a ``Stats`` round trip and a 64^3 SGEMM round trip. For
thread isolation it also measures what the wait costs other Python threads: a thread counting
in a Python loop while the main thread copies (its iterations per ms beside the copies).

    PYTHONPATH=$PWD python3 tools/settle_ab.py [--rounds 5] [--settle 150,3000]
        [--thread 150,3000] [--process 150,3000]

Writes ``$OUT/settle_ab.json`` and ``.md`` when OUT is set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, save_diagnostic  # noqa: E402

import gpumsg  # noqa: E402

MiB = 1 << 20


def per_call_us(fn: Callable[[], Any], n: int) -> float:
    """Median wall µs of ``n`` calls."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return statistics.median(out) / 1e3


class Neighbor:
    """A Python thread counting loop iterations while ``active`` (the cost of a device thread
    that keeps the GIL busy, seen from another thread)."""

    def __init__(self) -> None:
        self.count = 0
        self.active = threading.Event()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop:
            self.active.wait()
            n = 0
            while self.active.is_set():
                n += 1
            self.count += n

    def measure(self, fn: Callable[[], Any], n: int) -> tuple[float, float]:
        """(median µs per call of ``fn``, neighbor iterations per ms) over ``n`` calls."""
        self.count = 0
        self.active.set()
        t0 = time.perf_counter()
        us = per_call_us(fn, n)
        dt = time.perf_counter() - t0
        self.active.clear()
        time.sleep(0.002)  # let the counter add its last run
        return us, self.count / (dt * 1e3)


def cases(dev: Any, mib: int) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    for size in sorted({8, mib}):
        n = size * MiB // 4
        buf = dev.alloc((n,), np.float32).result()
        pin = dev.alloc_pinned((n,), np.float32).result()
        arr = pin.array
        arr[:] = np.random.default_rng(size).standard_normal(n, dtype=np.float32)
        out[f"H2D {size} MiB"] = (lambda b=buf, p=arr: dev.copy_from_host(b, p).result())
        out[f"D2H {size} MiB"] = (lambda b=buf, p=arr: dev.copy_to_host(b, out=p).result())
    a = dev.to_device(np.random.rand(64, 64).astype(np.float32, order="F")).result()
    c = dev.alloc((64, 64), np.float32).result()
    out["Stats round trip"] = lambda: dev.stats().result()
    out["64^3 SGEMM round trip"] = lambda: dev.sgemm(a, a, c, 64, 64, 64).result()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--settle", default="150,3000", help="µs values to compare (both "
                        "isolations, unless --thread or --process is given)")
    parser.add_argument("--thread", default=None, help="thread isolation's settle µs values")
    parser.add_argument("--process", default=None, help="worker settle µs values")
    parser.add_argument("--copies", type=int, default=10)
    args = parser.parse_args()
    thread_settings = (args.thread or args.settle).split(",")
    process_values = [int(v) for v in (args.process or args.settle).split(",") if v]
    thread_dev = gpumsg.open_device(0)
    ctx = thread_dev._worker.ctx
    configs: dict[str, tuple[Any, dict[str, Callable[[], Any]], Any]] = {}
    thread_cases = cases(thread_dev, args.mib)
    for setting in thread_settings:
        configs[f"thread@{setting}"] = (thread_dev, thread_cases, int(setting))
    for us in process_values:
        os.environ["GPUMSG_WORKER_SETTLE_US"] = str(us)
        dev = gpumsg.open_device(0, isolation="process", standby=False)
        configs[f"process@{us}"] = (dev, cases(dev, args.mib), None)
    os.environ.pop("GPUMSG_WORKER_SETTLE_US", None)
    neighbor = Neighbor()
    samples: dict[tuple[str, str], list[float]] = {}
    names = list(configs)
    for r in range(args.rounds + 1):  # round 0 warms up
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            dev, fns, settle_us = configs[name]
            if settle_us is not None:
                ctx.settle_seconds = settle_us * 1e-6
            for case, fn in fns.items():
                n = args.copies if "MiB" in case else 300
                us = per_call_us(fn, n)
                if r:
                    samples.setdefault((name, case), []).append(us)
            if settle_us is not None:
                key = f"H2D {args.mib} MiB"
                us, rate = neighbor.measure(fns[key], args.copies)
                if r:
                    samples.setdefault((name, f"{key} beside a Python thread"), []).append(us)
                    samples.setdefault((name, "that thread's iterations per ms"), []).append(
                        rate)
        print(f"round {r} done", flush=True)
    neighbor.stop = True
    neighbor.active.set()
    for dev, _fns, _us in {id(v[0]): v for v in configs.values()}.values():
        dev.close()
    case_names = list(dict.fromkeys(case for _name, case in samples))
    med = {k: statistics.median(v) for k, v in samples.items()}
    lines = ["# settle A/B", "", f"{environment().get('device')} · {environment()['date']}", "",
             "| case | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for case in case_names:
        lines.append(f"| {case} | " + " | ".join(
            f"{med[(n, case)]:.1f}" if (n, case) in med else "" for n in names) + " |")
    ratios = []
    base = f"thread@{thread_settings[0]}"
    for name in names:
        if name == base:
            continue
        for case in case_names:
            a, b = samples.get((name, case)), samples.get((base, case))
            if a and b:
                paired = [x / y for x, y in zip(a, b)]
                ratios.append(f"- {name} / {base}, {case}: median {statistics.median(paired):.3f}"
                              f" (rounds {min(paired):.3f}-{max(paired):.3f})")
    lines += ["", f"- medians of {args.rounds} rounds (µs per call; copies: {args.copies} per "
              "round, one per wait; round trips: 300 per round); configurations in turn, the "
              "order rotating by round", "", "paired by round:", ""] + ratios
    text = "\n".join(lines)
    print(text)
    save_diagnostic("settle_ab", {"environment": environment(), "samples": {
        f"{n}|{c}": v for (n, c), v in samples.items()}, "medians": {
        f"{n}|{c}": v for (n, c), v in med.items()}, "rounds": args.rounds}, text)


if __name__ == "__main__":
    main()
