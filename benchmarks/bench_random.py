"""``gpumsg.array_api.random`` beside torch and CuPy in the same run.

Cases (the sizes of the targets): standard normal and uniform draws of 256 Mi float32 (gpumsg's
Generator against ``torch.randn``/``torch.rand`` and CuPy's Generator), both into a buffer each
side already holds (``out=``) and into a new one per call; gamma (shape 2.5), binomial (n = 100,
p = 0.3), choice (with replacement, uniform and weighted) and permutation of 16 Mi against CuPy
(``cupy.random.default_rng()`` where it has the method, else ``cupy.random.RandomState``) and
torch where it has the call. Steady state, pipelined: each side issues n calls back to back then
synchronizes (gpumsg ``dev.synchronize()``, ``torch.cuda.synchronize``, CuPy's stream), warmed up
0.3 s first, runs alternating, medians of 5 (``_common.compare_many``). ratio = peer time /
gpumsg time (> 1: gpumsg faster).

    python benchmarks/bench_random.py [--quick] [--out DIR]

``--quick`` divides every size by 16.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import compare_many, write_results

import gpumsg
import gpumsg.array_api as xp

BIG = 256 << 20    # normal / uniform
MID = 16 << 20     # gamma, binomial, choice, permutation


def _row(case: str, n: int, nbytes: int, times: dict[str, float]) -> dict[str, Any]:
    ours = times["gpumsg"]
    row: dict[str, Any] = {"case": case, "n": n, "gpumsg_ms": ours * 1e3,
                           "gpumsg_GBps": nbytes / ours / 1e9}
    for peer in ("torch", "cupy"):
        if peer in times:
            row[f"{peer}_ms"] = times[peer] * 1e3
            row[f"ratio_{peer}"] = times[peer] / ours
    return row


def _measure(sides: dict[str, tuple[Callable[[], Any], Callable[[], Any]]],
             notes: list[str]) -> dict[str, float]:
    """Seconds per call of each side that runs (a peer whose first call fails is left out,
    with a note; gpumsg failing raises)."""
    names = []
    for name, (issue, finish) in sides.items():
        try:
            issue()
            finish()
        except Exception as exc:  # noqa: BLE001 - a peer without the call: say so
            if name == "gpumsg":
                raise
            notes.append(f"{name}: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        names.append(name)
    return dict(zip(names, compare_many([sides[k] for k in names])))


def _case(rows: list[dict[str, Any]], label: str, n: int, nbytes: int,
          sides: dict[str, tuple[Callable[[], Any], Callable[[], Any]]]) -> None:
    notes: list[str] = []
    try:
        row = _row(label, n, nbytes, _measure(sides, notes))
    except Exception as exc:  # noqa: BLE001 - record the failure, measure the other cases
        row = {"case": label, "n": n}
        notes.append(f"gpumsg failed: {type(exc).__name__}: {str(exc)[:160]}")
    if notes:
        row["note"] = "; ".join(notes)
    rows.append(row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/out)")
    ap.add_argument("--quick", action="store_true", help="sizes / 16")
    args = ap.parse_args()
    if args.out:
        os.environ["OUT"] = args.out
    big, mid = (BIG // 16, MID // 16) if args.quick else (BIG, MID)
    import torch

    try:
        import cupy
    except Exception:  # noqa: BLE001
        cupy = None
    rows: list[dict[str, Any]] = []
    dev = gpumsg.open_device(0)
    xp.set_default_device(dev)
    gen = xp.random.default_rng(1234)

    def sync() -> None:
        dev.synchronize().result()

    keep: dict[str, Any] = {}

    def ours(fn: Callable[[], Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
        return (lambda: keep.__setitem__("g", fn())), sync

    def theirs_torch(fn: Callable[[], Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
        return (lambda: keep.__setitem__("t", fn())), torch.cuda.synchronize

    def theirs_cupy(fn: Callable[[], Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
        return (lambda: keep.__setitem__("c", fn())), \
            (lambda: cupy.cuda.get_current_stream().synchronize())

    cgen = cupy.random.default_rng(1234) if cupy is not None else None
    crs = cupy.random.RandomState(1234) if cupy is not None else None

    def cupy_call(name: str) -> Any:
        fn = getattr(cgen, name, None)
        return fn if fn is not None else getattr(crs, name)

    # -- 256 Mi float32: normal and uniform ----------------------------------------------------
    buf = xp.empty((big,), dtype=xp.float32)
    tbuf = torch.empty(big, device="cuda", dtype=torch.float32)
    cbuf = cupy.empty(big, dtype=cupy.float32) if cupy is not None else None
    for label, g_fn, t_fn, c_fn in (
            ("standard_normal f32 into out",
             lambda: gen.standard_normal(dtype=xp.float32, out=buf),
             lambda: torch.randn(big, out=tbuf),
             (lambda: cgen.standard_normal(dtype=cupy.float32, out=cbuf)) if cgen else None),
            ("random (uniform [0,1)) f32 into out",
             lambda: gen.random(dtype=xp.float32, out=buf),
             lambda: torch.rand(big, out=tbuf),
             (lambda: cgen.random(dtype=cupy.float32, out=cbuf)) if cgen else None),
            ("standard_normal f32 new array",
             lambda: gen.standard_normal(big, dtype=xp.float32),
             lambda: torch.randn(big, device="cuda"),
             (lambda: cgen.standard_normal(big, dtype=cupy.float32)) if cgen else None),
            ("random f32 new array",
             lambda: gen.random(big, dtype=xp.float32),
             lambda: torch.rand(big, device="cuda"),
             (lambda: cgen.random(big, dtype=cupy.float32)) if cgen else None)):
        sides = {"gpumsg": ours(g_fn), "torch": theirs_torch(t_fn)}
        if c_fn is not None:
            sides["cupy"] = theirs_cupy(c_fn)
        _case(rows, label, big, 4 * big, sides)
        keep.clear()
        if label.startswith("random (uniform"):
            h = np.asarray(buf[: 1 << 22])
            rows[-1]["check"] = f"mean {h.mean():.4f} (1/2), var {h.var():.4f} (1/12)"
    buf = tbuf = cbuf = None  # the 1 GiB buffers go before the next cases
    torch.cuda.empty_cache()

    # -- 16 Mi: gamma, binomial, choice, permutation -------------------------------------------
    p = np.random.default_rng(0).random(1024)
    p /= p.sum()
    p_dev = xp.asarray(p)
    p_cupy = cupy.asarray(p) if cupy is not None else None
    p_torch = torch.as_tensor(p, device="cuda")
    cases: list[tuple[str, int, Callable, Any, Any]] = [
        ("standard_gamma(2.5) f64", 8,
         lambda: gen.standard_gamma(2.5, size=mid),
         (lambda: cupy_call("standard_gamma")(2.5, size=mid)) if cupy else None,
         lambda: torch._standard_gamma(torch.full((mid,), 2.5, device="cuda",
                                                  dtype=torch.float64))),
        ("binomial(100, 0.3) i64", 8,
         lambda: gen.binomial(100, 0.3, size=mid),
         (lambda: cupy_call("binomial")(100, 0.3, size=mid)) if cupy else None,
         lambda: torch.binomial(torch.full((mid,), 100.0, device="cuda"),
                                torch.full((mid,), 0.3, device="cuda"))),
        ("choice(16 Mi, 16 Mi) with replacement", 8,
         lambda: gen.choice(mid, mid),
         (lambda: crs.choice(mid, mid)) if cupy else None,
         lambda: torch.randint(0, mid, (mid,), device="cuda")),
        ("choice(1024, 16 Mi, p=...) weighted", 8,
         lambda: gen.choice(1024, mid, p=p_dev),
         (lambda: crs.choice(1024, mid, p=p_cupy)) if cupy else None,
         lambda: torch.multinomial(p_torch, mid, replacement=True)),
        ("permutation(16 Mi)", 8,
         lambda: gen.permutation(mid),
         (lambda: cupy_call("permutation")(mid)) if cupy else None,
         lambda: torch.randperm(mid, device="cuda")),
    ]
    for label, item, g_fn, c_fn, t_fn in cases:
        sides = {"gpumsg": ours(g_fn)}
        if t_fn is not None:
            sides["torch"] = theirs_torch(t_fn)
        if c_fn is not None:
            sides["cupy"] = theirs_cupy(c_fn)
        _case(rows, label, mid, item * mid, sides)
        keep.clear()
    notes = ["ratio_X = X's time / gpumsg's time (> 1: gpumsg faster); n pipelined calls then "
             "one synchronize (n sized for >= 30 ms of the last side's work), all sides warmed "
             "up 0.3 s, 5 alternating runs each, medians",
             "gpumsg: standard_normal is cuRAND's Philox generator; random, gamma, binomial "
             "and the permutation's labels are generated kernels on Philox4x32-10 streams; "
             "permutation puts indices in random buckets (a radix sort of 13-bit labels at "
             "16 Mi) and shuffles each bucket in shared memory by Fisher-Yates",
             "CuPy: cupy.random.default_rng() where it has the method, else RandomState; "
             "torch: its nearest call (randn/rand, _standard_gamma, binomial, randint, "
             "multinomial, randperm)",
             "targets: normal/uniform >= 0.95x torch; gamma, binomial, choice, permutation "
             ">= 0.8x CuPy"]
    write_results("random", rows, notes, ["case", "n", "gpumsg_ms", "torch_ms", "cupy_ms",
                                          "ratio_torch", "ratio_cupy", "gpumsg_GBps", "check",
                                          "note"])
    dev.close()


if __name__ == "__main__":
    main()
