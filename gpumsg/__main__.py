"""``python -m gpumsg info|demo|bench``."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np


def _backend_line(backend: str) -> str:
    from .backends import cuda_available

    ok, why = cuda_available()
    if backend == "sim":
        return "sim"
    if backend == "cuda":
        return "cuda" if ok else f"cuda: not usable here ({why})"
    return "cuda" if ok else f"sim (no GPU: {why})"


def info(args: argparse.Namespace) -> int:
    """Print the backend asked for, its devices, the driver and every CUDA library gpumsg
    binds. Returns 1 when ``--backend cuda`` finds no GPU."""
    from . import __version__, devices
    from .libs._loader import library_info

    print(f"gpumsg {__version__}, Python {sys.version.split()[0]}, NumPy {np.__version__}")
    print(f"backend ({args.backend}): {_backend_line(args.backend)}")
    try:
        import cuda.bindings

        print(f"cuda-bindings {cuda.bindings.__version__}")
    except ImportError:
        print("cuda-bindings: not installed")
    found = devices(args.backend)
    if not found:
        print(f"no device for backend {args.backend!r}")
    for d in found:
        line = f"device {d['ordinal']}: {d['name']} [{d['backend']}]"
        if d["backend"] == "cuda":
            from cuda.bindings import driver as cu

            v = cu.cuDriverGetVersion()[1]
            line += f", driver API {v // 1000}.{v % 1000 // 10}"
        print(line)
    if args.backend != "sim":  # the simulator binds no CUDA library
        for lib in library_info():
            if lib["error"]:
                print(f"  {lib['name']:<10} not found: {lib['error']}")
            else:
                print(f"  {lib['name']:<10} {lib['version']:<12} {lib['path']}")
    return 0 if found else 1


def demo(args: argparse.Namespace) -> int:
    """The main job: conjugate gradient on the 2-D Poisson equation through the service
    (``examples/cg_poisson.py``: cuSPARSE and cuBLAS, a host round trip per iteration), checked
    against NumPy float64. Full size on a GPU, small on the simulator."""
    import runpy

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "examples", "cg_poisson.py")
    if not os.path.exists(path):
        print(f"the demo runs examples/cg_poisson.py from a source tree; not found at {path}")
        return 2
    main = runpy.run_path(path)["main"]
    return int(main(["--backend", args.backend, "--device", str(args.device)]))


def bench(args: argparse.Namespace) -> int:
    """A quick look at per-message costs (the full suite is in benchmarks/)."""
    import gpumsg

    with gpumsg.open_device(args.device, backend=args.backend) as dev:
        print(dev)
        for _ in range(200):
            dev.stats().result()
        rt = []
        for _ in range(2000):
            t0 = time.perf_counter_ns()
            dev.stats().result()
            rt.append(time.perf_counter_ns() - t0)
        print(f"Stats round trip: median {statistics.median(rt) / 1e3:.1f} us")
        a = dev.to_device(np.random.rand(64, 64).astype(np.float32))
        b = dev.to_device(np.random.rand(64, 64).astype(np.float32))
        c = dev.alloc((64, 64), np.float32)
        for _ in range(200):
            dev.sgemm(a, b, c, 64, 64, 64)
        dev.synchronize().result()
        n = 5000
        t0 = time.perf_counter()
        for _ in range(n):
            f = dev.sgemm(a, b, c, 64, 64, 64)
        f.result()
        dt = time.perf_counter() - t0
        print(f"64^3 sgemm pipelined: {dt / n * 1e6:.1f} us/op")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpumsg")
    parser.add_argument("command", choices=("info", "demo", "bench"))
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    args = parser.parse_args(argv)
    from .errors import GpuError

    try:
        return {"info": info, "demo": demo, "bench": bench}[args.command](args)
    except GpuError as exc:  # a refusal (no driver, a bad ordinal): its message, no traceback
        print(f"python -m gpumsg {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
