"""Reliability as figures: the fuzz, soak and fault campaigns of tests/stress, run
once on one backend, their figures written to ``reliability.json`` (every run, by label) and
``reliability.md``.

    python benchmarks/bench_reliability.py --label gpu --backend cuda --cases 3000 \\
        --soak-ops 2000 --faults 100
    python benchmarks/bench_reliability.py --merge other/reliability.json   # add its runs

There is no peer to run beside: the figures are counts (cases, faults, lost, wrong, leaks) and
recovery times. Recovery is timed from the moment the client sees the fault's typed error to
the completion of the next successful checked SGEMM; "from inject" adds the detection (the
watchdog's limit for a hang).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from _common import HERE, environment, results_dir

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "stress"))

import faults  # noqa: E402
import fuzz  # noqa: E402
import soak  # noqa: E402


def run(label: str, backend: str, cases: int, soak_threads: int, soak_ops: int, n_faults: int,
        watchdog: float, save: Any = lambda out: None,
        fault_budget: float | None = None) -> dict[str, Any]:
    """Each campaign in turn; ``save(out)`` after each (a run cut short keeps what it did)."""
    out: dict[str, Any] = {"label": label, "backend": backend, "environment": environment()}
    t0 = time.perf_counter()
    if n_faults:
        frep = faults.campaign(n_faults, backend, threads=4, watchdog=watchdog,
                               time_budget=fault_budget)
        out["faults"] = frep.figures()
        out["fault_problems"] = frep.problems[:20]
        print("faults", out["faults"], flush=True)
        save(out)
    if cases:
        rep = fuzz.campaign(cases, backend)
        out["fuzz"] = rep.figures()
        out["fuzz_defects"] = rep.defects[:20]
        out["fuzz_engine"] = "hypothesis" if fuzz.HAVE_HYPOTHESIS else "random"
        print("fuzz", out["fuzz"], flush=True)
        save(out)
    if soak_ops:
        srep = soak.campaign(soak_threads, soak_ops, backend)
        out["soak"] = srep.figures()
        out["soak_problems"] = srep.problems[:20]
        print("soak", out["soak"], flush=True)
        save(out)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _row(r: dict[str, Any]) -> list[str]:
    env = r["environment"]
    fz, sk, ft = r.get("fuzz", {}), r.get("soak", {}), r.get("faults", {})

    def g(d: dict, k: str) -> str:
        v = d.get(k, "-")
        return "-" if v is None else str(v)

    leaks = "-"
    if ft:
        leaks = (f"{len(ft['leaked_shm'])} shm / {ft['leaked_blocks']} blocks / "
                 f"{len(ft['leaked_children'])} procs")
    pool = "-"
    if sk:
        pool = "back to start" if sk["pool_used_end"] == sk["pool_used_start"] else \
            f"{sk['pool_used_start']} -> {sk['pool_used_end']} B"
    device = "simulator" if r["backend"] == "sim" else env.get("device")
    return [r["label"], f"{device}, {env.get('cpu_count')} CPUs", str(env.get("date", ""))[:10],
            f"{g(fz, 'cases')} / {g(fz, 'defects')}",
            f"{g(sk, 'threads')}x{sk.get('ops', 0) // max(sk.get('threads', 1), 1)}"
            if sk else "-",
            f"{g(sk, 'lost')} / {g(sk, 'wrong')} / {g(sk, 'errors')}", pool,
            f"{g(ft, 'faults')} ({g(ft, 'fault_typed')} typed)",
            f"{g(ft, 'lost')} / {g(ft, 'wrong')} / {g(ft, 'untyped')}",
            f"{g(ft, 'recovery_median_ms')} / {g(ft, 'recovery_p99_ms')}",
            g(ft, "restart_bound_holds"), leaks]


COLUMNS = ["run", "device", "date", "fuzz cases / defects", "soak threads x ops",
           "soak lost / wrong / errors", "soak pool", "faults injected",
           "faults lost / wrong / untyped", "recovery median / p99 ms", "restart bound",
           "leaks after close"]


def write(doc: dict[str, Any], path: str) -> None:
    with open(os.path.join(path, "reliability.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    lines = ["# reliability", "",
             "Figures of the campaigns in tests/stress, one row per run "
             "(`benchmarks/bench_reliability.py`).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in doc["runs"].values():
        lines.append("| " + " | ".join(_row(r)) + " |")
    lines.append("")
    for r in doc["runs"].values():
        ft = r.get("faults")
        if ft:
            lines.append(f"- {r['label']}: faults by kind {ft['by_kind']}; recovery median "
                         f"by kind (ms, from the fault's error) "
                         f"{ft['recovery_median_ms_by_kind']}; from injection "
                         f"{ft.get('from_inject_median_ms_by_kind')}; supervisor's restart "
                         f"median {ft['supervisor_restart_median_ms']} ms; standby wait before "
                         f"a fault, median {ft.get('spare_wait_median_ms')} ms; "
                         f"{ft['client_ops']} client ops checked during the faults, "
                         f"{ft['client_typed_errors']} typed errors.")
        if r.get("soak"):
            lines.append(f"- {r['label']}: soak families {r['soak']['by_family']}, "
                         f"{r['soak']['freed_by_other_thread']} frees by another thread, "
                         f"{r['soak']['freed_by_gc']} by the collector, "
                         f"{r['soak']['seconds']:.0f} s.")
        if r.get("fuzz"):
            fz = r["fuzz"]
            lines.append(f"- {r['label']}: fuzz ({r.get('fuzz_engine')}) over {fz['targets']} "
                         "targets: "
                         f"{fz['typed_at_call']} typed at the call, {fz['typed_in_future']} "
                         f"typed through the future, {fz['succeeded']} succeeded, "
                         f"{fz['seconds']} s.")
    for extra in doc.get("notes", []):
        lines.append(f"- {extra}")
    with open(os.path.join(path, "reliability.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--label", default="sim")
    ap.add_argument("--backend", default="sim")
    ap.add_argument("--cases", type=int, default=2200)
    ap.add_argument("--soak-threads", type=int, default=8)
    ap.add_argument("--soak-ops", type=int, default=600)
    ap.add_argument("--faults", type=int, default=8)
    ap.add_argument("--watchdog", type=float, default=1.0)
    ap.add_argument("--fault-budget", type=float, default=None,
                    help="seconds after which no further fault is injected")
    ap.add_argument("--out", default=None, help="output folder (default: "
                    "benchmarks/out)")
    ap.add_argument("--merge", default=None, help="add the runs of another reliability.json")
    ap.add_argument("--note", action="append", default=[], help="a line for the notes")
    args = ap.parse_args(argv)
    path = args.out or results_dir()
    os.makedirs(path, exist_ok=True)
    try:
        with open(os.path.join(path, "reliability.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {"benchmark": "reliability", "runs": {}}
    notes = doc.setdefault("notes", [])
    notes += [n for n in args.note if n not in notes]
    if args.merge or args.note:
        if args.merge:
            with open(args.merge) as f:
                doc["runs"].update(json.load(f)["runs"])
        write(doc, path)
    else:
        before = dict(doc["runs"].get(args.label, {}))

        def save(out: dict[str, Any]) -> None:
            # a run of some campaigns (--faults 0, ...) keeps the label's others
            doc["runs"][args.label] = {**before, **out}
            write(doc, path)

        save(run(args.label, args.backend, args.cases, args.soak_threads, args.soak_ops,
                 args.faults, args.watchdog, save, args.fault_budget))
        return
    write(doc, path)


if __name__ == "__main__":
    main()
