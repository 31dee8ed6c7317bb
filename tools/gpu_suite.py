#!/usr/bin/env python3
"""The whole GPU check in two waves of parallel shards, each wave one call of under ten minutes
on a GPU machine (the suite run file by file in one process takes far longer):

    python3 tools/gpu_suite.py --wave 1 --out $OUT     # the libraries and the core
    python3 tools/gpu_suite.py --wave 2 --out $OUT     # the arrays and the campaigns
    python3 tools/gpu_suite.py --wave 2 --list         # the shards, without running them

Each shard is ``pytest -m gpu`` over some test folders or files (the campaigns: the fuzz and
fault campaigns, and the Array API conformance suite where ``GPUMSG_ARRAY_API_TESTS`` or
``../shared/external`` holds it), run beside the others with ``--timeout`` seconds each; its
output goes to ``<work>/<shard>.txt``, which ends with its exit status (124: out of time). The
summary, printed and written to ``<out>/wave<N>.txt``, names each shard's last counts,
every failed test and its skips by reason; ``<out>/wave<N>.tar.gz`` holds every log and the
campaigns' reports (two files: a GPU machine's call brings back a few files only). Together the
two waves hold every test file under ``tests/`` exactly once (tests/test_gpu_suite_tool.py
checks it): a new folder lands in a core shard, and the array files are spread over six shards
by their GPU test counts.

On a GPU machine without network, carried wheels are installed first where ``--site`` names
a folder of them (Ray, the cuDNN frontend: ``../shared/tools/carry_extras.sh``). The exit
status is 0 when every shard exited 0.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTEST = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rs"]
#: the library folders that get a shard each (the heaviest, or those holding many handles)
OWN_LIB_SHARDS = {"blas": ["cublas", "cublaslt", "cufft"], "cudnn": ["cudnn"],
                  "cusolver": ["cusolver"]}
#: the core folders of the first core shard; every other folder but libs and arrays goes to
#: the second
CORE_A = ["backends", "client", "memory", "messages", "service"]
ARRAY_SHARDS = 6
#: array test files whose tests take several times the others' (CUB kernels compiled through
#: NVRTC with the CCCL headers, seconds each while the disk cache is cold): their weight
SLOW = {"test_sorting.py": 6, "test_scan.py": 4}


def _rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def shards(wave: int, fuzz_seed: int = 57) -> dict[str, list[str]]:
    """Shard name -> the command (argv) of wave ``wave``."""
    tests = os.path.join(ROOT, "tests")
    out: dict[str, list[str]] = {}
    if wave == 1:
        libs = os.path.join(tests, "libs")
        own = [d for names in OWN_LIB_SHARDS.values() for d in names]
        for name, folders in OWN_LIB_SHARDS.items():
            out[name] = PYTEST + [_rel(os.path.join(libs, d)) for d in folders]
        out["libs"] = PYTEST + ["tests/libs"] + [f"--ignore=tests/libs/{d}" for d in own]
        out["core_a"] = PYTEST + [f"tests/{d}" for d in CORE_A]
        skip = ["libs", "array_api", *CORE_A]
        out["core_b"] = PYTEST + ["tests"] + [f"--ignore=tests/{d}" for d in skip]
        return out
    if wave != 2:
        raise ValueError(f"--wave is 1 or 2, got {wave}")
    arrays = os.path.join(tests, "array_api")
    units = sorted(glob.glob(os.path.join(arrays, "test_*.py")))
    units += sorted(d for d in glob.glob(os.path.join(arrays, "*"))
                    if os.path.isdir(d) and not os.path.basename(d).startswith("__"))
    weight = _weights([_rel(u) for u in units])
    # greedy: the heaviest unit to the lightest shard
    loads: list[list] = [[0, []] for _ in range(ARRAY_SHARDS)]
    for unit in sorted((_rel(u) for u in units), key=lambda u: (-weight[u], u)):
        lightest = min(loads, key=lambda load: load[0])
        lightest[0] += weight[unit]
        lightest[1].append(unit)
    for k, (_, members) in enumerate(loads):
        if members:
            out[f"arrays_{k}"] = PYTEST + sorted(members)
    tools = os.path.join(ROOT, "tools")
    out["fuzz"] = [sys.executable, os.path.join(tools, "fuzz_campaign.py"), "--backend", "cuda",
                   "--seed", str(fuzz_seed), "--cases", "3000", "--chunk", "500"]
    out["faults"] = [sys.executable, os.path.join(tools, "fault_campaign.py"), "--backend",
                     "cuda", "--faults", "24"]
    out["conformance"] = [sys.executable, os.path.join(tools, "array_api_conformance.py")]
    return out


def _weights(units: list[str]) -> dict[str, int]:
    """Each unit's GPU test count (pytest's collection, which needs no GPU), times its
    :data:`SLOW` factor; 1 each where collecting fails."""
    found = dict.fromkeys(units, 1)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(PYTEST + ["--collect-only", *units], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        path = line.split("::", 1)[0]
        for unit in units:
            if "::" in line and (path == unit or path.startswith(unit + "/")):
                found[unit] += 1
    return {u: n * SLOW.get(os.path.basename(u), 1) for u, n in found.items()}


def skip_reasons(lines: list[str], most: int = 4) -> list[str]:
    """A shard's skipped GPU tests by reason (pytest's ``-rs`` lines ``SKIPPED [n] file:line:
    reason``), the most frequent first: ``"<count> x <reason>"``, at most ``most`` of them and
    a line for the rest. On a GPU machine a skip is worth a look: a missing extra (Ray, the
    cuDNN frontend) or a simulator-only parameter."""
    counts: dict[str, int] = {}
    for ln in lines:
        if not ln.startswith("SKIPPED ["):
            continue
        head, _, rest = ln.partition("] ")
        reason = rest.split(": ", 1)[1] if ": " in rest else rest
        counts[reason[:110]] = counts.get(reason[:110], 0) + int(head[len("SKIPPED ["):])
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [f"{n} x {reason}" for reason, n in ranked[:most]]
    if len(ranked) > most:
        out.append(f"{sum(n for _, n in ranked[most:])} x {len(ranked) - most} other reasons")
    return out


def _install(site: str) -> str:
    """Unpack the carried extras in ``site`` (``*.tar.xz`` and wheels) into a folder for the
    path; the folder."""
    target = "/tmp/gpumsg_site"
    os.makedirs(target, exist_ok=True)
    for archive in glob.glob(os.path.join(site, "*.tar.xz")):
        subprocess.run(["tar", "-xJf", archive, "-C", target], check=False)
    wheels = glob.glob(os.path.join(site, "*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--target", target, *wheels], check=False, capture_output=True)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wave", type=int, required=True, choices=(1, 2))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu_suite"),
                    help="where the summary and the archive of the logs go")
    ap.add_argument("--work", default="/tmp/gpu_suite_work", help="where the logs are written")
    ap.add_argument("--timeout", type=float, default=280.0, help="seconds per shard")
    ap.add_argument("--fuzz-seed", type=int, default=57)
    ap.add_argument("--site", default=None, help="a folder of carried extras to install first")
    ap.add_argument("--list", action="store_true", help="print the shards, run nothing")
    args = ap.parse_args(argv)
    plan = shards(args.wave, args.fuzz_seed)
    if args.list:
        for name, cmd in plan.items():
            print(f"{name}: {' '.join(_rel(c) if c.startswith(ROOT) else c for c in cmd)}")
        return 0
    env = dict(os.environ, NCCL_NVLS_ENABLE="0")
    path = [ROOT] + ([_install(args.site)] if args.site else [])
    env["PYTHONPATH"] = os.pathsep.join(path + [p for p in [env.get("PYTHONPATH")] if p])
    work = os.path.join(args.work, f"wave{args.wave}")
    os.makedirs(work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    running = {}
    for name, cmd in plan.items():
        if name == "fuzz":
            cmd = cmd + ["--out", os.path.join(work, "fuzz")]
        elif name == "faults":
            cmd = cmd + ["--out", os.path.join(work, "faults")]
        log = open(os.path.join(work, f"{name}.txt"), "w")
        running[name] = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                          stderr=subprocess.STDOUT), log, time.monotonic())
    failed = False
    for proc, log, start in running.values():
        try:
            status = proc.wait(timeout=max(1.0, args.timeout - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            status = 124
        log.write(f"\nexit status {status}\n")
        log.close()
        failed |= status != 0
    summary = []
    for name in running:
        with open(os.path.join(work, f"{name}.txt")) as f:
            lines = f.read().splitlines()
        counts = [ln for ln in lines if any(word in ln for word in (
            " passed", " failed", " skipped", "pass rate", '"defects"', '"lost"', "not run"))]
        summary.append(f"{name}: {(counts[-1].strip() if counts else '-')} ({lines[-1]})")
        summary += [f"  {ln}" for ln in lines if ln.startswith(("FAILED", "ERROR"))]
        summary += [f"  skipped: {ln}" for ln in skip_reasons(lines)]
    text = "\n".join(summary) + "\n"
    print(text, end="")
    with open(os.path.join(args.out, f"wave{args.wave}.txt"), "w") as f:
        f.write(text)
    subprocess.run(["tar", "czf", os.path.join(args.out, f"wave{args.wave}.tar.gz"), "-C",
                    args.work, f"wave{args.wave}"], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
