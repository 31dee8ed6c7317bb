"""Host time per pipelined GEMM message (diagnostic, GPU): n calls posted, then the last one
awaited; "issue" is the caller's loop, "total" includes the wait, and "caller alone" is the
caller's time per call with nothing posted (the device never sees those calls). Cases:
strided-batched 512 x 128^3 bf16 (18.6 us of GPU work per call), a 64^3 SGEMM and a 16^3 x 8
strided-batched GEMM (both a few us). Run with ``GPUMSG_BLAS_REPLAY=0`` and without to see
what the CUDA-graph replays of repeated GEMMs save (backends/cuda/replays.py)."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import numpy as np

import gpumsg


def main(n: int = 1000, rounds: int = 7) -> None:
    batch, s = 512, 128
    bf16 = gpumsg.as_dtype("bf16")
    rng = np.random.default_rng()
    bh = [rng.standard_normal((batch, s, s), dtype=np.float32).astype(bf16) for _ in range(2)]
    with gpumsg.open_device(0) as dev:
        a, b = (dev.to_device(h).result() for h in bh)
        c = dev.alloc((batch, s, s), "bf16", order="C").result()
        small = [dev.alloc((64, 64), np.float32).result() for _ in range(3)]
        cases = {
            "strided 512 x 128^3 bf16": lambda: dev.cublas.gemm_strided_batched(
                b, a, c, s, s, s, batch, s * s, s * s, s * s),
            "sgemm 64^3": lambda: dev.sgemm(small[0], small[1], small[2], 64, 64, 64),
            "strided 8 x 16^3 bf16": lambda: dev.cublas.gemm_strided_batched(
                b, a, c, 16, 16, 16, 8, s * s, s * s, s * s),
        }
        for label, fn in cases.items():
            for _ in range(300):
                fn()
            dev.synchronize().result()
            issue, total = [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(n):
                    f = fn()
                t1 = time.perf_counter()
                f.result()
                t2 = time.perf_counter()
                issue.append((t1 - t0) / n * 1e6)
                total.append((t2 - t0) / n * 1e6)
            post = dev._post
            dev._post = lambda msg, fut: None  # type: ignore[method-assign]  # the caller alone
            alone = []
            try:
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fn()
                    alone.append((time.perf_counter() - t0) / n * 1e6)
            finally:
                dev._post = post  # type: ignore[method-assign]
            print(f"{label}: issue {statistics.median(issue):.1f} us/call, total "
                  f"{statistics.median(total):.1f} us/call, caller alone "
                  f"{statistics.median(alone):.1f} us/call", flush=True)
        pieces(dev, b, a, c, s, batch, n, rounds)
        print("replays:", dev.cublas.replay_info().result())


def pieces(dev: gpumsg.Device, b: Any, a: Any, c: Any, s: int, batch: int, n: int,
           rounds: int) -> None:
    """The caller's time per strided-batched call split into its parts, nothing posted, with
    the cyclic garbage collector on and off."""
    from gpumsg.messages.blas import GemmStridedBatched

    memo = dev.cublas._memo
    args = (s, s, s, batch, s * s, s * s, s * s, 1.0, 0.0, "N", "N", None, None, None, "default")
    msg = memo.message(GemmStridedBatched, (b, a, c), args)
    parts = {
        "memo lookup": lambda: memo.message(GemmStridedBatched, (b, a, c), args),
        "send (post skipped)": lambda: dev.send(msg),
        "whole call (post skipped)": lambda: dev.cublas.gemm_strided_batched(
            b, a, c, s, s, s, batch, s * s, s * s, s * s),
    }
    post = dev._post
    dev._post = lambda msg, fut: None  # type: ignore[method-assign]
    try:
        for collector in ("gc on", "gc off"):
            if collector == "gc off":
                gc.disable()
            for label, fn in parts.items():
                times = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fn()
                    times.append((time.perf_counter() - t0) / n * 1e6)
                print(f"  {label}, {collector}: {statistics.median(times):.2f} us/call",
                      flush=True)
            gc.enable()
    finally:
        dev._post = post  # type: ignore[method-assign]
        gc.enable()


if __name__ == "__main__":
    main()
