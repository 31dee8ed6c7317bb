"""Interop costs: DLPack export/import per call beside torch<->CuPy (GPU), and gpumsg.ray per
message beside a plain Ray actor method (a GPU where Ray sees one, else a simulated device).

DLPack (``interop.md``): each row is the median wall time of one hand-over, after warm-up:
gpumsg -> torch (``torch.from_dlpack(buf)``: the ExportSync round trip, the capsule, torch's
tensor; the tensor is dropped at once, so the deleter and its wait for torch's default stream
are included),
gpumsg -> CuPy, torch -> gpumsg and CuPy -> gpumsg (``dev.from_dlpack(t).result()``: the Adopt
round trip), the same with the buffer freed right after (the release), and
``__cuda_array_interface__`` through ``cupy.asarray``. The peer of each row is the same hand-over
between torch and CuPy. Without a GPU the rows are NumPy <-> gpumsg on the simulator (plumbing
only, peer NumPy -> NumPy).

Ray (``interop_ray.md``, on a local ``ray.init``; a GPU machine without network runs it with
the carried extras of ``../shared/tools/carry_extras.sh``): round trip and pipelined rate of
``rd.stats()`` and of a 64^3 float32 GEMM on the actor's device (CUDA where the cluster has a
GPU, else simulated), beside a plain actor method that returns a small value / multiplies the
same matrices with NumPy, and 256 MiB host -> remote device (``rd.to_device``) beside a plain
actor method that receives the array through the object store and copies it once.

    python benchmarks/bench_interop.py --out DIR [--part dlpack|ray|all] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _common import median_us, write_results

import gpumsg


def bench_dlpack(n: int) -> None:
    from gpumsg.backends import cuda_available

    ok, why = cuda_available()
    rows: list[dict] = []
    notes: list[str] = []
    if ok:
        import cupy as cp
        import numpy as np
        import torch

        dev = gpumsg.open_device(0, backend="cuda")
        buf = dev.to_device(np.ones((256, 256), np.float32)).result()
        t = torch.ones((256, 256), device="cuda")
        c = cp.ones((256, 256), dtype=cp.float32)
        torch.cuda.synchronize()

        from gpumsg.client import _dlpack as dlpack

        def row(name: str, ours, peer_name: str, peer) -> None:
            before = dict(dlpack.counts)
            try:
                a = median_us(ours, n)
                z = dlpack.counts["zero_trip"] - before["zero_trip"]
                r = dlpack.counts["round_trip"] - before["round_trip"]
                b = median_us(peer, n)
            except Exception as exc:  # noqa: BLE001 - keep the other rows
                rows.append({"hand-over": name, "peer": f"failed: {exc!r}"})
                return
            rows.append({"hand-over": name, "gpumsg_us": a, "peer": peer_name, "peer_us": b,
                         "ratio": a / b, "exports: no message / ExportSync":
                         f"{z} / {r}" if z + r else "-"})

        kept: list = []

        def keep(x) -> None:
            kept.append(x)
            if len(kept) > 256:
                kept.clear()

        row("gpumsg -> torch, tensor kept", lambda: keep(torch.from_dlpack(buf)),
            "CuPy -> torch, kept", lambda: keep(torch.from_dlpack(c)))
        kept.clear()
        row("gpumsg -> torch, tensor dropped", lambda: torch.from_dlpack(buf),
            "CuPy -> torch", lambda: torch.from_dlpack(c))
        quiet_address = dlpack._quiet_address
        dlpack._quiet_address = lambda *a: None  # every export sends ExportSync
        row("gpumsg -> torch, kept, ExportSync forced", lambda: keep(torch.from_dlpack(buf)),
            "CuPy -> torch, kept", lambda: keep(torch.from_dlpack(c)))
        dlpack._quiet_address = quiet_address
        kept.clear()
        row("gpumsg -> CuPy (cupy.from_dlpack)", lambda: cp.from_dlpack(buf),
            "torch -> CuPy", lambda: cp.from_dlpack(t))
        row("torch -> gpumsg (dev.from_dlpack)", lambda: dev.from_dlpack(t).result(),
            "torch -> CuPy", lambda: cp.from_dlpack(t))
        row("CuPy -> gpumsg (dev.from_dlpack)", lambda: dev.from_dlpack(c).result(),
            "CuPy -> torch", lambda: torch.from_dlpack(c))
        row("torch -> gpumsg, then free", lambda: dev.from_dlpack(t).result().free(),
            "torch -> CuPy", lambda: cp.from_dlpack(t))
        row("gpumsg -> CuPy (__cuda_array_interface__)", lambda: cp.asarray(buf),
            "torch -> CuPy (CAI)", lambda: cp.asarray(t))
        kept.clear()
        dev.synchronize().result()
        dev.close()
        notes.append("gpumsg's export needs no message when the device is quiet (nothing "
                     "queued or in flight), else one round trip (ExportSync: the consumer's "
                     "stream waits on the fence event of the buffer's last write; nothing waits "
                     "on the GPU). A dropped tensor's deleter waits, on its own thread, until "
                     "the consumer's queued work is done before gpumsg's next use or free: "
                     "torch's default (legacy) stream is queried and synchronized only if busy; "
                     "any other consumer stream, which may be gone, is not touched (the context "
                     "is synchronized). torch<->CuPy hand-overs cross no thread.")
    else:
        import numpy as np

        dev = gpumsg.open_device(0, backend="sim")
        buf = dev.to_device(np.ones((256, 256), np.float32)).result()
        arr = np.ones((256, 256), np.float32)
        for name, ours in (("gpumsg -> NumPy (np.from_dlpack)", lambda: np.from_dlpack(buf)),
                           ("NumPy -> gpumsg (dev.from_dlpack)",
                            lambda: dev.from_dlpack(arr).result())):
            a, b = median_us(ours, n), median_us(lambda: np.from_dlpack(arr), n)
            rows.append({"hand-over": name, "gpumsg_us": a, "peer": "NumPy -> NumPy",
                         "peer_us": b, "ratio": a / b})
        dev.close()
        notes.append(f"no GPU here ({why}): simulator rows (host memory, kDLCPU), the "
                     "simulator's export waits for the write's completion (a host consumer)")
    write_results("interop", rows, notes, ["hand-over", "gpumsg_us", "peer", "peer_us",
                                           "ratio", "exports: no message / ExportSync"])


def bench_ray(n: int, quick: bool) -> None:
    try:
        import ray
    except ImportError:
        print("Ray is not installed: the Ray rows need 'pip install gpumsg[ray]'")
        return
    import numpy as np

    import gpumsg.ray as gray

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})  # Ray may live on the path

    @ray.remote(num_cpus=0)
    class Plain:
        def __init__(self) -> None:
            rng = np.random.default_rng()
            self.a = rng.standard_normal((64, 64)).astype(np.float32)
            self.b = rng.standard_normal((64, 64)).astype(np.float32)
            self.c = np.empty((64, 64), np.float32)

        def ping(self) -> int:
            return 0

        def gemm(self) -> None:
            np.matmul(self.a, self.b, out=self.c)

        def take(self, arr: np.ndarray) -> int:
            return int(np.array(arr, copy=True).nbytes)

    @ray.remote(num_cpus=0)
    class PlainAsync:
        async def ping(self) -> int:
            return 0

    plain = Plain.remote()
    plain_async = PlainAsync.remote()
    ray.get([plain.ping.remote(), plain_async.ping.remote()])
    rg = gray.open_devices(num_gpus=1, backend="auto")  # CUDA where Ray sees a GPU
    rd = rg[0]
    backend = rd.backend
    rng = np.random.default_rng()
    a = rd.to_device(rng.standard_normal((64, 64)).astype(np.float32, order="F")).result()
    b = rd.to_device(rng.standard_normal((64, 64)).astype(np.float32, order="F")).result()
    c = rd.alloc((64, 64), np.float32).result()

    def gemm():
        return rd.cublas.gemm(a, b, c, 64, 64, 64)

    def pipelined(issue, wait) -> float:
        samples = []
        for _ in range(3):
            t0 = time.perf_counter()
            futs = [issue() for _ in range(n)]
            wait(futs)
            samples.append((time.perf_counter() - t0) / n * 1e6)
        return statistics.median(samples)

    rows: list[dict] = []
    rt = max(50, n // 4)
    for name, ours, peer_name, peer in (
            ("stats round trip", lambda: rd.stats().result(), "plain method (returns 0)",
             lambda: ray.get(plain.ping.remote())),
            ("stats round trip", lambda: rd.stats().result(),
             "plain asyncio actor method (returns 0)", lambda: ray.get(plain_async.ping.remote())),
            ("64^3 f32 GEMM round trip", lambda: gemm().result(), "plain method (NumPy GEMM)",
             lambda: ray.get(plain.gemm.remote()))):
        x, y = median_us(ours, rt, warmup=20), median_us(peer, rt, warmup=20)
        rows.append({"operation": name, "gpumsg.ray_us": x, "peer": peer_name, "peer_us": y,
                     "ratio": x / y})
    for name, issue, wait, peer_name, pissue in (
            ("stats pipelined", rd.stats, lambda fs: [f.result() for f in fs],
             "plain method pipelined", plain.ping.remote),
            ("64^3 GEMM pipelined", gemm, lambda fs: [f.result() for f in fs],
             "plain NumPy GEMM pipelined", plain.gemm.remote)):
        x = pipelined(issue, wait)
        y = pipelined(pissue, lambda refs: ray.get(refs))
        rows.append({"operation": name, "gpumsg.ray_us": x, "peer": peer_name, "peer_us": y,
                     "ratio": x / y})
    big = np.ones(((64 if quick else 256) << 20) // 4, np.float32)
    reps = 3 if quick else 5
    x = median_us(lambda: rd.to_device(big).result(), reps, warmup=1)
    y = median_us(lambda: ray.get(plain.take.remote(big)), reps, warmup=1)
    mib = big.nbytes >> 20
    rows.append({"operation": f"{mib} MiB host -> remote device", "gpumsg.ray_us": x,
                 "peer": "plain method receiving + copying it", "peer_us": y, "ratio": x / y,
                 "GB/s": big.nbytes / (x * 1e-6) / 1e9})
    rg.close()
    ray.shutdown()
    where = ("a CUDA device in one Ray actor" if backend == "cuda" else
             "CPU only: a simulated device in one Ray actor")
    write_results("interop_ray", rows, [
        f"{where} on this machine; the peer is a plain Ray actor on the same cluster. Per-op "
        "times in µs; pipelined rows issue all calls, then wait for all.",
        "gpumsg.ray's actor is a threaded actor (calls overlap on its threads while their "
        "futures are pending); the second row's peer is a plain asyncio actor. The gap to "
        "the plain method is Ray carrying a request and a reply where the plain method "
        "carries neither (the actor's own work, the device call included, is a few µs), on "
        f"{os.cpu_count()} cores shared with Ray's daemons here.",
        *([] if backend == "cuda" else [
            "256 MiB: gpumsg's to_device on the simulator alone takes 0.21-0.55 s in-process on "
            "a 2-core machine (fill, staging copies, the simulated DMA), so that row is the "
            "simulator's copy more than Ray's transport.",
            "The simulator's GEMM is NumPy behind the device thread, so the GEMM rows measure "
            "the message path, not a GPU."]),
        "The peer's GEMM is NumPy's, in the plain actor."],
        ["operation", "gpumsg.ray_us", "peer", "peer_us", "ratio", "GB/s"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--part", default="all", choices=["dlpack", "ray", "all"])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.out:
        os.environ["OUT"] = args.out
    n = 200 if args.quick else 2000
    if args.part in ("dlpack", "all"):
        bench_dlpack(n)
    if args.part in ("ray", "all"):
        bench_ray(200 if args.quick else 1000, args.quick)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
