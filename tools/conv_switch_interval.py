"""Diagnostic (H100): pipelined ResNet-50 convolutions beside torch under several GIL switch
intervals (``sys.setswitchinterval``, see gpumsg/client/gil.py), in one run. (Its first version
also tried handing the GIL over after each large convolution; docs/performance.md has those
figures, the code is gone.)"""
# ruff: noqa: B023, E731 - the lambdas run within the iteration that made them
from __future__ import annotations

import json
import sys

import numpy as np

sys.path.insert(0, "benchmarks")
from _common import compare  # noqa: E402

import gpumsg  # noqa: E402

CASES = [("conv2_x 3x3 fwd", 64, 64, 3, 1, 1, 56, "fwd"),
         ("conv2_x 1x1 expand fwd", 64, 256, 1, 1, 0, 56, "fwd"),
         ("conv3_x 3x3 s2 bwd_filter", 128, 128, 3, 2, 1, 56, "bwd_filter"),
         ("conv5_x 3x3 fwd", 512, 512, 3, 1, 1, 7, "fwd"),
         ("conv5_x 3x3 bwd_data", 512, 512, 3, 1, 1, 7, "bwd_data")]
INTERVALS = [("5ms", 0.005), ("1ms", 0.001), ("200us", 0.0002), ("100us", 0.0001),
             ("50us", 0.00005)]
B = 64


def main() -> None:
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = False
    rng = np.random.default_rng(0)
    bf16 = gpumsg.as_dtype("bf16")
    with gpumsg.open_device(0) as dev:
        for label, c, k, r, s, p, hw, direction in CASES:
            oh = (hw + 2 * p - r) // s + 1
            x_h = rng.standard_normal((B, hw, hw, c), dtype=np.float32).astype(bf16)
            w_h = (rng.standard_normal((k, r, r, c), dtype=np.float32) / 30).astype(bf16)
            dy_h = rng.standard_normal((B, oh, oh, k), dtype=np.float32).astype(bf16)
            x, w, dy = dev.to_device(x_h), dev.to_device(w_h), dev.to_device(dy_h)
            y = dev.alloc((B, oh, oh, k), "bf16", order="C").result()
            dx = dev.alloc(x_h.shape, "bf16", order="C").result()
            dw = dev.alloc(w_h.shape, "bf16", order="C").result()
            kw = dict(stride=s, padding=p, layout="NHWC")

            def t(a):
                return torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16) \
                    .permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

            tx, tw, tdy = t(x_h), t(w_h), t(dy_h)
            geo = ([s, s], [p, p], [1, 1], False, [0, 0], 1)
            last = [None]
            bwd = torch.ops.aten.convolution_backward
            if direction == "fwd":
                ours = lambda: last.__setitem__(0, dev.dnn.conv2d(x, w, out=y, **kw))
                theirs = lambda: F.conv2d(tx, tw, stride=s, padding=p)
            elif direction == "bwd_data":
                ours = lambda: last.__setitem__(0, dev.dnn.conv_backward_data(
                    dy, w, x_h.shape, out=dx, **kw))
                theirs = lambda: bwd(tdy, tx, tw, None, *geo, [True, False, False])
            else:
                ours = lambda: last.__setitem__(0, dev.dnn.conv_backward_filter(
                    x, dy, w_h.shape, out=dw, **kw))
                theirs = lambda: bwd(tdy, tx, tw, None, *geo, [False, True, False])
            row = {"case": label}
            for name, interval in INTERVALS:
                sys.setswitchinterval(interval)
                a, b = compare((ours, lambda: last[0].result()),
                               (theirs, torch.cuda.synchronize), repeats=5, warmup_s=0.2)
                row[name] = {"us": round(a * 1e6, 1), "torch_us": round(b * 1e6, 1),
                             "ratio": round(b / a, 3)}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
