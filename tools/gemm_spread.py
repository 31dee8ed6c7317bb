"""How a 4096^3 GEMM's ratio to torch spreads within and between processes (diagnostic, GPU):
``bench_blas.gemm_case`` run several times per dtype in each of a few fresh processes.

    PYTHONPATH=$PWD python3 tools/gemm_spread.py [processes] [repeats]   (defaults: 3, 6)

Writes ``$OUT/gemm_spread.json`` when OUT is set.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(HERE, "tools"))
from _fresh import child_main, in_fresh_processes  # noqa: E402

DTYPES = ("tf32", "fp16", "bf16")


def child(repeats: int) -> dict[str, list[list[float]]]:
    sys.path.insert(0, os.path.join(HERE, "benchmarks"))
    import torch
    from bench_blas import gemm_case

    import gpumsg

    out: dict[str, list[list[float]]] = {name: [] for name in DTYPES}
    with gpumsg.open_device(0) as dev:
        for _ in range(repeats):
            for name in DTYPES:
                r = gemm_case(dev, torch, name, 4096)
                out[name].append([round(r["gpumsg"], 1), round(r["torch"], 1),
                                  round(r["ratio"], 4)])
    return out


def main() -> None:
    if child_main(child):
        return
    procs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    results = []
    for i, r in enumerate(in_fresh_processes(__file__, procs, repeats, 500)):
        results.append(r)
        for name, rows in r.items():
            print(f"process {i} {name}: ratios {[x[2] for x in rows]}; gpumsg "
                  f"{[x[0] for x in rows]}; torch {[x[1] for x in rows]} TFLOP/s", flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gemm_spread.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
