"""Where the GPU time of pipelined convolutions goes, gpumsg beside torch (diagnostic, H100).

Runs n pipelined ResNet-50-shaped convolutions (batch 64, NHWC bf16) through ``dev.cudnn`` and
through torch under ``torch.profiler`` (CUPTI sees every stream of the process), then reads the
kernel timeline of each side's stream: kernels per call, kernel time per call, busy span per
call and the idle gaps between consecutive GPU operations. Equal kernel time with a longer span
means the GPU waited for the host; longer kernel time means the GPU work itself differs.
Prints one JSON object per case (and writes them to $OUT/conv_timeline.json)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from typing import Any

import numpy as np
from conv_case import conv_pair

import gpumsg

CASES = [("conv2_x 3x3 fwd", 64, 64, 3, 1, 1, 56, "fwd"),
         ("conv2_x 1x1 expand fwd", 64, 256, 1, 1, 0, 56, "fwd"),
         ("conv5_x 3x3 fwd", 512, 512, 3, 1, 1, 7, "fwd"),
         ("conv5_x 3x3 bwd_data", 512, 512, 3, 1, 1, 7, "bwd_data")]


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


def compare_timelines(torch: Any, ours: Any, wait: Any, theirs: Any, n: int) -> dict:
    """Both sides warmed up (200 calls each), then ``n`` calls of each under torch.profiler:
    {"gpumsg": summary, "torch": summary} of each side's busiest stream (:func:`summarize`,
    plus the operations counted per stream)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(200):
        ours()
        theirs()
    wait()
    torch.cuda.synchronize()
    row = {}
    for side, fn in (("gpumsg", ours), ("torch", theirs)):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            wait()
            torch.cuda.synchronize()
        path = os.path.join(tempfile.mkdtemp(), "t.json")
        prof.export_chrome_trace(path)
        streams = timeline(path)
        main_stream = max(streams, key=lambda st: len(streams[st]))
        row[side] = summarize(streams[main_stream], n)
        row[side]["streams"] = {st: len(v) for st, v in streams.items()}
    return row


def main() -> None:
    import torch

    torch.backends.cudnn.benchmark = False
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = np.random.default_rng(0)
    results = []
    with gpumsg.open_device(0) as dev:
        for label, c, k, r, s, p, hw, direction in CASES:
            ours, wait, theirs = conv_pair(dev, torch, rng, c, k, r, s, p, hw, direction)
            row = {"case": label, **compare_timelines(torch, ours, wait, theirs, n)}
            print(json.dumps(row), flush=True)
            results.append(row)
    save("conv_timeline.json", results)


def save(name: str, obj: Any) -> None:
    """Write ``obj`` as JSON to ``$OUT/name`` when $OUT is set (a device run)."""
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, name), "w") as f:
            json.dump(obj, f, indent=1)


if __name__ == "__main__":
    main()
