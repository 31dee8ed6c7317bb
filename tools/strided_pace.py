"""What paces pipelined strided-batched GEMMs (512 x 128^3 bf16) in gpumsg, beside torch.bmm
(diagnostic, H100).

For each launch setting (the replays' launch holding the GIL under 256 operations in flight,
the default; holding it always; releasing it always) a device is opened, warmed up, and then
``rounds`` times: ``n`` calls are issued with a ``Stats`` every ``every`` calls, and the last
call awaited; torch.bmm makes the same ``n`` calls beside it. Reported: µs per call (wall),
the caller's µs per call to issue, and the operations in flight and mailbox depth that the
Stats saw (the GPU's backlog as the device thread launches: near zero means the host is the
slower side). The settings are rotated round by round; medians.

Then the GPU's own pace, the host taken out: a spin kernel holds the stream while the host
enqueues ``n`` calls behind it (gpumsg: an NVRTC kernel on the compute stream; torch:
``torch.cuda._sleep``); the spin alone is timed the same way and subtracted.

Usage: python tools/strided_pace.py [n] [rounds] [json_path]
(``PACE_ONLY_PREQUEUED=1``: the GPU's pace alone)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

import gpumsg
from gpumsg.backends.cuda import driver

SETTINGS = {"hold<256": driver.HOLD_IN_FLIGHT, "hold always": 1 << 40, "release": 0}


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
"""


def bmm_operands(torch: Any, batch: int, s: int) -> tuple[list[Any], tuple[Any, Any, Any]]:
    """Two random (batch, s, s) bf16 host arrays, and torch's A and B made from them and an
    empty C, on the GPU."""
    bf16 = gpumsg.as_dtype("bf16")
    rng = np.random.default_rng()
    hosts = [rng.standard_normal((batch, s, s), dtype=np.float32).astype(bf16) for _ in range(2)]
    ta, tb = (torch.from_numpy(h.astype(np.float32)).cuda().to(torch.bfloat16) for h in hosts)
    return hosts, (ta, tb, torch.empty(batch, s, s, device="cuda", dtype=torch.bfloat16))


def gpu_pace(torch: Any, hosts: list[Any], n: int, rounds: int) -> dict[str, Any]:
    """µs per call of the GPU alone: n calls queued behind a spin, less the spin alone."""
    batch, s = 512, 128
    ta, tb = (torch.from_numpy(h.astype(np.float32)).cuda().to(torch.bfloat16) for h in hosts)
    tc = torch.empty(batch, s, s, device="cuda", dtype=torch.bfloat16)
    spin_s = n * 40e-6  # longer than either side takes to enqueue n calls
    with gpumsg.open_device(0) as dev:
        kernel = dev.nvrtc.compile(SPIN, "spin").result()
        a, b = (dev.to_device(h).result() for h in hosts)
        c = dev.alloc((batch, s, s), "bf16", order="C").result()
        # the spin's clock rate: time one spin of a known count of cycles
        probe = 20_000_000
        dev.launch(kernel, 1, 1, (probe,)).result()
        t0 = time.perf_counter()
        dev.launch(kernel, 1, 1, (probe,)).result()
        cycles = int(probe / (time.perf_counter() - t0) * spin_s)

        for _ in range(200):
            dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s)
        dev.synchronize().result()
        ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ev[0].record()
        torch.cuda._sleep(probe)
        ev[1].record()
        ev[1].synchronize()
        torch_cycles = int(probe / (ev[0].elapsed_time(ev[1]) * 1e-3) * spin_s)
        def paced(gpumsg_abc: tuple, torch_abc: tuple) -> tuple[list[float], list[float]]:
            """Per round, µs per call of gpumsg's and torch's calls queued behind a spin."""
            (ga, gb, gc), (xa, xb, xc) = gpumsg_abc, torch_abc
            ours: list[float] = []
            peers: list[float] = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                dev.launch(kernel, 1, 1, (cycles,)).result()
                alone = time.perf_counter() - t0
                t0 = time.perf_counter()
                dev.launch(kernel, 1, 1, (cycles,))
                for _ in range(n):
                    last = dev.cublas.gemm_strided_batched(gb, ga, gc, s, s, s, batch, s * s,
                                                           s * s, s * s)
                last.result()
                ours.append((time.perf_counter() - t0 - alone) * 1e6 / n)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                torch.cuda._sleep(torch_cycles)
                torch.cuda.synchronize()
                alone = time.perf_counter() - t0
                t0 = time.perf_counter()
                torch.cuda._sleep(torch_cycles)
                for _ in range(n):
                    torch.bmm(xa, xb, out=xc)
                torch.cuda.synchronize()
                peers.append((time.perf_counter() - t0 - alone) * 1e6 / n)
            return ours, peers

        mine, theirs = paced((a, b, c), (ta, tb, tc))
        # the same, each side on the other's memory (DLPack both ways, zero copy)
        oa, ob, oc = (dev.from_dlpack(t).result() for t in (ta, tb, tc))
        xa, xb, xc = (torch.from_dlpack(buf) for buf in (a, b, c))
        swapped_mine, swapped_theirs = paced((oa, ob, oc), (xa, xb, xc))
        dev.synchronize().result()
        addresses = {"gpumsg": [hex(x.data_ptr()) for x in (xa, xb, xc)],
                     "torch": [hex(x.data_ptr()) for x in (ta, tb, tc)]}
        del xa, xb, xc
    return {"setting": "prequeued (GPU pace)", "gpumsg_us_per_call": statistics.median(mine),
            "torch_us_per_call": statistics.median(theirs),
            "gpumsg_on_torch_memory_us": statistics.median(swapped_mine),
            "torch_on_gpumsg_memory_us": statistics.median(swapped_theirs),
            "gpumsg_all": mine, "torch_all": theirs, "gpumsg_swapped_all": swapped_mine,
            "torch_swapped_all": swapped_theirs,
            "addresses": addresses}


def main() -> None:
    import torch
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    out_path = sys.argv[3] if len(sys.argv) > 3 else None
    every = 100
    batch, s = 512, 128
    hosts, (ta, tb, tc) = bmm_operands(torch, batch, s)

    def torch_run() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            torch.bmm(ta, tb, out=tc)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e6 / n

    seen: dict[str, dict[str, list[Any]]] = {
        k: {"us": [], "issue_us": [], "in_flight": [], "queue": [], "torch_us": []}
        for k in SETTINGS}
    defaults = driver.guarded_launch.__defaults__
    for r in range(0 if os.environ.get("PACE_ONLY_PREQUEUED") else rounds):
        names = list(SETTINGS)
        names = names[r % len(names):] + names[:r % len(names)]
        for name in names:
            driver.guarded_launch.__defaults__ = (SETTINGS[name],)
            try:
                with gpumsg.open_device(0) as dev:
                    a, b = (dev.to_device(h).result() for h in hosts)
                    c = dev.alloc((batch, s, s), "bf16", order="C").result()

                    def call(dev: Any = dev, a: Any = a, b: Any = b, c: Any = c) -> Any:
                        return dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s,
                                                               s * s, s * s)

                    end = time.perf_counter() + 0.3
                    while time.perf_counter() < end:
                        call()
                    dev.synchronize().result()
                    stats = []
                    t0 = time.perf_counter()
                    for i in range(n):
                        last = call()
                        if i % every == every - 1:
                            stats.append(dev.stats())
                    issued = time.perf_counter() - t0
                    last.result()
                    wall = time.perf_counter() - t0
                    loads = [f.result() for f in stats]
            finally:
                driver.guarded_launch.__defaults__ = defaults
            got = seen[name]
            got["us"].append(wall * 1e6 / n)
            got["issue_us"].append(issued * 1e6 / n)
            got["in_flight"].append([x.ops_in_flight for x in loads])
            got["queue"].append([x.queue_depth for x in loads])
            got["torch_us"].append(torch_run())
    rows = []
    prequeued = gpu_pace(torch, hosts, n, rounds)
    print(json.dumps(prequeued), flush=True)
    rows.append(prequeued)
    if os.environ.get("PACE_ONLY_PREQUEUED"):
        return
    for name, got in seen.items():
        row = {"setting": name, "n": n, "rounds": rounds,
               "us_per_call": statistics.median(got["us"]),
               "issue_us_per_call": statistics.median(got["issue_us"]),
               "torch_us_per_call": statistics.median(got["torch_us"]),
               "in_flight_median": statistics.median(v for lst in got["in_flight"] for v in lst),
               "in_flight_max": max(v for lst in got["in_flight"] for v in lst),
               "queue_median": statistics.median(v for lst in got["queue"] for v in lst),
               "in_flight_round0": got["in_flight"][0], "all": got}
        row["torch_over_gpumsg"] = row["torch_us_per_call"] / row["us_per_call"]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "all"}), flush=True)
    if out_path:
        with open(out_path, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
