"""Which cuBLAS kernels gpumsg's GEMMs run beside torch's, and how long each takes on the GPU
(torch's profiler reads CUPTI, which sees every kernel of the process). Explains throughput
gaps that are not host overhead. Writes $OUT/gemm_kernels.txt when OUT is set."""

from __future__ import annotations

import os
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import gpumsg  # noqa: E402


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    lines = []
    size = 4096
    with gpumsg.open_device(0) as dev:
        for name, dtype, tdt, compute in (("bf16", "bf16", torch.bfloat16, "default"),
                                          ("fp16", "f16", torch.float16, "default"),
                                          ("tf32", "f32", torch.float32, "tf32")):
            torch.backends.cuda.matmul.allow_tf32 = compute == "tf32"
            h = np.random.default_rng().standard_normal((size, size), dtype=np.float32)
            a = dev.to_device(np.asfortranarray(h.astype(gpumsg.as_dtype(dtype))))
            c = dev.alloc((size, size), dtype)
            ta = torch.from_numpy(h).to(tdt).cuda()
            tc = torch.empty(size, size, device="cuda", dtype=tdt)
            for _ in range(3):
                dev.blas.gemm(a, a, c, size, size, size, compute=compute).result()
                torch.mm(ta, ta, out=tc)
            torch.cuda.synchronize()
            for who in ("gpumsg", "torch"):
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        if who == "gpumsg":
                            f = dev.blas.gemm(a, a, c, size, size, size, compute=compute)
                        else:
                            torch.mm(ta, ta, out=tc)
                    if who == "gpumsg":
                        f.result()
                    torch.cuda.synchronize()
                kernels: dict[str, list[float]] = defaultdict(list)
                for ev in prof.events():
                    if ev.device_type.name == "CUDA" and "gemm" in ev.name.lower() \
                            or "sm90" in ev.name or "cutlass" in ev.name.lower():
                        kernels[ev.name].append(ev.device_time_total)
                for k, ts in kernels.items():
                    lines.append(f"{name} {who:6s}: {len(ts):3d} x {np.mean(ts):8.1f} us  "
                                 f"{k[:150]}")
    text = "\n".join(lines)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gemm_kernels.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
