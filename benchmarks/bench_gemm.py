"""GEMM throughput by size: square products from 256^3 to 8192^3 in fp32, tf32, fp16 and bf16,
gpumsg beside torch and CuPy in the same process (CuPy where it has the type: fp32, fp16).

Each row is one size and type: TFLOP/s of each side in steady state (n products issued, then
the last one awaited, n sized for >= 30 ms of torch's work; every side warmed up 0.3 s, then 5
alternating runs, medians) and the ratios to torch. gpumsg's product is checked against NumPy in
float64 on a corner of the result. Writes ``gemm.{json,md}`` to the output folder.

    python benchmarks/bench_gemm.py [--sizes 256,1024,4096] [--types fp32,bf16] [--out DIR]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from _common import api, compare_many, write_results

import gpumsg

SIZES = (256, 512, 1024, 2048, 4096, 8192)
TYPES = ("fp32", "tf32", "fp16", "bf16")
#: type name -> (gpumsg dtype, gpumsg compute, CuPy has it)
DT = {"fp32": ("f32", "default", True), "tf32": ("f32", "tf32", False),
      "fp16": ("f16", "default", True), "bf16": ("bf16", "default", False)}


def gemm_row(dev: Any, torch: Any, cupy: Any, name: str, size: int) -> dict[str, Any]:
    dtype, compute, cupy_has = DT[name]
    rng = np.random.default_rng()
    npdt = gpumsg.as_dtype(dtype)
    a_h = rng.standard_normal((size, size), dtype=np.float32).astype(npdt)
    b_h = rng.standard_normal((size, size), dtype=np.float32).astype(npdt)
    # column-major operands and output: cuBLAS's own layout, no transposition on either side
    a = dev.to_device(np.asfortranarray(a_h))
    b = dev.to_device(np.asfortranarray(b_h))
    c = dev.alloc((size, size), dtype, order="F")
    gemm = api(dev, "cublas.gemm", "cublas.gemm")
    last = [dev.synchronize()]

    def issue() -> None:
        last[0] = gemm(a, b, c, size, size, size, compute=compute)

    sides = [(issue, lambda: last[0].result())]
    if cupy is not None and cupy_has:
        ca, cb = cupy.asarray(a_h), cupy.asarray(b_h)
        cc = cupy.empty((size, size), dtype=ca.dtype)
        sides.append((lambda: cupy.matmul(ca, cb, out=cc),
                      cupy.cuda.runtime.deviceSynchronize))
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = compute == "tf32"
        tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        ta = torch.from_numpy(a_h.astype(np.float32)).to(tdt).cuda()
        tb = torch.from_numpy(b_h.astype(np.float32)).to(tdt).cuda()
        tc = torch.empty(size, size, device="cuda", dtype=tdt)
        sides.append((lambda: torch.mm(ta, tb, out=tc), torch.cuda.synchronize))
    if len(sides) == 1:  # no peer (the simulator): a few calls, timed alone
        sides.append(sides[0])
    times = compare_many(sides, min_run_s=0.03 if torch is not None else 0.0)
    out = np.asarray(dev.copy_to_host(c).result(), np.float64)
    corner = min(size, 48)
    ref = a_h[:corner].astype(np.float64) @ b_h[:, :corner].astype(np.float64)
    err = float(np.linalg.norm(out[:corner, :corner] - ref) / np.linalg.norm(ref))
    flop = 2.0 * size ** 3
    row: dict[str, Any] = {"size": size, "type": name, "gpumsg_tflops": flop / times[0] / 1e12,
                           "torch_tflops": "", "cupy_tflops": "", "ratio_torch": "",
                           "ratio_cupy": "", "rel_err": err}
    if torch is not None:
        row["torch_tflops"] = flop / times[-1] / 1e12
        row["ratio_torch"] = times[-1] / times[0]
    if cupy is not None and cupy_has:
        row["cupy_tflops"] = flop / times[1] / 1e12
        row["ratio_cupy"] = times[1] / times[0]
    for buf in (a, b, c):
        buf.result().free()
    if torch is not None:
        del ta, tb, tc
        torch.cuda.empty_cache()
    return row


def peers() -> tuple[Any, Any]:
    """torch and CuPy where they are installed and see a GPU, else None."""
    try:
        import torch
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - any failure means no CuPy peer
        cupy = None
    return torch, cupy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/out)")
    args = ap.parse_args(argv)
    torch, cupy = peers()
    rows = []
    with gpumsg.open_device(0) as dev:
        for name in args.types.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                rows.append(gemm_row(dev, torch, cupy, name, size))
                print(rows[-1], flush=True)
        backend = dev.backend
    notes = ["TFLOP/s = 2 n^3 / seconds per product; n products issued, then the last awaited, "
             "n sized for >= 30 ms of torch's work; every side warmed up 0.3 s, then 5 "
             "alternating runs, medians",
             "ratio_torch, ratio_cupy = gpumsg speed / the peer's speed (> 1: gpumsg faster)",
             "fp32 is strict fp32 on every side (torch's allow_tf32 off); tf32 opts in on gpumsg "
             "and torch; fp16/bf16 accumulate in fp32",
             "rel_err: a 48 x 48 corner of gpumsg's product against NumPy in float64",
             f"backend: {backend}"]
    write_results("gemm", rows, notes, ["size", "type", "gpumsg_tflops", "torch_tflops",
                                        "cupy_tflops", "ratio_torch", "ratio_cupy", "rel_err"])


if __name__ == "__main__":
    main()
