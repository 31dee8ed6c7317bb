"""Does capturing a replay wait for the GPU? (diagnostic, GPU)

A 1M-element ``dot`` is made once (its key is then seen), a hung kernel holds the compute stream
for ``seconds``, and the same ``dot`` is made again: this time its reduction is captured as a
CUDA graph. The driver calls of the capture are timed through a proxy of the replays' driver,
and a ``Stats`` round trip right after shows whether the device thread waited for the hang.
The same again with a GEMM (``sgemm`` 64^3) for the GEMM replays.

    PYTHONPATH=$PWD python3 tools/capture_sync.py [seconds]
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

import gpumsg


class TimedDriver:
    """``cuda.bindings.driver`` with the wall time of each call noted in ``calls``."""

    def __init__(self, driver: Any) -> None:
        self._driver = driver
        self.calls: list[tuple[str, float]] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._driver, name)
        if not callable(fn) or not name.startswith("cu"):
            return fn

        def timed(*args: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.calls.append((name, (time.perf_counter() - t0) * 1e3))
        return timed


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    with gpumsg.open_device(0, backend="cuda", allow_fault_injection=True) as dev:
        x = dev.to_device(np.ones(1 << 20, np.float32)).result()
        m = [dev.to_device(np.ones((64, 64), np.float32)).result() for _ in range(3)]
        dev.inject_fault("hang", seconds=0.01).result()  # the fault kernel loaded
        dev.cublas.dot(x, x).result()  # handles made, the dot's key seen
        dev.sgemm(m[0], m[1], m[2], 64, 64, 64).result()
        blas = dev._worker.ctx.library("cublas")
        for label, replays, op in (
                ("dot", blas.reduction_replays, lambda: dev.cublas.dot(x, x)),
                ("sgemm", blas.replays, lambda: dev.sgemm(m[0], m[1], m[2], 64, 64, 64))):
            proxy = TimedDriver(replays.driver)
            replays.driver = proxy
            try:
                dev.inject_fault("hang", seconds=seconds)
                t0 = time.perf_counter()
                fut = op()
                dev.stats().result()
                answered = time.perf_counter() - t0
                fut.result()
            finally:
                replays.driver = proxy._driver
            calls = ", ".join(f"{n} {ms:.2f} ms" for n, ms in proxy.calls)
            print(f"{label}: a Stats after the capture answered in {answered * 1e3:.1f} ms "
                  f"(hang {seconds * 1e3:.0f} ms); driver calls: {calls}", flush=True)


if __name__ == "__main__":
    main()
