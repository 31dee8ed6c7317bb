"""cuSOLVER dense beside torch.linalg in the same run: Cholesky (potrf) and LU (getrf) at 4096^2
in f64 and f32, and batched Cholesky of 10,000 32x32 matrices, each a device copy of the input
plus the in-place factorization on both sides
(torch: ``linalg.cholesky_ex`` / ``linalg.lu_factor_ex``, the variants that do not synchronize
to check ``info``; torch's preferred linalg library set to cuSOLVER, the same library
underneath). gpumsg checks ``info`` without blocking: copied back on the stream, read at
completion. Writes solver_sparse.{json,md} to the output folder."""

from __future__ import annotations

import numpy as np
from _common import compare, write_results

import gpumsg


def _spd(rng, n: int, dtype) -> np.ndarray:
    m = rng.standard_normal((n, n))
    return (m @ m.T / n + np.eye(n)).astype(dtype)


def factor_case(dev, torch, kind: str, dtype: str, n: int) -> dict:
    rng = np.random.default_rng()
    npdt = gpumsg.as_dtype(dtype)
    tdt = {"f32": torch.float32, "f64": torch.float64}[dtype]
    if kind == "potrf":
        a_h = _spd(rng, n, npdt)
    else:
        a_h = (rng.standard_normal((n, n)) + 2 * np.sqrt(n) * np.eye(n)).astype(npdt)
    a = dev.to_device(np.asfortranarray(a_h))  # symmetric or not, column-major is what we pass
    work = dev.alloc((n, n), dtype, order="F")
    ipiv = dev.alloc((n,), np.int64)
    last = [dev.synchronize()]

    def issue() -> None:
        dev.copy(work, a)
        if kind == "potrf":
            last[0] = dev.cusolver.potrf(work, n, "L")
        else:
            last[0] = dev.cusolver.getrf(work, n, n, ipiv)

    ta = torch.from_numpy(np.ascontiguousarray(a_h.T)).to(tdt).cuda()  # the same column-major A
    if kind == "potrf":
        def theirs() -> None:
            torch.linalg.cholesky_ex(ta)
    else:
        def theirs() -> None:
            torch.linalg.lu_factor_ex(ta)

    ours_s, theirs_s = compare((issue, lambda: last[0].result()),
                               (theirs, torch.cuda.synchronize), repeats=5, warmup_s=0.5)
    # correctness of the last factorization
    issue()
    last[0].result()
    out = dev.copy_to_host(work).result()
    if kind == "potrf":
        k = 256  # the leading block of the factor is the factor of the leading block
        ref = np.linalg.cholesky(a_h[:k, :k].astype(np.float64))
        err = np.linalg.norm(np.tril(out[:k, :k]) - ref) / np.linalg.norm(ref)
    else:
        from scipy.linalg import lu_factor
        lu, _ = lu_factor(a_h.astype(np.float64))
        err = np.linalg.norm(out.astype(np.float64) - lu) / np.linalg.norm(lu)
    flop = (n ** 3 / 3 if kind == "potrf" else 2 * n ** 3 / 3)
    return {"case": f"{kind} {n}^2 {dtype}", "gpumsg": ours_s * 1e3, "torch": theirs_s * 1e3,
            "unit": "ms/call", "gpumsg_tflops": flop / ours_s / 1e12, "ratio": theirs_s / ours_s,
            "rel_err": err, "target": ">= 0.95"}


def batched_case(dev, torch, dtype: str, batch: int, n: int) -> dict:
    """NumPy-shaped cholesky_batched (copy + potrfBatched + zeroing above the diagonal) beside
    torch.linalg.cholesky_ex on the same (batch, n, n) stack."""
    rng = np.random.default_rng()
    npdt = gpumsg.as_dtype(dtype)
    m = rng.standard_normal((batch, n, n))
    stack_h = (m @ m.transpose(0, 2, 1) / n + np.eye(n)).astype(npdt)
    stack = dev.to_device(stack_h)
    last = [dev.synchronize()]
    outs: list = []

    def issue() -> None:
        last[0] = dev.linalg.cholesky(stack)
        outs.append(last[0])
        if len(outs) > 4:
            outs.pop(0).buffer.free()

    ts = torch.from_numpy(stack_h).cuda()
    ours_s, theirs_s = compare((issue, lambda: last[0].result()),
                               (lambda: torch.linalg.cholesky_ex(ts), torch.cuda.synchronize),
                               repeats=5, warmup_s=0.5)
    got = dev.copy_to_host(last[0].result()).result()
    ref = np.linalg.cholesky(stack_h[:64].astype(np.float64))
    err = np.linalg.norm(got[:64] - ref) / np.linalg.norm(ref)
    return {"case": f"cholesky_batched {batch}x{n}^2 {dtype}", "gpumsg": ours_s * 1e3,
            "torch": theirs_s * 1e3, "unit": "ms/call", "ratio": theirs_s / ours_s,
            "rel_err": err, "target": ">= 0.95"}


def main() -> None:
    import torch

    torch.backends.cuda.preferred_linalg_library("cusolver")
    rows = []
    with gpumsg.open_device(0) as dev:
        for kind in ("potrf", "getrf"):
            for dtype in ("f64", "f32"):
                rows.append(factor_case(dev, torch, kind, dtype, 4096))
                print(rows[-1], flush=True)
        for dtype in ("f64", "f32"):
            rows.append(batched_case(dev, torch, dtype, 10000, 32))
            print(rows[-1], flush=True)
        cache = dev.cusolver.cache_info().result()
    notes = ["ratio = torch time / gpumsg time (> 1: gpumsg faster); wall time of n pipelined "
             "calls then one wait, n sized for >= 30 ms of torch's work; both warmed up, then "
             "5 alternating runs, medians",
             "each call = device copy of A into a work buffer + the factorization in place, on "
             "both sides; gpumsg also copies info back to pinned memory and checks it at "
             "completion",
             f"cuSOLVER workspace-size cache at the end: {cache}",
             "rel_err: potrf leading 256^2 block vs NumPy float64; getrf vs SciPy lu_factor"]
    write_results("solver_sparse", rows, notes,
                  ["case", "gpumsg", "torch", "unit", "gpumsg_tflops", "ratio", "rel_err",
                   "target"])


if __name__ == "__main__":
    main()
