"""benchmarks/bench_linalg_stacked.py's timing: alternating runs for fast sides, and a side slower
than SLOW_S a call timed by one call, not by repeated runs (a peer that loops over a stack takes
seconds a call)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its bare-name import of _common
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_linalg_stacked", ROOT / "benchmarks" / "bench_linalg_stacked.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_a_slow_side_is_timed_by_one_call_and_the_rest_by_runs(monkeypatch) -> None:
    mod = _module()
    monkeypatch.setattr(mod, "SLOW_S", 0.05)
    counts = {"fast": 0, "slow": 0}

    def side(name: str, seconds: float):
        def call() -> None:
            counts[name] += 1
            time.sleep(seconds)
        return call, lambda: None

    med, calls, once = mod.measure({"fast": side("fast", 0.002), "slow": side("slow", 0.08)}, 3)
    assert once == ["slow"]
    assert counts["slow"] == 2  # the warm-up and the timed call
    assert calls > 1 and counts["fast"] == 2 + 3 * calls  # runs sized from the fast side
    assert 0.07 < med["slow"] < 0.5 and 0.0015 < med["fast"] < 0.05


def test_without_a_slow_side_every_side_runs(monkeypatch) -> None:
    mod = _module()
    calls_made = []
    med, calls, once = mod.measure({"a": (lambda: calls_made.append(1), lambda: None)}, 2)
    assert once == [] and set(med) == {"a"} and len(calls_made) == 2 + 2 * calls
