"""Host<->device copy bandwidth, pinned and pageable, 1 MiB to 512 MiB, beside torch."""

from __future__ import annotations

import numpy as np
from _common import copy_operands, gbps, write_results

import gpumsg

MiB = 1 << 20
SIZES = (1, 4, 16, 64, 256, 512)


def measure(dev: gpumsg.Device, mib: int) -> list[dict]:
    import torch

    nbytes = mib * MiB
    n = nbytes // 4
    reps = 20 if mib <= 64 else 7
    host, buf, pinned = copy_operands(dev, nbytes)
    pin = pinned.array
    pageable_out = np.empty(n, np.float32)
    ours = {
        "H2D pinned": gbps(lambda: dev.copy_from_host(buf, pin).result(), nbytes, reps),
        "H2D pageable": gbps(lambda: dev.copy_from_host(buf, host).result(), nbytes, reps),
        "D2H pinned": gbps(lambda: dev.copy_to_host(buf, out=pin).result(), nbytes, reps),
        "D2H pageable": gbps(lambda: dev.copy_to_host(buf, out=pageable_out).result(), nbytes,
                             reps),
    }
    assert np.array_equal(pageable_out, host), "D2H pageable copy is wrong"
    assert np.array_equal(pin, host), "D2H pinned copy is wrong"
    td = torch.empty(n, device="cuda")
    tp = torch.from_numpy(host).pin_memory()
    tq = torch.from_numpy(host.copy())
    sync = torch.cuda.synchronize
    theirs = {
        "H2D pinned": gbps(lambda: (td.copy_(tp, non_blocking=True), sync()), nbytes, reps),
        "H2D pageable": gbps(lambda: (td.copy_(tq), sync()), nbytes, reps),
        "D2H pinned": gbps(lambda: (tp.copy_(td, non_blocking=True), sync()), nbytes, reps),
        "D2H pageable": gbps(lambda: (tq.copy_(td), sync()), nbytes, reps),
    }
    rows = []
    for kind in ours:
        target = {"H2D pinned": ">= 0.95", "D2H pinned": ">= 0.95",
                  "H2D pageable": ">= 1.5"}.get(kind, "")
        rows.append({"size_MiB": mib, "copy": kind, "gpumsg_GBps": ours[kind],
                     "torch_GBps": theirs[kind], "ratio": ours[kind] / theirs[kind],
                     "target": target})
    return rows


def main() -> None:
    rows, notes = [], []
    with gpumsg.open_device(0) as dev:
        for mib in SIZES:
            rows += measure(dev, mib)
    notes.append("GB/s = bytes / median wall time of one copy awaited to completion "
                 "(gpumsg: .result(); torch: synchronize)")
    notes.append("pageable H2D: gpumsg stages through pinned blocks with a parallel host copy "
                 "overlapping the DMA; torch lets the driver stage")
    write_results("copies", rows, notes,
                  ["size_MiB", "copy", "gpumsg_GBps", "torch_GBps", "ratio", "target"])


if __name__ == "__main__":
    main()
