"""Where a message's time goes: cProfile of the caller and the device thread over one kind of
call, pipelined and as round trips, beside the floors it is built on.

    PYTHONPATH=$PWD python3 tools/profile_messages.py [CASE] [--n 10000] [--top 30] [--backend auto]

CASE is a part of the name of a ``benchmarks/bench_small_ops.py`` case (default ``SGEMM 64^3
(reference)``; ``python3 tools/profile_messages.py --list`` names them all). The report, printed and
written to ``profile.txt`` in the benchmark output folder (``GPUMSG_BENCH_OUT``, ``$OUT`` or
``benchmarks/out/``), holds:

- the floors: a bare thread + queue + Future echo and a ``Stats`` round trip;
- the case's µs per call, pipelined (n issued, the last awaited) and as a round trip;
- the top functions by own time over those calls. Python 3.12's cProfile sees every thread,
  so one profile covers the caller and the device thread; before 3.12 the device thread
  profiles itself (``GPUMSG_PROFILE``) and its profile is printed apart.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import threading
import time
from concurrent.futures import Future
from queue import SimpleQueue
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_small_ops  # noqa: E402
from _common import median_us, results_dir  # noqa: E402

import gpumsg  # noqa: E402


def echo_floor(n: int = 3000) -> tuple[float, float]:
    """A bare thread + SimpleQueue + Future echo: (round trip µs, pipelined µs per call), the
    floor any service of this shape pays under the GIL."""
    q: SimpleQueue = SimpleQueue()

    def serve() -> None:
        while (fut := q.get()) is not None:
            fut.set_result(None)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def post() -> Future:
        fut: Future = Future()
        q.put(fut)
        return fut

    rt = median_us(lambda: post().result(), n)
    pipe = bench_small_ops.per_call_pipelined(post, lambda last: last.result())
    q.put(None)
    thread.join()
    return rt, pipe


def _stats_text(stats: pstats.Stats, top: int) -> str:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case", nargs="?", default="SGEMM 64^3 (reference)")
    ap.add_argument("--n", type=int, default=10000, help="pipelined calls profiled")
    ap.add_argument("--top", type=int, default=30, help="functions listed")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--list", action="store_true", help="name the cases and stop")
    ap.add_argument("--out", default=None, help="output folder")
    args = ap.parse_args(argv)

    base = os.path.join(results_dir(), "profile_device")
    per_thread = sys.version_info < (3, 12)  # one profiler per thread before 3.12
    if per_thread:
        os.environ["GPUMSG_PROFILE"] = base  # read when the device thread starts
    dev = gpumsg.open_device(0, backend=args.backend)
    os.environ.pop("GPUMSG_PROFILE", None)
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    try:
        cases, _notes = bench_small_ops.build_cases(dev, None, None)
        if args.list:
            for c in cases:
                print(c.name)
            return 0
        matching = [c for c in cases if args.case.lower() in c.name.lower()]
        if not matching:
            print(f"no case matches {args.case!r}; --list names them", file=sys.stderr)
            return 2
        case = matching[0]
        now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        say(f"{dev!r}; Python {sys.version.split()[0]}; {now}")
        echo_rt, echo_pipe = echo_floor()
        say(f"bare thread + queue + Future echo: round trip {echo_rt:.2f} µs, "
            f"pipelined {echo_pipe:.2f} µs")
        say(f"Stats round trip: {median_us(lambda: dev.stats().result(), 2000):.2f} µs")
        call: Any = case.ours
        for _ in range(500):
            call()
        dev.synchronize().result()
        pipe = bench_small_ops.per_call_pipelined(call, lambda last: last.result())
        rt = median_us(lambda: call().result(), 2000)
        say(f"{case.name}: pipelined {pipe:.2f} µs per call, round trip {rt:.2f} µs")
        prof = cProfile.Profile()
        prof.enable()
        last = None
        for _ in range(args.n):
            last = call()
        last.result()
        for _ in range(args.n // 5):
            call().result()
        prof.disable()
    finally:
        dev.close()
    what = f"{args.n} pipelined + {args.n // 5} round-trip calls of {case.name}"
    label = "caller thread" if per_thread else "all threads"
    say(f"== {label}: {what} (cProfile, by own time) ==")
    say(_stats_text(pstats.Stats(prof), args.top))
    if per_thread and os.path.exists(f"{base}.device0"):
        say(f"== device thread: {what} ==")
        say(_stats_text(pstats.Stats(f"{base}.device0"), args.top))
    path = os.path.join(results_dir(), "profile.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
