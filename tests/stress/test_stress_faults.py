"""Fault campaign in process isolation (see faults.py): CI injects 8 faults (2 of each kind)
on the simulator under 4 submitting threads; ``make stress`` injects 100."""

from __future__ import annotations

import faults
from stress_env import BACKEND, FULL


def test_fault_campaign() -> None:
    n = 100 if FULL else 8
    report = faults.campaign(faults=n, backend=BACKEND, threads=4)
    fig = report.figures()
    print(fig)
    assert report.faults == n and report.fault_typed == n, report.problems
    assert set(report.by_kind) == set(faults.KINDS)
    assert not report.problems, report.problems[:10]
    assert report.lost == 0 and report.wrong == 0 and report.untyped == 0
    assert report.client_ops > 0
    assert report.stale_checked == n - report.by_kind["oom"]
    assert report.restart_bound_holds
    assert not report.leaked_shm and report.leaked_blocks == 0 and not report.leaked_children
    assert fig["recovery_median_ms"] <= 500
