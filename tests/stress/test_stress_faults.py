"""Fault campaign in process isolation (see faults.py): CI injects 8 faults (2 of each kind)
on the simulator under 2 threads of copies and SGEMMs and 2 of array-layer chains; ``make
stress`` injects 100."""

from __future__ import annotations

import faults
import pytest
from stress_env import BACKEND, FULL

from tests.conftest import need_backend


def test_fault_campaign() -> None:
    n = 100 if FULL else 8
    report = faults.campaign(faults=n, backend=BACKEND, threads=2, array_threads=2)
    fig = report.figures()
    print(fig)
    assert report.faults == n and report.fault_typed == n, report.problems
    assert set(report.by_kind) == set(faults.KINDS)
    assert not report.problems, report.problems[:10]
    assert report.lost == 0 and report.wrong == 0 and report.untyped == 0
    assert report.client_ops > 0
    # the array layer's chains ran (its generated kernels included) and were checked
    assert report.array_kernels and report.array_ops > 0
    assert report.stale_checked == n - report.by_kind["oom"]
    assert report.restart_bound_holds
    assert not report.leaked_shm and report.leaked_blocks == 0 and not report.leaked_children
    assert fig["recovery_median_ms"] <= 500


@pytest.mark.gpu
def test_fault_campaign_gpu() -> None:
    """On the GPU: 40 faults (10 of each kind) with the array layer's chains in flight; the
    median recovery within 0.5 s. The full campaign is ``tools/fault_campaign.py``."""
    need_backend("cuda")
    report = faults.campaign(faults=40, backend="cuda", threads=2, array_threads=2)
    fig = report.figures()
    print(fig)
    assert report.faults == 40 and report.fault_typed == 40, report.problems
    assert not report.problems, report.problems[:10]
    assert report.lost == 0 and report.wrong == 0 and report.untyped == 0
    assert report.array_kernels and report.array_ops > 0 and report.client_ops > 0
    assert report.unplanned_restarts == 0, report.unplanned  # nothing ran past the watchdog
    assert fig["recovery_median_ms"] <= 500
