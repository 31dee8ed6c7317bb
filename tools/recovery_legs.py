"""Where a process-isolated device's recovery from a spaced fault goes (diagnostic): the standby
is ready before each fault; from injecting an illegal address, the client's stamps of the fault's
error and of the next operation's success, the supervisor's own restart time, and the first
operation of each kind on the new worker: a round trip copy, then a 64^3 SGEMM (a cuBLAS handle
the new worker has not made yet), then a second SGEMM.

Usage: python tools/recovery_legs.py [faults] [json_path]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

import gpumsg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
from bench_supervision import fault_then_round_trip  # noqa: E402


def main() -> None:
    faults = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    out_path = sys.argv[2] if len(sys.argv) > 2 else None
    dev = gpumsg.open_device(0, isolation="process", allow_fault_injection=True,
                             max_restarts=faults + 2, restart_window=600)
    x = np.arange(1000.0)
    a_h = np.random.default_rng().standard_normal((64, 64)).astype(np.float32, order="F")
    rows: list[dict[str, Any]] = []

    def sgemm_ms() -> float:
        t0 = time.perf_counter()
        a = dev.to_device(a_h)
        c = dev.alloc((64, 64), np.float32)
        dev.sgemm(a, a, c, 64, 64, 64).result(timeout=60)
        return (time.perf_counter() - t0) * 1e3

    try:
        sgemm_ms()
        for _ in range(faults):
            sup = dev._worker
            if sup._spare_thread is not None:
                sup._spare_thread.join(60)
            time.sleep(0.3)
            error_s, copy_s, tries = fault_then_round_trip(dev, x)
            error_ms, copy_ms = error_s * 1e3, copy_s * 1e3
            first_gemm = sgemm_ms()
            second_gemm = sgemm_ms()
            row = {"error_ms": error_ms, "first_copy_ok_ms": copy_ms, "tries": tries,
                   "supervisor_ms": sup.restart_times[-1] * 1e3,
                   "first_sgemm_ms": first_gemm, "second_sgemm_ms": second_gemm}
            rows.append(row)
            print(json.dumps({k: round(v, 1) for k, v in row.items()}), flush=True)
        summary = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print("medians", json.dumps({k: round(v, 1) for k, v in summary.items()}), flush=True)
        if out_path:
            with open(out_path, "w") as f:
                json.dump({"rows": rows, "medians": summary,
                           "starts": dev._worker.startup_times}, f, indent=1)
    finally:
        dev.close()


if __name__ == "__main__":
    main()
