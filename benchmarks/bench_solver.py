"""cuSOLVER dense beside torch.linalg in the same run: getrf, potrf, syevd and gesvdj
at 4096^2 in f64 and f32, batched Cholesky of 10,000 32x32 matrices, and the NumPy-shaped
``dev.linalg`` as a user calls it (``cholesky`` 4096^2, ``eigh`` and ``svd`` of 10,000 64x64
f32 matrices, new outputs) beside ``torch.linalg``. Each call is a device
copy of the input plus the factorization on both sides (torch: ``lu_factor_ex``,
``cholesky_ex``, ``eigh``, ``svd(driver='gesvdj')``; its preferred linalg library set to
cuSOLVER, the same library underneath). gpumsg reads ``info`` back without blocking (copied on
the stream, checked at completion). The batched rows separate the costs of the NumPy-shaped
``cholesky_batched`` (copy + potrfBatched + zeroing above the diagonal) from the raw
``potrf_batched`` (copy + potrfBatched). Writes solver.{json,md} to the output folder.
"""

from __future__ import annotations

import time

import numpy as np
from _common import compare, write_results

import gpumsg


def _input(rng, kind: str, n: int, dtype) -> np.ndarray:
    m = rng.standard_normal((n, n))
    if kind in ("potrf", "syevd"):
        return (m @ m.T / n + np.eye(n)).astype(dtype)
    if kind == "getrf":
        return (m + 2 * np.sqrt(n) * np.eye(n)).astype(dtype)
    return m.astype(dtype)


def big_case(dev, torch, kind: str, dtype: str, n: int) -> dict:
    rng = np.random.default_rng()
    npdt = gpumsg.as_dtype(dtype)
    tdt = {"f32": torch.float32, "f64": torch.float64}[dtype]
    a_h = _input(rng, kind, n, npdt)
    a = dev.to_device(np.asfortranarray(a_h))
    work = dev.alloc((n, n), dtype, order="F")
    ipiv = dev.alloc((n,), np.int64)
    w = dev.alloc((n,), dtype)
    u, v = dev.alloc((n, n), dtype, order="F"), dev.alloc((n, n), dtype, order="F")
    last = [dev.synchronize()]

    def issue() -> None:
        dev.copy(work, a)
        if kind == "potrf":
            last[0] = dev.cusolver.potrf(work, n, "L")
        elif kind == "getrf":
            last[0] = dev.cusolver.getrf(work, n, n, ipiv)
        elif kind == "syevd":
            last[0] = dev.cusolver.syevd(work, w, n, "L")
        else:
            last[0] = dev.cusolver.gesvdj(work, w, n, n, u, v)

    ta = torch.from_numpy(np.ascontiguousarray(a_h.T)).to(tdt).cuda()
    theirs = {"potrf": lambda: torch.linalg.cholesky_ex(ta),
              "getrf": lambda: torch.linalg.lu_factor_ex(ta),
              "syevd": lambda: torch.linalg.eigh(ta),
              "gesvdj": lambda: torch.linalg.svd(ta, driver="gesvdj")}[kind]
    slow = kind in ("syevd", "gesvdj")
    if slow:  # seconds per call: one warm call each, then 3 alternating single calls
        issue()
        last[0].result()
        theirs()
        torch.cuda.synchronize()
        ours_s, theirs_s = compare((issue, lambda: last[0].result()),
                                   (theirs, torch.cuda.synchronize), n=1, repeats=3,
                                   warmup_s=0.0)
    else:
        ours_s, theirs_s = compare((issue, lambda: last[0].result()),
                                   (theirs, torch.cuda.synchronize), repeats=5, warmup_s=0.5)
    issue()
    last[0].result()
    err = float("nan")
    if kind == "syevd":
        got = dev.copy_to_host(w).result().astype(np.float64)
        ref = np.linalg.eigvalsh(a_h.astype(np.float64))
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    elif kind == "gesvdj":
        got = dev.copy_to_host(w).result().astype(np.float64)
        ref = np.linalg.svd(a_h.astype(np.float64), compute_uv=False)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    elif kind == "potrf":
        out = dev.copy_to_host(work).result()
        k = 256
        ref = np.linalg.cholesky(a_h[:k, :k].astype(np.float64))
        err = np.linalg.norm(np.tril(out[:k, :k]) - ref) / np.linalg.norm(ref)
    flop = {"potrf": n ** 3 / 3, "getrf": 2 * n ** 3 / 3}.get(kind)
    row = {"case": f"{kind} {n}^2 {dtype}", "gpumsg": ours_s * 1e3, "torch": theirs_s * 1e3,
           "unit": "ms/call", "ratio": theirs_s / ours_s, "rel_err": err, "target": ">= 0.95"}
    if flop:
        row["gpumsg_tflops"] = flop / ours_s / 1e12
    for x in (a, work, ipiv, w, u, v):
        x.buffer.free()
    return row


def batched_case(dev, torch, dtype: str, batch: int, n: int, variant: str,
                 peer: str = "cholesky_ex") -> dict:
    rng = np.random.default_rng()
    npdt = gpumsg.as_dtype(dtype)
    m = rng.standard_normal((batch, n, n))
    stack_h = (m @ m.transpose(0, 2, 1) / n + np.eye(n)).astype(npdt)
    stack = dev.to_device(stack_h)
    work = dev.alloc(stack_h.shape, dtype, order="C")
    last = [dev.synchronize()]
    outs: list = []

    def issue() -> None:
        if variant == "cholesky_batched":
            last[0] = dev.linalg.cholesky(stack)
            outs.append(last[0])
            if len(outs) > 4:
                outs.pop(0).buffer.free()
        else:
            dev.copy(work, stack)
            last[0] = dev.cusolver.potrf_batched(work, n, batch, "L" if variant == "raw L" else "U",
                                                 clean=variant == "clean")

    ts = torch.from_numpy(stack_h).cuda()
    fn = getattr(torch.linalg, peer)
    ours_s, theirs_s = compare((issue, lambda: last[0].result()),
                               (lambda: fn(ts), torch.cuda.synchronize), repeats=5, warmup_s=0.5)
    err = float("nan")
    if variant == "cholesky_batched":
        got = dev.copy_to_host(last[0].result()).result()
        ref = np.linalg.cholesky(stack_h[:64].astype(np.float64))
        err = np.linalg.norm(got[:64] - ref) / np.linalg.norm(ref)
    for o in outs:
        o.buffer.free()
    stack.buffer.free()
    work.buffer.free()
    label = {"cholesky_batched": f"cholesky_batched vs {peer}",
             "raw": "copy + potrf_batched U (no zeroing)",
             "raw L": "copy + potrf_batched L (no zeroing)",
             "clean": "copy + potrf_batched U clean=True"}[variant]
    return {"case": f"{label} {batch}x{n}^2 {dtype}", "gpumsg": ours_s * 1e3,
            "torch": theirs_s * 1e3, "unit": "ms/call", "ratio": theirs_s / ours_s,
            "rel_err": err, "target": ">= 0.95" if variant == "cholesky_batched" else ""}


def numpy_case(dev, torch, kind: str, dtype: str, shape: tuple) -> dict:
    """``dev.linalg`` as a user calls it (a C-ordered input, a new output per call, the
    outputs freed as they are replaced) beside ``torch.linalg`` on a C-ordered tensor:
    ``cholesky`` of one matrix, ``eigh`` and ``svd`` of a stack (full matrices)."""
    rng = np.random.default_rng()
    npdt = gpumsg.as_dtype(dtype)
    tdt = {"f32": torch.float32, "f64": torch.float64}[dtype]
    g = rng.standard_normal(shape)
    n = shape[-1]
    if kind == "cholesky":
        a_h = g @ np.swapaxes(g, -1, -2) / n + np.eye(n)
    elif kind == "eigh":
        a_h = (g + np.swapaxes(g, -1, -2)) / 2
    else:
        a_h = g
    a_h = a_h.astype(npdt)
    a = dev.to_device(a_h)
    ta = torch.from_numpy(a_h).to(tdt).cuda()
    last = [dev.synchronize()]
    outs: list = []

    def issue() -> None:
        last[0] = getattr(dev.linalg, kind)(a)
        outs.append(last[0])
        if len(outs) > 3:
            old = outs.pop(0).result()
            for b in (old if isinstance(old, tuple) else (old,)):
                b.free()

    theirs = {"cholesky": lambda: torch.linalg.cholesky(ta),
              "eigh": lambda: torch.linalg.eigh(ta), "svd": lambda: torch.linalg.svd(ta)}[kind]
    issue()
    last[0].result()
    theirs()
    torch.cuda.synchronize()
    ours_s, theirs_s = compare((issue, lambda: last[0].result()),
                               (theirs, torch.cuda.synchronize), n=1 if kind != "cholesky"
                               else None, repeats=3 if kind != "cholesky" else 5,
                               warmup_s=0.0 if kind != "cholesky" else 0.5)
    res = last[0].result()
    if kind == "cholesky":
        k = 256
        got = dev.copy_to_host(res).result()[:k, :k].astype(np.float64)
        ref = np.linalg.cholesky(a_h[:k, :k].astype(np.float64))
    else:
        part = res[0] if kind == "eigh" else res[1]
        got = dev.copy_to_host(part).result()[:32].astype(np.float64)
        fn = np.linalg.eigvalsh if kind == "eigh" else \
            (lambda x: np.linalg.svd(x, compute_uv=False))
        ref = fn(a_h[:32].astype(np.float64))
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    for o in outs:
        for b in (o.result() if isinstance(o.result(), tuple) else (o.result(),)):
            b.free()
    a.buffer.free()
    size = "x".join(map(str, shape[:-2])) + ("x" if len(shape) > 2 else "") + f"{n}^2"
    return {"case": f"{kind} (dev.linalg, new output) {size} {dtype}", "gpumsg": ours_s * 1e3,
            "torch": theirs_s * 1e3, "unit": "ms/call", "ratio": theirs_s / ours_s,
            "rel_err": err, "target": ">= 0.95" if kind == "cholesky" else ">= 0.9"}


def probe_gesvdj_batched(dev) -> dict:
    """Does gesvdjBatched report non-convergence with max_sweeps=1 (syevjBatched does not)?"""
    rng = np.random.default_rng()
    batch, n = 3, 24
    stack = rng.standard_normal((batch, n, n))
    s = dev.alloc((batch, n), "f64", order="C")
    out = {"probe": "gesvdjBatched 3x24^2 f64 max_sweeps=1"}
    try:
        dev.cusolver.gesvdj_batched(dev.to_device(stack), s, n, n, batch, vectors=False,
                                    max_sweeps=1).result()
        got = dev.copy_to_host(s).result()
        ref = np.stack([np.linalg.svd(x, compute_uv=False) for x in stack])
        out["raised"] = None
        out["rel_err"] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    except gpumsg.GpuError as exc:
        out["raised"] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> None:
    import torch

    torch.backends.cuda.preferred_linalg_library("cusolver")
    rows = []
    t0 = time.perf_counter()
    with gpumsg.open_device(0) as dev:
        for dtype in ("f64", "f32"):
            for variant in ("cholesky_batched", "raw", "raw L", "clean"):
                rows.append(batched_case(dev, torch, dtype, 10000, 32, variant))
                print(rows[-1], flush=True)
            rows.append(batched_case(dev, torch, dtype, 10000, 32, "cholesky_batched",
                                     "cholesky"))
            print(rows[-1], flush=True)
        for dtype in ("f32", "f64"):
            rows.append(numpy_case(dev, torch, "cholesky", dtype, (4096, 4096)))
            print(rows[-1], flush=True)
        for kind in ("eigh", "svd"):
            rows.append(numpy_case(dev, torch, kind, "f32", (10000, 64, 64)))
            print(rows[-1], flush=True)
        probes = [probe_gesvdj_batched(dev)]
        print(probes, flush=True)
        for kind in ("potrf", "getrf", "syevd", "gesvdj"):
            for dtype in ("f64", "f32"):
                n = 4096
                if kind == "gesvdj" and time.perf_counter() - t0 > 150:
                    n = 2048  # keep the run inside its time limit
                rows.append(big_case(dev, torch, kind, dtype, n))
                print(rows[-1], flush=True)
        cache = dev.cusolver.cache_info().result()
    notes = ["ratio = torch time / gpumsg time (> 1: gpumsg faster); potrf/getrf/batched: wall "
             "time of n pipelined calls then one wait (n sized for >= 30 ms of torch's work), "
             "warmed up, 5 alternating runs, medians; syevd/gesvdj: one warm call each, then 3 "
             "alternating single calls, medians",
             "each call = device copy of A into a work buffer + the factorization, on both "
             "sides; gpumsg also copies info back to pinned memory and checks it at completion",
             "torch peers: cholesky_ex, lu_factor_ex, eigh (syevd), svd(driver='gesvdj') "
             "(full U, V; gpumsg gesvdj likewise)",
             f"cuSOLVER workspace-size cache at the end: {cache}",
             "rel_err: eigenvalues / singular values vs NumPy float64; potrf leading 256^2 block; "
             "cholesky_batched first 64 items",
             "cholesky_batched = one message: a kernel makes each item Hermitian from NumPy's "
             "lower triangle, potrfBatched uplo=L, a kernel turns L' into the C-ordered L "
             "(NVRTC, compiled once); the potrf_batched rows show the library call's own cost "
             "by uplo",
             f"probe: {probes}"]
    write_results("solver", rows, notes,
                  ["case", "gpumsg", "torch", "unit", "gpumsg_tflops", "ratio", "rel_err",
                   "target"])


if __name__ == "__main__":
    main()
