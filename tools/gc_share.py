"""Diagnostic (GPU or simulator): how much of a pipelined allocation is Python's cyclic garbage
collector. 2000 allocations issued back to back and kept (the last awaited), as
``bench_overhead``'s "alloc pipelined" row, with the collector on and off, switched in place
round by round, for gpumsg and the bare service of ``benchmarks/bench_overhead.py``; and gpumsg
with the collector on and its futures' two lists made eagerly (``--eager``: as before stop 28)
or when first used.

    PYTHONPATH=$PWD python3 tools/gc_share.py [--rounds 9]

Writes ``$OUT/gc_share.json`` and ``.md`` when OUT is set.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, save_diagnostic  # noqa: E402
from bench_overhead import alloc_pipelined, start_bare  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.client.buffers import GpuFuture  # noqa: E402


def main() -> None:
    from cuda.bindings import driver as cu

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--eager", action="store_true", help="also gpumsg with eager lists")
    opts = ap.parse_args()
    env = environment()
    rng = np.random.default_rng()
    host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
    xh, yh = (rng.standard_normal(1 << 10).astype(np.float32) for _ in range(2))
    seen: dict[str, list[float]] = {}
    with gpumsg.open_device(0) as dev:
        svc, ops = start_bare(cu, host, xh, yh)
        post = svc.post

        def release_ours(keep: list) -> None:
            for f in keep:
                f.result().free()
            dev.synchronize().result()

        def release_bare(keep: list) -> None:
            for f in keep:
                post(ops.free, f.result())
            post(ops.stats).result()

        cases: dict[str, Any] = {
            "gpumsg": lambda: alloc_pipelined(lambda: dev.alloc(256, np.float32), release_ours),
            "bare": lambda: alloc_pipelined(lambda: post(ops.alloc, 1024), release_bare)}
        lazy_init = GpuFuture.__init__

        def eager_init(self: Any) -> None:  # the lists made with every future, as before
            lazy_init(self)
            self._waiter_list = []
            self._callback_list = []

        try:
            for r in range(opts.rounds):
                if opts.eager:
                    for init in ((eager_init, lazy_init) if r % 2 else (lazy_init, eager_init)):
                        GpuFuture.__init__ = init  # type: ignore[method-assign]
                        seen.setdefault(f"gpumsg, lists {'eager' if init is eager_init else 'lazy'}"
                                        ", collector on", []).append(cases["gpumsg"]())
                    GpuFuture.__init__ = lazy_init  # type: ignore[method-assign]
                for on in ((True, False) if r % 2 == 0 else (False, True)):
                    for who, fn in cases.items():
                        if not on:
                            gc.disable()
                        try:
                            seen.setdefault(f"{who}, collector {'on' if on else 'off'}",
                                            []).append(fn())
                        finally:
                            gc.enable()
                print(f"round {r + 1}/{opts.rounds}", flush=True)
        finally:
            GpuFuture.__init__ = lazy_init  # type: ignore[method-assign]
            svc.close()
            ops.close()
    med = {k: statistics.median(v) for k, v in seen.items()}
    lines = ["# pipelined allocations with the garbage collector on and off", "",
             f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
             f"Python {env['python']}", "",
             f"µs per allocation (2000 issued and kept, the last awaited; median of 3 repeats), "
             f"medians of {opts.rounds} rounds, the collector switched in place", "",
             "| case | µs |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in med.items()]
    text = "\n".join(lines)
    print(text)
    save_diagnostic("gc_share", {"environment": env, "medians": med, "rounds": seen}, text)


if __name__ == "__main__":
    main()
