"""Where the GPU time of pipelined convolutions goes, gpumsg beside torch (diagnostic, H100).

Runs n pipelined ResNet-50-shaped convolutions (batch 64, NHWC bf16) through ``dev.dnn`` and
through torch under ``torch.profiler`` (CUPTI sees every stream of the process), then reads the
kernel timeline of each side's stream: kernels per call, kernel time per call, busy span per
call and the idle gaps between consecutive GPU operations. Equal kernel time with a longer span
means the GPU waited for the host; longer kernel time means the GPU work itself differs.
Prints one JSON object per case (and writes them to $OUT/conv_timeline.json)."""

# ruff: noqa: B023, E731 - the lambdas run within the iteration that made them
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile

import numpy as np

import gpumsg

CASES = [("conv2_x 3x3 fwd", 64, 64, 3, 1, 1, 56, "fwd"),
         ("conv2_x 1x1 expand fwd", 64, 256, 1, 1, 0, 56, "fwd"),
         ("conv5_x 3x3 fwd", 512, 512, 3, 1, 1, 7, "fwd"),
         ("conv5_x 3x3 bwd_data", 512, 512, 3, 1, 1, 7, "bwd_data")]
B = 64


def timeline(trace_path: str) -> dict[int, list[tuple[float, float, str, str]]]:
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    by_stream: dict[int, list] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        s = int(e.get("args", {}).get("stream", -1))
        by_stream.setdefault(s, []).append((float(e["ts"]), float(e["dur"]), e["cat"],
                                            e["name"][:60]))
    for v in by_stream.values():
        v.sort()
    return by_stream


def summarize(ops: list, calls: int) -> dict:
    gaps = [ops[i + 1][0] - (ops[i][0] + ops[i][1]) for i in range(len(ops) - 1)]
    names: dict[str, int] = {}
    for _, _, cat, name in ops:
        names[f"{cat}:{name}"] = names.get(f"{cat}:{name}", 0) + 1
    return {"ops_per_call": len(ops) / calls,
            "gpu_us_per_call": sum(o[1] for o in ops) / calls,
            "span_us_per_call": (ops[-1][0] + ops[-1][1] - ops[0][0]) / calls,
            "gap_median_us": statistics.median(gaps) if gaps else 0.0,
            "gap_p90_us": sorted(gaps)[int(0.9 * len(gaps))] if gaps else 0.0,
            "gap_sum_us_per_call": sum(gaps) / calls,
            "ops": {k: v / calls for k, v in sorted(names.items(), key=lambda kv: -kv[1])[:6]}}


def main() -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    torch.backends.cudnn.benchmark = False
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = np.random.default_rng(0)
    bf16 = gpumsg.as_dtype("bf16")
    results = []
    with gpumsg.open_device(0) as dev:
        for label, c, k, r, s, p, hw, direction in CASES:
            oh = (hw + 2 * p - r) // s + 1
            x_h = rng.standard_normal((B, hw, hw, c), dtype=np.float32).astype(bf16)
            w_h = (rng.standard_normal((k, r, r, c), dtype=np.float32) / 30).astype(bf16)
            dy_h = rng.standard_normal((B, oh, oh, k), dtype=np.float32).astype(bf16)
            x, w, dy = dev.to_device(x_h), dev.to_device(w_h), dev.to_device(dy_h)
            y = dev.alloc((B, oh, oh, k), "bf16", order="C").result()
            dx = dev.alloc(x_h.shape, "bf16", order="C").result()
            kw = dict(stride=s, padding=p, layout="NHWC")

            def t(a):
                return torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16) \
                    .permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

            tx, tw, tdy = t(x_h), t(w_h), t(dy_h)
            geo = ([s, s], [p, p], [1, 1], False, [0, 0], 1)
            if direction == "fwd":
                ours = lambda: dev.dnn.conv2d(x, w, out=y, **kw)
                theirs = lambda: F.conv2d(tx, tw, stride=s, padding=p)
            else:
                ours = lambda: dev.dnn.conv_backward_data(dy, w, x_h.shape, out=dx, **kw)
                theirs = lambda: torch.ops.aten.convolution_backward(
                    tdy, tx, tw, None, *geo, [True, False, False])
            for _ in range(200):
                last = ours()
                theirs()
            last.result()
            torch.cuda.synchronize()
            row = {"case": label}
            for side, fn in (("gpumsg", ours), ("torch", theirs)):
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(n):
                        last = fn()
                    if side == "gpumsg":
                        last.result()
                    torch.cuda.synchronize()
                path = os.path.join(tempfile.mkdtemp(), "t.json")
                prof.export_chrome_trace(path)
                streams = timeline(path)
                main_stream = max(streams, key=lambda st: len(streams[st]))
                row[side] = summarize(streams[main_stream], n)
                row[side]["streams"] = {st: len(v) for st, v in streams.items()}
            print(json.dumps(row), flush=True)
            results.append(row)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "conv_timeline.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
