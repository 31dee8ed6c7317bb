"""Where the GPU time of pipelined strided-batched GEMMs goes, gpumsg beside torch.bmm
(diagnostic, H100): 512 x 128^3 bf16, n calls each under torch.profiler, the kernel timeline of
each side's stream summarized as in ``conv_timeline.py`` (kernel time per call vs busy span per
call: equal kernel time with a longer span means the GPU waited for the host)."""

from __future__ import annotations

import json
import sys

import numpy as np
from conv_timeline import compare_timelines, save

import gpumsg


def main() -> None:
    import torch
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    batch, s = 512, 128
    bf16 = gpumsg.as_dtype("bf16")
    rng = np.random.default_rng()
    bh = [rng.standard_normal((batch, s, s), dtype=np.float32).astype(bf16) for _ in range(2)]
    with gpumsg.open_device(0) as dev:
        a, b = (dev.to_device(h).result() for h in bh)
        c = dev.alloc((batch, s, s), "bf16", order="C").result()
        last = [dev.synchronize()]

        def ours() -> None:
            last[0] = dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s)

        ta, tb = (torch.from_numpy(h.astype(np.float32)).cuda().to(torch.bfloat16) for h in bh)
        tc = torch.empty(batch, s, s, device="cuda", dtype=torch.bfloat16)

        def theirs() -> None:
            torch.bmm(ta, tb, out=tc)

        row = {"case": "strided-batched 512 x 128^3 bf16",
               **compare_timelines(torch, ours, lambda: last[0].result(), theirs, n)}
        print(json.dumps(row), flush=True)
        save("bmm_timeline.json", row)


if __name__ == "__main__":
    main()
