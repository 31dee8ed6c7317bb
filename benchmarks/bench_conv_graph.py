"""Convolutions replayed from a ``dev.graph`` beside torch eager and torch's own CUDA graphs, in
one run (H100): the ResNet-50-shaped problems of ``bench_cudnn.py`` (batch 64, NHWC bf16,
forward and both backwards). For each problem ``G`` identical convolutions into a fixed output
are recorded once (gpumsg: ``with dev.graph()`` after one eager call; torch:
``torch.cuda.graph``), and each side replays its graph; the rows give the time per
convolution, beside gpumsg's and torch's eager pipelined calls. ``ratio`` is torch eager's
time over gpumsg graph's (above 1: the recorded gpumsg sequence is faster than torch eager).

``--repeats`` / ``--warmup`` shrink the run; ``--per-graph`` sets G (default 8).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from _common import compare, write_results
from bench_cudnn import RESNET50

import gpumsg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from conv_case import conv_pair  # noqa: E402


def rows_for(dev, torch, rng, name: str, geo: tuple, direction: str, per_graph: int,
             timing: dict) -> dict:
    ours, wait, theirs = conv_pair(dev, torch, rng, *geo, direction)
    ours()
    wait()  # planned: it may be recorded now
    with dev.graph() as g:
        for _ in range(per_graph):
            ours()
    g.ready.result(timeout=120)
    last = [g.launch()]

    def replay() -> None:
        last[0] = g.launch()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            theirs()
    torch.cuda.current_stream().wait_stream(side)
    tg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(tg):
        for _ in range(per_graph):
            theirs()
    sync = torch.cuda.synchronize
    graph_s, torch_graph_s = compare((replay, lambda: last[0].result()), (tg.replay, sync),
                                     **timing)
    eager_s, torch_eager_s = compare((ours, wait), (theirs, sync), **timing)
    us = 1e6
    return {"case": f"{name} {direction}", "gpumsg_graph_us": graph_s / per_graph * us,
            "torch_eager_us": torch_eager_s * us,
            "ratio": torch_eager_s / (graph_s / per_graph),
            "gpumsg_eager_us": eager_s * us,
            "torch_graph_us": torch_graph_s / per_graph * us,
            "graph_vs_torch_graph": torch_graph_s / graph_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=0.3)
    parser.add_argument("--per-graph", type=int, default=8)
    args = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = False
    timing = {"repeats": args.repeats, "warmup_s": args.warmup}
    rng = np.random.default_rng()
    rows = []
    with gpumsg.open_device(0) as dev:
        for name, *geo in RESNET50:
            for direction in ("fwd", "bwd_data", "bwd_filter"):
                row = rows_for(dev, torch, rng, name, tuple(geo), direction, args.per_graph,
                               timing)
                print(row, flush=True)
                rows.append(row)
        info = dev.cudnn.cache_info().result()
    ratios = sorted(r["ratio"] for r in rows)
    notes = [f"{args.per_graph} identical convolutions per graph (fixed buffers); times per "
             "convolution; ratio = torch eager / gpumsg graph (> 1: gpumsg's recorded "
             "sequence is faster); graph_vs_torch_graph = torch graph / gpumsg graph",
             f"median ratio {ratios[len(ratios) // 2]:.2f}, range {ratios[0]:.2f}-"
             f"{ratios[-1]:.2f} over {len(rows)} problems",
             f"both sides take cuDNN's heuristics; gpumsg's plans: graph path "
             f"{info.get('graph_plans')}, legacy {info.get('legacy_plans')}",
             f"medians of {args.repeats} alternating runs after {args.warmup} s warm-up each"]
    write_results("conv_graph", rows, notes,
                  ["case", "gpumsg_graph_us", "torch_eager_us", "ratio", "gpumsg_eager_us",
                   "torch_graph_us", "graph_vs_torch_graph"])


if __name__ == "__main__":
    main()
