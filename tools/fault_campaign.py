#!/usr/bin/env python3
"""The process-isolation fault campaign with the array layer's operations in flight, one command:

    python3 tools/fault_campaign.py --backend cuda --faults 100 --out /tmp/faults   # full
    python3 tools/fault_campaign.py --backend sim --faults 8                        # CI size

Faults of every kind (illegal address, worker exit, hang caught by the watchdog, out of memory)
are injected in turn while ``--threads`` clients copy and multiply and ``--array-threads``
clients keep chains of ``gpumsg.array_api`` operations queued (tests/stress/faults.py). Printed
and written to ``--out``/faults_<backend>.json: faults injected and typed, client operations and
array chains checked, lost, wrong, untyped, recovery median and p99, leaks after close. Exit
status 0 when nothing was lost, wrong or untyped, no problem was recorded and the median
recovery is within ``--recovery-ms`` (500).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (ROOT, os.path.join(ROOT, "tests", "stress")):
    if _p not in sys.path:
        sys.path.insert(0, _p)


def main(argv: list[str] | None = None) -> int:
    import faults

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="sim", choices=("sim", "cuda"))
    ap.add_argument("--faults", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--array-threads", type=int, default=2)
    ap.add_argument("--watchdog", type=float, default=1.0)
    ap.add_argument("--recovery-ms", type=float, default=500.0)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "out", "faults"))
    args = ap.parse_args(argv)
    rep = faults.campaign(args.faults, args.backend, threads=args.threads,
                          watchdog=args.watchdog, array_threads=args.array_threads)
    fig = rep.figures()
    doc = {"backend": args.backend, "figures": fig, "problems": rep.problems[:50],
           "unplanned_restarts": rep.unplanned[:50]}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"faults_{args.backend}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    print(json.dumps(fig, indent=1, default=str))
    for p in rep.problems[:20]:
        print("PROBLEM", p)
    for p in rep.unplanned[:20]:
        print("UNPLANNED RESTART", p)
    print(f"written: {path}")
    good = (rep.faults == args.faults and rep.fault_typed == args.faults and not rep.lost
            and not rep.wrong and not rep.untyped and not rep.problems
            and fig["recovery_median_ms"] is not None
            and fig["recovery_median_ms"] <= args.recovery_ms)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
