"""cuDNN convolutions beside torch in the same run: ResNet-50-shaped convolutions (batch 64,
NHWC, bf16) forward, backward data and backward filter through ``dev.cudnn`` beside
``torch.nn.functional.conv2d`` and ``torch.ops.aten.convolution_backward`` (which call cuDNN
themselves) on channels-last tensors. Both sides use cuDNN's heuristics (torch's
``cudnn.benchmark`` off, gpumsg's default ``algo="heuristic"``); gpumsg's ``algo="find"`` (every
candidate plan timed once per problem) is measured beside them too. gpumsg takes cuDNN's graph API
through the ``nvidia-cudnn-frontend`` package where it is installed (``cache_info`` says which
path each plan took).

``--repeats`` / ``--warmup`` shrink the run (defaults: 5 alternating runs, 0.3 s warm-up)."""

from __future__ import annotations

import argparse
import os

import numpy as np
from _common import compare, write_results

import gpumsg

# name, C in, K out, kernel, stride, padding, H (= W) in
RESNET50 = [
    ("conv2_x 3x3", 64, 64, 3, 1, 1, 56),
    ("conv2_x 1x1 expand", 64, 256, 1, 1, 0, 56),
    ("conv2_x 1x1 reduce", 256, 64, 1, 1, 0, 56),
    ("conv3_x 3x3 stride 2", 128, 128, 3, 2, 1, 56),
    ("conv3_x 1x1 downsample stride 2", 256, 512, 1, 2, 0, 56),
    ("conv5_x 3x3", 512, 512, 3, 1, 1, 7),
]
BATCH = 64
TIMING = {"repeats": 5, "warmup_s": 0.3}


def conv_cases(dev, torch, name: str, c: int, k: int, r: int, s: int, p: int, hw: int
               ) -> list[dict]:
    import torch.nn.functional as F

    rng = np.random.default_rng()
    bf16 = gpumsg.as_dtype("bf16")
    out_hw = (hw + 2 * p - r) // s + 1
    x_h = rng.standard_normal((BATCH, hw, hw, c), dtype=np.float32).astype(bf16)
    w_h = (rng.standard_normal((k, r, r, c), dtype=np.float32) / np.sqrt(c * r * r)).astype(bf16)
    dy_h = rng.standard_normal((BATCH, out_hw, out_hw, k), dtype=np.float32).astype(bf16)
    x, w, dy = dev.to_device(x_h), dev.to_device(w_h), dev.to_device(dy_h)
    y = dev.alloc((BATCH, out_hw, out_hw, k), "bf16", order="C").result()
    dx = dev.alloc(x_h.shape, "bf16", order="C").result()
    dw = dev.alloc(w_h.shape, "bf16", order="C").result()
    kw = dict(stride=s, padding=p, layout="NHWC")
    fkw = dict(kw, algo="find")

    def t(a: np.ndarray) -> object:  # NHWC / KRSC host array -> channels-last torch tensor
        return torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16) \
            .permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

    tx, tw, tdy = t(x_h), t(w_h), t(dy_h)
    last = [dev.synchronize()]
    conv_bwd = torch.ops.aten.convolution_backward
    geo = ([s, s], [p, p], [1, 1], False, [0, 0], 1)
    ours_fns = {
        "fwd": lambda: last.__setitem__(0, dev.cudnn.conv2d(x, w, out=y, **kw)),
        "bwd_data": lambda: last.__setitem__(0, dev.cudnn.conv_backward_data(
            dy, w, x_h.shape, out=dx, **kw)),
        "bwd_filter": lambda: last.__setitem__(0, dev.cudnn.conv_backward_filter(
            x, dy, w_h.shape, out=dw, **kw)),
    }
    find_fns = {
        "fwd": lambda: last.__setitem__(0, dev.cudnn.conv2d(x, w, out=y, **fkw)),
        "bwd_data": lambda: last.__setitem__(0, dev.cudnn.conv_backward_data(
            dy, w, x_h.shape, out=dx, **fkw)),
        "bwd_filter": lambda: last.__setitem__(0, dev.cudnn.conv_backward_filter(
            x, dy, w_h.shape, out=dw, **fkw)),
    }
    torch_fns = {
        "fwd": lambda: F.conv2d(tx, tw, stride=s, padding=p),
        "bwd_data": lambda: conv_bwd(tdy, tx, tw, None, *geo, [True, False, False]),
        "bwd_filter": lambda: conv_bwd(tdy, tx, tw, None, *geo, [False, True, False]),
    }
    # agreement with torch (both bf16 with f32 accumulation; different algorithms round apart)
    ours_fns["fwd"]()
    ours_fns["bwd_data"]()
    ours_fns["bwd_filter"]()
    ref = {"fwd": torch_fns["fwd"](), "bwd_data": torch_fns["bwd_data"]()[0],
           "bwd_filter": torch_fns["bwd_filter"]()[1]}
    got = {"fwd": y, "bwd_data": dx, "bwd_filter": dw}
    flop = 2.0 * BATCH * out_hw * out_hw * k * c * r * r
    rows = []
    for direction in ("fwd", "bwd_data", "bwd_filter"):
        ours, theirs = compare((ours_fns[direction], lambda: last[0].result()),
                               (torch_fns[direction], torch.cuda.synchronize), **TIMING)
        mine = np.asarray(dev.copy_to_host(got[direction]).result(), np.float64)
        theirs_h = ref[direction].float().permute(0, 2, 3, 1).cpu().numpy().astype(np.float64)
        err = np.linalg.norm(mine - theirs_h) / np.linalg.norm(theirs_h)
        found, theirs2 = compare((find_fns[direction], lambda: last[0].result()),
                                 (torch_fns[direction], torch.cuda.synchronize), **TIMING)
        mine = np.asarray(dev.copy_to_host(got[direction]).result(), np.float64)
        err_find = np.linalg.norm(mine - theirs_h) / np.linalg.norm(theirs_h)
        rows.append({"case": f"{name} {c}->{k} @{hw} {direction}", "gpumsg": flop / ours / 1e12,
                     "torch": flop / theirs / 1e12, "unit": "TFLOP/s", "ratio": theirs / ours,
                     "gpumsg_find": flop / found / 1e12, "ratio_find": theirs2 / found,
                     "rel_err_vs_torch": err, "rel_err_find": err_find})
    return rows


def softmax_case(dev, torch, rows_n: int = 8192, cols: int = 8192) -> dict:
    """Row softmax of a (rows, cols) bf16 matrix: cuDNN channel mode on (N=rows, C=cols)."""
    rng = np.random.default_rng()
    x_h = rng.standard_normal((rows_n, cols), dtype=np.float32).astype(gpumsg.as_dtype("bf16"))
    x = dev.to_device(x_h)
    y = dev.alloc(x_h.shape, "bf16", order="C").result()
    tx = torch.from_numpy(x_h.astype(np.float32)).cuda().to(torch.bfloat16)
    last = [dev.synchronize()]

    def ours() -> None:
        last[0] = dev.cudnn.softmax(x, "channel", out=y)

    ours_s, theirs_s = compare((ours, lambda: last[0].result()),
                               (lambda: torch.softmax(tx, dim=-1), torch.cuda.synchronize),
                               **TIMING)
    ref = torch.softmax(tx.float(), dim=-1).cpu().numpy().astype(np.float64)
    mine = np.asarray(dev.copy_to_host(y).result(), np.float64)
    err = np.linalg.norm(mine - ref) / np.linalg.norm(ref)
    nbytes = 2 * 2 * rows_n * cols  # read x, write y
    return {"case": f"softmax rows {rows_n}x{cols} bf16", "gpumsg": nbytes / ours_s / 1e9,
            "torch": nbytes / theirs_s / 1e9, "unit": "GB/s", "ratio": theirs_s / ours_s,
            "rel_err_vs_torch": err}


def host_costs(dev, torch, n: int = 400) -> dict:
    """Where the time of one pipelined convolution goes on the host: the caller's issue time
    per call, the device thread's time inside ``DnnHandle.conv`` and inside ``GraphPlan.run``
    (a CUDA-graph replay, or the frontend's execute), for conv5_x 3x3 (~30 µs of GPU work) and
    for a tiny convolution (a few µs of GPU work: the per-call floor), each beside torch's
    rate; each once as gpumsg runs (replays on) and once with the replays bypassed (every call
    through the frontend's execute), in the same run."""
    import time

    from gpumsg.libs.cudnn import _graph as graph_mod
    from gpumsg.libs.cudnn._handle import DnnHandle

    spent = {"conv": 0.0, "run": 0.0, "calls": 0, "replay": True}
    conv0, run0 = DnnHandle.conv, graph_mod.GraphPlan.run

    def conv(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return conv0(self, *a, **k)
        finally:
            spent["conv"] += time.perf_counter() - t0
            spent["calls"] += 1

    def run(self, *a, **k):
        t0 = time.perf_counter()
        try:
            if not spent["replay"]:
                k["stream"] = None  # the frontend's execute, as before the replays
            return run0(self, *a, **k)
        finally:
            spent["run"] += time.perf_counter() - t0

    out = {}
    bf16 = gpumsg.as_dtype("bf16")
    rng = np.random.default_rng()
    cases = [(replay, label, shape) for label, shape in (
        ("conv5_x 3x3 512->512 @7", (BATCH, 512, 512, 7)),
        ("tiny 3x3 8->8 @8 batch 1", (1, 8, 8, 8))) for replay in (True, False)]
    for replay, label, (b, c, k, hw) in cases:
        spent["replay"] = True
        if not replay:
            label += ", replays bypassed"
        x = dev.to_device(rng.standard_normal((b, hw, hw, c), dtype=np.float32).astype(bf16))
        w = dev.to_device(rng.standard_normal((k, 3, 3, c), dtype=np.float32).astype(bf16))
        y = dev.alloc((b, hw, hw, k), "bf16", order="C").result()
        tx = torch.randn(b, c, hw, hw, device="cuda", dtype=torch.bfloat16) \
            .contiguous(memory_format=torch.channels_last)
        tw = torch.randn(k, c, 3, 3, device="cuda", dtype=torch.bfloat16) \
            .contiguous(memory_format=torch.channels_last)
        for _ in range(50):
            last = dev.cudnn.conv2d(x, w, padding=1, layout="NHWC", out=y)
        last.result()
        DnnHandle.conv, graph_mod.GraphPlan.run = conv, run
        try:
            spent.update(conv=0.0, run=0.0, calls=0, replay=replay)
            t0 = time.perf_counter()
            for _ in range(n):
                last = dev.cudnn.conv2d(x, w, padding=1, layout="NHWC", out=y)
            t_issue = time.perf_counter() - t0
            last.result()
            t_all = time.perf_counter() - t0
        finally:
            DnnHandle.conv, graph_mod.GraphPlan.run = conv0, run0
        for _ in range(50):
            torch.nn.functional.conv2d(tx, tw, padding=1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            torch.nn.functional.conv2d(tx, tw, padding=1)
        torch.cuda.synchronize()
        t_torch = time.perf_counter() - t0
        calls = max(spent["calls"], 1)
        out[label] = {"us_per_call": t_all / n * 1e6, "torch_us_per_call": t_torch / n * 1e6,
                      "caller_issue_us": t_issue / n * 1e6,
                      "device_conv_us": spent["conv"] / calls * 1e6,
                      "graph_run_us": spent["run"] / calls * 1e6}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=0.3)
    parser.add_argument("--out", default=None, help="output folder (default: "
                        "benchmarks/out)")
    args = parser.parse_args()
    TIMING.update(repeats=args.repeats, warmup_s=args.warmup)
    if args.out:
        os.environ["OUT"] = args.out
    import torch

    torch.backends.cudnn.benchmark = False
    rows: list[dict] = []
    with gpumsg.open_device(0) as dev:
        for case in RESNET50:
            rows.extend(conv_cases(dev, torch, *case))
        rows.append(softmax_case(dev, torch))
        costs = host_costs(dev, torch)
        cache = dev.cudnn.cache_info().result()
    notes = [f"batch {BATCH}, NHWC (torch: channels_last), bf16 with f32 accumulation",
             "ratio = gpumsg speed / torch speed (> 1: gpumsg faster); TFLOP/s from wall time of "
             "n pipelined calls then one wait (n sized for >= 30 ms of torch's work); both warmed "
             f"up {TIMING['warmup_s']} s, then {TIMING['repeats']} alternating runs each, "
             "medians",
             "gpumsg / ratio: both sides take cuDNN's heuristic choice (torch.backends.cudnn."
             "benchmark = False); gpumsg_find / ratio_find: gpumsg's algo='find' (each candidate "
             "plan timed once per problem) against torch measured again beside it; "
             "rel_err_vs_torch compares the two bf16 outputs",
             f"gpumsg plan cache at the end: {cache}"]
    for label, c in costs.items():
        notes.append(f"host costs, {label} (n pipelined, timers on): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in c.items()))
    write_results("cudnn", rows, notes,
                  ["case", "gpumsg", "torch", "unit", "ratio", "gpumsg_find", "ratio_find",
                   "rel_err_vs_torch"], extra={"host_costs": costs})


if __name__ == "__main__":
    main()
