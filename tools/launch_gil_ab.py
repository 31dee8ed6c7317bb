"""Diagnostic (H100): enqueue-only calls with the GIL held or released (GPUMSG_LAUNCH_GIL, see
gpumsg/backends/cuda/calls.py), in one process, the two modes alternating round by round.

The mode is switched between measurements by rebinding the device's driver calls and cuBLAS's
GEMMs in place (what the environment variable chooses once per process). Each round measures
every case once per mode, in alternating order; medians over the rounds. torch is measured in
each round as a reference for the machine's drift. Prints one JSON object per case and writes
them all to $OUT/launch_gil_ab.json.

    python3 tools/launch_gil_ab.py [rounds]      (cuDNN cases need the cuDNN frontend package)
"""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "tools")
from _common import median_us, rate_us  # noqa: E402
from conv_case import conv_pair  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.backends.cuda.calls import DriverCalls, driver_calls  # noqa: E402
from gpumsg.libs.loader import load  # noqa: E402

MODES = {"hold": ctypes.PyDLL, "release": ctypes.CDLL}


def rebind(dev: Any, mode: str) -> None:
    """Bind the device's enqueue-only calls the ``mode`` way (the device must be idle)."""
    dev.synchronize().result()
    cls = MODES[mode]
    DriverCalls.__init__(driver_calls(), cls)  # in place: bound methods follow
    for name in ("cublas", "cublasLt"):
        try:
            lib = load(name)
        except Exception:  # noqa: BLE001 - not loaded on this machine
            continue
        dll = cls(lib.path)
        for fn in lib.spec.functions:
            if fn.holds_gil:
                f = getattr(dll, fn.name)
                f.restype, f.argtypes = fn.restype, list(fn.argtypes)
                setattr(lib, fn.name, f)
    ctx = dev._worker.ctx
    blas = ctx.libraries.get("cublas")
    if blas is not None:
        blas._sgemm = blas.lib.cublasSgemm_v2
    lt = ctx.libraries.get("cublaslt")
    if lt is not None and hasattr(lt, "_matmul"):
        lt._matmul = lt.lib.cublasLtMatmul


def aggregate(make_op: Callable[[], Callable[[], Any]], threads: int, total: int,
              wait_each: bool) -> float:
    """Operations per second of ``threads`` threads issuing ``total`` in all."""
    per = total // threads
    start = threading.Barrier(threads + 1)

    def work() -> None:
        op = make_op()
        start.wait()
        last = None
        for _ in range(per):
            last = op()
            if wait_each:
                last.result()
        last.result()

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return per * threads / (time.perf_counter() - t0)


def cases(dev: Any, torch: Any) -> dict[str, Callable[[], float]]:
    """Each case: a function measuring it once (µs per op, or a ratio for the thread rows)."""
    rng = np.random.default_rng()
    host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
    a, b = (dev.to_device(h).result() for h in host)
    c = dev.alloc((64, 64), np.float32).result()
    kib = rng.standard_normal(256).astype(np.float32)
    buf = dev.alloc(256, np.float32).result()
    last: list[Any] = [dev.synchronize()]

    def sgemm() -> Any:
        last[0] = dev.sgemm(a, b, c, 64, 64, 64)

    def alloc_pipelined() -> float:
        keep = []
        t0 = time.perf_counter_ns()
        for _ in range(2000):
            keep.append(dev.alloc(256, np.float32))
        keep[-1].result()
        us = (time.perf_counter_ns() - t0) / 2000 / 1e3
        keep.clear()
        dev.synchronize().result()
        return us

    def gemm_op() -> Callable[[], Any]:
        mine = dev.alloc((64, 64), np.float32).result()
        return lambda: dev.sgemm(a, b, mine, 64, 64, 64)

    def threads(wait_each: bool) -> float:
        one = aggregate(gemm_op, 1, 2000, wait_each)
        many = aggregate(gemm_op, 8, 2000, wait_each)
        return many / one

    batch, s = 512, 128
    bf16 = gpumsg.as_dtype("bf16")
    bh = [rng.standard_normal((batch, s, s), dtype=np.float32).astype(bf16) for _ in range(2)]
    ba, bb = (dev.to_device(h).result() for h in bh)
    bc = dev.alloc((batch, s, s), "bf16", order="C").result()

    def bmm() -> Any:
        last[0] = dev.blas.gemm_strided_batched(bb, ba, bc, s, s, s, batch, s * s, s * s, s * s)

    wait = lambda: last[0].result()
    out: dict[str, Callable[[], float]] = {
        "sgemm 64^3 pipelined us": lambda: rate_us(sgemm, wait, 2000, repeats=3),
        "sgemm 64^3 round trip us": lambda: median_us(
            lambda: dev.sgemm(a, b, c, 64, 64, 64).result(), 1000),
        "alloc pipelined us": alloc_pipelined,
        "1 KiB H2D round trip us": lambda: median_us(
            lambda: dev.copy_from_host(buf, kib).result(), 1000),
        "1 KiB D2H round trip us": lambda: median_us(
            lambda: dev.copy_to_host(buf).result(), 1000),
        "8 threads pipelined / 1 thread": lambda: threads(False),
        "8 threads round trips / 1 thread": lambda: threads(True),
        "strided-batched 512x128^3 bf16 pipelined us": lambda: rate_us(bmm, wait, 1000,
                                                                       repeats=3),
    }
    if torch is not None:
        ta, tb = (torch.from_numpy(np.ascontiguousarray(h)).cuda() for h in host)
        tc = torch.empty(64, 64, device="cuda")
        tba, tbb = (torch.from_numpy(h.astype(np.float32)).cuda().to(torch.bfloat16)
                    for h in bh)
        tbc = torch.empty(batch, s, s, device="cuda", dtype=torch.bfloat16)
        sync = torch.cuda.synchronize
        out["torch mm 64^3 pipelined us"] = lambda: rate_us(
            lambda: torch.mm(ta, tb, out=tc), sync, 2000, repeats=3)
        out["torch bmm 512x128^3 bf16 pipelined us"] = lambda: rate_us(
            lambda: torch.bmm(tba, tbb, out=tbc), sync, 1000, repeats=3)
        try:
            for label, args in (("conv5_x 3x3 fwd", (512, 512, 3, 1, 1, 7, "fwd")),
                                ("conv2_x 3x3 fwd", (64, 64, 3, 1, 1, 56, "fwd"))):
                ours, cwait, theirs = conv_pair(dev, torch, rng, *args)
                ours()
                cwait()
                out[f"{label} pipelined us"] = (lambda o=ours, w=cwait: rate_us(o, w, 400,
                                                                                repeats=3))
                out[f"torch {label} pipelined us"] = (lambda t=theirs: rate_us(
                    t, sync, 400, repeats=3))
        except Exception as exc:  # noqa: BLE001 - no cuDNN frontend here
            print(f"conv cases left out: {exc!r}", flush=True)
    return out


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    try:
        import torch
    except ImportError:
        torch = None
    results: dict[str, dict[str, list[float]]] = {}
    with gpumsg.open_device(0) as dev:
        measure = cases(dev, torch)
        for r in range(rounds):
            order = ("hold", "release") if r % 2 == 0 else ("release", "hold")
            for mode in order:
                rebind(dev, mode)
                for name, fn in measure.items():
                    results.setdefault(name, {}).setdefault(mode, []).append(fn())
            print(f"round {r + 1}/{rounds} done", flush=True)
        rebind(dev, "hold")
    rows = []
    for name, by_mode in results.items():
        row = {"case": name}
        for mode, values in by_mode.items():
            row[mode] = round(statistics.median(values), 3)
            row[f"{mode}_all"] = [round(v, 2) for v in values]
        if "hold" in row and "release" in row and row["hold"]:
            row["release/hold"] = round(row["release"] / row["hold"], 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "launch_gil_ab.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
