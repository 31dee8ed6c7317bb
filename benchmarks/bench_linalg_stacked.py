"""Stacked linear algebra on arrays beside torch.linalg and CuPy in one process.

    python benchmarks/bench_linalg_stacked.py [--quick] [--only inv,solve,eigh,svd,cholesky,big]
                                              [--batch 10000] [--n 64] [--backend auto|cuda|sim]
                                              [--out DIR]

* ``inv``, ``solve``, ``eigh``, ``svd``, ``cholesky``: ``gpumsg.array_api.linalg`` on a stack of
  ``batch`` n x n float32 matrices (10,000 of 64 x 64 by default), a new output per call, as a
  user calls them (``solve``: right-hand sides (batch, n, 1)); torch: ``torch.linalg.inv``,
  ``solve``, ``eigh``, ``svd`` (full matrices, as NumPy's default), ``cholesky``; CuPy: the
  ``cupy.linalg`` functions of the same names.
* ``big``: ``cholesky`` and ``inv`` of one 4096 x 4096 matrix, float32 and float64, through the
  array namespace and through ``dev.linalg`` (the NumPy-shaped client), beside
  ``torch.linalg.cholesky`` and ``inv`` (CuPy's functions of the same names too).
* ``fills``: the raw calls whose fill mode the NumPy-shaped calls choose, with uplo 'L' and 'U'
  on the same column-major matrix (a device copy + the call): potrf and potrf + potri at
  4096^2, syevd at 2048^2, float32 and float64 (gpumsg alone).

Every side's answer is checked against NumPy float64 (the first 32 matrices of a stack) before
it is timed. A run issues ``k`` calls and synchronizes (gpumsg ``dev.synchronize()``,
``torch.cuda.synchronize``, CuPy ``deviceSynchronize``), ``k`` sized so that a run of the
slowest side lasts about 0.2 s; each side is warmed up, then the sides' runs alternate and the
median per call is reported with the ratios torch / gpumsg and CuPy / gpumsg (above 1: gpumsg is
faster; the target for the stacked rows is >= 0.9 against torch). A side whose one timed call
takes over a second (torch's stacked ``eigh`` and ``svd`` loop over the matrices) is reported by
that call (``timed_once``). The svd's one-stream row (every matrix's gesvdj on one stream, the
baseline of gpumsg's lanes) is gpumsg alone. torch and CuPy are used only when importable with
a GPU; on the simulator small sizes run without peers, to exercise the harness. Writes
``linalg_stacked.{json,md}`` to the benchmarks' output folder.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import write_results

import gpumsg
import gpumsg.array_api as xp

STACKED = ("inv", "solve", "eigh", "svd", "cholesky")
CASES = STACKED + ("big", "fills")
COLUMNS = ["case", "size", "gpumsg_ms", "torch_ms", "cupy_ms", "torch/gpumsg", "cupy/gpumsg",
           "uplo_L_ms", "uplo_U_ms", "U/L", "calls_per_run", "timed_once", "rel_err", "target"]
#: how many matrices of a stack are checked against NumPy
CHECKED = 32


def load_peers(notes: list[str]) -> tuple[Any, Any]:
    """torch and CuPy when importable with a GPU, else None (noted)."""
    torch = cupy = None
    try:
        import torch as _torch

        if _torch.cuda.is_available():
            torch = _torch
            notes.append("torch preferred linalg library: "
                         f"{torch.backends.cuda.preferred_linalg_library()}")
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


def inputs(kind: str, batch: int, n: int, dtype: Any, rng: np.random.Generator
           ) -> tuple[np.ndarray, np.ndarray | None]:
    """Well-conditioned random operands (never zeros): the stack and, for solve, (batch, n, 1)."""
    shape = (batch, n, n) if batch else (n, n)
    g = rng.standard_normal(shape)
    if kind in ("eigh",):
        a = (g + np.swapaxes(g, -1, -2)) / 2
    elif kind in ("cholesky", "big"):
        a = g @ np.swapaxes(g, -1, -2) / n + np.eye(n)
    elif kind in ("inv", "solve", "big_inv"):
        a = g / np.sqrt(n) + 2 * np.eye(n)
    else:
        a = g
    b = rng.standard_normal((batch, n, 1)) if kind == "solve" else None
    return a.astype(dtype), (None if b is None else b.astype(dtype))


def reference(kind: str, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """NumPy float64's answer for the first matrices, as the value checked."""
    a64 = a[:CHECKED].astype(np.float64) if a.ndim == 3 else a.astype(np.float64)
    if kind == "inv":
        return np.linalg.inv(a64)
    if kind == "big_inv":
        return np.linalg.inv(a64)[:512, :512]  # the leading block of the inverse
    if kind == "solve":
        assert b is not None
        return np.linalg.solve(a64, b[:CHECKED].astype(np.float64))
    if kind == "eigh":
        return np.linalg.eigvalsh(a64)
    if kind == "svd":
        return np.linalg.svd(a64, compute_uv=False)
    if a64.ndim == 2:
        return np.linalg.cholesky(a64[:512, :512])  # the leading block of the factor
    return np.linalg.cholesky(a64)


def checked_part(kind: str, out: Any, stacked: bool) -> np.ndarray:
    """The part of an answer (host array) compared with :func:`reference`."""
    if kind == "eigh":
        out = out[0]
    elif kind == "svd":
        out = out[1]
    host = np.asarray(out)
    if not stacked:
        return host[:512, :512]
    return host[:CHECKED]


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def ours(kind: str, dev: Any, a: np.ndarray, b: np.ndarray | None,
         client: str = "array") -> Callable[[], Any]:
    x = xp.asarray(a, device=dev)
    y = xp.asarray(b, device=dev) if b is not None else None
    la = xp.linalg
    if client == "dev.linalg":
        buf = dev.to_device(a)
        if kind == "big_inv":
            return lambda: dev.linalg.inv(buf)
        return lambda: dev.linalg.cholesky(buf)
    return {"inv": lambda: la.inv(x), "solve": lambda: la.solve(x, y),
            "eigh": lambda: la.eigh(x), "svd": lambda: la.svd(x),
            "cholesky": lambda: la.cholesky(x), "big": lambda: la.cholesky(x),
            "big_inv": lambda: la.inv(x)}[kind]


def peer(mod: Any, kind: str, a: np.ndarray, b: np.ndarray | None) -> Callable[[], Any]:
    if mod.__name__ == "torch":
        x = mod.from_numpy(a).cuda()
        y = mod.from_numpy(b).cuda() if b is not None else None
        la = mod.linalg
    else:
        x = mod.asarray(a)
        y = mod.asarray(b) if b is not None else None
        la = mod.linalg
    return {"inv": lambda: la.inv(x), "solve": lambda: la.solve(x, y),
            "eigh": lambda: la.eigh(x), "svd": lambda: la.svd(x),
            "cholesky": lambda: la.cholesky(x), "big": lambda: la.cholesky(x),
            "big_inv": lambda: la.inv(x)}[kind]


def to_host(kind: str, out: Any, mod: Any) -> Any:
    """A peer's answer as NumPy arrays (tuples kept)."""
    def one(t: Any) -> np.ndarray:
        if mod is None:
            return np.asarray(t)
        if mod.__name__ == "torch":
            return t.cpu().numpy()
        return mod.asnumpy(t)

    if isinstance(out, tuple):
        return tuple(one(t) for t in out)
    return one(out)


def timed(call: Callable[[], Any], sync: Callable[[], Any], calls: int) -> Callable[[], float]:
    def run() -> float:
        sync()
        t0 = time.perf_counter()
        keep = [call() for _ in range(calls)]
        sync()
        del keep
        return (time.perf_counter() - t0) / calls

    return run


#: a side whose timed call takes longer than this (seconds) is timed by that one call, not by
#: alternating runs: torch's stacked eigh and svd of 64 x 64 matrices loop over the stack, seconds
#: a call, and repeating them would take minutes of device time for no better figure
SLOW_S = 1.0


def measure(sides: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], repeats: int
            ) -> tuple[dict[str, float], int, list[str]]:
    """Median seconds per call of each side (warmed up, runs alternating), the calls per run
    (sized from the slowest of the sides that run again: a run of about 0.2 s) and the sides
    timed by a single call (its time over :data:`SLOW_S`)."""
    single: dict[str, float] = {}
    for name, (call, sync) in sides.items():
        call()
        sync()  # warm-up: plans, kernels, workspaces
        sync()
        t0 = time.perf_counter()
        call()
        sync()
        single[name] = time.perf_counter() - t0
    once = [name for name, t in single.items() if t > SLOW_S]
    again = {name: side for name, side in sides.items() if name not in once}
    slowest = max((single[name] for name in again), default=0.0)
    calls = max(1, min(200, int(0.2 / max(slowest, 1e-6))))
    runs: dict[str, list[float]] = {name: [] for name in again}
    fns = {name: timed(call, sync, calls) for name, (call, sync) in again.items()}
    for _ in range(repeats):
        for name, fn in fns.items():
            runs[name].append(fn())
    med = {name: statistics.median(v) for name, v in runs.items()}
    med.update({name: single[name] for name in once})
    return med, calls, once


def bench(kind: str, dev: Any, torch: Any, cupy: Any, batch: int, n: int, dtype: Any,
          repeats: int, client: str = "array") -> dict[str, Any]:
    rng = np.random.default_rng(41)
    stacked = kind not in ("big", "big_inv")
    a, b = inputs(kind, batch if stacked else 0, n, dtype, rng)
    want = reference(kind, a, b)
    tol = 1e-3 if np.dtype(dtype) == np.float32 else 1e-9
    sides: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    errs = {}
    call = ours(kind, dev, a, b, client)
    if client == "dev.linalg":
        got = dev.copy_to_host(call()).result()
    else:
        got = to_host(kind, call(), None)
    errs["gpumsg"] = rel_err(checked_part(kind, got, stacked), want)
    sides["gpumsg"] = (call, lambda: dev.synchronize().result())
    for name, mod, sync in (("torch", torch, lambda: torch.cuda.synchronize()),
                            ("cupy", cupy, lambda: cupy.cuda.runtime.deviceSynchronize())):
        if mod is None:
            continue
        fn = peer(mod, kind, a, b)
        errs[name] = rel_err(checked_part(kind, to_host(kind, fn(), mod), stacked), want)
        sides[name] = (fn, sync)
    for name, err in errs.items():
        if not err < tol:
            raise AssertionError(f"{kind} {name}: relative error {err:.2e} against NumPy")
    med, calls, once = measure(sides, repeats)
    label = kind if stacked else {"big": "cholesky", "big_inv": "inv"}[kind]
    size = (f"{batch} x {n}^2 {np.dtype(dtype).name}" if stacked
            else f"{n}^2 {np.dtype(dtype).name}")
    row: dict[str, Any] = {
        "case": label + ("" if client == "array" else f" ({client})"), "size": size,
        "gpumsg_ms": med["gpumsg"] * 1e3, "calls_per_run": calls,
        "rel_err": max(errs.values()), "errors": errs,
        "target": ">= 0.9" if kind in ("inv", "solve", "eigh", "svd") else ">= 0.95"}
    if once:
        row["timed_once"] = ", ".join(once)
    for name in ("torch", "cupy"):
        row[f"{name}_ms"] = med[name] * 1e3 if name in med else ""
        row[f"{name}/gpumsg"] = med[name] / med["gpumsg"] if name in med else ""
    print(row, flush=True)
    return row


def bench_fill(dev: Any, kind: str, n: int, dtype: Any, repeats: int) -> dict[str, Any]:
    """One raw call with uplo 'L' and with 'U' on the same column-major matrix."""
    rng = np.random.default_rng(42)
    g = rng.standard_normal((n, n))
    a_h = (g @ g.T / n + np.eye(n)).astype(dtype)
    a = dev.to_device(np.asfortranarray(a_h), order="F")
    name = np.dtype(dtype).name
    work = dev.alloc((n, n), name, order="F")
    w = dev.alloc((n,), name)
    raw = dev.cusolver

    def side(uplo: str) -> Callable[[], Any]:
        def call() -> Any:
            dev.copy(work, a)
            if kind == "syevd":
                return raw.syevd(work, w, n, uplo)
            done = raw.potrf(work, n, uplo)
            return raw.potri(work, n, uplo) if kind == "potrf+potri" else done
        return call

    sync = lambda: dev.synchronize().result()  # noqa: E731
    med, calls, _ = measure({"L": (side("L"), sync), "U": (side("U"), sync)}, repeats)
    for x in (a, work, w):
        x.buffer.free()
    row = {"case": f"{kind} raw, uplo L vs U", "size": f"{n}^2 {name}",
           "uplo_L_ms": med["L"] * 1e3, "uplo_U_ms": med["U"] * 1e3, "U/L": med["U"] / med["L"],
           "calls_per_run": calls}
    print(row, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    ap.add_argument("--only", default=",".join(CASES),
                    help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--batch", type=int, default=10000)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--out", default=None, help="output folder (read by _common.results_dir)")
    args = ap.parse_args(argv)
    chosen = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        ap.error(f"unknown cases {unknown}; choose from {CASES}")
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    repeats = 3 if args.quick else 5
    with gpumsg.open_device(0, backend=args.backend) as dev:
        old = xp.set_default_device(dev)
        on_gpu = dev.backend == "cuda"
        torch, cupy = load_peers(notes) if on_gpu else (None, None)
        batch, n, big = (args.batch, args.n, 4096) if on_gpu else (16, 40, 64)
        if not on_gpu:
            notes.append("simulator: small sizes, no peers (a check of the harness, not a "
                         "measurement)")
        notes.append(f"gpumsg device: {dev}")
        try:
            for kind in STACKED:
                if kind in chosen:
                    rows.append(bench(kind, dev, torch, cupy, batch, n, np.float32, repeats))
            if "svd" in chosen and n > 32:
                # the same with every matrix's gesvdj on one stream (the lanes' baseline)
                from gpumsg.libs.cusolver import _handle

                lanes, _handle.GESVDJ_LANES = _handle.GESVDJ_LANES, 1
                try:
                    rows.append(bench("svd", dev, None, None, batch, n, np.float32, repeats))
                finally:
                    _handle.GESVDJ_LANES = lanes
                rows[-1]["case"] = "svd, one stream"
            if "big" in chosen:
                for kind in ("big", "big_inv"):
                    for dtype in (np.float32, np.float64):
                        for client in ("array", "dev.linalg"):
                            rows.append(bench(kind, dev, torch, cupy, 0, big, dtype, repeats,
                                              client))
            if "fills" in chosen:
                for dtype in (np.float32, np.float64):
                    for kind, size in (("potrf", big), ("potrf+potri", big),
                                       ("syevd", big // 2)):
                        rows.append(bench_fill(dev, kind, size, dtype, repeats))
        finally:
            xp.set_default_device(old)
    notes += [
        "ratios: the peer's time over gpumsg's (above 1: gpumsg is faster); medians of "
        f"{repeats} alternating runs of calls_per_run calls each, after a warm-up call; a side "
        f"whose one timed call took over {SLOW_S:g} s (timed_once) is that call's time",
        "each call makes new outputs, as a user calls it; torch and CuPy answers checked "
        "against NumPy float64 like gpumsg's (rel_err: the largest of the sides)",
        "gpumsg routes: inv/solve cuBLAS getrfBatched + getrsBatched; eigh syevjBatched (n <= "
        "32) or cusolverDnXsyevBatched (one Xsyevd per matrix without it); svd gesvdjBatched "
        "(<= 32) or one gesvdj per matrix in one message, spread over GESVDJ_LANES streams "
        "('svd, one stream': all on one); cholesky potrfBatched; big cholesky: potrf uplo 'L' "
        "after a transposing geam (dev.linalg: and another after it); big inv: getrf and "
        "getrs against an identity made on the device",
    ]
    write_results("linalg_stacked", rows, notes, COLUMNS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
