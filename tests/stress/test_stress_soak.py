"""Soak: 8 client threads, every op family, checked against NumPy, with the simulator's
random jitter; frees from other threads and from the garbage collector (see soak.py). CI runs
8 x 600 operations (~20 s); ``make stress`` 8 x 10,000."""

from __future__ import annotations

import soak
from stress_env import BACKEND, FULL


def test_soak() -> None:
    ops = 10_000 if FULL else 600
    report = soak.campaign(threads=8, ops_per_thread=ops, backend=BACKEND)
    print(report.figures())
    assert report.ops == 8 * ops, report.problems[:10]
    assert report.lost == 0 and report.wrong == 0 and report.errors == 0, report.problems[:10]
    assert report.families >= 13 and len(report.by_family) == report.families  # every one ran
    assert report.freed_by_other_thread > 0 and report.freed_by_gc > 0
    # nothing leaked: the pool holds what it held after the warm-up, plus at most the scratch
    # that the library handles of each other compute stream of a pool keep (made on first use
    # there; one stream: exactly what it held)
    extra = (report.compute_streams - 1) * report.scratch_per_stream
    assert report.pool_used_start <= report.pool_used_end <= report.pool_used_start + extra, (
        report.pool_used_start, report.pool_used_end, extra)
    assert report.pinned_blocks_after_close == 0
