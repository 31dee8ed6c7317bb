"""Run benchmarks of the suite in turn, each in a process of its own.

    python benchmarks/run_all.py [--headline] [--out DIR] [name[:args] ...]

``--headline``: what ``benchmarks/RESULTS.md`` is made from, in about five minutes on one H100:
GEMM, FFT and copy bandwidth by size, small-op latency, the per-message cost beside a bare
service, the large-GEMM rows and process isolation, each beside torch (and CuPy). Without it and
without names: the whole suite. A name may carry arguments after a colon, split on commas
(``bench_fft:--headline``). Results go to ``--out`` (default ``$GPUMSG_BENCH_OUT``, ``$OUT`` or
``benchmarks/out/``); ``benchmarks/report.py`` turns them into RESULTS.md and plots.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

#: every benchmark, in the order of the full run
SUITE = ["bench_overhead", "bench_gemm", "bench_blas", "bench_fft", "bench_copies",
         "bench_small_ops", "bench_alloc", "bench_supervision", "bench_graphs", "bench_rng",
         "bench_solver", "bench_solver_sparse", "bench_sparse", "bench_cudnn", "bench_cudnn_norm",
         "bench_cudnn_rnn", "bench_attention", "bench_conv_graph", "bench_interop", "bench_random",
         "bench_workloads", "bench_linalg_stacked", "bench_arrays", "bench_sort",
         "bench_sparse_arrays", "bench_streams"]

#: what RESULTS.md needs; the seconds each took on an H100 are in the comments
HEADLINE = ["bench_gemm",            # GEMM by size and type beside torch and CuPy (~70 s)
            "bench_fft:--headline",  # FFT by size; the fixed cases (~50 s)
            "bench_copies",          # host<->device bandwidth by size (~30 s)
            "bench_small_ops",       # small-op latency beside torch and CuPy (~40 s)
            "bench_overhead",        # per message beside a bare service (~20 s)
            "bench_blas",            # 4096^3/8192^3 GEMMs, bmm, bias+GELU, dot (~40 s)
            "bench_supervision",     # process isolation and recovery (~45 s)
            "bench_workloads:--quick"]  # whole programs beside torch and CuPy


def run(spec: str, out: str, timeout: float) -> int:
    """Run one benchmark (``name`` or ``name:arg,arg``) in a child process; its exit status."""
    name, _, args = spec.partition(":")
    cmd = [sys.executable, os.path.join(HERE, f"{name}.py"), *[a for a in args.split(",") if a]]
    env = dict(os.environ, GPUMSG_BENCH_OUT=out)
    root = os.path.dirname(HERE)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    print(f"\n=== {spec}", flush=True)
    t0 = time.perf_counter()
    try:
        rc = subprocess.run(cmd, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    print(f"=== {spec}: exit {rc}, {time.perf_counter() - t0:.0f} s", flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headline", action="store_true", help="the run RESULTS.md is made from")
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/out)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per benchmark")
    ap.add_argument("names", nargs="*", help="benchmarks to run (name or name:arg,arg)")
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out or os.environ.get("GPUMSG_BENCH_OUT") or os.environ.get("OUT")
                          or os.path.join(HERE, "out"))
    os.makedirs(out, exist_ok=True)
    specs = args.names or (HEADLINE if args.headline else SUITE)
    failed = [s for s in specs if run(s, out, args.timeout) != 0]
    print(f"\nresults in {out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
