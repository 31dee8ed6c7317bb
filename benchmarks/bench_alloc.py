"""Alloc+Free round trip of a 1 MiB buffer: gpumsg beside CuPy's memory pool and the raw driver
calls (cuMemAlloc/cuMemFree and cuMemAllocAsync/cuMemFreeAsync)."""

from __future__ import annotations

import numpy as np
from _common import median_us, rate_us, write_results

import gpumsg

N = 3000
NBYTES = 1 << 20


def main() -> None:
    rows, notes = [], []
    with gpumsg.open_device(0) as dev:
        def alloc_free() -> None:
            dev.alloc((NBYTES // 4,), np.float32).result().free()

        ours_rt = median_us(alloc_free, N)
        last = [dev.synchronize()]

        def alloc_drop() -> None:  # pipelined: allocate, drop (the finalizer posts Free)
            last[0] = dev.alloc((NBYTES // 4,), np.float32)

        ours_pipe = rate_us(alloc_drop, lambda: last[0].result(), N)
    peers = {}
    try:
        import cupy

        peers["CuPy pool: cupy.empty + del"] = median_us(
            lambda: cupy.empty(NBYTES // 4, cupy.float32), N)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"CuPy unavailable: {exc!r}")
    from cuda.bindings import driver as cu

    cu.cuInit(0)
    ctx = cu.cuDevicePrimaryCtxRetain(cu.cuDeviceGet(0)[1])[1]
    cu.cuCtxSetCurrent(ctx)
    peers["cuMemAlloc + cuMemFree"] = median_us(
        lambda: cu.cuMemFree(cu.cuMemAlloc(NBYTES)[1]), 500)
    stream = cu.cuStreamCreate(1)[1]
    peers["cuMemAllocAsync + cuMemFreeAsync"] = median_us(
        lambda: cu.cuMemFreeAsync(cu.cuMemAllocAsync(NBYTES, stream)[1], stream), N)
    for name, us in peers.items():
        rows.append({"case": "alloc + free round trip", "gpumsg_us": ours_rt, "peer": name,
                     "peer_us": us, "ratio": ours_rt / us})
    rows.append({"case": "alloc pipelined (drop posts Free)", "gpumsg_us": ours_pipe})
    notes.append("gpumsg round trip = alloc(...).result() then free() (the free is posted, not "
                 "awaited): one message round trip plus one post")
    write_results("alloc", rows, notes, ["case", "gpumsg_us", "peer", "peer_us", "ratio"])


if __name__ == "__main__":
    main()
