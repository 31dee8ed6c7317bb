"""Where the time of one message round trip goes (diagnostic, GPU or simulator): timestamps at
the points a message passes, medians over many round trips, per case.

The points: the caller's call; its post (``Device._post``); the device thread entering and
leaving the handler; the end of the batch's flush (its completion event recorded); the start and
end of answering the batch (``answer_entries``, on the device thread or a completion thread);
the caller's ``result()`` returning. The functions are wrapped in place for the run, one message
at a time, so each point is passed once per round trip (the first pass counts).

    python3 tools/roundtrip_timeline.py [n] [backend]      (defaults: 2000, auto)
"""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import gpumsg
from gpumsg.service import completion, context, registry

_now = time.perf_counter_ns
MARKS: dict[str, int] = {}

SEGMENTS = (  # (name, from, to)
    ("caller until post", "call", "post"),
    ("post until handler", "post", "handler_in"),
    ("handler", "handler_in", "handler_out"),
    ("handler until flushed", "handler_out", "flushed"),
    ("flushed until answering", "flushed", "answer_in"),
    ("answering", "answer_in", "answer_out"),
    ("answered until result() returns", "answer_out", "returned"),
    ("whole round trip", "call", "returned"),
)


def mark(name: str) -> None:
    MARKS.setdefault(name, _now())


def instrument(dev: Any) -> None:
    for t, handler in list(registry.HANDLERS.items()):
        def wrapped(ctx: Any, msg: Any, reply: Any, _h: Callable = handler) -> None:
            mark("handler_in")
            try:
                _h(ctx, msg, reply)
            finally:
                mark("handler_out")
        registry.HANDLERS[t] = wrapped
    flush = context.DeviceContext.flush

    def flushed(self: Any) -> None:
        flush(self)
        mark("flushed")
    context.DeviceContext.flush = flushed  # type: ignore[method-assign]
    answer = completion.answer_entries

    def answering(entries: Any, trace: Any) -> None:
        mark("answer_in")
        answer(entries, trace)
        mark("answer_out")
    context.answer_entries = completion.answer_entries = answering  # type: ignore[assignment]
    post = dev._post

    def posting(msg: Any, fut: Any) -> None:
        mark("post")
        post(msg, fut)
    dev._post = posting


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    backend = sys.argv[2] if len(sys.argv) > 2 else "auto"
    rng = np.random.default_rng()
    with gpumsg.open_device(0, backend=backend) as dev:
        kib = rng.standard_normal(256).astype(np.float32)
        buf = dev.to_device(kib).result()
        s64 = [dev.to_device(rng.standard_normal((64, 64), dtype=np.float32)).result()
               for _ in range(3)]
        x = dev.to_device(rng.standard_normal(1 << 20, dtype=np.float32)).result()
        cases: dict[str, Callable[[], Any]] = {
            "sgemm 64^3": lambda: dev.sgemm(s64[0], s64[1], s64[2], 64, 64, 64).result(),
            "1 KiB H2D": lambda: dev.copy_from_host(buf, kib).result(),
            "1 KiB D2H": lambda: dev.copy_to_host(buf).result(),
            "dot 1M f32": lambda: dev.cublas.dot(x, x).result(),
            "Stats": lambda: dev.stats().result(),
            "alloc 1 KiB": lambda: dev.alloc((256,), np.float32).result(),
        }
        for fn in cases.values():
            for _ in range(200):
                fn()
        instrument(dev)
        rows = []
        for label, fn in cases.items():
            seen: dict[str, list[float]] = {name: [] for name, _, _ in SEGMENTS}
            for _ in range(n):
                MARKS.clear()
                MARKS["call"] = _now()
                fn()
                MARKS["returned"] = _now()
                for name, a, b in SEGMENTS:
                    if a in MARKS and b in MARKS:
                        seen[name].append((MARKS[b] - MARKS[a]) / 1e3)
            row = {"case": label, "backend": dev.backend}
            for name, values in seen.items():
                if values:
                    row[name] = round(statistics.median(values), 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "roundtrip_timeline.json"), "w") as f:
            json.dump(rows, f, indent=1)
    names = [name for name, _, _ in SEGMENTS]
    print("| case | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for row in rows:
        print(f"| {row['case']} | " + " | ".join(str(row.get(k, "")) for k in names) + " |")


if __name__ == "__main__":
    main()
