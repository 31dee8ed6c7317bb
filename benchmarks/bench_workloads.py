"""Whole workloads beside torch and CuPy in one process: the programs of ``examples/``, timed.

    python benchmarks/bench_workloads.py [--quick] [--only cg,cg-device,serving,spectral,mixed]
                                         [--backend auto|cuda|sim] [--out DIR]

* ``cg``: conjugate gradient on the 2-D Poisson equation (5-point stencil as CSR), 64^2 and
  1024^2 grids, 100 iterations, float64, the two scalars of each iteration read to the host
  (gpumsg: cuSPARSE SpMV, cuBLAS dot/axpy/scal; torch: a sparse CSR tensor, ``torch.dot(...)
  .item()``, ``add_(alpha=)``; CuPy: ``cupyx.scipy.sparse.csr_matrix``, ``float(cupy.dot)``,
  in-place array arithmetic). ms per iteration.
* ``cg-device``: the same iterations with the scalars kept on the device, nothing waited for
  until x comes back (gpumsg: NVRTC dot/update kernels over a scalar buffer and cuSPARSE SpMV;
  torch/CuPy: the same loop with 0-d device arrays for alpha and beta). ms per iteration.
* ``serving``: a 3-layer MLP (1024 wide, batch 32, bias + GELU) and a softmax served to 8 client
  threads, each request uploaded, computed and downloaded (gpumsg: cuBLASLt epilogues, cuDNN
  softmax; torch: ``addmm`` + ``F.gelu(approximate="tanh")`` + ``softmax`` + ``.cpu()``; CuPy:
  ``@`` + a fused bias-GELU elementwise kernel + a softmax in array operations + ``asnumpy``).
  µs per request across the 8 clients, and requests/s.
* ``spectral``: ``u <- irfft2(rfft2(u) * K)`` on 256^2 float32, 50 steps per run (gpumsg: cuFFT
  and an NVRTC complex multiply in place; torch/CuPy: their FFTs and ``*``). ms per step.
* ``mixed``: upload 16 x 16 float32 (1 KiB), matmul by a resident 16 x 16, download; one wait
  per step, allocating each step and through kept buffers. µs per step (median of single
  steps).

Every side's answer is checked against NumPy float64 before it is timed. Each measurement starts
and ends with the device synchronized (gpumsg ``dev.synchronize()``, ``torch.cuda.synchronize``,
CuPy ``deviceSynchronize``); each side is warmed up, then the sides' runs alternate and the
median of the runs is reported with the ratio gpumsg / peer (time: below 1, gpumsg is faster).
torch and CuPy are imported only when present with a GPU; a missing peer is skipped and noted.
On the simulator (no GPU) the small sizes run, without peers, to exercise the harness.

Writes ``workloads.{json,md}`` to the benchmarks' output folder (``_common.results_dir``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import write_results

import gpumsg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import cg_device_scalars  # noqa: E402  (examples/ is a folder of scripts)
import cg_poisson  # noqa: E402
import mixed_step  # noqa: E402
import mlp_serving  # noqa: E402
import spectral_step  # noqa: E402

WORKLOADS = ("cg", "cg-device", "serving", "spectral", "mixed")
COLUMNS = ["workload", "size", "unit", "gpumsg", "torch", "cupy", "gpumsg/torch",
           "gpumsg/cupy", "runs"]

#: a side of a comparison: one timed run, returning the figure (seconds per unit)
Side = Callable[[], float]


# -- peers -------------------------------------------------------------------------------------
def load_peers(notes: list[str]) -> tuple[Any, Any]:
    """torch and CuPy when importable with a GPU, else None (noted)."""
    torch = cupy = None
    try:
        import torch as _torch

        if _torch.cuda.is_available():
            torch = _torch
            torch.backends.cuda.matmul.allow_tf32 = False  # fp32 math on every side
            torch.backends.cudnn.allow_tf32 = False
        else:
            notes.append("torch: no CUDA device, skipped")
    except ImportError as exc:
        notes.append(f"torch: not installed ({exc}), skipped")
    try:
        import cupy as _cupy

        if _cupy.cuda.runtime.getDeviceCount() > 0:
            cupy = _cupy
    except Exception as exc:  # noqa: BLE001 - any failure to load CuPy skips it
        notes.append(f"CuPy: unavailable ({type(exc).__name__}: {exc}), skipped")
    return torch, cupy


def synced(run: Callable[[], Any], sync: Callable[[], Any], units: int) -> Side:
    """A side timing ``run()`` between two synchronizations, per unit of work."""

    def side() -> float:
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        return (time.perf_counter() - t0) / units

    return side


def alternate(sides: dict[str, Side], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Warm each side up, then run the sides in turn ``repeats`` times: each side's figures."""
    for side in sides.values():
        for _ in range(warmup):
            side()
    runs: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, side in sides.items():
            runs[name].append(side())
    return runs


def row(workload: str, size: str, unit: str, scale: float, runs: dict[str, list[float]],
        **extra: Any) -> dict[str, Any]:
    """A result row: medians in ``unit`` (seconds times ``scale``), ratios to each peer."""
    med = {k: statistics.median(v) for k, v in runs.items()}
    out: dict[str, Any] = {"workload": workload, "size": size, "unit": unit,
                           "runs": len(runs["gpumsg"])}
    for k in ("gpumsg", "torch", "cupy"):
        out[k] = med[k] * scale if k in med else ""
        out[f"{k}_runs_s"] = runs.get(k, [])
    for peer in ("torch", "cupy"):
        out[f"gpumsg/{peer}"] = med["gpumsg"] / med[peer] if peer in med else ""
    out.update(extra)
    return out


def assert_close(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> None:
    err = float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))
    if not err < tol:
        raise AssertionError(f"{name}: relative error {err:.2e} against NumPy (tolerance {tol})")


# -- (a) CG with host scalars ------------------------------------------------------------------
def bench_cg(dev: Any, torch: Any, cupy: Any, grids: tuple[int, ...], iters: int,
             repeats: int) -> list[dict[str, Any]]:
    rows = []
    for n in grids:
        prob = cg_poisson.setup(dev, n)
        indptr, indices, data = cg_poisson.poisson_csr(n)
        b = prob.b_host
        x_ref, _ = cg_poisson.cg_numpy(b, n, iters)
        tol = cg_poisson.TOLERANCE

        history = cg_poisson.cg(dev, prob, iters)
        assert_close(f"gpumsg CG {n}^2", dev.copy_to_host(prob.x).result(), x_ref, tol)
        assert len(history) == iters
        sides: dict[str, Side] = {
            "gpumsg": synced(lambda prob=prob: cg_poisson.cg(dev, prob, iters),
                             lambda: dev.synchronize().result(), iters)}
        if torch is not None:
            t = _torch_cg(torch, indptr, indices, data, b)
            assert_close(f"torch CG {n}^2", t(iters).cpu().numpy(), x_ref, tol)
            sides["torch"] = synced(lambda t=t: t(iters), torch.cuda.synchronize, iters)
        if cupy is not None:
            c = _cupy_cg(cupy, indptr, indices, data, b)
            assert_close(f"CuPy CG {n}^2", cupy.asnumpy(c(iters)), x_ref, tol)
            sides["cupy"] = synced(lambda c=c: c(iters), cupy.cuda.runtime.deviceSynchronize,
                                   iters)
        rows.append(row("CG, host scalars (f64)", f"{n}^2, {iters} it", "ms/iteration", 1e3,
                        alternate(sides, repeats)))
        prob.free()
    return rows


def _torch_cg(torch: Any, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
              b_host: np.ndarray) -> Callable[[int], Any]:
    size = b_host.size
    a = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                torch.from_numpy(data), (size, size), device="cuda")
    b = torch.from_numpy(b_host).cuda()
    x, r, p = (torch.empty_like(b) for _ in range(3))

    def solve(iters: int) -> Any:
        x.zero_()
        r.copy_(b)
        p.copy_(b)
        rr = torch.dot(r, r).item()
        for _ in range(iters):
            ap = torch.mv(a, p)
            alpha = rr / torch.dot(p, ap).item()
            x.add_(p, alpha=alpha)
            r.add_(ap, alpha=-alpha)
            rr_new = torch.dot(r, r).item()
            p.mul_(rr_new / rr).add_(r)
            rr = rr_new
        return x

    return solve


def _cupy_cg(cupy: Any, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
             b_host: np.ndarray) -> Callable[[int], Any]:
    import cupyx.scipy.sparse as csp

    size = b_host.size
    a = csp.csr_matrix((cupy.asarray(data), cupy.asarray(indices), cupy.asarray(indptr)),
                       shape=(size, size))
    b = cupy.asarray(b_host)

    def solve(iters: int) -> Any:
        x = cupy.zeros_like(b)
        r = b.copy()
        p = b.copy()
        rr = float(cupy.dot(r, r))
        for _ in range(iters):
            ap = a @ p
            alpha = rr / float(cupy.dot(p, ap))
            x += alpha * p
            r -= alpha * ap
            rr_new = float(cupy.dot(r, r))
            p *= rr_new / rr
            p += r
            rr = rr_new
        return x

    return solve


# -- (b) CG with device scalars -----------------------------------------------------------------
def bench_cg_device(dev: Any, torch: Any, cupy: Any, grids: tuple[int, ...], iters: int,
                    repeats: int) -> list[dict[str, Any]]:
    rows = []
    ds = cg_device_scalars.prepare(dev, iters)
    for n in grids:
        prob = cg_poisson.setup(dev, n)
        indptr, indices, data = cg_poisson.poisson_csr(n)
        b = prob.b_host
        x_ref, _ = cg_poisson.cg_numpy(b, n, iters)
        tol = cg_poisson.TOLERANCE

        cg_device_scalars.cg(dev, prob, ds)
        assert_close(f"gpumsg device-scalar CG {n}^2", dev.copy_to_host(prob.x).result(), x_ref,
                     tol)
        sides: dict[str, Side] = {
            "gpumsg": synced(lambda prob=prob: cg_device_scalars.cg(dev, prob, ds),
                             lambda: dev.synchronize().result(), iters)}
        if torch is not None:
            t = _torch_cg_device(torch, indptr, indices, data, b)
            assert_close(f"torch device-scalar CG {n}^2", t(iters).cpu().numpy(), x_ref, tol)
            sides["torch"] = synced(lambda t=t: t(iters), torch.cuda.synchronize, iters)
        if cupy is not None:
            c = _cupy_cg_device(cupy, indptr, indices, data, b)
            assert_close(f"CuPy device-scalar CG {n}^2", cupy.asnumpy(c(iters)), x_ref, tol)
            sides["cupy"] = synced(lambda c=c: c(iters), cupy.cuda.runtime.deviceSynchronize,
                                   iters)
        rows.append(row("CG, device scalars (f64)", f"{n}^2, {iters} it", "ms/iteration", 1e3,
                        alternate(sides, repeats)))
        prob.free()
    ds.free()
    return rows


def _torch_cg_device(torch: Any, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                     b_host: np.ndarray) -> Callable[[int], Any]:
    size = b_host.size
    a = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                torch.from_numpy(data), (size, size), device="cuda")
    b = torch.from_numpy(b_host).cuda()
    x, r, p = (torch.empty_like(b) for _ in range(3))

    def solve(iters: int) -> Any:
        x.zero_()
        r.copy_(b)
        p.copy_(b)
        rr = torch.dot(r, r)
        for _ in range(iters):
            ap = torch.mv(a, p)
            alpha = rr / torch.dot(p, ap)  # 0-d tensors: no host read
            x.addcmul_(alpha, p)
            r.addcmul_(alpha, ap, value=-1.0)
            rr_new = torch.dot(r, r)
            p.mul_(rr_new / rr).add_(r)
            rr = rr_new
        return x

    return solve


def _cupy_cg_device(cupy: Any, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
                    b_host: np.ndarray) -> Callable[[int], Any]:
    import cupyx.scipy.sparse as csp

    size = b_host.size
    a = csp.csr_matrix((cupy.asarray(data), cupy.asarray(indices), cupy.asarray(indptr)),
                       shape=(size, size))
    b = cupy.asarray(b_host)

    def solve(iters: int) -> Any:
        x = cupy.zeros_like(b)
        r = b.copy()
        p = b.copy()
        rr = cupy.dot(r, r)
        for _ in range(iters):
            ap = a @ p
            alpha = rr / cupy.dot(p, ap)  # 0-d arrays: no host read
            x += alpha * p
            r -= alpha * ap
            rr_new = cupy.dot(r, r)
            p *= rr_new / rr
            p += r
            rr = rr_new
        return x

    return solve


# -- (c) MLP + softmax served to 8 clients -----------------------------------------------------
def bench_serving(dev: Any, torch: Any, cupy: Any, sizes: tuple[int, ...], requests: int,
                  repeats: int) -> list[dict[str, Any]]:
    width, batch, classes, clients, _ = sizes
    model = mlp_serving.Model.random(width, classes).upload(dev)
    check_x = np.random.default_rng().standard_normal((batch, width)).astype(np.float32)
    want = model.reference(check_x)
    tol = mlp_serving.TOLERANCE
    replicas = [mlp_serving.Client(dev, model, batch) for _ in range(clients)]
    for s in replicas:
        assert_close("gpumsg MLP", s.infer(check_x), want, tol)
    infers: dict[str, list[Callable[[np.ndarray], np.ndarray]]] = {
        "gpumsg": [s.infer for s in replicas]}
    syncs: dict[str, Callable[[], Any]] = {"gpumsg": lambda: dev.synchronize().result()}
    if torch is not None:
        f = _torch_mlp(torch, model)
        assert_close("torch MLP", f(check_x), want, tol)
        infers["torch"] = [f] * clients
        syncs["torch"] = torch.cuda.synchronize
    if cupy is not None:
        f = _cupy_mlp(cupy, model)
        assert_close("CuPy MLP", f(check_x), want, tol)
        infers["cupy"] = [f] * clients
        syncs["cupy"] = cupy.cuda.runtime.deviceSynchronize

    def side(name: str) -> Side:
        def run() -> float:
            syncs[name]()
            rate, _ = mlp_serving.run_clients(infers[name], batch, width, requests)
            syncs[name]()
            return 1.0 / rate

        return run

    runs = alternate({k: side(k) for k in infers}, repeats, warmup=0)  # run_clients warms up
    rates = {k: 1.0 / statistics.median(v) for k, v in runs.items()}
    out = row(f"MLP + softmax, {clients} client threads (f32)",
              f"{width} wide, batch {batch}, {clients} x {requests} req", "us/request", 1e6,
              runs, **{f"{k}_requests_per_s": v for k, v in rates.items()})
    for s in replicas:
        s.free()
    model.free()
    return [out]


def _torch_mlp(torch: Any, model: Any) -> Callable[[np.ndarray], np.ndarray]:
    import torch.nn.functional as F

    ws = [torch.from_numpy(w).cuda() for w in model.ws]
    bs = [torch.from_numpy(b).cuda() for b in model.bs]

    def infer(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            h = torch.from_numpy(x).cuda()
            for i in range(2):
                h = F.gelu(torch.addmm(bs[i], h, ws[i]), approximate="tanh")
            return torch.softmax(torch.addmm(bs[2], h, ws[2]), dim=1).cpu().numpy()

    return infer


def _cupy_mlp(cupy: Any, model: Any) -> Callable[[np.ndarray], np.ndarray]:
    ws = [cupy.asarray(w) for w in model.ws]
    bs = [cupy.asarray(b) for b in model.bs]
    bias_gelu = cupy.ElementwiseKernel(
        "T h, T b", "T y",
        "T v = h + b; y = (T)0.5 * v * ((T)1 + tanh((T)0.7978845608028654 * "
        "(v + (T)0.044715 * v * v * v)))", "bench_bias_gelu")

    def infer(x: np.ndarray) -> np.ndarray:
        h = cupy.asarray(x)
        for i in range(2):
            h = bias_gelu(h @ ws[i], bs[i])
        z = h @ ws[2] + bs[2]
        e = cupy.exp(z - z.max(axis=1, keepdims=True))
        return cupy.asnumpy(e / e.sum(axis=1, keepdims=True))

    return infer


# -- (d) the spectral step ---------------------------------------------------------------------
def bench_spectral(dev: Any, torch: Any, cupy: Any, n: int, steps: int,
                   repeats: int) -> list[dict[str, Any]]:
    s = spectral_step.setup(dev, n)
    want = spectral_step.steps_numpy(s.u0_host, s.k_host, steps)
    tol = spectral_step.TOLERANCE
    got = dev.copy_to_host(spectral_step.run(dev, s, steps).result()).result()
    assert_close("gpumsg spectral", got, want, tol)
    sides: dict[str, Side] = {
        "gpumsg": synced(lambda: spectral_step.run(dev, s, steps).result(),
                         lambda: dev.synchronize().result(), steps)}
    if torch is not None:
        u0 = torch.from_numpy(s.u0_host).cuda()
        k = torch.from_numpy(s.k_host.astype(np.complex64)).cuda()

        def t_run() -> Any:
            u = u0
            for _ in range(steps):
                u = torch.fft.irfft2(torch.fft.rfft2(u) * k, s=(n, n))
            return u

        assert_close("torch spectral", t_run().cpu().numpy(), want, tol)
        sides["torch"] = synced(t_run, torch.cuda.synchronize, steps)
    if cupy is not None:
        cu0 = cupy.asarray(s.u0_host)
        ck = cupy.asarray(s.k_host.astype(np.complex64))

        def c_run() -> Any:
            u = cu0
            for _ in range(steps):
                u = cupy.fft.irfft2(cupy.fft.rfft2(u) * ck, s=(n, n))
            return u

        assert_close("CuPy spectral", cupy.asnumpy(c_run()), want, tol)
        sides["cupy"] = synced(c_run, cupy.cuda.runtime.deviceSynchronize, steps)
    out = row("spectral step rfft2 * K irfft2 (f32)", f"{n}^2, {steps} steps", "ms/step", 1e3,
              alternate(sides, repeats))
    s.free()
    return [out]


# -- (e) the mixed step ------------------------------------------------------------------------
def bench_mixed(dev: Any, torch: Any, cupy: Any, steps: int,
                repeats: int) -> list[dict[str, Any]]:
    side_n = mixed_step.SIDE
    rng = np.random.default_rng()
    w_host = rng.standard_normal((side_n, side_n)).astype(np.float32)
    xs = [rng.standard_normal((side_n, side_n)).astype(np.float32) for _ in range(16)]
    want = xs[0].astype(np.float64) @ w_host
    tol = mixed_step.TOLERANCE
    w = dev.to_device(w_host).result()
    xb = dev.alloc((side_n, side_n), np.float32, order="C").result()
    yb = dev.alloc((side_n, side_n), np.float32, order="C").result()
    out = np.empty((side_n, side_n), np.float32)
    alloc: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "gpumsg": lambda x: mixed_step.step(dev, x, w)}
    kept: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "gpumsg": lambda x: mixed_step.step_into(dev, x, w, xb, yb, out)}
    syncs: dict[str, Callable[[], Any]] = {"gpumsg": lambda: dev.synchronize().result()}
    if torch is not None:
        tw = torch.from_numpy(w_host).cuda()
        txd = torch.empty(side_n, side_n, device="cuda")
        tyd = torch.empty(side_n, side_n, device="cuda")
        tyh = torch.empty(side_n, side_n)

        def t_kept(x: np.ndarray) -> np.ndarray:
            txd.copy_(torch.from_numpy(x))
            torch.matmul(txd, tw, out=tyd)
            tyh.copy_(tyd)
            return tyh.numpy()

        alloc["torch"] = lambda x: (torch.from_numpy(x).cuda() @ tw).cpu().numpy()
        kept["torch"] = t_kept
        syncs["torch"] = torch.cuda.synchronize
    if cupy is not None:
        cw = cupy.asarray(w_host)
        cxd = cupy.empty((side_n, side_n), np.float32)
        cyd = cupy.empty((side_n, side_n), np.float32)
        cyh = np.empty((side_n, side_n), np.float32)

        def c_kept(x: np.ndarray) -> np.ndarray:
            cxd.set(x)
            cupy.matmul(cxd, cw, out=cyd)
            cyd.get(out=cyh)
            return cyh

        alloc["cupy"] = lambda x: cupy.asnumpy(cupy.asarray(x) @ cw)
        kept["cupy"] = c_kept
        syncs["cupy"] = cupy.cuda.runtime.deviceSynchronize
    rows = []
    for label, fns in (("allocating", alloc), ("kept buffers", kept)):
        for name, fn in fns.items():
            assert_close(f"{name} mixed step ({label})", fn(xs[0]), want, tol)

        rows.append(row(f"mixed step: 1 KiB up, matmul, down ({label})",
                        f"{side_n}x{side_n} f32, {steps} steps", "us/step", 1e6,
                        alternate({k: _single_steps(fns[k], syncs[k], xs, steps) for k in fns},
                                  repeats)))
    for buf in (w, xb, yb):
        buf.free()
    return rows


def _single_steps(step: Callable[[np.ndarray], np.ndarray], sync: Callable[[], Any],
                  xs: list[np.ndarray], steps: int) -> Side:
    """A side timing ``steps`` single steps (each ends in its download): their median."""

    def run() -> float:
        sync()
        times = []
        for i in range(steps):
            t0 = time.perf_counter()
            step(xs[i % len(xs)])
            times.append(time.perf_counter() - t0)
        sync()
        return statistics.median(times)

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs and requests")
    ap.add_argument("--only", default=",".join(WORKLOADS),
                    help=f"comma-separated subset of {','.join(WORKLOADS)}")
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--out", default=None, help="output folder (read by _common.results_dir)")
    args = ap.parse_args(argv)
    chosen = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        ap.error(f"unknown workloads {unknown}; choose from {WORKLOADS}")
    notes: list[str] = []
    repeats = 3 if args.quick else 7
    rows: list[dict[str, Any]] = []
    with gpumsg.open_device(0, backend=args.backend) as dev:
        on_gpu = dev.backend == "cuda"
        torch, cupy = load_peers(notes) if on_gpu else (None, None)
        if not on_gpu:
            notes.append("simulator: small sizes, no peers (a check of the harness, not a "
                         "measurement)")
        notes.append(f"gpumsg device: {dev}")
        if "cg" in chosen:
            grids = cg_poisson.GRIDS if on_gpu else cg_poisson.SMALL_GRIDS
            iters = cg_poisson.ITERS if on_gpu else cg_poisson.SMALL_ITERS
            rows += bench_cg(dev, torch, cupy, grids, iters, repeats)
        if "cg-device" in chosen:
            grids = cg_poisson.GRIDS if on_gpu else cg_poisson.SMALL_GRIDS
            iters = cg_poisson.ITERS if on_gpu else cg_poisson.SMALL_ITERS
            rows += bench_cg_device(dev, torch, cupy, grids, iters, repeats)
        if "serving" in chosen:
            sizes = mlp_serving.FULL if on_gpu else mlp_serving.SMALL
            requests = (20 if args.quick else 50) if on_gpu else sizes[4]
            rows += bench_serving(dev, torch, cupy, sizes, requests, repeats)
        if "spectral" in chosen:
            n, steps = spectral_step.FULL if on_gpu else spectral_step.SMALL
            rows += bench_spectral(dev, torch, cupy, n, steps, repeats)
        if "mixed" in chosen:
            steps = (500 if args.quick else 2000) if on_gpu else 50
            rows += bench_mixed(dev, torch, cupy, steps, repeats)
    notes.append("ratios: gpumsg's time over the peer's (below 1: gpumsg is faster); figures "
                 f"are medians of {repeats} alternating runs after a warm-up, each run between "
                 "two device synchronizations")
    notes.append("CG: two host reads per iteration on every side; CuPy's updates are array "
                 "expressions (x += alpha * p), torch's in-place add_(alpha=)")
    notes.append("serving: gpumsg keeps per-client activation buffers (one wait per request); "
                 "torch and CuPy allocate from their caching pools on the shared default stream")
    write_results("workloads", rows, notes, COLUMNS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
