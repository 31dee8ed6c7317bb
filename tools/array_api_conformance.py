"""Run the Array API standard's conformance suite (data-apis/array-api-tests) against
``gpumsg.array_api`` and hold its pass rate to a floor.

    python tools/array_api_conformance.py [--suite PATH] [--max-examples N] [--floor 0.95]

The suite is not part of this repository: it is read from ``--suite`` (default
``../shared/external/array-api-tests`` beside the checkout, or ``$GPUMSG_ARRAY_API_TESTS``) and
run from its own folder, with this checkout first on the path. ``--max-examples`` is
hypothesis's example count per test (10 for CI; leave the suite's default on a GPU). Prints the
summary and the failures by test; exits 1 when passed / (passed + failed) is under the floor,
0 otherwise (and 0, with a note, when the suite is not there).

Hypothesis's deadline (800 ms per example) is off (the suite's ``--disable-deadline``): the
first call of an operation with a new dtype or layout compiles its kernel (NVRTC, a second or
more before the disk cache has it), which is a cold start, not a wrong answer; pass
``--deadline`` to keep it.

Known on a GPU: ``test_dunder_dlpack`` draws ``x.__dlpack__(copy=False,
dl_device=(kDLCPU, 0))`` for arrays in GPU memory, which needs a copy to the host; the
standard says that such a call raises BufferError (as CuPy's and torch's do), and the suite
counts any exception as a failure. On the simulator the memory is host memory and the export
needs no copy.

Known wherever NumPy's dtypes are the dtypes: ``test_can_cast`` expects ``can_cast(a, b)`` to be
true when ``promotion_table.get((a, other)) == b`` for some ``other``; a pair missing from the
table gives None, and NumPy compares None equal to float64 (``np.dtype(None)`` is float64), so
when hypothesis draws ``b = float64`` it expects true from every dtype, ``complex64`` included.
gpumsg answers false for complex to real (the imaginary part would be lost), as NumPy and CuPy
do; the pair is drawn rarely, so the test fails on some runs only.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: what the suite imports beside pytest (its requirements), as (package, module)
_NEEDS = (("hypothesis", "hypothesis"), ("ndindex", "ndindex"),
          ("pytest-json-report", "pytest_jsonreport"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    default = os.environ.get("GPUMSG_ARRAY_API_TESTS") or os.path.join(
        ROOT, "..", "shared", "external", "array-api-tests")
    ap.add_argument("--suite", default=default, help="the array-api-tests checkout")
    ap.add_argument("--max-examples", type=int, default=10)
    ap.add_argument("--floor", type=float, default=0.95, help="the least pass rate accepted")
    ap.add_argument("--deadline", action="store_true",
                    help="keep hypothesis's per-example deadline (off by default)")
    args = ap.parse_args(argv)
    suite = os.path.abspath(args.suite)
    if not os.path.isdir(os.path.join(suite, "array_api_tests")):
        print(f"array-api-tests not found at {suite}: conformance not run")
        return 0
    missing = [name for name, module in _NEEDS if importlib.util.find_spec(module) is None]
    if missing:
        print(f"array-api-tests needs {', '.join(missing)} (pip install {' '.join(missing)}): "
              "conformance not run")
        return 1
    env = dict(os.environ, ARRAY_API_TESTS_MODULE="gpumsg.array_api")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    # hypothesis keeps the examples that failed in a database and replays them first; kept in
    # the suite's folder (the working directory) it would write into the shared checkout and
    # make a rare draw fail every later run: each run gets a database of its own
    scratch = tempfile.TemporaryDirectory(prefix="gpumsg-hypothesis-")
    env["HYPOTHESIS_STORAGE_DIRECTORY"] = scratch.name
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
           "array_api_tests/", f"--max-examples={args.max_examples}"]
    if not args.deadline:
        cmd.append("--disable-deadline")
    with scratch:
        run = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True)
    out = run.stdout + run.stderr
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)s?\b", out)}
    passed, failed = counts.get("passed", 0), counts.get("failed", 0) + counts.get("error", 0)
    for line in out.splitlines():
        if line.startswith(("FAILED", "ERROR")):
            print(line)
    if failed:  # what each failure raised, hypothesis's sub-failures included: a GPU run that
        for line in _failure_lines(out):  # comes back with a bare FAILED line costs another
            print(line)
    if passed + failed == 0 or counts.get("error"):
        print(out[-3000:])  # what stopped the run, or the errors counted as failures
    if passed + failed == 0:
        print("array-api-tests ran no test")
        return 1
    rate = passed / (passed + failed)
    print(f"array-api-tests: {passed} passed, {failed} failed, {counts.get('skipped', 0)} "
          f"skipped: pass rate {rate:.1%} (floor {args.floor:.0%})")
    return 0 if rate >= args.floor else 1


def _failure_lines(out: str, limit: int = 40) -> list[str]:
    """The lines of pytest's failure report that say what was raised and for which input (an
    exception's ``Name: message``, hypothesis's failing cases and their notes), each once."""
    keep = re.compile(r"^[\s|+]*(E\s+\S|\w+(Error|Exception|Group)\b.*:|Failing test case|"
                      r"Falsifying|x\.\S+ with )")
    seen: list[str] = []
    for line in out.splitlines():
        text = line.rstrip()
        if keep.match(text) and text not in seen:
            seen.append(text)
    return seen[:limit]


if __name__ == "__main__":
    sys.exit(main())
