"""``gpumsg.array_api`` beside CuPy and torch in the same process: fused element-wise chains,
large element-wise calls, reductions and small pipelined calls.

Cases (64 Mi float32 unless named otherwise; every side gets the same values):

- ``sum(exp(x * y + z) * w)``: gpumsg fused (one reduction kernel), gpumsg with fusion off
  (five kernels), CuPy eager, ``cupy.fuse``, torch eager, ``torch.compile``; the fused side and
  the eager peers again in runs of about 0.3 s (the default run lasts about 0.03 s); and the
  chain without the sum (one element-wise kernel, its result written).
- ``x + y``, ``exp(x)``, ``where(c, x, y)``: a new result per call on every side, beside a
  device-to-device copy moving the same number of bytes (read + written); the ``GBps`` column
  counts bytes read and written.
- ``sum`` of 64 Mi whole and of 8192 x 8192 along axis 0 and axis 1.
- ``x + y`` on 1 Ki elements, pipelined: per-call time (fusion off: one kernel a call; fusion on:
  a chain of 32 calls is one kernel).
- ``stack`` of four 1 Mi arrays and ``x[i]`` with 256 Ki int64 indices into 1 Mi: new outputs.

The compiled peers of the chain (``cupy.fuse``, ``torch.compile``) are timed last, beside gpumsg
fused again: ``torch.compile`` leaves threads running that slow whatever is measured after it.
Before them, the large rows once more as *GPU time* (rows ``<case>, GPU time``): each side's
kernels' busy time per call as CUPTI records it (``gpu_us_per_call``), which separates what the
kernels cost from how fast the host issues them.

Each side is an (issue, finish) pair timed by ``compare_many``: warmed up, then runs of calls
issued back to back and one wait (gpumsg: ``dev.synchronize()``, whose post also computes what
is pending; torch/CuPy: a stream synchronize), medians of 5, the runs alternating. A gpumsg call
whose result would stay pending is followed by ``xp.flush()`` so that every call's work is done.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import compare_many, gpu_us_per_call, write_results

import gpumsg
import gpumsg.array_api as xp

N = 64 << 20
SIDE = 8192


def _flushed(fn: Callable[[], Any], keep: list) -> Callable[[], None]:
    def issue() -> None:
        keep[:] = [fn()]
        xp.flush()
    return issue


def _row(rows: list, case: str, names: list[str], secs: list[float], nbytes: int = 0,
         ref: int = 0, note: str = "") -> None:
    """One row per side: ms per call, GB/s (``nbytes`` moved) and speed relative to side
    ``ref`` (gpumsg's) -- a ratio above 1 means gpumsg is faster than that side."""
    for name, s in zip(names, secs):
        row: dict[str, Any] = {"case": case, "side": name, "ms": s * 1e3,
                               "vs_gpumsg": s / secs[ref]}
        if nbytes:
            row["GBps"] = nbytes / s / 1e9
        if note:
            row["note"] = note
        rows.append(row)


def _target(rows: list, case: str, ours: float, peer: float, peer_name: str,
            target: str) -> None:
    """A row of the targets table (benchmarks/report.py): ``ratio`` = peer time / ours."""
    rows.append({"case": f"{case} vs {peer_name}", "side": "target", "gpumsg_ms": ours * 1e3,
                 "peer_ms": peer * 1e3, "ratio": peer / ours, "target": target})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="output folder (default: benchmarks/out)")
    ap.add_argument("--n", type=int, default=N)
    ap.add_argument("--side", type=int, default=SIDE)
    args = ap.parse_args()
    if args.out:
        os.environ["OUT"] = args.out
    n, side = args.n, args.side
    import cupy
    import torch

    size = f"{n / (1 << 20):g}Mi f32"
    rng = np.random.default_rng(0)
    hs = [rng.standard_normal(n, dtype=np.float32) * 0.5 for _ in range(4)]
    rows: list[dict] = []
    notes: list[str] = []
    with gpumsg.open_device(0) as dev:
        old = xp.set_default_device(dev)
        g = [xp.asarray(h) for h in hs]
        t = [torch.from_numpy(h).cuda() for h in hs]
        c = [cupy.asarray(h) for h in hs]
        def sync() -> None:
            dev.synchronize().result()
        tsync = torch.cuda.synchronize
        csync = cupy.cuda.get_current_stream().synchronize
        keep: list = []

        # -- the five-operation chain ----------------------------------------------------------
        x, y, z, w = g
        tx, ty, tz, tw = t
        cx, cy, cz, cw = c

        def chain_t(a: Any, b: Any, cc: Any, d: Any) -> Any:
            return (torch.exp(a * b + cc) * d).sum()

        def chain_c(a: Any, b: Any, cc: Any, d: Any) -> Any:
            return cupy.sum(cupy.exp(a * b + cc) * d)

        sides: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
            ("gpumsg fused", lambda: keep.__setitem__(slice(None), [xp.sum(xp.exp(x * y + z)
                                                                           * w)]), sync)]

        def unfused() -> None:
            with xp.fusion(False):
                keep[:] = [xp.sum(xp.exp(x * y + z) * w)]
        sides.append(("gpumsg fusion off", unfused, sync))
        sides.append(("CuPy eager", lambda: chain_c(cx, cy, cz, cw), csync))
        sides.append(("torch eager", lambda: chain_t(tx, ty, tz, tw), tsync))
        fused_side = sides[0]
        #: (case, [(side, issue, finish)]) timed again as GPU time at the end
        gpu_cases: list[tuple[str, list[tuple[str, Any, Any]]]] = [
            (f"sum(exp(x*y+z)*w) {size}", [sides[0], sides[2], sides[3]])]
        ref = float(np.sum(np.exp(hs[0].astype(np.float64) * hs[1] + hs[2]) * hs[3]))
        got = float(xp.sum(xp.exp(x * y + z) * w))
        notes.append(f"sum(exp(x*y+z)*w): gpumsg {got:.6g}, float64 {ref:.6g}")
        secs = compare_many([(f, s) for _, f, s in sides])
        case = f"sum(exp(x*y+z)*w) {size}"
        _row(rows, case, [nm for nm, _, _ in sides], secs, nbytes=4 * 4 * n)
        for nm, s in zip([nm for nm, _, _ in sides], secs):
            if nm in ("CuPy eager", "torch eager"):
                _target(rows, case, secs[0], s, nm, ">= 3")
        chain_case = case
        # the same sides in runs ten times as long: a run of 40 chains pays the first chain's
        # host cost (issued before the GPU has anything to do, on caches the peer's run left
        # cold) once per 40; here once per 400 or so
        steady = [sides[0], sides[2], sides[3]]
        secs = compare_many([(f, s) for _, f, s in steady], repeats=3, min_run_s=0.3)
        case = f"sum(exp(x*y+z)*w) {size}, runs of about 0.3 s"
        _row(rows, case, [nm for nm, _, _ in steady], secs, nbytes=4 * 4 * n)
        for nm, s in zip([nm for nm, _, _ in steady][1:], secs[1:]):
            _target(rows, case, secs[0], s, nm, "(reported)")

        sides = [("gpumsg fused", _flushed(lambda: xp.exp(x * y + z) * w, keep), sync)]

        def unfused_ew() -> None:
            with xp.fusion(False):
                keep[:] = [xp.exp(x * y + z) * w]
        sides.append(("gpumsg fusion off", unfused_ew, sync))
        sides.append(("CuPy eager", lambda: cupy.exp(cx * cy + cz) * cw, csync))
        sides.append(("torch eager", lambda: torch.exp(tx * ty + tz) * tw, tsync))
        secs = compare_many([(f, s) for _, f, s in sides])
        _row(rows, f"exp(x*y+z)*w {size}", [nm for nm, _, _ in sides], secs,
             nbytes=5 * 4 * n)

        # -- large element-wise beside a copy of the same bytes ------------------------------
        cond = x > 0
        tcond, ccond = tx > 0, cx > 0
        dev.synchronize().result()
        src = dev.alloc((3 * n,), "f32").result()
        dst = dev.alloc((3 * n,), "f32").result()
        for case, ours, cup, tor, moved in [
                ("x + y", lambda: x + y, lambda: cx + cy, lambda: tx + ty, 12 * n),
                ("exp(x)", lambda: xp.exp(x), lambda: cupy.exp(cx), lambda: torch.exp(tx),
                 8 * n),
                ("where(c, x, y)", lambda: xp.where(cond, x, y),
                 lambda: cupy.where(ccond, cx, cy), lambda: torch.where(tcond, tx, ty),
                 13 * n)]:
            half = moved // 8  # f32 elements a copy reads (and writes) to move `moved` bytes
            secs = compare_many([
                (_flushed(ours, keep), sync), (cup, csync), (tor, tsync),
                (lambda h=half: dev.copy_bytes(dst, src, 4 * h), sync)])
            _row(rows, f"{case} {size}", ["gpumsg", "CuPy", "torch", "gpumsg D2D copy"],
                 secs, nbytes=moved)
            gpu_cases.append((f"{case} {size}", [("gpumsg", _flushed(ours, keep), sync),
                                                 ("CuPy", cup, csync), ("torch", tor, tsync)]))
            for nm, s, target in zip(["CuPy", "torch", "a D2D copy of the same bytes"],
                                     secs[1:], [">= 0.95", ">= 0.95", ">= 0.9"]):
                _target(rows, f"{case} {size}", secs[0], s, nm, target)
        src.free()
        dst.free()

        # -- reductions --------------------------------------------------------------------------
        m = xp.reshape(x, (side, side)) if side * side == n else \
            xp.asarray(rng.standard_normal((side, side), dtype=np.float32))
        tm = torch.from_numpy(np.asarray(m)).cuda()
        cm = cupy.asarray(np.asarray(m))
        for case, ours, cup, tor, moved in [
                (f"sum {size}", lambda: xp.sum(x), lambda: cx.sum(), lambda: tx.sum(), 4 * n),
                (f"sum {side}x{side} axis=0", lambda: xp.sum(m, axis=0),
                 lambda: cm.sum(axis=0), lambda: tm.sum(dim=0), 4 * side * side),
                (f"sum {side}x{side} axis=1", lambda: xp.sum(m, axis=1),
                 lambda: cm.sum(axis=1), lambda: tm.sum(dim=1), 4 * side * side)]:
            secs = compare_many([(lambda f=ours: keep.__setitem__(slice(None), [f()]), sync),
                                 (cup, csync), (tor, tsync)])
            _row(rows, case, ["gpumsg", "CuPy", "torch"], secs, nbytes=moved)
            _target(rows, case, secs[0], min(secs[1:]), "the faster of CuPy and torch",
                    ">= 0.9")
            gpu_cases.append((case, [
                ("gpumsg", lambda f=ours: keep.__setitem__(slice(None), [f()]), sync),
                ("CuPy", cup, csync), ("torch", tor, tsync)]))

        # -- small element-wise, pipelined -----------------------------------------------------
        a = xp.asarray(hs[0][:1024])
        b = xp.asarray(hs[1][:1024])
        ta, tb = t[0][:1024].clone(), t[1][:1024].clone()
        ca, cb = c[0][:1024].copy(), c[1][:1024].copy()

        def small_off() -> None:
            with xp.fusion(False):
                keep[:] = [a + b]

        def small_chain() -> None:
            v = a
            for _ in range(32):
                v = v + b
            keep[:] = [v]
            xp.flush()

        secs = compare_many([(small_off, sync), (lambda: ca + cb, csync),
                             (lambda: ta + tb, tsync)])
        _row(rows, "x + y 1Ki f32, per call", ["gpumsg fusion off", "CuPy", "torch"], secs)
        (chain_s,) = compare_many([(small_chain, sync)])
        rows.append({"case": "x + y 1Ki f32, per call", "side": "gpumsg fused chain of 32",
                     "ms": chain_s / 32 * 1e3, "vs_gpumsg": chain_s / 32 / secs[0],
                     "note": "32 calls, one kernel"})

        # -- concatenation and a gather, new outputs -----------------------------------------
        part = 1 << 20 if n >= 1 << 20 else n
        gp = [xp.asarray(h[:part]) for h in hs]
        tp = [v[:part].clone() for v in t]
        cp = [v[:part].copy() for v in c]
        ih = rng.integers(0, part, part // 4)
        gi, ti, ci = xp.asarray(ih), torch.from_numpy(ih).cuda(), cupy.asarray(ih)
        for case, ours, cup, tor in [
                (f"stack of 4 x {part} f32", lambda: xp.stack(gp), lambda: cupy.stack(cp),
                 lambda: torch.stack(tp)),
                (f"x[i], {part // 4} int64 indices into {part} f32", lambda: gp[0][gi],
                 lambda: cp[0][ci], lambda: tp[0][ti])]:
            secs = compare_many([(lambda f=ours: keep.__setitem__(slice(None), [f()]), sync),
                                 (cup, csync), (tor, tsync)])
            _row(rows, case, ["gpumsg", "CuPy", "torch"], secs)

        # -- matrix products of the dtypes beside float32: one cuBLAS GEMM (or strided batch)
        for case, shape_a, shape_b, dt in [
                ("x @ y 2048x2048 f64", (2048, 2048), (2048, 2048), np.float64),
                ("x @ y 64 x 256x256 f16", (64, 256, 256), (64, 256, 256), np.float16)]:
            ha = (rng.standard_normal(shape_a) * 0.1).astype(dt)
            hb = (rng.standard_normal(shape_b) * 0.1).astype(dt)
            ga, gb = xp.asarray(ha), xp.asarray(hb)
            ta_, tb_ = torch.from_numpy(ha).cuda(), torch.from_numpy(hb).cuda()
            ca_, cb_ = cupy.asarray(ha), cupy.asarray(hb)
            secs = compare_many([
                (lambda p=ga, q=gb: keep.__setitem__(slice(None), [p @ q]), sync),
                (lambda p=ca_, q=cb_: p @ q, csync), (lambda p=ta_, q=tb_: p @ q, tsync)])
            _row(rows, case, ["gpumsg", "CuPy", "torch"], secs)

        # -- GPU time of the large rows: what the kernels cost, apart from the host ------------
        try:
            for case, gsides in gpu_cases:
                busy = [gpu_us_per_call(f, s) * 1e-6 for _, f, s in gsides]
                _row(rows, f"{case}, GPU time", [nm for nm, _, _ in gsides], busy,
                     note="kernel busy time per call (CUPTI)")
        except Exception as exc:  # noqa: BLE001 - reported, not fatal (no CUPTI, say)
            notes.append(f"GPU time not measured: {type(exc).__name__}: {exc}")

        # -- the compiled peers of the chain, measured last: torch.compile leaves threads (its
        # compile workers, a progress monitor) that wake while later rows run and slowed every
        # gpumsg row measured after it by 10-30 us a call (a probe on an H200)
        sides = [fused_side]
        try:
            fused_c = cupy.fuse()(chain_c)
            fused_c(cx, cy, cz, cw)
            sides.append(("cupy.fuse", lambda: fused_c(cx, cy, cz, cw), csync))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            notes.append(f"cupy.fuse failed: {type(exc).__name__}: {exc}")
        try:
            compiled = torch.compile(chain_t)
            compiled(tx, ty, tz, tw)
            sides.append(("torch.compile", lambda: compiled(tx, ty, tz, tw), tsync))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            notes.append(f"torch.compile failed: {type(exc).__name__}: {exc}")
        if len(sides) > 1:
            secs = compare_many([(f, s) for _, f, s in sides])
            peers: list[dict] = []
            # the compiled peers' rows, relative to gpumsg fused timed beside them
            _row(peers, chain_case, [nm for nm, _, _ in sides], secs, nbytes=4 * 4 * n)
            rows.extend(peers[1:])
            for (nm, _, _), s in zip(sides[1:], secs[1:]):
                _target(rows, chain_case, secs[0], s, nm, "(reported)")
        notes.append(f"fusion_stats at the end: {xp.fusion_stats()}")
        xp.set_default_device(old)
    write_results("bench_arrays", rows, notes,
                  ["case", "side", "ms", "GBps", "vs_gpumsg", "ratio", "target", "note"])


if __name__ == "__main__":
    main()
