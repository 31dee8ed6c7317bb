"""BLAS throughput beside torch in the same run: GEMM 4096^3 and 8192^3 in fp32, tf32, fp16 and
bf16; strided-batched GEMM 512 x 128^3 beside ``torch.bmm``; the cuBLASLt bias+GELU epilogue
beside ``torch.addmm`` followed by GELU; ``dot`` round trip and pipelined beside
``torch.dot(...).item()``."""

from __future__ import annotations

import numpy as np
from _common import api, compare, median_us, write_results

import gpumsg

DT = {"fp32": ("f32", "default"), "tf32": ("f32", "tf32"), "fp16": ("f16", "default"),
      "bf16": ("bf16", "default")}


def gemm_case(dev, torch, name: str, size: int) -> dict:
    dtype, compute = DT[name]
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    torch.backends.cuda.matmul.allow_tf32 = compute == "tf32"
    rng = np.random.default_rng()
    a_h = rng.standard_normal((size, size), dtype=np.float32).astype(gpumsg.as_dtype(dtype))
    b_h = rng.standard_normal((size, size), dtype=np.float32).astype(gpumsg.as_dtype(dtype))
    a, b = dev.to_device(np.asfortranarray(a_h)), dev.to_device(np.asfortranarray(b_h))
    c = dev.alloc((size, size), dtype, order="F")
    last = [dev.synchronize()]
    gemm = api(dev, "cublas.gemm", "cublas.gemm")

    def issue() -> None:
        last[0] = gemm(a, b, c, size, size, size, compute=compute)

    ta = torch.from_numpy(a_h.astype(np.float32)).to(tdt).cuda()
    tb = torch.from_numpy(b_h.astype(np.float32)).to(tdt).cuda()
    tc = torch.empty(size, size, device="cuda", dtype=tdt)
    ours, theirs = compare((issue, lambda: last[0].result()),
                           (lambda: torch.mm(ta, tb, out=tc), torch.cuda.synchronize))
    out = np.asarray(dev.copy_to_host(c).result(), np.float64)
    ref = a_h[:48].astype(np.float64) @ b_h[:, :48].astype(np.float64)
    err = np.linalg.norm(out[:48, :48] - ref) / np.linalg.norm(ref)
    flop = 2.0 * size ** 3
    return {"case": f"GEMM {size}^3 {name}", "gpumsg": flop / ours / 1e12,
            "torch": flop / theirs / 1e12, "unit": "TFLOP/s", "ratio": theirs / ours,
            "rel_err": err, "target": ">= 0.97"}


def bmm_case(dev, torch, name: str, convenience: bool = False) -> dict:
    """torch.bmm beside GemmStridedBatched (or the row-major ``matmul`` built on it)."""
    dtype, compute = DT[name]
    torch.backends.cuda.matmul.allow_tf32 = False
    batch, s = 512, 128
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    rng = np.random.default_rng()
    a_h = rng.standard_normal((batch, s, s), dtype=np.float32).astype(gpumsg.as_dtype(dtype))
    b_h = rng.standard_normal((batch, s, s), dtype=np.float32).astype(gpumsg.as_dtype(dtype))
    a, b = dev.to_device(a_h), dev.to_device(b_h)  # C-ordered (batch, row, col)
    out = dev.alloc((batch, s, s), dtype, order="C").result()
    last = [dev.synchronize()]
    matmul = api(dev, "linalg.matmul", "linalg.matmul")
    strided = api(dev, "cublas.gemm_strided_batched", "cublas.gemm_strided_batched")
    if convenience:
        def issue() -> None:
            last[0] = matmul(a, b, out=out)
    else:
        def issue() -> None:  # row-major C = A B is column-major C^T = B^T A^T
            last[0] = strided(b, a, out, s, s, s, batch, s * s, s * s,
                                                    s * s)
    ta = torch.from_numpy(a_h.astype(np.float32)).to(tdt).cuda()
    tb = torch.from_numpy(b_h.astype(np.float32)).to(tdt).cuda()
    tc = torch.empty(batch, s, s, device="cuda", dtype=tdt)
    ours, theirs = compare((issue, lambda: last[0].result()),
                           (lambda: torch.bmm(ta, tb, out=tc), torch.cuda.synchronize))
    got = np.asarray(dev.copy_to_host(out).result()[:4], np.float64)
    ref = a_h[:4].astype(np.float64) @ b_h[:4].astype(np.float64)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    flop = 2.0 * batch * s ** 3
    label = "matmul 3-D" if convenience else "GemmStridedBatched"
    return {"case": f"{label} {batch} x {s}^3 {name}", "gpumsg": flop / ours / 1e12,
            "torch": flop / theirs / 1e12, "unit": "TFLOP/s", "ratio": theirs / ours,
            "rel_err": err, "target": ">= 0.95"}


def gelu_case(dev, torch, size: int) -> dict:
    """Y = gelu(X W + b) in bf16: one fused cuBLASLt call beside addmm + gelu (two kernels)."""
    rng = np.random.default_rng()
    m = n = k = size
    x_h = rng.standard_normal((k, m), dtype=np.float32).astype(gpumsg.bfloat16)  # A^T stored
    w_h = rng.standard_normal((k, n), dtype=np.float32).astype(gpumsg.bfloat16)
    b_h = rng.standard_normal(m, dtype=np.float32).astype(gpumsg.bfloat16)
    x, w, bias = (dev.to_device(np.asfortranarray(v)) for v in (x_h, w_h, b_h))
    d = dev.alloc((m, n), "bf16", order="F")
    last = [dev.synchronize()]
    lt_matmul = api(dev, "cublaslt.matmul", "cublaslt.matmul")

    def issue() -> None:
        last[0] = lt_matmul(x, w, d, m, n, k, transa="T", epilogue="gelu_bias",
                                     bias=bias)

    # the same math in torch: D^T (n x m, row-major) = gelu(W^T X + b) ...
    tx = torch.from_numpy(x_h.astype(np.float32)).to(torch.bfloat16).cuda()  # k x m
    tw = torch.from_numpy(w_h.astype(np.float32)).to(torch.bfloat16).cuda()  # k x n
    tb = torch.from_numpy(b_h.astype(np.float32)).to(torch.bfloat16).cuda()
    gelu = torch.nn.functional.gelu

    def torch_issue() -> None:
        gelu(torch.addmm(tb, tw.t(), tx), approximate="tanh")

    ours, theirs = compare((issue, lambda: last[0].result()),
                           (torch_issue, torch.cuda.synchronize))
    ref = gelu(torch.addmm(tb, tw.t(), tx).float(), approximate="tanh").t().cpu().numpy()
    got = np.asarray(dev.copy_to_host(d).result(), np.float32)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    return {"case": f"bias+GELU {size}^3 bf16 (fused Lt vs addmm+gelu)",
            "gpumsg": ours * 1e6, "torch": theirs * 1e6, "unit": "us/call",
            "ratio": theirs / ours, "rel_err": err, "target": "> 1 (faster)"}


def dot_cases(dev, torch) -> list[dict]:
    n = 1 << 20
    rng = np.random.default_rng()
    x_h, y_h = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    x, y = dev.to_device(x_h).result(), dev.to_device(y_h).result()
    tx, ty = torch.from_numpy(x_h).cuda(), torch.from_numpy(y_h).cuda()
    dot = api(dev, "cublas.dot", "cublas.dot")
    ours_rt = median_us(lambda: dot(x, y).result(), 2000)
    theirs_rt = median_us(lambda: torch.dot(tx, ty).item(), 2000)
    value = dot(x, y).result()
    err = abs(value - float(np.dot(x_h.astype(np.float64), y_h))) / np.sqrt(n)

    def ours_batch() -> None:
        futures = [dot(x, y) for _ in range(100)]
        [f.result() for f in futures]

    def theirs_batch() -> None:
        outs = [torch.dot(tx, ty) for _ in range(100)]
        [o.item() for o in outs]

    pipe_ours = median_us(ours_batch, 30, warmup=3) / 100
    pipe_theirs = median_us(theirs_batch, 30, warmup=3) / 100
    return [
        {"case": "dot 1M f32 round trip", "gpumsg": ours_rt, "torch": theirs_rt, "unit": "us",
         "ratio": theirs_rt / ours_rt, "rel_err": err, "target": ""},
        {"case": "dot 1M f32 pipelined (100 issued, then read)", "gpumsg": pipe_ours,
         "torch": pipe_theirs, "unit": "us/op", "ratio": pipe_theirs / pipe_ours,
         "rel_err": err, "target": ""},
    ]


def main() -> None:
    import torch

    rows = []
    with gpumsg.open_device(0) as dev:
        for name in ("fp32", "tf32", "fp16", "bf16"):
            for size in (4096, 8192):
                rows.append(gemm_case(dev, torch, name, size))
        rows.append(bmm_case(dev, torch, "fp32"))
        rows.append(bmm_case(dev, torch, "bf16"))
        rows.append(bmm_case(dev, torch, "bf16", convenience=True))
        rows.append(gelu_case(dev, torch, 4096))
        rows.append(gelu_case(dev, torch, 1024))
        rows.extend(dot_cases(dev, torch))
        cache = api(dev, "cublaslt.cache_info", "cublaslt.cache_info")().result()
        replays = api(dev, "cublas.replay_info", "cublas.replay_info")().result()
    notes = ["ratio = gpumsg speed / torch speed (> 1: gpumsg faster); TFLOP/s from wall time of "
             "n pipelined calls then one wait, n sized for >= 30 ms of torch's work (steady "
             "state); both sides warmed up 0.3 s, then 5 alternating runs each, medians",
             f"cuBLASLt plan cache at the end: {cache}",
             f"GEMMs replayed as CUDA graphs (GPUMSG_BLAS_REPLAY=0 turns it off): {replays}",
             "torch's allow_tf32 follows the case (off for fp32, on for tf32)"]
    write_results("blas", rows, notes,
                  ["case", "gpumsg", "torch", "unit", "ratio", "rel_err", "target"])


if __name__ == "__main__":
    main()
