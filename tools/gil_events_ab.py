"""Diagnostic (GPU): the device thread's event record and query with the GIL held
(``ctypes.PyDLL``) or released (the binding), switched in place, round by round: one and eight
client threads of 64^3 SGEMMs, round trips and pipelined.

Why: with eight callers doing round trips, a caller's answer took a median 211 µs to reach its
``result()`` (12 µs with one caller), and the device thread spent 14.5 µs per op in ``settle``
making about one event query per call (``threads_timeline.md``): each query gives the GIL to a
waiting caller, and the device thread queues for it again.

    PYTHONPATH=$PWD python3 tools/gil_events_ab.py [--rounds 7] [--total 3000]

Writes ``$OUT/gil_events_ab.json`` and ``.md`` when OUT is set.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, median_us, save_diagnostic  # noqa: E402
from bench_overhead import aggregate  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.errors import CudaError  # noqa: E402


def held_calls(backend: Any) -> dict[str, Any]:
    """``event_record``/``event_query`` as the backend's, through libcuda with the GIL held."""
    lib = ctypes.PyDLL("libcuda.so.1")
    record, query = lib.cuEventRecord, lib.cuEventQuery
    record.argtypes, record.restype = (ctypes.c_void_p, ctypes.c_void_p), ctypes.c_int
    query.argtypes, query.restype = (ctypes.c_void_p,), ctypes.c_int

    def event_record(event: Any, stream: Any) -> None:
        err = record(int(event), int(stream))
        if err:
            raise CudaError(err, f"CUDA_ERROR_{err}", "cuEventRecord")

    def event_query(event: Any) -> bool:
        err = query(int(event))
        if not err:
            return True
        if err == 600:
            return False
        raise CudaError(err, f"CUDA_ERROR_{err}", "cuEventQuery")

    return {"event_record": event_record, "event_query": event_query}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--total", type=int, default=3000)
    opts = ap.parse_args()
    env = environment()
    total = opts.total
    with gpumsg.open_device(0) as dev:
        backend = dev._worker.ctx.backend
        modes = {"binding": {}, "held": held_calls(backend)}
        rng = np.random.default_rng()
        host = rng.standard_normal((64, 64)).astype(np.float32, order="F")
        a = dev.to_device(host).result()
        c = dev.alloc((64, 64), np.float32).result()
        sg = lambda: (lambda: dev.sgemm(a, a, c, 64, 64, 64))  # noqa: E731
        cases = {
            "Stats round trip (µs)": lambda: median_us(lambda: dev.stats().result(), 1500),
            "1 thread, round trips (kops/s)": lambda: aggregate(sg, 1, total, True) / 1e3,
            "8 threads, round trips (kops/s)": lambda: aggregate(sg, 8, total, True) / 1e3,
            "1 thread, pipelined (kops/s)": lambda: aggregate(sg, 1, total, False) / 1e3,
            "8 threads, pipelined (kops/s)": lambda: aggregate(sg, 8, total, False) / 1e3,
        }
        seen: dict[str, dict[str, list[float]]] = {m: {k: [] for k in cases} for m in modes}
        names = list(modes)
        try:
            for r in range(opts.rounds):
                for m in (names if r % 2 == 0 else names[::-1]):
                    for attr in ("event_record", "event_query"):
                        backend.__dict__.pop(attr, None)
                    backend.__dict__.update(modes[m])
                    for case, fn in cases.items():
                        seen[m][case].append(fn())
                print(f"round {r + 1}/{opts.rounds}", flush=True)
        finally:
            for attr in ("event_record", "event_query"):
                backend.__dict__.pop(attr, None)
        ref = host.astype(np.float64) @ host
        assert np.abs(dev.copy_to_host(c).result() - ref).max() < 1e-3
    med = {m: {k: statistics.median(v) for k, v in seen[m].items()} for m in modes}
    lines = ["# the device thread's event calls with the GIL held or released", "",
             f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
             f"Python {env['python']}", "",
             f"medians of {opts.rounds} rounds, modes alternating in place; {total} 64^3 "
             "SGEMMs per rate", "", "| case | " + " | ".join(modes) + " |",
             "|---|" + "---|" * len(modes)]
    for case in cases:
        lines.append(f"| {case} | " + " | ".join(f"{med[m][case]:.1f}" for m in modes) + " |")
    for how in ("round trips", "pipelined"):
        lines.append(f"| 8 threads / 1, {how} | " + " | ".join(
            f"**{med[m][f'8 threads, {how} (kops/s)'] / med[m][f'1 thread, {how} (kops/s)']:.2f}**"
            for m in modes) + " |")
    lines += ["", "Paired by round (the modes of one round ran back to back): median of held / "
              "binding per round (rates: > 1 held faster; the Stats time: < 1 held faster), and "
              "the rounds in which held was faster:", ""]
    for case in cases:
        ratios = [h / b for h, b in zip(seen["held"][case], seen["binding"][case])]
        faster = sum((r < 1) if "µs" in case else (r > 1) for r in ratios)
        lines.append(f"- {case}: {statistics.median(ratios):.3f}, {faster} of {len(ratios)}")
    text = "\n".join(lines)
    print(text)
    save_diagnostic("gil_events_ab", {"environment": env, "medians": med, "rounds": seen}, text)


if __name__ == "__main__":
    main()
