"""Where the GPU time of pipelined strided-batched GEMMs goes, gpumsg beside torch.bmm
(diagnostic, H100): 512 x 128^3 bf16, n calls each under torch.profiler, the kernel timeline of
each side's stream summarized as in ``conv_timeline.py`` (kernel time per call vs busy span per
call: equal kernel time with a longer span means the GPU waited for the host)."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np
from conv_timeline import summarize, timeline

import gpumsg


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

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
            last[0] = dev.blas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s)

        ta, tb = (torch.from_numpy(h.astype(np.float32)).cuda().to(torch.bfloat16) for h in bh)
        tc = torch.empty(batch, s, s, device="cuda", dtype=torch.bfloat16)

        def theirs() -> None:
            torch.bmm(ta, tb, out=tc)

        for _ in range(200):
            ours()
            theirs()
        last[0].result()
        torch.cuda.synchronize()
        row: dict = {"case": "strided-batched 512 x 128^3 bf16"}
        for side, fn in (("gpumsg", ours), ("torch", theirs)):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    fn()
                last[0].result()
                torch.cuda.synchronize()
            path = os.path.join(tempfile.mkdtemp(), "t.json")
            prof.export_chrome_trace(path)
            streams = timeline(path)
            main_stream = max(streams, key=lambda st: len(streams[st]))
            row[side] = summarize(streams[main_stream], n)
        print(json.dumps(row), flush=True)
        out = os.environ.get("OUT")
        if out:
            with open(os.path.join(out, "bmm_timeline.json"), "w") as f:
                json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
