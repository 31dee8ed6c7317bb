"""Which cuBLAS kernels gpumsg's GEMMs run beside torch's, and how long each takes on the GPU
(torch's profiler reads CUPTI, which sees every kernel of the process). Explains throughput
gaps that are not host overhead: plain GEMMs at 4096^3, and the fused cuBLASLt bias+GELU
beside torch's addmm + gelu, with the wall time per call of each when issued back to back.
Writes $OUT/gemm_kernels.txt when OUT is set."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import gpumsg  # noqa: E402

lines: list[str] = []


def kernels(label: str, issue: Callable[[], object], wait: Callable[[], object],
            calls: int = 10) -> None:
    """Run ``issue`` ``calls`` times under torch's profiler; list every GPU kernel it ran, with
    count and mean GPU time, and the wall time per call."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        issue()
        wait()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            issue()
        wait()
        wall = (time.perf_counter() - t0) / calls * 1e6
    times: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if ev.device_type.name == "CUDA":
            times[ev.name].append(ev.device_time_total)
    lines.append(f"{label}: {wall:8.1f} us wall per call (profiled)")
    for name, ts in times.items():
        lines.append(f"    {len(ts):3d} x {np.mean(ts):8.1f} us  {name[:150]}")


def plain_gemm(dev: gpumsg.Device, name: str, dtype: str, compute: str, who: str,
               size: int = 4096) -> None:
    """A square GEMM through gpumsg (``who='gpumsg'``) or torch.mm."""
    import torch

    h = np.random.default_rng().standard_normal((size, size), dtype=np.float32)
    if who == "gpumsg":
        a = dev.to_device(np.asfortranarray(h.astype(gpumsg.as_dtype(dtype))))
        c = dev.alloc((size, size), dtype)
        last = [dev.synchronize()]

        def issue() -> None:
            last[0] = dev.cublas.gemm(a, a, c, size, size, size, compute=compute)

        kernels(f"GEMM {size}^3 {name} gpumsg", issue, lambda: last[0].result())
        return
    torch.backends.cuda.matmul.allow_tf32 = compute == "tf32"
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    ta = torch.from_numpy(h).to(tdt).cuda()
    tc = torch.empty(size, size, device="cuda", dtype=tdt)
    kernels(f"GEMM {size}^3 {name} torch ", lambda: torch.mm(ta, ta, out=tc),
            torch.cuda.synchronize)


def fused_gelu(dev: gpumsg.Device, size: int, who: str) -> None:
    """The bias+GELU benchmark's call: D = gelu(X^T W + b) in bf16, as one cuBLASLt matmul with
    the epilogue (``who='gelu_bias'``), the same GEMM with none (``'none'``), or torch's
    addmm + gelu (``'torch'``)."""
    import torch

    rng = np.random.default_rng()
    x_h, w_h = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    b_h = rng.standard_normal(size, dtype=np.float32)
    if who == "torch":
        gelu = torch.nn.functional.gelu
        tx, tw, tb = (torch.from_numpy(v).to(torch.bfloat16).cuda() for v in (x_h, w_h, b_h))
        kernels(f"addmm+gelu {size}^3 bf16 torch",
                lambda: gelu(torch.addmm(tb, tw.t(), tx), approximate="tanh"),
                torch.cuda.synchronize, calls=50)
        return
    x, w, bias = (dev.to_device(np.asfortranarray(v.astype(gpumsg.bfloat16)))
                  for v in (x_h, w_h, b_h))
    d = dev.alloc((size, size), "bf16")
    last = [dev.synchronize()]

    def issue() -> None:
        last[0] = dev.cublaslt.matmul(x, w, d, size, size, size, transa="T", epilogue=who,
                                      bias=bias if who != "none" else None)

    kernels(f"Lt {size}^3 bf16 epilogue={who} gpumsg", issue, lambda: last[0].result(),
            calls=50)


CASES = {
    **{f"gemm-{name}-{who}": (plain_gemm, (name, dtype, compute, who))
       for name, dtype, compute in (("bf16", "bf16", "default"), ("fp16", "f16", "default"),
                                    ("tf32", "f32", "tf32"))
       for who in ("gpumsg", "torch")},
    **{f"gelu-{size}-{who}": (fused_gelu, (size, who))
       for size in (1024, 4096) for who in ("gelu_bias", "none", "torch")},
}


def main() -> None:
    """Each case in a child process of its own, with one profiler session there. A process that
    ran torch's profiler while a gpumsg device was open sometimes aborts at exit with glibc heap
    corruption (on the H100: 1 run in 5 of one case, and 6 of the 12 children of one run of
    this tool; never in a process without the profiler). That matches
    the CUPTI activity-buffer bug fixed in PyTorch after 2.11 (pytorch/pytorch#195471), but it
    was not proven; a child's output is kept and its exit status shown."""
    if len(sys.argv) > 1:
        fn, args = CASES[sys.argv[1]]
        with gpumsg.open_device(0) as dev:
            fn(dev, *args)
            print("\n".join(lines), flush=True)
        return
    out = []
    for case in CASES:
        run = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True)
        out += [ln for ln in run.stdout.splitlines() if ln.strip()]
        if run.returncode:
            out.append(f"    ({case}: the child exited with status {run.returncode}: "
                       f"{(run.stderr.strip().splitlines() or [''])[-1]})")
    text = "\n".join(out)
    print(text)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gemm_kernels.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
