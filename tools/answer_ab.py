"""Diagnostic (GPU): the answer path of stop 27 switched in place, beside the bare service of
``benchmarks/bench_overhead.py`` measured in the same rounds.

- ``new``: a caller blocked in ``GpuFuture.result()`` sleeps on a bare lock of its own; a
  staging block goes back to its pool after the copy's future is answered.
- ``old``: the waiter makes the future's ``threading.Condition`` and waits on it
  (``Future.result``); the block goes back before the answer (the code before stop 27, put
  back by patching the two classes for the ``old`` rounds).

Rows: round trips of Stats, 64^3 SGEMM, 1 KiB H2D and D2H, dot, alloc+free; eight threads of
SGEMM round trips (aggregate µs per op). Modes alternate round by round, medians of the rounds.

    python3 tools/answer_ab.py [--rounds 7] [--n 1500]

Writes ``$OUT/answer_ab.json`` and ``.md`` when OUT is set.
"""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import Future
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, median_us, save_diagnostic  # noqa: E402
from bench_overhead import aggregate, operands, start_bare  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.client import buffers, staging  # noqa: E402

_FINISHED = buffers._FINISHED
NEW = {"result": buffers.GpuFuture.result, "exception": buffers.GpuFuture.exception,
       "down": staging._ChunkDownload.set_result, "up": staging._ChunkUpload.set_result}


def _old_result(self: Any, timeout: float | None = None) -> Any:
    if self._state is _FINISHED and self._exception is None:
        return self._result
    if self._lead is not None and self._state is not _FINISHED:
        timeout = self._lead(self, timeout)
    return Future.result(self, timeout)


def _old_exception(self: Any, timeout: float | None = None) -> Any:
    if self._state is _FINISHED:
        return self._exception
    return Future.exception(self, timeout)


def _old_down(self: Any, result: Any) -> None:
    try:
        staging.copy_bytes(self._dest, self._block.bytes[:self._dest.nbytes])
    finally:
        self._pool.release(self._block)
    buffers.GpuFuture.set_result(self, self._answer)


def _old_up(self: Any, result: Any) -> None:
    self._pool.release(self._block)
    buffers.GpuFuture.set_result(self, result)


OLD = {"result": _old_result, "exception": _old_exception, "down": _old_down, "up": _old_up}


def use(fns: dict[str, Any]) -> None:
    buffers.GpuFuture.result = fns["result"]  # type: ignore[method-assign]
    buffers.GpuFuture.exception = fns["exception"]  # type: ignore[method-assign]
    staging._ChunkDownload.set_result = fns["down"]  # type: ignore[method-assign]
    staging._ChunkUpload.set_result = fns["up"]  # type: ignore[method-assign]


def main() -> None:
    from cuda.bindings import driver as cu

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--cases", default="", help="only the cases whose name holds this text")
    opts = ap.parse_args()
    env = environment()
    rng = np.random.default_rng()
    host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
    xh, yh = (rng.standard_normal(1 << 20).astype(np.float32) for _ in range(2))
    kib = rng.standard_normal(256).astype(np.float32)
    n = opts.n
    with gpumsg.open_device(0) as dev:
        svc, ops = start_bare(cu, host, xh, yh)
        post = svc.post
        a, b, c, x, y, buf = operands(dev, host, xh, yh)

        def bare_h2d() -> None:
            np.copyto(ops.pinned_view[:1024], kib.view(np.uint8))
            post(ops.h2d, 1024).result()

        def threads(op: Any) -> float:
            return 1e6 / aggregate(op, 8, 2000, wait_each=True)

        ours = {
            "Stats round trip": lambda: median_us(lambda: dev.stats().result(), n),
            "64^3 SGEMM round trip": lambda: median_us(
                lambda: dev.sgemm(a, b, c, 64, 64, 64).result(), n),
            "1 KiB H2D round trip": lambda: median_us(
                lambda: dev.copy_from_host(buf, kib).result(), n),
            "1 KiB D2H round trip": lambda: median_us(lambda: dev.copy_to_host(buf).result(), n),
            "dot 1M f32 round trip": lambda: median_us(lambda: dev.cublas.dot(x, y).result(), n),
            "alloc+free round trip": lambda: median_us(
                lambda: dev.alloc(256, np.float32).result().free().result(), n),
            "8 threads of SGEMM round trips (µs per op)": lambda: threads(
                lambda: (lambda: dev.sgemm(a, b, c, 64, 64, 64))),
            "8 threads of SGEMMs pipelined (µs per op)": lambda: 1e6 / aggregate(
                lambda: (lambda: dev.sgemm(a, b, c, 64, 64, 64)), 8, 2000, wait_each=False),
            "1 thread of SGEMMs pipelined (µs per op)": lambda: 1e6 / aggregate(
                lambda: (lambda: dev.sgemm(a, b, c, 64, 64, 64)), 1, 2000, wait_each=False),
        }
        bare = {
            "Stats round trip": lambda: median_us(lambda: post(ops.stats).result(), n),
            "64^3 SGEMM round trip": lambda: median_us(lambda: post(ops.sgemm).result(), n),
            "1 KiB H2D round trip": lambda: median_us(bare_h2d, n),
            "1 KiB D2H round trip": lambda: median_us(lambda: post(ops.d2h, 1024).result(), n),
            "dot 1M f32 round trip": lambda: median_us(lambda: post(ops.dot).result(), n),
            "alloc+free round trip": lambda: median_us(
                lambda: post(ops.free, post(ops.alloc, 1024).result()).result(), n),
            "8 threads of SGEMM round trips (µs per op)": lambda: threads(
                lambda: (lambda: post(ops.sgemm))),
            "8 threads of SGEMMs pipelined (µs per op)": lambda: 1e6 / aggregate(
                lambda: (lambda: post(ops.sgemm)), 8, 2000, wait_each=False),
            "1 thread of SGEMMs pipelined (µs per op)": lambda: 1e6 / aggregate(
                lambda: (lambda: post(ops.sgemm)), 1, 2000, wait_each=False),
        }
        ours = {k: v for k, v in ours.items() if opts.cases in k}
        assert np.array_equal(dev.copy_to_host(buf).result(), dev.copy_to_host(buf).result())
        modes = [("new", NEW), ("old", OLD)]
        seen: dict[str, dict[str, list[float]]] = {
            m: {case: [] for case in ours} for m in ("new", "old", "bare")}
        try:
            for r in range(opts.rounds):
                order = modes if r % 2 == 0 else modes[::-1]
                for case in ours:
                    seen["bare"][case].append(bare[case]())
                    for name, fns in order:
                        use(fns)
                        seen[name][case].append(ours[case]())
                        # the copies still answer correctly in either mode
                        dev.copy_from_host(buf, kib).result()
                        assert np.array_equal(dev.copy_to_host(buf).result(), kib)
                use(NEW)
                print(f"round {r + 1}/{opts.rounds}", flush=True)
        finally:
            use(NEW)
            svc.close()
            ops.close()
    rows = []
    for case in ours:
        med = {m: statistics.median(seen[m][case]) for m in seen}
        rows.append({"case": case, **{m: round(v, 2) for m, v in med.items()},
                     "new_vs_bare": round(med["new"] / med["bare"], 3),
                     "old_vs_bare": round(med["old"] / med["bare"], 3)})
    lines = ["# answer path A/B (in place) beside the bare service", "",
             f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
             f"Python {env['python']}", "",
             f"µs, medians of {opts.rounds} rounds; new and old alternate in place, the bare "
             "service measured in the same rounds", "",
             "| case | new | old | bare | new / bare | old / bare |", "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['case']} | {row['new']} | {row['old']} | {row['bare']} | "
                     f"{row['new_vs_bare']} | {row['old_vs_bare']} |")
    lines += ["", f"- rounds: {json.dumps(seen)}"]
    text = "\n".join(lines)
    print(text)
    save_diagnostic("answer_ab", {"environment": env, "rows": rows, "rounds": seen}, text)


if __name__ == "__main__":
    main()
