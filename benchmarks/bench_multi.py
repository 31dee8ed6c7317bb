"""Two GPUs: AllReduce bus bandwidth (1 MiB - 1 GiB, f32 and bf16) and 8 KiB all-reduce
latency, gpumsg (the caller issues every member's part in one NCCL group call, real NCCL; the
latency also with one Collective message per device, ``multi_issue="members"``) beside
torch.distributed with NCCL (one process per GPU, spawned here with torch.multiprocessing), plus
256 MiB
device-to-device copies (gpumsg: ``copy_peer`` both ways, and grouped NCCL send/recv) beside
``tensor.to("cuda:1")``.

Bus bandwidth as nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n. Each timed
region issues ``reps`` in-place all-reduces back to back and waits for the last (torch:
``cuda.synchronize`` on every rank; gpumsg: every rank's future); the median of 5 regions.

    python benchmarks/bench_multi.py --out DIR [--max-mib 1024] [--quick] [--copy-only]
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


def _median_time(fn, reps: int = 10, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


PIPELINE = 8  # copies in flight in the pipelined rows


def peer_copy(group) -> list[tuple[str, float, str, float]]:
    """GB/s of 256 MiB device-to-device copies, rows (gpumsg case, GB/s, torch case, GB/s):
    one copy at a time (torch ``.to("cuda:1")`` then ``cuda.synchronize``; gpumsg
    ``copy_peer`` allocating, into a buffer, both directions, waited on through the future),
    ``PIPELINE`` copies back to back then one wait (torch ``copy_(non_blocking=True)``), and
    grouped NCCL send/recv."""
    import torch

    nbytes = COPY_BYTES
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda:0")
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:1")

    def torch_to() -> None:
        y = src.to("cuda:1")
        torch.cuda.synchronize(1)
        del y

    def torch_pipelined() -> None:
        for _ in range(PIPELINE):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)

    t_to = nbytes / _median_time(torch_to) / 1e9
    t_pipe = PIPELINE * nbytes / _median_time(torch_pipelined) / 1e9
    src = dst = None
    torch.cuda.empty_cache()
    ours = gpumsg_copies(group, nbytes)
    rows = []
    for name, gbps in ours.items():
        if "pipelined" in name:
            rows.append((name, gbps, f"torch copy_ x{PIPELINE} pipelined", t_pipe))
        else:
            rows.append((name, gbps, "torch .to('cuda:1')", t_to))
    return rows


def gpumsg_copies(group, nbytes: int) -> dict[str, float]:
    """The gpumsg side of :func:`peer_copy` (runs on the simulator too, for a dry run)."""
    import numpy as np

    out: dict[str, float] = {}
    d0, d1 = group[0], group[1]
    link = group.topology()
    print(f"topology: kind={link.kind} perf_rank={link.perf_rank}", file=sys.stderr)
    host = np.random.default_rng().integers(0, 255, nbytes, dtype=np.uint8)
    a = d0.to_device(host)
    b = d1.alloc((nbytes,), np.uint8)
    back = d0.alloc((nbytes,), np.uint8)
    a.result()
    b.result()
    back.result()

    def fresh() -> None:
        y = d1.copy_peer(src=a).result()
        y.free()

    def pipelined() -> None:
        futs = [d1.copy_peer(b, a) for _ in range(PIPELINE)]
        futs[-1].result()

    out["gpumsg copy_peer 0->1 (allocating)"] = nbytes / _median_time(fresh) / 1e9
    out["gpumsg copy_peer 0->1 (into a buffer)"] = nbytes / _median_time(
        lambda: d1.copy_peer(b, a).result()) / 1e9
    out["gpumsg copy_peer 1->0 (into a buffer)"] = nbytes / _median_time(
        lambda: d0.copy_peer(back, b).result()) / 1e9
    out[f"gpumsg copy_peer 0->1 x{PIPELINE} pipelined"] = PIPELINE * nbytes / _median_time(
        pipelined) / 1e9
    got = d0.copy_to_host(back).result()
    assert np.array_equal(got, host), "peer copy round trip differs"
    comm = group.nccl(timeout=120)

    def nccl_once() -> None:
        with comm.group() as fut:
            comm.send(a, peer=1)
            comm.recv(b, peer=0)
        fut.result()

    out["gpumsg NCCL send/recv 0->1"] = nbytes / _median_time(nccl_once) / 1e9
    assert np.array_equal(d1.copy_to_host(b).result(), host)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-mib", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="fewer sizes (1, 16, 256 MiB)")
    ap.add_argument("--copy-only", action="store_true", help="only the 256 MiB peer copies")
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
    if args.copy_only:
        plan = []

    # before gpumsg opens the GPUs (separate processes anyway)
    t_torch = torch_allreduce(plan) if plan else {}
    import gpumsg

    with gpumsg.open_devices([0, 1], backend="cuda") as group:
        t_ours = gpumsg_allreduce(group, plan) if plan else {}
        latency = [p for p in plan if p[2] == LAT_BYTES]
        with gpumsg.config.configured(multi_issue="members"):
            t_members = gpumsg_allreduce(group, latency) if latency else {}
        copies = peer_copy(group)

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
    for key, dtype, nbytes, _ in plan:
        if key in t_members:
            ours, theirs = t_members[key], t_torch[key]
            rows.append({"case": "all_reduce latency, one message per member", "dtype": dtype,
                         "bytes": nbytes, "gpumsg_us": ours * 1e6, "torch_us": theirs * 1e6,
                         "gpumsg_busbw_GBps": nbytes / ours / 1e9 * factor,
                         "torch_busbw_GBps": nbytes / theirs / 1e9 * factor,
                         "ratio_vs_torch": theirs / ours})
    for name, gbps, peer, peer_gbps in copies:
        rows.append({"case": f"peer copy 256 MiB: {name} vs {peer}", "dtype": "u8",
                     "bytes": COPY_BYTES, "gpumsg_busbw_GBps": gbps,
                     "torch_busbw_GBps": peer_gbps, "ratio_vs_torch": gbps / peer_gbps})
    notes = ["busbw = bytes / time * 2(n-1)/n (nccl-tests), n = 2; the copy rows are GB/s",
             "ratio_vs_torch > 1: gpumsg faster; latency row = per-op time of 500 pipelined ops",
             "NCCL_NVLS_ENABLE=0 in every process"]
    write_results("bench_multi", rows, notes,
                  ["case", "dtype", "bytes", "gpumsg_us", "torch_us", "gpumsg_busbw_GBps",
                   "torch_busbw_GBps", "ratio_vs_torch"])


if __name__ == "__main__":
    sys.exit(main())
