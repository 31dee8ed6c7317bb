"""Two GPUs: AllReduce bus bandwidth (1 MiB - 1 GiB, f32 and bf16) and 8 KiB all-reduce
latency, gpumsg (one Collective message per device, real NCCL) beside torch.distributed with
NCCL (one process per GPU, spawned here with torch.multiprocessing), plus a 256 MiB
device-to-device transfer (gpumsg: grouped NCCL send/recv) beside ``tensor.to("cuda:1")``.

Bus bandwidth as nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n. Each timed
region issues ``reps`` in-place all-reduces back to back and waits for the last (torch:
``cuda.synchronize`` on every rank; gpumsg: every rank's future); the median of 5 regions.

    python benchmarks/bench_multi.py --out DIR [--max-mib 1024] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, in every process

from _common import write_results  # noqa: E402

SIZES_MIB = (1, 4, 16, 64, 256, 1024)
LAT_BYTES = 8 << 10
COPY_BYTES = 256 << 20


def _reps(nbytes: int) -> int:
    return 50 if nbytes <= (16 << 20) else 10


def _torch_worker(rank: int, world: int, port: int, plan: list, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    results = {}
    for key, dtype_name, nbytes, reps in plan:
        dt = getattr(torch, dtype_name)
        x = torch.zeros(nbytes // torch.empty((), dtype=dt).element_size(), dtype=dt,
                        device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) / reps)
        results[key] = statistics.median(samples)
        del x
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def torch_allreduce(plan: list) -> dict:
    import torch.multiprocessing as mp

    path = tempfile.mktemp(suffix=".json")
    port = 29500 + os.getpid() % 1000
    mp.spawn(_torch_worker, args=(2, port, plan, path), nprocs=2, join=True)
    with open(path) as f:
        return json.load(f)


def gpumsg_allreduce(group, plan: list) -> dict:
    import numpy as np

    import gpumsg

    comm = group.nccl(timeout=120)
    results = {}
    for key, dtype_name, nbytes, reps in plan:
        dt = np.float32 if dtype_name == "float32" else gpumsg.bfloat16
        n = nbytes // np.dtype(dt).itemsize
        bufs = [d.alloc((n,), dt) for d in group]
        for d, b in zip(group, bufs):
            d.memset(b, 0).result()
        for _ in range(3):
            comm.all_reduce(bufs).result()
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            futs = [comm.all_reduce(bufs) for _ in range(reps)]
            for f in futs:
                f.result()
            samples.append((time.perf_counter() - t0) / reps)
        results[key] = statistics.median(samples)
        for d, b in zip(group, bufs):
            d.free(b)
    return results


def peer_copy(group) -> tuple[float, float]:
    import numpy as np
    import torch

    nbytes = COPY_BYTES
    # torch: a device-to-device copy of 256 MiB
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    for _ in range(3):
        src.to("cuda:1")
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    ts = []
    for _ in range(10):
        t0 = time.perf_counter()
        y = src.to("cuda:1")
        torch.cuda.synchronize(1)
        ts.append(time.perf_counter() - t0)
        del y
    t_torch = statistics.median(ts)
    del src
    torch.cuda.empty_cache()
    comm = group.nccl(timeout=120)
    a = group[0].alloc((nbytes,), np.uint8)
    b = group[1].alloc((nbytes,), np.uint8)
    group[0].memset(a, 1).result()

    def once() -> None:
        with comm.group() as fut:
            comm.send(a, peer=1)
            comm.recv(b, peer=0)
        fut.result()

    for _ in range(3):
        once()
    ts = []
    for _ in range(10):
        t0 = time.perf_counter()
        once()
        ts.append(time.perf_counter() - t0)
    assert int(group[1].copy_to_host(b).result()[-1]) == 1
    return nbytes / statistics.median(ts) / 1e9, nbytes / t_torch / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-mib", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="fewer sizes (1, 16, 256 MiB)")
    args = ap.parse_args()
    if args.out:
        os.environ["OUT"] = args.out
    sizes = [s for s in ((1, 16, 256) if args.quick else SIZES_MIB) if s <= args.max_mib]
    plan = []
    for dtype in ("float32", "bfloat16"):
        for mib in sizes:
            nbytes = mib << 20
            plan.append((f"{dtype}:{nbytes}", dtype, nbytes, _reps(nbytes)))
    plan.append((f"float32:{LAT_BYTES}", "float32", LAT_BYTES, 500))

    t_torch = torch_allreduce(plan)  # before gpumsg opens the GPUs: separate processes anyway
    import gpumsg

    with gpumsg.open_devices([0, 1], backend="cuda") as group:
        t_ours = gpumsg_allreduce(group, plan)
        copy_ours, copy_torch = peer_copy(group)

    rows = []
    factor = 2 * (2 - 1) / 2
    for key, dtype, nbytes, _ in plan:
        ours, theirs = t_ours[key], t_torch[key]
        rows.append({"case": "all_reduce" if nbytes != LAT_BYTES else "all_reduce latency",
                     "dtype": dtype, "bytes": nbytes,
                     "gpumsg_us": ours * 1e6, "torch_us": theirs * 1e6,
                     "gpumsg_busbw_GBps": nbytes / ours / 1e9 * factor,
                     "torch_busbw_GBps": nbytes / theirs / 1e9 * factor,
                     "ratio_vs_torch": theirs / ours})
    rows.append({"case": "peer copy 256 MiB (gpumsg: NCCL send/recv; torch: .to('cuda:1'))",
                 "dtype": "u8", "bytes": COPY_BYTES, "gpumsg_busbw_GBps": copy_ours,
                 "torch_busbw_GBps": copy_torch, "ratio_vs_torch": copy_ours / copy_torch})
    notes = ["busbw = bytes / time * 2(n-1)/n (nccl-tests), n = 2; the copy row is GB/s",
             "ratio_vs_torch > 1: gpumsg faster; latency row = per-op time of 500 pipelined ops",
             "NCCL_NVLS_ENABLE=0 in every process"]
    write_results("bench_multi", rows, notes,
                  ["case", "dtype", "bytes", "gpumsg_us", "torch_us", "gpumsg_busbw_GBps",
                   "torch_busbw_GBps", "ratio_vs_torch"])


if __name__ == "__main__":
    sys.exit(main())
