"""Large SGEMM throughput: gpumsg beside torch (TF32 off: strict fp32 on both sides)."""

from __future__ import annotations

import numpy as np
from _common import compare, write_results

import gpumsg


def measure(dev: gpumsg.Device, size: int) -> dict:
    import torch

    rng = np.random.default_rng()
    a_h = rng.standard_normal((size, size), dtype=np.float32)
    b_h = rng.standard_normal((size, size), dtype=np.float32)
    a, b = dev.to_device(np.asfortranarray(a_h)), dev.to_device(np.asfortranarray(b_h))
    c = dev.alloc((size, size), np.float32)
    last = [dev.synchronize()]

    def issue() -> None:
        last[0] = dev.sgemm(a, b, c, size, size, size)

    ta, tb = torch.from_numpy(a_h).cuda(), torch.from_numpy(b_h).cuda()
    tc = torch.empty(size, size, device="cuda")
    t_ours, t_torch = compare((issue, lambda: last[0].result()),
                              (lambda: torch.mm(ta, tb, out=tc), torch.cuda.synchronize))
    out = dev.copy_to_host(c).result()
    ref = a_h[:64].astype(np.float64) @ b_h[:, :64]  # a corner of the product, in float64
    err = np.linalg.norm(out[:64, :64] - ref) / np.linalg.norm(ref)
    flop = 2.0 * size ** 3
    return {"size": f"{size}^3 fp32", "gpumsg_tflops": flop / t_ours / 1e12,
            "torch_tflops": flop / t_torch / 1e12, "ratio": t_torch / t_ours, "rel_err": err,
            "target": ">= 0.97"}


def main() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with gpumsg.open_device(0) as dev:
        rows = [measure(dev, 4096), measure(dev, 8192)]
    notes = ["ratio = gpumsg throughput / torch throughput; TF32 disabled in torch, gpumsg "
             "Sgemm is strict fp32 (CUBLAS_COMPUTE_32F)",
             "pipelined: n products issued, then the last awaited, n sized for >= 30 ms of "
             "work; both sides warmed up 0.3 s, then 5 alternating runs each, medians"]
    write_results("sgemm", rows, notes,
                  ["size", "gpumsg_tflops", "torch_tflops", "ratio", "rel_err", "target"])


if __name__ == "__main__":
    main()
