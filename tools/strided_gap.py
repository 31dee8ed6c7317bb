"""Where gpumsg's strided-batched GEMMs lose GPU time beside torch.bmm (diagnostic, H100).

512 x 128^3 bf16, the calls of each side queued behind a spin kernel (gpumsg: an NVRTC kernel
on its compute stream; torch: ``torch.cuda._sleep``), so the host's pace is out of it, under
``torch.profiler`` (CUPTI sees every stream of the process). Each call is a memset and a GEMM
kernel on both sides (``bmm_timeline.json``); the timeline of each side's stream is split into
the GEMM kernel's time, the memset's time, the idle gap from a memset to its kernel and from a
kernel to the next call's memset. Equal kernel times with longer gaps point at the launch (a
graph's nodes, the stream); a longer kernel at the kernel's own execution. Sides alternate,
``rounds`` times; medians per round. Then the same ``n`` calls pipelined (no spin).

Usage: python tools/strided_gap.py [n] [rounds]   (JSON lines; $OUT/strided_gap.json)
``GPUMSG_BLAS_REPLAY=0`` in the environment: gpumsg's calls launched directly.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from typing import Any

from conv_timeline import save, timeline
from strided_pace import SPIN, bmm_operands

import gpumsg


def split(ops: list[tuple[float, float, str, str]]) -> dict[str, float]:
    """Medians of the GEMM kernel's and memset's durations and of the gaps before each, and the
    span per call, over one side's stream (the spin left out)."""
    ops = [o for o in ops if "spin" not in o[3] and "sleep" not in o[3].lower()]
    kernel, memset, before_kernel, before_memset = [], [], [], []
    for prev, op in zip(ops, ops[1:], strict=False):
        gap = op[0] - (prev[0] + prev[1])
        (memset if op[2] == "gpu_memset" else kernel).append(op[1])
        (before_memset if op[2] == "gpu_memset" else before_kernel).append(gap)
    calls = sum(1 for o in ops if o[2] == "kernel")
    return {"calls": calls, "kernel_us": statistics.median(kernel),
            "kernel_mean_us": statistics.fmean(kernel),
            "memset_us": statistics.median(memset) if memset else 0.0,
            "gap_memset_to_kernel_us": statistics.median(before_kernel) if before_kernel else 0.0,
            "gap_kernel_to_memset_us": statistics.median(before_memset) if before_memset else 0.0,
            "gap_kernel_to_memset_mean_us": statistics.fmean(before_memset) if before_memset
            else 0.0,
            "span_us_per_call": (ops[-1][0] + ops[-1][1] - ops[0][0]) / max(calls, 1),
            "names": sorted({f"{o[2]}:{o[3]}" for o in ops})}


def profiled(torch: Any, body: Any) -> dict[int, list]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        body()
    path = os.path.join(tempfile.mkdtemp(), "t.json")
    prof.export_chrome_trace(path)
    return timeline(path)


def busiest(streams: dict[int, list]) -> list:
    return streams[max(streams, key=lambda st: sum(1 for o in streams[st] if o[2] == "kernel"))]


def probe_setup(torch: Any, rounds: int) -> tuple[int, int, int, int, list[Any], tuple, str]:
    """The probes' common start: n and rounds from the command line (defaults 600 and
    ``rounds``), the 512 x 128^3 problem, its host arrays and torch operands, and the replay
    setting (``GPUMSG_BLAS_REPLAY``)."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else rounds
    batch, s = 512, 128
    hosts, operands = bmm_operands(torch, batch, s)
    return n, rounds, batch, s, hosts, operands, os.environ.get("GPUMSG_BLAS_REPLAY", "1")


def main() -> None:
    import torch
    n, rounds, batch, s, hosts, (ta, tb, tc), replay = probe_setup(torch, 3)
    rows: list[dict[str, Any]] = []
    with gpumsg.open_device(0) as dev:
        kernel = dev.nvrtc.compile(SPIN, "spin").result()
        a, b = (dev.to_device(h).result() for h in hosts)
        c = dev.alloc((batch, s, s), "bf16", order="C").result()

        def ours() -> Any:
            return dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s)

        for _ in range(300):
            ours()
            torch.bmm(ta, tb, out=tc)
        dev.synchronize().result()
        torch.cuda.synchronize()
        cycles = 2_000 * n * 40  # ~40 µs per call at ~2 GHz: longer than either side enqueues

        def gpumsg_prequeued() -> None:
            dev.launch(kernel, 1, 1, (cycles,))
            last = None
            for _ in range(n):
                last = ours()
            last.result()

        def torch_prequeued() -> None:
            torch.cuda._sleep(cycles)
            for _ in range(n):
                torch.bmm(ta, tb, out=tc)
            torch.cuda.synchronize()

        def gpumsg_pipelined() -> None:
            last = None
            for _ in range(n):
                last = ours()
            last.result()

        def torch_pipelined() -> None:
            for _ in range(n):
                torch.bmm(ta, tb, out=tc)
            torch.cuda.synchronize()

        for mode, pair in (("prequeued", (gpumsg_prequeued, torch_prequeued)),
                           ("pipelined", (gpumsg_pipelined, torch_pipelined))):
            for r in range(rounds):
                for side, body in zip(("gpumsg", "torch"), pair, strict=True):
                    row = {"mode": mode, "round": r, "side": side, "replay": replay, "n": n,
                           **split(busiest(profiled(torch, body)))}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    save(f"strided_gap_replay{replay}.json", rows)


if __name__ == "__main__":
    main()
