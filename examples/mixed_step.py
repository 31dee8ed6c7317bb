"""The mixed step: upload 1 KiB, multiply by a matrix kept on the device, download the answer.

The smallest whole round trip a program makes: a 16 x 16 float32 input (1 KiB) goes up, one
matmul with NumPy's ``@`` semantics (cuBLAS) multiplies it by a resident 16 x 16 weight, and the
product comes back. The three calls are issued without waiting; the download's future is the
step's only wait. What a step costs is the service's round trip, not the GPU's work.

Every step's answer is checked against NumPy float64::

    python examples/mixed_step.py                  # on a GPU: 2000 steps
    python examples/mixed_step.py --backend sim    # the NumPy simulator: 50 steps
    python examples/mixed_step.py --size full      # 2000 steps wherever it runs

Exit status 0 when every answer agrees with NumPy, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

import gpumsg

#: the input's side: 16 x 16 float32 is 1 KiB
SIDE = 16
FULL_STEPS, SMALL_STEPS = 2000, 50
#: float32 products over 16 terms against float64
TOLERANCE = 1e-5


def step(dev: gpumsg.Device, x: np.ndarray, w: Any) -> np.ndarray:
    """``x @ w`` for a host array ``x`` and a device buffer ``w``: upload, matmul, download;
    the download is the one wait."""
    xb = dev.to_device(x)
    y = dev.linalg.matmul(xb, w)
    return dev.copy_to_host(y).result()


def step_into(dev: gpumsg.Device, x: np.ndarray, w: Any, xb: Any, yb: Any,
              out: np.ndarray) -> np.ndarray:
    """:func:`step` through buffers made once (``xb``, ``yb`` on the device, ``out`` on the
    host)."""
    dev.copy_from_host(xb, x)
    dev.linalg.matmul(xb, w, out=yb)
    return dev.copy_to_host(yb, out=out).result()


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def small_sizes(size: str, backend: str) -> bool:
    """``--size small`` or ``full`` as asked; ``auto`` (the default; ``GPUMSG_EXAMPLES_SIZE``
    overrides it): full on a GPU, small on the simulator."""
    if size == "auto":
        size = os.environ.get("GPUMSG_EXAMPLES_SIZE", "auto")
    return size == "small" or (size != "full" and backend != "cuda")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--size", default="auto", choices=("auto", "small", "full"),
                    help="full on a GPU and small on the simulator unless told")
    args = ap.parse_args(argv)
    rng = np.random.default_rng()
    with gpumsg.open_device(args.device, backend=args.backend) as dev:
        steps = SMALL_STEPS if small_sizes(args.size, dev.backend) else FULL_STEPS
        w_host = rng.standard_normal((SIDE, SIDE)).astype(np.float32)
        inputs = [rng.standard_normal((SIDE, SIDE)).astype(np.float32) for _ in range(steps)]
        w = dev.to_device(w_host).result()
        xb = dev.alloc((SIDE, SIDE), np.float32, order="C").result()
        yb = dev.alloc((SIDE, SIDE), np.float32, order="C").result()
        out = np.empty((SIDE, SIDE), np.float32)
        worst, times = 0.0, []
        for i, x in enumerate(inputs):
            t0 = time.perf_counter()
            # alternate the allocating step and the one through kept buffers: both checked
            y = step(dev, x, w) if i % 2 == 0 else step_into(dev, x, w, xb, yb, out)
            times.append(time.perf_counter() - t0)
            worst = max(worst, relative_error(y, x.astype(np.float64) @ w_host))
        for buf in (w, xb, yb):
            buf.free()
        ok = worst < TOLERANCE
        print(f"mixed_step {SIDE}x{SIDE} float32 (1 KiB up, matmul, down), {steps} steps "
              f"[{dev.backend}]: worst error vs NumPy {worst:.1e} ({'ok' if ok else 'WRONG'}), "
              f"median {statistics.median(times) * 1e6:.0f} us/step")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
