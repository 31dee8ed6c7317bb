"""Diagnostic (H100): pipelined ResNet-50 convolutions beside torch under several GIL switch
intervals (``sys.setswitchinterval``, see gpumsg/client/gil.py), in one run. (Its first version
also tried handing the GIL over after each large convolution; docs/performance.md has those
figures, the code is gone.)"""
from __future__ import annotations

import json
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
from _common import compare  # noqa: E402
from conv_case import conv_pair  # noqa: E402

import gpumsg  # noqa: E402

CASES = [("conv2_x 3x3 fwd", 64, 64, 3, 1, 1, 56, "fwd"),
         ("conv2_x 1x1 expand fwd", 64, 256, 1, 1, 0, 56, "fwd"),
         ("conv3_x 3x3 s2 bwd_filter", 128, 128, 3, 2, 1, 56, "bwd_filter"),
         ("conv5_x 3x3 fwd", 512, 512, 3, 1, 1, 7, "fwd"),
         ("conv5_x 3x3 bwd_data", 512, 512, 3, 1, 1, 7, "bwd_data")]
INTERVALS = [("5ms", 0.005), ("1ms", 0.001), ("200us", 0.0002), ("100us", 0.0001),
             ("50us", 0.00005)]


def main() -> None:
    import torch

    torch.backends.cudnn.benchmark = False
    rng = np.random.default_rng(0)
    with gpumsg.open_device(0) as dev:
        for label, c, k, r, s, p, hw, direction in CASES:
            ours, wait, theirs = conv_pair(dev, torch, rng, c, k, r, s, p, hw, direction)
            row = {"case": label}
            for name, interval in INTERVALS:
                sys.setswitchinterval(interval)
                a, b = compare((ours, wait), (theirs, torch.cuda.synchronize), repeats=5,
                               warmup_s=0.2)
                row[name] = {"us": round(a * 1e6, 1), "torch_us": round(b * 1e6, 1),
                             "ratio": round(b / a, 3)}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
