"""Large SGEMM throughput: gpumsg beside torch (TF32 off: strict fp32 on both sides)."""

from __future__ import annotations

import statistics
import time

import numpy as np
from _common import write_results

import gpumsg


def timed(issue, finish, n: int, repeats: int = 3) -> float:
    """Median seconds per operation over ``repeats`` runs of ``n`` pipelined operations."""
    issue()
    finish()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            issue()
        finish()
        runs.append((time.perf_counter() - t0) / n)
    return statistics.median(runs)


def measure(dev: gpumsg.Device, size: int, n: int) -> dict:
    import torch

    rng = np.random.default_rng()
    a_h = rng.standard_normal((size, size), dtype=np.float32)
    b_h = rng.standard_normal((size, size), dtype=np.float32)
    a, b = dev.to_device(np.asfortranarray(a_h)), dev.to_device(np.asfortranarray(b_h))
    c = dev.alloc((size, size), np.float32)
    last = [dev.synchronize()]

    def issue() -> None:
        last[0] = dev.sgemm(a, b, c, size, size, size)

    t_ours = timed(issue, lambda: last[0].result(), n)
    out = dev.copy_to_host(c).result()
    ref = a_h[:64].astype(np.float64) @ b_h[:, :64]  # a corner of the product, in float64
    err = np.linalg.norm(out[:64, :64] - ref) / np.linalg.norm(ref)
    ta, tb = torch.from_numpy(a_h).cuda(), torch.from_numpy(b_h).cuda()
    tc = torch.empty(size, size, device="cuda")
    t_torch = timed(lambda: torch.mm(ta, tb, out=tc), torch.cuda.synchronize, n)
    flop = 2.0 * size ** 3
    return {"size": f"{size}^3 fp32", "gpumsg_tflops": flop / t_ours / 1e12,
            "torch_tflops": flop / t_torch / 1e12, "ratio": t_torch / t_ours, "rel_err": err,
            "target": ">= 0.97"}


def main() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with gpumsg.open_device(0) as dev:
        rows = [measure(dev, 4096, 20), measure(dev, 8192, 6)]
    notes = ["ratio = gpumsg throughput / torch throughput; TF32 disabled in torch, gpumsg "
             "Sgemm is strict fp32 (cublasSgemm, default math mode)",
             "pipelined: n products issued, then the last awaited; median of 3 runs"]
    write_results("sgemm", rows, notes,
                  ["size", "gpumsg_tflops", "torch_tflops", "ratio", "rel_err", "target"])


if __name__ == "__main__":
    main()
