"""Process isolation's recovery from faults one right after another, with workers started by the
fork server or spawned, alternating (``GPUMSG_WORKER_START``), and where each worker's start
goes (``ProcessWorker.startup_times``: interpreter and imports, backend, device context).

Faults back to back find the standby worker of the previous recovery still starting, so their
recovery is about one worker's start. Usage:
python tools/worker_start_ab.py [faults] [rounds] [json_path]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
from bench_supervision import recovery  # noqa: E402

METHODS = ("forkserver", "spawn")


def one_round(method: str, faults: int) -> dict[str, Any]:
    os.environ["GPUMSG_WORKER_START"] = method
    return {"method": method, **recovery(faults)}


def main() -> None:
    faults = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    out_path = sys.argv[3] if len(sys.argv) > 3 else None
    results = []
    for r in range(rounds):
        for method in (METHODS if r % 2 == 0 else METHODS[::-1]):
            res = one_round(method, faults)
            results.append(res)
            phases = {k: round(statistics.median(s[k] for s in res["starts"][1:]) * 1e3)
                      for k in res["starts"][0]}
            print(json.dumps({"method": method, "open_ms": round(res["open_s"] * 1e3),
                              "recovery_median_ms": round(statistics.median(res["recovery_s"])
                                                          * 1e3),
                              "recovery_ms": [round(t * 1e3) for t in res["recovery_s"]],
                              "first_start_ms": {k: round(v * 1e3)
                                                 for k, v in res["starts"][0].items()},
                              "later_starts_median_ms": phases}), flush=True)
    if out_path:
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
