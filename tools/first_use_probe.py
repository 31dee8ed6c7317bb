"""The first use of cuBLAS in a fresh process, with its libraries opened before CUDA starts or
not, and thread isolation's fault detection (diagnostic, GPU): ``cold`` opens a device and
times the first and second 64^3 SGEMM (the first opens libcublas and libcublasLt and makes the
handle); ``preloaded`` opens the two libraries first (as a fork server could, before any CUDA
call), then the same; ``opened`` makes the cuBLAS handle first (``dev.open_libraries``, as a
standby does), then the same; ``fault`` also times an injected illegal address to its typed
error.

Usage: python tools/first_use_probe.py cold|preloaded|opened|fault   (one process per measurement)
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import gpumsg
from gpumsg.libs.loader import load


def first_sgemm(dev: gpumsg.Device) -> float:
    a_h = np.ones((64, 64), np.float32, order="F")
    t0 = time.perf_counter()
    a = dev.to_device(a_h)
    c = dev.alloc((64, 64), np.float32)
    dev.sgemm(a, a, c, 64, 64, 64).result(timeout=60)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    mode = sys.argv[1]
    out: dict = {"mode": mode}
    if mode == "preloaded":
        t0 = time.perf_counter()
        for name in ("cublas", "cublasLt"):
            load(name)
        out["load_ms"] = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    dev = gpumsg.open_device(0, allow_fault_injection=True)
    out["open_ms"] = (time.perf_counter() - t0) * 1e3
    if mode == "opened":
        t0 = time.perf_counter()
        dev.open_libraries("cublas").result(timeout=60)
        out["open_cublas_ms"] = (time.perf_counter() - t0) * 1e3
    out["first_sgemm_ms"] = first_sgemm(dev)
    out["second_sgemm_ms"] = first_sgemm(dev)
    if mode == "fault":
        t0 = time.perf_counter()
        try:
            dev.inject_fault("illegal_address").result(timeout=60)
        except gpumsg.ContextPoisoned:
            pass
        out["thread_fault_error_ms"] = (time.perf_counter() - t0) * 1e3
    dev.close()
    print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items()}))


if __name__ == "__main__":
    main()
