"""Run every benchmark of the suite in turn (``make bench``)."""

from __future__ import annotations

import importlib
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SUITE = ["bench_overhead", "bench_sgemm", "bench_copies", "bench_alloc", "bench_blas",
         "bench_supervision"]


def main(names: list[str]) -> int:
    failed = 0
    for name in names or SUITE:
        print(f"\n=== {name}", flush=True)
        try:
            importlib.import_module(name).main()
        except Exception:  # noqa: BLE001 - report and go on with the others
            traceback.print_exc()
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
