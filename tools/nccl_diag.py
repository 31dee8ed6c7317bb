"""Diagnose NCCL communicator setup on a multi-GPU machine: torch's NCCL, then gpumsg's, with
NCCL_DEBUG output (run with NCCL_DEBUG=INFO)."""

from __future__ import annotations

import sys
import time

import gpumsg


def main() -> int:
    try:
        import torch
        import torch.cuda.nccl as tn
        xs = [torch.ones(1024, device=f"cuda:{i}") for i in range(2)]
        t0 = time.perf_counter()
        tn.all_reduce(xs)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        print("torch nccl all_reduce ok", xs[0][0].item(), f"{time.perf_counter() - t0:.2f} s",
              flush=True)
    except Exception as exc:  # report and go on to gpumsg
        print("torch nccl failed:", repr(exc), flush=True)
    g = gpumsg.open_devices([0, 1], backend="cuda")
    t0 = time.perf_counter()
    try:
        comm = g.nccl(timeout=float(sys.argv[1]) if len(sys.argv) > 1 else 20)
        print("gpumsg comm ok", f"{time.perf_counter() - t0:.2f} s", flush=True)
        import numpy as np
        bufs = [d.to_device(np.full(1024, i + 1, np.float32)) for i, d in enumerate(g.devices)]
        comm.all_reduce(bufs).result(30)
        print("gpumsg all_reduce", [d.copy_to_host(b).result()[0] for d, b in zip(g.devices, bufs)],
              flush=True)
    except Exception as exc:
        print("gpumsg failed:", repr(exc), f"{time.perf_counter() - t0:.2f} s", flush=True)
    g.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
