"""Shared helpers for the benchmark scripts: timing, environment, and result files.

Every script measures gpumsg beside its peer (torch, CuPy, the raw library call) in the same
process and run, reports medians (after warm-up) and the ratio, and writes ``<name>.json`` plus
``<name>.md`` to the output folder (:func:`results_dir`), stamped with the device, driver and
date. ``benchmarks/report.py`` turns the JSON files into ``benchmarks/RESULTS.md`` and plots.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from the tree without installing


def median_us(fn: Callable[[], Any], n: int, warmup: int = 50) -> float:
    """Median wall time of one ``fn()`` call, in microseconds."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def gbps(fn: Callable[[], Any], nbytes: int, reps: int, warmup: int = 2) -> float:
    """Bandwidth in GB/s: ``nbytes`` over the median wall time of one ``fn()`` call (``fn``
    returns when its copy is complete)."""
    return nbytes / (median_us(fn, reps, warmup) * 1e-6) / 1e9


def rate_us(issue: Callable[[], Any], finish: Callable[[], Any], n: int, repeats: int = 5,
            warmup: int = 200) -> float:
    """Median over ``repeats`` of (time to issue ``n`` operations and finish them) / n, in µs:
    the per-operation cost of a pipelined stream of operations."""
    for _ in range(warmup):
        issue()
    finish()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            issue()
        finish()
        runs.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(runs) / 1e3


def compare(ours: tuple[Callable[[], Any], Callable[[], Any]],
            theirs: tuple[Callable[[], Any], Callable[[], Any]], n: int | None = None,
            repeats: int = 5, warmup_s: float = 0.3, min_run_s: float = 0.03
            ) -> tuple[float, float]:
    """Seconds per operation of two (issue, finish) pairs in steady state, each run ``n``
    pipelined operations at a time.

    Both are warmed up for ``warmup_s`` first (clocks ramp up under load), then their runs
    alternate, so neither gets the cooler or the hotter GPU; medians of ``repeats``. With
    ``n=None`` a run is made long enough (``min_run_s`` of the peer's work) that the fixed cost of
    filling and draining the pipeline (gpumsg: about half a millisecond, measured by the round
    trip rows) does not pass for a lower throughput.
    """
    for issue, finish in (ours, theirs):
        t_end = time.perf_counter() + warmup_s
        while time.perf_counter() < t_end:  # waiting each time: never queue more than one
            issue()
            finish()
    if n is None:
        issue, finish = theirs
        t0 = time.perf_counter()
        for _ in range(5):
            issue()
        finish()
        per_op = (time.perf_counter() - t0) / 5
        n = max(10, min(2000, int(min_run_s / per_op) + 1))
    runs: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for (issue, finish), out in zip((ours, theirs), runs):
            t0 = time.perf_counter()
            for _ in range(n):
                issue()
            finish()
            out.append((time.perf_counter() - t0) / n)
    return statistics.median(runs[0]), statistics.median(runs[1])


def copy_operands(dev: Any, nbytes: int) -> tuple[Any, Any, Any]:
    """The operands of a copy benchmark: ``nbytes`` of random float32 on the host, the same in a
    new device buffer of ``dev`` and in a new page-locked buffer. Returns (host array, device
    buffer, pinned buffer)."""
    import numpy as np

    host = np.random.default_rng().standard_normal(nbytes // 4, dtype=np.float32)
    buf = dev.to_device(host).result()
    pinned = dev.alloc_pinned((host.size,), np.float32).result()
    pinned.array[:] = host
    return host, buf, pinned


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
    }
    try:
        from cuda.bindings import driver as cu

        cu.cuInit(0)
        dev = cu.cuDeviceGet(0)[1]
        env["device"] = cu.cuDeviceGetName(256, dev)[1].split(b"\0", 1)[0].decode()
        v = cu.cuDriverGetVersion()[1]
        env["cuda_driver_api"] = f"{v // 1000}.{v % 1000 // 10}"
    except Exception as exc:  # noqa: BLE001
        env["device"] = f"none ({exc})"
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        env["driver"] = out.splitlines()[0] if out else "unknown"  # one line per GPU
    except Exception:  # noqa: BLE001
        env["driver"] = "unknown"
    for mod in ("numpy", "torch", "cupy", "cuda.bindings"):
        try:
            m = __import__(mod, fromlist=["__version__"])
            env[mod] = m.__version__
        except Exception:  # noqa: BLE001
            pass
    return env


#: where a run's raw files go unless told otherwise (git-ignored)
DEFAULT_OUT = os.path.join(HERE, "out")


def results_dir() -> str:
    """The output folder: ``--out DIR`` on the command line, else ``$GPUMSG_BENCH_OUT``, else
    ``$OUT`` (the folder that comes back from the GPU machine), else ``benchmarks/out/``."""
    path = (_out_argument() or os.environ.get("GPUMSG_BENCH_OUT") or os.environ.get("OUT")
            or DEFAULT_OUT)
    os.makedirs(path, exist_ok=True)
    return path


def _out_argument() -> str | None:
    """The value of ``--out DIR`` / ``--out=DIR`` in ``sys.argv``, if given."""
    argv = sys.argv[1:]
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--out="):
            return arg.split("=", 1)[1]
    return None


def api(obj: Any, *paths: str) -> Any:
    """The first attribute path of ``obj`` that exists, e.g. ``api(dev, "cufft.plan",
    "cufft.plan")``: the benchmarks run against the namespaces of the tree they sit in."""
    for path in paths:
        target = obj
        try:
            for part in path.split("."):
                target = getattr(target, part)
        except AttributeError:
            continue
        return target
    raise AttributeError(f"none of {paths} on {type(obj).__name__}")


def compare_many(sides: list[tuple[Callable[[], Any], Callable[[], Any]]],
                 repeats: int = 5, warmup_s: float = 0.3, min_run_s: float = 0.03
                 ) -> list[float]:
    """:func:`compare` for any number of (issue, finish) pairs: seconds per operation of each,
    in steady state, their runs alternating; a run is sized from the last side's speed (the
    peer's, by convention)."""
    for issue, finish in sides:
        t_end = time.perf_counter() + warmup_s
        while time.perf_counter() < t_end:
            issue()
            finish()
    issue, finish = sides[-1]
    t0 = time.perf_counter()
    for _ in range(5):
        issue()
    finish()
    per_op = (time.perf_counter() - t0) / 5
    n = max(10, min(2000, int(min_run_s / per_op) + 1))
    runs: list[list[float]] = [[] for _ in sides]
    for _ in range(repeats):
        for (issue, finish), out in zip(sides, runs):
            t0 = time.perf_counter()
            for _ in range(n):
                issue()
            finish()
            out.append((time.perf_counter() - t0) / n)
    return [statistics.median(r) for r in runs]


def gpu_us_per_call(issue: Callable[[], Any], finish: Callable[[], Any],
                    calls: int = 20) -> float:
    """The GPU's busy time per call of ``issue``, in microseconds: the durations of every
    kernel, copy and set the CUDA activity profiler (CUPTI, through ``torch.profiler``; it sees
    the whole process's device work, whatever library launched it) records while ``calls``
    calls run, over ``calls``. ``finish`` waits for the work before and after (it must launch
    nothing itself). Gaps between kernels do not count: this is what the work costs the GPU,
    apart from how fast the host issues it."""
    from torch.profiler import ProfilerActivity, profile

    issue()
    finish()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            issue()
        finish()
    busy = sum(e.time_range.elapsed_us() for e in prof.events()
               if e.device_type.name == "CUDA")
    return busy / calls


def write_results(name: str, rows: list[dict[str, Any]], notes: list[str],
                  columns: list[str], extra: dict[str, Any] | None = None) -> None:
    """Write ``name.json`` (everything) and ``name.md`` (a table of ``columns``)."""
    env = environment()
    doc = {"benchmark": name, "environment": env, "columns": columns, "rows": rows,
           "notes": notes}
    if extra:
        doc.update(extra)
    path = results_dir()
    with open(os.path.join(path, f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    lines = [f"# {name}", "",
             f"{env.get('device')} · driver {env.get('driver')} · {env.get('date')} · "
             f"Python {env.get('python')} · torch {env.get('torch', '-')} · "
             f"CuPy {env.get('cupy', '-')}", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    with open(os.path.join(path, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"
    return str(v)
