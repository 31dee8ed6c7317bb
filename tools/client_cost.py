"""The caller's share of a message: µs per call of the client API with the post taken out
(diagnostic; any machine, simulator backend).

A simulator device is opened, each call is made once for real (plans, memos), then the device's
post is replaced by one that drops the message, and each call is timed alone in a loop: what
remains is what the caller's thread does before the mailbox (checks, the memo, the message and
its future). Medians of 5 runs of ``n`` calls.

    PYTHONPATH=$PWD python3 tools/client_cost.py [n]

Writes ``$OUT/client_cost.json`` and ``.md`` when OUT is set.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, save_diagnostic  # noqa: E402

import gpumsg  # noqa: E402


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def per_call_us(fn: Callable[[], Any], n: int) -> float:
    runs = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter_ns() - t0) / n / 1e3)
    return statistics.median(runs)


def calls(dev: Any) -> dict[str, Callable[[], Any]]:
    """name -> a call whose message is made and then dropped."""
    batch, s = 8, 16
    a, b, out = (dev.alloc((batch, s, s), "bf16", order="C").result() for _ in range(3))
    m64 = [dev.alloc((64, 64), np.float32).result() for _ in range(3)]
    x, y = (dev.to_device(np.ones(1024, np.float32)).result() for _ in range(2))
    blas = dev.cublas
    return {
        "sgemm 64^3": lambda: dev.sgemm(m64[0], m64[1], m64[2], 64, 64, 64),
        "gemm f32 64^3": lambda: blas.gemm(m64[0], m64[1], m64[2], 64, 64, 64),
        "gemm_strided_batched bf16": lambda: blas.gemm_strided_batched(
            b, a, out, s, s, s, batch, s * s, s * s, s * s),
        "matmul 3-D bf16, out given": lambda: blas.matmul(a, b, out=out),
        "dot": lambda: blas.dot(x, y),
        "stats": dev.stats,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    rows = []
    with gpumsg.open_device(0, backend="sim") as dev:
        todo = calls(dev)
        for fn in todo.values():
            fn().result()
        dev.synchronize().result()
        posted = dev._post
        dev._post = lambda msg, reply: None  # type: ignore[method-assign]
        try:
            for name, fn in todo.items():
                rows.append({"call": name, "us": round(per_call_us(fn, n), 3)})
                print(rows[-1], flush=True)
        finally:
            dev._post = posted  # type: ignore[method-assign]
    env = environment()
    env["cpu"] = cpu_model()
    lines = ["# client_cost", "", f"{env['cpu']} · {env.get('date', '')} · Python "
             f"{env.get('python', '')}", "",
             f"The caller's µs per call with the post taken out (simulator device; medians of 5 "
             f"runs of {n} calls; tools/client_cost.py).", "", "| call | µs |", "|---|---|"]
    lines += [f"| {r['call']} | {r['us']} |" for r in rows]
    save_diagnostic("client_cost", {"environment": env, "n": n, "rows": rows},
                    "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
