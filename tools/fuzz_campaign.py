#!/usr/bin/env python3
"""The differential fuzz campaign, one command on any backend:

    python3 tools/fuzz_campaign.py --backend cuda --seed 43 --cases 20000 --out /tmp/fuzz
    python3 tools/fuzz_campaign.py --backend sim  --seed 43 --cases 20000 --out /tmp/fuzz-sim
    python3 tools/fuzz_campaign.py --diff /tmp/fuzz-sim /tmp/fuzz   # case by case

The plan of ``--cases`` cases is drawn from ``--seed`` alone (tests/stress/fuzz_targets.py), so
two backends given one seed make the same calls: the report's ``plan_digest`` shows it. The
plan runs in chunks of ``--chunk`` cases, each in an interpreter of its own: an interpreter that
dies (a signal, an abort in native code) or stops answering (``--chunk-timeout``) is counted as
a crash or a hang of the case it was running, and the campaign goes on from the next case.
One that ends before its first case began (its devices could not be opened) charges no
case: the chunk is tried once more, and a second such end stops the campaign with its error.

Written to ``--out``: ``fuzz_<backend>_<seed>.json`` (the figures: calls tried, accepted,
refused by error type, answers checked, wrong, untyped, crashes, hangs, and the defects) and
``cases_<backend>_<seed>.jsonl`` (one line per case: its outcome). The exit status is 0 when
wrong, untyped, crashes, hangs and defects are all 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRESS = os.path.join(ROOT, "tests", "stress")
for _p in (ROOT, STRESS):
    if _p not in sys.path:
        sys.path.insert(0, _p)

#: the child: runs cases [start, stop) of the plan, one JSON line per case (flushed), so what it
#: did survives its death; "START i" lines name the case it is in
CHILD = r"""
import json, os, sys
sys.path[:0] = [{root!r}, {stress!r}]
import fuzz, fuzz_targets
cases = fuzz_targets.plan({seed}, {cases}, fuzz.valid_calls(), {start}, {stop})
out = open({log!r}, "a", buffering=1)
abort_at = os.environ.get("GPUMSG_FUZZ_ABORT_AT")  # the crash accounting's own test

def started(case):
    out.write(json.dumps({{"start": case.index}}) + "\n")
    if abort_at == str(case.index):
        os.abort()

def emit(case, rep):
    outcome = ("hang" if rep.hangs else "untyped" if rep.untyped else
               "refused" if rep.refused else "accepted" if rep.succeeded or rep.valid_cases
               else "error")
    out.write(json.dumps({{"i": case.index, "case": case.describe()[:300],
                          "outcome": outcome, "error": next(iter(rep.refused), None),
                          "report": rep.to_json()}}) + "\n")
    if rep.hangs:  # the blocked call's thread lives on: the next cases get a fresh interpreter
        out.close()
        os._exit({hung})

fuzz.run_cases({backend!r}, {seed}, cases, emit, started)
"""


#: the exit status of a chunk that stopped after a case that hung (recorded as a hang)
HUNG = 75
#: seconds before a chunk whose interpreter ended before its first case is tried again
SETUP_RETRY_S = 5.0


def run_chunk(backend: str, seed: int, cases: int, start: int, stop: int, log: str,
              timeout: float) -> tuple[int | None, str]:
    """Cases [start, stop) in a fresh interpreter; (exit status or None on timeout, stderr
    tail)."""
    code = CHILD.format(root=ROOT, stress=STRESS, seed=seed, cases=cases, start=start,
                        stop=stop, log=log, backend=backend, hung=HUNG)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return None, err[-2000:]
    return proc.returncode, proc.stderr[-2000:]


def _read_log(log: str, start: int) -> tuple[list[dict], int | None]:
    """The case records of a chunk's log from ``start`` on, and the case it began but did not
    finish (None if none)."""
    done: dict[int, dict] = {}
    began: int | None = None
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by the interpreter's death
                if "start" in rec and rec["start"] >= start:
                    began = rec["start"]
                elif "i" in rec and rec["i"] >= start:
                    done[rec["i"]] = rec
    unfinished = began if began is not None and began not in done else None
    return [done[i] for i in sorted(done)], unfinished


def campaign(backend: str, seed: int, cases: int, out_dir: str, chunk: int = 250,
             chunk_timeout: float = 900.0, log: Any = print) -> dict[str, Any]:
    """Run the plan in chunks; returns (and writes) the report."""
    import fuzz
    import fuzz_targets

    os.makedirs(out_dir, exist_ok=True)
    cases_path = os.path.join(out_dir, f"cases_{backend}_{seed}.jsonl")
    tmp_log = os.path.join(out_dir, f".chunk_{backend}_{seed}.jsonl")
    for p in (cases_path, tmp_log):
        if os.path.exists(p):
            os.remove(p)
    planned = fuzz_targets.plan(seed, cases, fuzz.valid_calls())
    total = fuzz.FuzzReport()
    crashes: list[str] = []
    t0 = time.perf_counter()
    log(f"fuzz campaign: backend {backend}, seed {seed}, {cases} cases "
        f"({len(fuzz_targets.targets())} targets, {len(fuzz.valid_calls())} valid calls), "
        f"plan digest {fuzz_targets.digest(planned)}, chunks of {chunk}")
    nxt = 0
    setup_failures = 0
    with open(cases_path, "w") as sink:
        while nxt < cases:
            stop = min(nxt + chunk, cases)
            if os.path.exists(tmp_log):
                os.remove(tmp_log)
            status, err = run_chunk(backend, seed, cases, nxt, stop, tmp_log, chunk_timeout)
            records, unfinished = _read_log(tmp_log, nxt)
            if status not in (0, None) and not records and unfinished is None:
                # the interpreter ended before its first case began (opening its devices: a
                # GPU that other processes filled, say): no case ran, so none is charged; the
                # chunk is tried once more, and a second such failure ends the campaign
                setup_failures += 1
                if setup_failures > 1:
                    raise RuntimeError(
                        f"cases {nxt}..{stop - 1}: the chunk's interpreter ended before its "
                        f"first case twice (exit status {status}): the device could not be "
                        f"set up\n{err[-1500:]}")
                log(f"  cases {nxt}..{stop - 1}: the interpreter ended before its first case "
                    f"(exit status {status}); trying the chunk once more\n{err[-600:]}")
                time.sleep(SETUP_RETRY_S)
                continue
            setup_failures = 0
            for rec in records:
                total.merge(fuzz.FuzzReport.from_json(rec.pop("report")))
                sink.write(json.dumps(rec) + "\n")
            last = records[-1]["i"] if records else nxt - 1
            if status == 0 and last == stop - 1:
                nxt = stop
            elif status == HUNG and records and records[-1]["outcome"] == "hang":
                nxt = last + 1  # counted in the case's record; a fresh interpreter goes on
            else:
                bad = unfinished if unfinished is not None else last + 1
                what = "hang" if status is None else f"crash (exit status {status})"
                case = planned[bad].describe() if bad < cases else "?"
                line = f"{case}: the interpreter ended in a {what}\n{err[-1500:]}"
                if status is None:
                    total.hangs += 1
                else:
                    total.crashes += 1
                total.cases += 1
                total.defects.append(line)
                crashes.append(line)
                sink.write(json.dumps({"i": bad, "case": case[:300],
                                       "outcome": "hang" if status is None else "crash",
                                       "error": None}) + "\n")
                nxt = bad + 1
            log(f"  cases {nxt}/{cases}: {total.succeeded + total.valid_ok} accepted, "
                f"{sum(total.refused.values())} refused, {total.checked} checked, "
                f"{total.wrong} wrong, {total.untyped} untyped, {total.crashes} crashes, "
                f"{total.hangs} hangs ({time.perf_counter() - t0:.0f} s)")
    if os.path.exists(tmp_log):
        os.remove(tmp_log)
    fig = total.figures()
    fig["seconds"] = round(time.perf_counter() - t0, 1)
    report = {"backend": backend, "seed": seed, "cases": cases,
              "plan_digest": fuzz_targets.digest(planned), "figures": fig,
              "defects": total.defects[:200], "device": _device(backend)}
    path = os.path.join(out_dir, f"fuzz_{backend}_{seed}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    log(json.dumps({k: v for k, v in fig.items() if k != "checked_types"}, indent=1))
    for d in total.defects[:20]:
        log("DEFECT " + d[:1500])
    log(f"written: {path} and {cases_path}")
    return report


def _device(backend: str) -> str:
    if backend == "sim":
        return "simulator"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
        return out.stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001 - a description only
        return backend


def ok(report: dict[str, Any]) -> bool:
    """The campaign's pass mark: nothing wrong, untyped, crashed or hung, no other defect."""
    f = report["figures"]
    return not (f["wrong"] or f["untyped"] or f["crashes"] or f["hangs"] or report["defects"])


def diff(a_dir: str, b_dir: str, log: Any = print) -> list[str]:
    """Cases whose outcome differs between two runs of one plan (e.g. simulator and GPU):
    accepted on one and refused on the other, or refused with different error types."""
    def load(d: str) -> tuple[dict, dict[int, dict]]:
        rep = next(f for f in sorted(os.listdir(d)) if f.startswith("fuzz_"))
        cases = next(f for f in sorted(os.listdir(d)) if f.startswith("cases_"))
        with open(os.path.join(d, rep)) as f:
            head = json.load(f)
        with open(os.path.join(d, cases)) as f:
            recs = {r["i"]: r for r in map(json.loads, f)}
        return head, recs

    ha, ra = load(a_dir)
    hb, rb = load(b_dir)
    if ha["plan_digest"] != hb["plan_digest"]:
        log(f"different plans: {ha['plan_digest']} != {hb['plan_digest']}")
    out = []
    for i in sorted(set(ra) | set(rb)):
        x, y = ra.get(i, {}), rb.get(i, {})
        if (x.get("outcome"), x.get("error")) != (y.get("outcome"), y.get("error")):
            out.append(f"{x.get('case') or y.get('case')}: {ha['backend']} "
                       f"{x.get('outcome')}/{x.get('error')}, {hb['backend']} "
                       f"{y.get('outcome')}/{y.get('error')}")
    log(f"{len(out)} of {len(ra)} cases end differently")
    for line in out[:200]:
        log("  " + line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="sim", choices=("sim", "cuda"))
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--cases", type=int, default=2400)
    ap.add_argument("--chunk", type=int, default=250, help="cases per interpreter")
    ap.add_argument("--chunk-timeout", type=float, default=900.0,
                    help="seconds a chunk may take before it counts as a hang")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "out", "fuzz"))
    ap.add_argument("--diff", nargs=2, metavar=("DIR_A", "DIR_B"),
                    help="compare two runs' cases instead of running")
    args = ap.parse_args(argv)
    if args.diff:
        diff(*args.diff)
        return 0
    report = campaign(args.backend, args.seed, args.cases, args.out, args.chunk,
                      args.chunk_timeout)
    return 0 if ok(report) else 1


if __name__ == "__main__":
    sys.exit(main())
