"""A/B of the mailbox backpressure (gpumsg/service/backpressure.py) in one process.

For each setting ``HIGH/LOW[/WAKE]`` (``high`` 0: off; WAKE: how a relief wakes paused callers,
:func:`use_wake`), switched in place on one open device,
alternating setting by setting for ``--rounds`` rounds, it measures: a pipelined 64^3 SGEMM
(µs per op, 2000 issued then the last awaited), one and eight client threads issuing 2000 SGEMMs
in all (pipelined and with a round trip each; aggregate ops/s), a 64^3 SGEMM round trip, and
ResNet-50's conv5_x 3x3 512->512 @7 forward (batch 64, NHWC bf16) pipelined beside torch's
``conv2d`` on channels-last tensors and strided-batched 512 x 128^3 bf16 beside ``torch.bmm``
(GPU only). Medians over the rounds, and each setting
paired round by round against the last one listed; JSON and Markdown into
``--out`` (default ``$OUT`` or ``benchmarks/results``) as ``backpressure_ab.*``.

    PYTHONPATH=$PWD python3 tools/backpressure_ab.py [--backend sim] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_overhead import aggregate  # noqa: E402

import gpumsg  # noqa: E402

SETTINGS = "128/64/one,128/64/all,0/0,128/16,256/128"


class WakeAll:
    """The wake-up of stops 22-29, switched in place for an A/B (``HIGH/LOW/all``): a relief
    wakes every paused caller at once (one event for all), a pause lasts at most 5 ms. It keeps
    its own event and flag here; gpumsg's Backpressure wakes one caller per batch."""

    room = __import__("threading").Event()
    waiting = False
    timeout = 0.005

    @staticmethod
    def pause(bp: Any) -> None:
        from gpumsg.service.backpressure import _local

        if getattr(_local, "exempt", False):
            return
        WakeAll.room.clear()
        WakeAll.waiting = True
        if bp.high and bp._qsize() > bp.low:
            bp.pauses += 1
            WakeAll.room.wait(WakeAll.timeout)

    @staticmethod
    def relieve(bp: Any) -> None:
        if WakeAll.waiting and bp._qsize() <= bp.low:
            WakeAll.waiting = False
            WakeAll.room.set()


class WakeOneBounded:
    """Stop 30's first wake-one, switched in place for an A/B (``HIGH/LOW/bounded``): callers
    wait on one ``threading.Condition`` (woken one per batch, longest waiting first), and a
    pause ends after 5 ms whatever the device thread does. gpumsg's Backpressure keeps a
    caller's place past the bound while batches finish. (``one100``, and ``turn`` on this
    Condition, measured in stop 30's first runs, are in this file as of commit aae5276; ``turn``
    on the FIFO of turns, measured in run 6, then became gpumsg's own wake-up.)"""

    room = __import__("threading").Condition(__import__("threading").Lock())
    waiting = 0
    timeout = 0.005

    @staticmethod
    def pause(bp: Any) -> None:
        from gpumsg.service.backpressure import _local

        if getattr(_local, "exempt", False):
            return
        room = WakeOneBounded.room
        with room:
            WakeOneBounded.waiting += 1
            try:
                if bp.high and bp._qsize() > bp.low:
                    bp.pauses += 1
                    if not room.wait(WakeOneBounded.timeout):
                        bp.timeouts += 1
            finally:
                WakeOneBounded.waiting -= 1

    @staticmethod
    def relieve(bp: Any) -> None:
        if WakeOneBounded.waiting and bp._qsize() <= bp.low:
            with WakeOneBounded.room:
                WakeOneBounded.room.notify()


class WakeEachBatch:
    """A predecessor (``HIGH/LOW/each``): gpumsg's wake-up as it was at commit 3140107, waking
    the longest-waiting caller after every batch that leaves ``low`` or fewer messages, even
    while the caller woken before is still refilling."""

    @staticmethod
    def relieve(bp: Any) -> None:
        bp.batches += 1
        turns = bp._turns
        if turns and bp._qsize() <= bp.low:
            with bp._mutex:
                if turns:
                    turns.popleft().release()


class WakeSticky:
    """A variant (``HIGH/LOW/sticky``): gpumsg's wake-one, except that a caller who pauses
    again after its turn goes to the front of the line, for up to ``turns`` turns in a row,
    then to the back: the posting moves to another thread (another CPU, cold caches) a
    ``turns``-th as often."""

    turns = 4

    @staticmethod
    def pause(bp: Any) -> None:
        from gpumsg.service.backpressure import _allocate_lock, _local

        if getattr(_local, "exempt", False):
            return
        turn = _allocate_lock()
        turn.acquire()
        with bp._mutex:
            if not bp.high or bp._qsize() <= bp.low:
                return
            had = getattr(_local, "sticky", 0)
            if had and had < WakeSticky.turns:
                bp._turns.appendleft(turn)
                _local.sticky = had + 1
            else:
                bp._turns.append(turn)
                _local.sticky = 1
            bp.pauses += 1
            bp._woken_at = -1
        while True:
            seen = bp.batches
            if turn.acquire(True, bp.timeout):
                return
            if bp.batches == seen:
                break
        with bp._mutex:
            bp.timeouts += 1
            try:
                bp._turns.remove(turn)
            except ValueError:
                pass


def use_wake(mode: str) -> None:
    """Switch every Backpressure of the process to ``mode`` in place: ``one`` (gpumsg's),
    ``each`` (:class:`WakeEachBatch`), ``bounded`` (:class:`WakeOneBounded`) or ``all``
    (:class:`WakeAll`). The device thread and
    the callers look the methods up at each call; switch only while no caller is paused."""
    from gpumsg.service import backpressure as mod

    cls = mod.Backpressure
    if not hasattr(use_wake, "own"):
        use_wake.own = (cls.pause, cls.relieve)  # type: ignore[attr-defined]
    ways = {"all": (WakeAll.pause, WakeAll.relieve),
            "bounded": (WakeOneBounded.pause, WakeOneBounded.relieve),
            "each": (use_wake.own[0], WakeEachBatch.relieve),  # type: ignore[attr-defined]
            "sticky": (WakeSticky.pause, use_wake.own[1]),  # type: ignore[attr-defined]
            "one": use_wake.own}  # type: ignore[attr-defined]
    if mode not in ways:
        raise ValueError(f"wake mode must be one of {sorted(ways)}, got {mode!r}")
    cls.pause, cls.relieve = ways[mode]


def per_op_us(fn: Any, n: int) -> float:
    t0 = time.perf_counter()
    last = None
    for _ in range(n):
        last = fn()
    last.result()  # type: ignore[union-attr]
    return (time.perf_counter() - t0) / n * 1e6


PAIRED = ("threads_pipelined_8_ops", "threads_pipelined_1_ops", "threads_round_trips_8_ops",
          "sgemm_pipelined_us", "conv5x_fwd_us", "strided_bf16_us", "strided_torch_over_ours")


def paired_lines(rounds: dict[str, dict[str, list[float]]], baseline: str) -> list[str]:
    """For each setting, each measure in :data:`PAIRED` over ``baseline``'s in the same round:
    the median ratio and in how many rounds it was above 1 (ops/s: faster; us: slower)."""
    base = rounds[baseline]
    lines = [f"- paired by round against `{baseline}` (median ratio, rounds above 1):"]
    for setting, r in rounds.items():
        if setting == baseline:
            continue
        parts = []
        for key in PAIRED:
            if key in r and key in base:
                q = [x / y for x, y in zip(r[key], base[key], strict=True)]
                parts.append(f"{key} {statistics.median(q):.3f} "
                             f"({sum(v > 1 for v in q)}/{len(q)})")
        lines.append(f"  - `{setting}`: " + "; ".join(parts))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settings", default=SETTINGS, help="high/low pairs, 0/0: off")
    parser.add_argument("--thread-ops", type=int, default=2000,
                        help="SGEMMs in all over 1 or 8 threads")
    parser.add_argument("--out", default=os.environ.get("OUT") or "benchmarks/results")
    args = parser.parse_args()
    rng = np.random.default_rng()
    settings = []
    # HIGH/LOW or HIGH/LOW/WAKE (one, each, bounded, all), WAKE@MS setting gpumsg's bound
    for pair in args.settings.split(","):
        high, low, *wake = pair.split("/")
        settings.append((int(high), int(low), wake[0] if wake else "one"))
    results: dict[str, dict[str, list[float]]] = {
        "/".join(map(str, s)): {} for s in settings}
    torch = None
    if args.backend == "cuda":
        import torch  # type: ignore[no-redef]
    with gpumsg.open_device(backend=args.backend) as dev:
        bp = dev._worker.backpressure
        default_timeout = bp.timeout
        a = dev.to_device(rng.standard_normal((64, 64), dtype=np.float32)).result()
        b = dev.to_device(rng.standard_normal((64, 64), dtype=np.float32)).result()
        c = dev.alloc((64, 64), np.float32).result()

        def gemm_op() -> Any:
            mine = dev.alloc((64, 64), np.float32).result()
            return lambda: dev.sgemm(a, b, mine, 64, 64, 64)

        conv = None
        if torch is not None:
            bf16 = gpumsg.as_dtype("bf16")
            x = dev.to_device(rng.standard_normal((64, 7, 7, 512), dtype=np.float32)
                              .astype(bf16))
            w = dev.to_device((rng.standard_normal((512, 3, 3, 512), dtype=np.float32) / 48)
                              .astype(bf16))
            y = dev.alloc((64, 7, 7, 512), "bf16", order="C").result()
            tx = torch.randn(64, 512, 7, 7, device="cuda", dtype=torch.bfloat16) \
                .contiguous(memory_format=torch.channels_last)
            tw = torch.randn(512, 512, 3, 3, device="cuda", dtype=torch.bfloat16) \
                .contiguous(memory_format=torch.channels_last)
            conv = lambda: dev.nn.conv2d(x, w, padding=1, layout="NHWC", out=y)  # noqa: E731
            per_op_us(conv, 100)

            def torch_conv_us(n: int) -> float:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    torch.nn.functional.conv2d(tx, tw, padding=1)
                torch.cuda.synchronize()
                return (time.perf_counter() - t0) / n * 1e6

            torch_conv_us(100)
            # strided-batched 512 x 128^3 bf16 beside torch.bmm (issue 8's knock-on row)
            bh = [rng.standard_normal((512, 128, 128), dtype=np.float32).astype(bf16)
                  for _ in range(2)]
            sa, sb = (dev.to_device(h).result() for h in bh)
            sc = dev.alloc((512, 128, 128), "bf16", order="C").result()
            ta, tb = (torch.from_numpy(h.astype(np.float32)).cuda().to(torch.bfloat16)
                      for h in bh)
            tc = torch.empty(512, 128, 128, device="cuda", dtype=torch.bfloat16)
            strided = lambda: dev.cublas.gemm_strided_batched(  # noqa: E731
                  sb, sa, sc, 128, 128, 128, 512, 128 * 128, 128 * 128, 128 * 128)
            per_op_us(strided, 100)

            def torch_bmm_us(n: int) -> float:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    torch.bmm(ta, tb, out=tc)
                torch.cuda.synchronize()
                return (time.perf_counter() - t0) / n * 1e6

            torch_bmm_us(100)
        per_op_us(lambda: dev.sgemm(a, b, c, 64, 64, 64), 500)
        for rnd in range(args.rounds):
            # each round starts with another setting: no setting always follows the same one
            for high, low, wake in (settings[rnd % len(settings):]
                                    + settings[:rnd % len(settings)]):
                mode, _, ms = wake.partition("@")
                use_wake(mode)
                bp.high, bp.low = high, low
                bp.timeout = float(ms) / 1e3 if ms else default_timeout
                r = results[f"{high}/{low}/{wake}"]

                def add(key: str, value: float, r: dict = r) -> None:
                    r.setdefault(key, []).append(value)

                add("sgemm_pipelined_us", per_op_us(lambda: dev.sgemm(a, b, c, 64, 64, 64),
                                                    2000))
                t0 = time.perf_counter()
                for _ in range(500):
                    dev.sgemm(a, b, c, 64, 64, 64).result()
                add("sgemm_round_trip_us", (time.perf_counter() - t0) / 500 * 1e6)
                keep = []
                t0 = time.perf_counter()
                for _ in range(2000):
                    keep.append(dev.alloc(256, np.float32))
                keep[-1].result()
                add("alloc_pipelined_us", (time.perf_counter() - t0) / 2000 * 1e6)
                keep.clear()  # the finalizers post the frees
                dev.synchronize().result()
                for wait_each, label in ((False, "pipelined"), (True, "round_trips")):
                    one = aggregate(gemm_op, 1, args.thread_ops, wait_each)
                    eight = aggregate(gemm_op, 8, args.thread_ops, wait_each)
                    add(f"threads_{label}_1_ops", one)
                    add(f"threads_{label}_8_ops", eight)
                    add(f"threads_{label}_8_over_1", eight / one)
                if conv is not None:
                    add("conv5x_fwd_us", per_op_us(conv, 600))
                    add("torch_conv5x_fwd_us", torch_conv_us(600))
                    add("conv5x_torch_over_ours", r["torch_conv5x_fwd_us"][-1]
                        / r["conv5x_fwd_us"][-1])
                    add("strided_bf16_us", per_op_us(strided, 1500))
                    add("torch_bmm_us", torch_bmm_us(1500))
                    add("strided_torch_over_ours", r["torch_bmm_us"][-1]
                        / r["strided_bf16_us"][-1])
            print(f"round {rnd + 1} done", flush=True)
        pauses, timeouts = bp.pauses, bp.timeouts
        use_wake("one")
        bp.high, bp.low, bp.timeout = 128, 64, default_timeout
    medians = {s: {k: statistics.median(v) for k, v in r.items()} for s, r in results.items()}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = f"{dev.props.name} · {args.backend} · {when} · Python {platform.python_version()}"
    keys = list(next(iter(medians.values())))
    lines = ["# backpressure A/B", "", head, "",
             "| high/low/wake | " + " | ".join(keys) + " |",
             "|---" * (len(keys) + 1) + "|"]
    for s, m in medians.items():
        lines.append(f"| {s} | " + " | ".join(f"{m[k]:.3g}" for k in keys) + " |")
    lines += ["", f"- medians of {args.rounds} rounds; settings alternate within each round "
              "(0/0: off; wake: one = a relief wakes the longest-waiting caller once the one "
              "woken before has paused again, and a caller keeps its place while batches "
              "finish (a pause ends early after "
              f"{default_timeout * 1e3:g} ms without a batch); bounded = the same on a "
              "Condition, every pause ending at 5 ms; each = one, but waking the next caller "
              "after every batch even while the last woken still refills; sticky = one, but "
              "a caller pausing again after its turn goes to the front, up to "
              f"{WakeSticky.turns} turns in a row; @MS: the bound; "
              "all = every caller at once, 5 ms, as in stops 22-29); threads: "
              f"{args.thread_ops} SGEMMs in all over 1 or 8 threads (ops/s); "
              "alloc: 2000 1 KiB allocations issued, the last awaited; conv5_x: "
              "600 pipelined calls then one wait, beside torch's conv2d in the same round",
              f"- pauses taken in all: {pauses}, of which ended at their bound: {timeouts}"]
    lines += paired_lines(results, "/".join(map(str, settings[-1])))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "backpressure_ab.json").write_text(json.dumps(
        {"header": head, "medians": medians, "rounds": results}, indent=1))
    (out / "backpressure_ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
