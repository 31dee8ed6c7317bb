"""Diagnostic (H100): ways of running the device thread, switched in place in one process on the
idle device, alternating round by round, with torch's rate measured in the same round beside
them; medians over the rounds. ``--switch``:

- ``launch`` (modes ``hold``/``release``): the replays' cuGraphLaunch with the GIL held
  (``ctypes.PyDLL``) or released (``ctypes.CDLL``): the ``raw_launch`` of the cuBLAS, cuBLASLt
  and cuDNN replays (what ``GPUMSG_RAW_LAUNCH`` chooses once per process).
- ``derived`` (modes ``on``/``off``): the device's DerivedMemo (service/derived.py), or a
  stand-in that builds every time.
- ``reductions`` (modes ``on``/``off``): the cuBLAS handle's replays of reductions and their
  copy back (``reduction_replays``), or none (issued as calls).
- ``interval`` (modes from ``--intervals``, seconds, default ``50e-6,1e-3,5e-3``): the
  interpreter's GIL switch interval (client/gil.py sets 50 µs while a device is open).
- ``settle`` (modes from ``--settles``, seconds, default ``150e-6,0,30e-6``): how long the
  device thread asks for running work's completion before it blocks on an empty mailbox and
  hands that work to the completion threads (``DeviceContext.settle_seconds``).

Every mode is measured in every round; the order of the modes rotates from round to round.

Writes ``$OUT/<name>.json`` and ``.md`` (launch_hold_ab, derived_ab, reductions_ab,
switch_interval_ab or settle_ab_inplace).

    python3 tools/inplace_ab.py [--switch launch|derived|reductions|interval|settle]
                                [--rounds 7] [--intervals 50e-6,1e-3,5e-3]
                                [--settles 150e-6,0,30e-6] [--thread-ops 2000]
"""
# ruff: noqa: E731 - small closures over one problem's buffers
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "tools")
from _common import environment, rate_us, save_diagnostic  # noqa: E402
from conv_case import conv_pair  # noqa: E402

import gpumsg  # noqa: E402


def launchers() -> dict[str, Any]:
    out = {}
    for mode, loader in (("hold", ctypes.PyDLL), ("release", ctypes.CDLL)):
        fn = loader("libcuda.so.1").cuGraphLaunch
        fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_void_p), ctypes.c_int
        out[mode] = fn
    return out


def set_launch(dev: Any, fn: Any) -> int:
    """Point every replay of the (idle) device at ``fn``; returns how many were switched."""
    dev.synchronize().result()
    ctx = dev._worker.ctx
    switched = 0
    for name in ("cublas", "cublaslt"):
        r = getattr(ctx.libraries.get(name), "replays", None)
        if r is not None:
            r.raw_launch = fn
            switched += 1
    dnn = ctx.libraries.get("cudnn")
    for plan in getattr(dnn, "cache", {}).values():
        r = getattr(getattr(plan, "graph", None), "replays", None)
        if r is not None:
            r.raw_launch = fn
            switched += 1
    return switched


class BuildEveryTime:
    """The DerivedMemo's interface, keeping nothing."""

    def get(self, msg: Any, stamp: Any, build: Callable[[], Any]) -> Any:
        return build()

    def __len__(self) -> int:
        return 0


def interval_name(seconds: float) -> str:
    return f"{seconds * 1e3:g}ms" if seconds >= 1e-3 else f"{seconds * 1e6:g}us"


def switches(dev: Any, what: str, intervals: list[float], settles: list[float] = ()
             ) -> dict[str, Callable[[], int]]:
    """mode -> a function that puts the idle device in that mode."""
    if what == "settle":
        def put_settle(value: float) -> int:
            dev.synchronize().result()
            dev._worker.ctx.settle_seconds = value
            return 1
        return {f"settle {interval_name(v) if v else '0'}": (lambda v=v: put_settle(v))
                for v in settles}
    if what == "interval":
        def put_interval(value: float) -> int:
            dev.synchronize().result()
            sys.setswitchinterval(value)
            return 1
        return {interval_name(v): (lambda v=v: put_interval(v)) for v in intervals}
    if what == "launch":
        fns = launchers()
        return {mode: (lambda fn=fn: set_launch(dev, fn)) for mode, fn in fns.items()}
    ctx = dev._worker.ctx
    if what == "reductions":
        blas = ctx.library("cublas")
        replays = blas.reduction_replays

        def put_replays(value: Any) -> int:
            dev.synchronize().result()
            blas.reduction_replays = value
            return 1
        return {"on": lambda: put_replays(replays), "off": lambda: put_replays(None)}
    memo, stand_in = ctx.derived, BuildEveryTime()

    def put(value: Any) -> int:
        dev.synchronize().result()
        ctx.derived = value
        return 1
    return {"on": lambda: put(memo), "off": lambda: put(stand_in)}


def cases(dev: Any, torch: Any, thread_ops: int = 2000
          ) -> dict[str, tuple[Callable, Callable, Callable, Callable, int]]:
    """name -> (ours, our finish, theirs, their finish, n pipelined per run). The thread cases
    issue ``thread_ops`` SGEMMs per burst (round trips: two fifths of it)."""
    rng = np.random.default_rng()
    bf16 = gpumsg.as_dtype("bf16")
    batch, s = 512, 128
    bh = [rng.standard_normal((batch, s, s), dtype=np.float32).astype(bf16) for _ in range(2)]
    a, b = (dev.to_device(h).result() for h in bh)
    c = dev.alloc((batch, s, s), "bf16", order="C").result()
    ta, tb = (torch.from_numpy(h.astype(np.float32)).cuda().to(torch.bfloat16) for h in bh)
    tc = torch.empty(batch, s, s, device="cuda", dtype=torch.bfloat16)
    last: list[Any] = [None]

    def strided() -> None:
        last[0] = dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s)

    def matmul() -> None:
        last[0] = dev.linalg.matmul(a, b, out=c)

    small = [dev.to_device(rng.standard_normal((64, 64), dtype=np.float32)).result()
             for _ in range(3)]
    t64 = [torch.randn(64, 64, device="cuda") for _ in range(3)]

    def sgemm() -> None:
        last[0] = dev.sgemm(small[0], small[1], small[2], 64, 64, 64)

    wait = lambda: last[0].result()
    sync = torch.cuda.synchronize
    xh, yh = (rng.standard_normal(1 << 20, dtype=np.float32) for _ in range(2))
    x, y = dev.to_device(xh).result(), dev.to_device(yh).result()
    tx, ty = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).cuda()
    nothing = lambda: None
    kh = rng.standard_normal(256, dtype=np.float32)
    kb = dev.to_device(kh).result()
    tk = torch.from_numpy(kh).cuda()

    def burst(issue: Callable[[int], Callable[[], Any]], finish: Callable[[], Any],
              threads: int = 8, total: int = 2000, each: bool = False) -> Callable[[], None]:
        """``threads`` threads issue ``total`` operations in all, each thread waiting for its
        last (``each``: for every one, round trips)."""
        def run() -> None:
            def one(k: int) -> None:
                op, last = issue(k), None
                for _ in range(total // threads):
                    last = op()
                    if each:
                        last.result()
                if last is not None:
                    last.result()
                finish()
            pool = [threading.Thread(target=one, args=(k,)) for k in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
        return run

    def spin(us: float = 20.0) -> None:
        """The caller's own Python work between posts (a loop that builds its next inputs)."""
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass

    def busy_sgemm() -> None:
        spin()
        last[0] = dev.sgemm(small[0], small[1], small[2], 64, 64, 64)

    def busy_torch() -> None:
        spin()
        torch.mm(t64[0], t64[1], out=t64[2])

    # each thread writes its own C, as in benchmarks/bench_overhead.py
    own_c = [dev.alloc((64, 64), np.float32).result() for _ in range(8)]
    sgemm_op = lambda k: (lambda: dev.sgemm(small[0], small[1], own_c[k], 64, 64, 64))
    torch_op = lambda k: (lambda: (torch.mm(t64[0], t64[1], out=t64[2]), None)[1])
    torch_rt = lambda k: (lambda: (torch.mm(t64[0], t64[1], out=t64[2]), sync(), None)[2])
    n_pipe, n_rt = thread_ops, thread_ops * 2 // 5
    ours8, theirs8 = burst(sgemm_op, nothing, total=n_pipe), burst(torch_op, sync, total=n_pipe)
    ours1 = burst(sgemm_op, nothing, threads=1, total=n_pipe)
    theirs1 = burst(torch_op, sync, threads=1, total=n_pipe)
    rt8 = burst(sgemm_op, nothing, total=n_rt, each=True)
    trt8 = burst(torch_rt, nothing, total=n_rt)
    rt1 = burst(sgemm_op, nothing, threads=1, total=n_rt, each=True)
    trt1 = burst(torch_rt, nothing, threads=1, total=n_rt)
    out = {
        "strided 512x128^3 bf16": (strided, wait, lambda: torch.bmm(ta, tb, out=tc), sync, 1500),
        "matmul 3-D 512x128^3 bf16": (matmul, wait, lambda: torch.bmm(ta, tb, out=tc), sync,
                                      1500),
        "sgemm 64^3": (sgemm, wait, lambda: torch.mm(t64[0], t64[1], out=t64[2]), sync, 2000),
        "dot 1M f32 round trip": (lambda: dev.cublas.dot(x, y).result(), nothing,
                                  lambda: torch.dot(tx, ty).item(), nothing, 500),
        "nrm2 1M f32 round trip": (lambda: dev.cublas.nrm2(x).result(), nothing,
                                   lambda: torch.linalg.vector_norm(tx).item(), nothing, 500),
        "1 KiB H2D round trip": (lambda: dev.copy_from_host(kb, kh).result(), nothing,
                                 lambda: tk.copy_(torch.from_numpy(kh)), sync, 500),
        "1 KiB D2H round trip": (lambda: dev.copy_to_host(kb).result(), nothing,
                                 lambda: tk.cpu(), nothing, 500),
        "sgemm 64^3, 20 µs of caller work between posts": (busy_sgemm, wait, busy_torch, sync,
                                                           1000),
        f"1 thread sgemm 64^3 (µs per burst of {n_pipe})": (ours1, nothing, theirs1, nothing, 1),
        f"8 threads sgemm 64^3 (µs per burst of {n_pipe})": (ours8, nothing, theirs8, nothing, 1),
        f"1 thread sgemm 64^3 round trips (µs per {n_rt})": (rt1, nothing, trt1, nothing, 1),
        f"8 threads sgemm 64^3 round trips (µs per {n_rt})": (rt8, nothing, trt8, nothing, 1),
    }
    try:
        import cudnn  # noqa: F401 - the frontend: the graph path and its replays
    except ImportError:
        print("no cuDNN frontend: convolution cases left out", flush=True)
        return out
    for label, (ch, k, r, st, p, hw) in {"conv5_x 3x3 512 @7": (512, 512, 3, 1, 1, 7),
                                         "conv2_x 3x3 64 @56": (64, 64, 3, 1, 1, 56)}.items():
        for direction in ("fwd", "bwd_data"):
            ours, finish, theirs = conv_pair(dev, torch, rng, ch, k, r, st, p, hw, direction)
            out[f"{label} {direction}"] = (ours, finish, theirs, sync, 800)
    return out


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", choices=("launch", "derived", "reductions", "interval",
                                         "settle"),
                    default="launch")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--intervals", default="50e-6,1e-3,5e-3")
    ap.add_argument("--settles", default="150e-6,0,30e-6")
    ap.add_argument("--thread-ops", type=int, default=2000,
                    help="SGEMMs per burst of the thread cases (round trips: two fifths)")
    ap.add_argument("--cases", default="", help="only the cases whose name contains one of "
                    "these comma-separated words")
    opts = ap.parse_args()
    rows: dict[str, dict[str, list[float]]] = {}
    saved_interval = sys.getswitchinterval()
    with gpumsg.open_device(0) as dev:
        todo = cases(dev, torch, opts.thread_ops)
        if opts.cases:
            words = opts.cases.split(",")
            todo = {k: v for k, v in todo.items() if any(w in k for w in words)}
        for ours, finish, theirs, tfinish, _ in todo.values():  # plans, captures, graphs
            for _ in range(3):
                ours()
            finish()
            theirs()
            tfinish()
        modes = switches(dev, opts.switch, [float(v) for v in opts.intervals.split(",")],
                         [float(v) for v in opts.settles.split(",")])
        names = list(modes)
        for rnd in range(opts.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name, (ours, finish, theirs, tfinish, n) in todo.items():
                row = rows.setdefault(name, {**{m: [] for m in names}, "torch": []})
                warmup = 100 if n > 1 else 1
                for mode in order:
                    modes[mode]()
                    row[mode].append(rate_us(ours, finish, n, repeats=3, warmup=warmup))
                modes[names[0]]()
                row["torch"].append(rate_us(theirs, tfinish, n, repeats=3, warmup=warmup))
            print(f"round {rnd + 1}/{opts.rounds} done", flush=True)
        modes[names[0]]()  # the default of each switch is its first mode
        if opts.switch == "interval":
            sys.setswitchinterval(saved_interval)
    env = environment()
    a = names[0]
    result = []
    for name, row in rows.items():
        med = {k: statistics.median(v) for k, v in row.items()}
        # each mode over the first in the same round: the host's drift between rounds cancels
        paired = {m: [x / y for x, y in zip(row[m], row[a], strict=True)] for m in names[1:]}
        result.append({"case": name, **{f"{k}_us": round(v, 2) for k, v in med.items()},
                       **{f"{m}_over_{a}": round(med[m] / med[a], 3) for m in names[1:]},
                       **{f"{m}_over_{a}_paired": round(statistics.median(q), 3)
                          for m, q in paired.items()},
                       **{f"{m}_faster_rounds": sum(v < 1 for v in q) for m, q in paired.items()},
                       "samples": {k: [round(x, 2) for x in v] for k, v in row.items()},
                       **{f"torch_over_{m}": round(med["torch"] / med[m], 3) for m in names},
                       "spread": {k: [round(min(v), 1), round(max(v), 1)] for k, v in row.items()}})
        print(json.dumps(result[-1]), flush=True)
    name = {"launch": "launch_hold_ab", "derived": "derived_ab",
            "reductions": "reductions_ab", "interval": "switch_interval_ab",
            "settle": "settle_ab_inplace"}[opts.switch]
    lines = [f"# {name}", "",
             f"{env.get('device', '')} · driver {env.get('driver', '')} · {env.get('date', '')}",
             "", f"Per-call µs of n pipelined calls then one wait; switch `{opts.switch}`, modes "
             f"{', '.join(names)} switched in place, in rotating order; torch beside them in "
             f"each round (under mode {a}); medians of {opts.rounds} rounds "
             "(tools/inplace_ab.py). torch / ours > 1: ours faster. Paired: each mode's time over "
             f"{a}'s in the same round, median over the rounds (< 1: faster), and the rounds "
             "where it was faster.", "",
             "| case | " + " | ".join(f"{m} µs" for m in names) + " | torch µs | " +
             " | ".join(f"torch/{m}" for m in names) + " | " +
             " | ".join(f"{m}/{a} paired (rounds faster)" for m in names[1:]) + " |",
             "|---" * (3 * len(names) + 1) + "|"]
    for r in result:
        lines.append(f"| {r['case']} | " + " | ".join(str(r[m + '_us']) for m in names) +
                     f" | {r['torch_us']} | " +
                     " | ".join(str(r['torch_over_' + m]) for m in names) + " | " +
                     " | ".join(f"{r[f'{m}_over_{a}_paired']} ({r[f'{m}_faster_rounds']}/"
                                f"{opts.rounds})" for m in names[1:]) + " |")
    save_diagnostic(name, {"environment": env, "switch": opts.switch, "rounds": opts.rounds,
                           "rows": result}, "\n".join(lines), default_dir=".")
    print("\n".join(lines[-len(result) - 2:]))


if __name__ == "__main__":
    main()
