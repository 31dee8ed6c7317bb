"""Independent work from many client threads on a device's stream pool, beside torch's streams,
in one process.

    python benchmarks/bench_streams.py [--threads 8] [--pools 1,4,8] [--ops N] [--repeats R]
                                       [--quick] [--backend auto|cuda|sim] [--out DIR]

1. **Many threads, independent work.** ``--threads`` client threads, each issuing its own work in
   a loop after a common start; thread ``k`` runs kind ``k % 3``:

   - a GEMM layer, ``gelu(x W + b)`` with x 32 x 1024 and W 1024 x 1024, bf16 (gpumsg: one
     cuBLASLt matmul with the ``gelu_bias`` epilogue into the thread's kept output; torch:
     ``F.gelu(F.linear(x, w, b), approximate="tanh")``);
   - an FFT of 64 x 4096 complex64 along the last axis, into a new output (``dev.fft.fft``;
     ``torch.fft.fft``);
   - a 3 x 3 convolution, batch 8, 64 to 64 channels, 56 x 56, bf16 NHWC, padding 1, into the
     thread's kept output (``dev.cudnn.conv2d``; torch: channels-last ``F.conv2d``).

   Aggregate operations per second: gpumsg with the device opened with each pool size
   (``streams``; 1 is one compute stream), torch with each thread on its own
   ``torch.cuda.Stream``; and one thread's rate (one stream) as the base. The clock runs from
   the common start until every thread has issued its operations and the device has finished
   them.
2. **One caller's dependent chain.** One thread applies the GEMM layer to its own output again
   and again (each call reads what the last wrote): µs per call with each pool size; the pool
   must not make it slower.
3. **Serving** (``examples/mlp_serving.py``): a 3-layer MLP and softmax served to
   ``--threads`` clients, requests/s with each pool size, beside torch (the workload of
   ``bench_workloads.py``).

Each gpumsg answer is checked against NumPy float64 before it is timed. The sides' runs
alternate (a device is opened per pool size and run); medians. On the simulator small sizes run
without torch, to exercise the harness. Writes ``streams.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import write_results

import gpumsg
from gpumsg.config import configured

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import mlp_serving  # noqa: E402  (examples/ is a folder of scripts)
from bench_workloads import _torch_mlp  # noqa: E402

COLUMNS = ["case", "side", "streams", "ops_per_s", "us_per_op", "vs_one_stream", "vs_torch",
           "runs", "ratio", "target"]
BF16 = gpumsg.as_dtype("bf16")


class Sizes:
    """The work's sizes: the targets' on a GPU, small ones on the simulator."""

    def __init__(self, small: bool) -> None:
        self.rows, self.width = (8, 64) if small else (32, 1024)
        self.fft = (4, 256) if small else (64, 4096)
        self.conv = (2, 8, 12) if small else (8, 64, 56)  # batch, channels, height = width


def _close(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> None:
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    if not err < tol:
        raise AssertionError(f"{name}: relative error {err:.2e} against NumPy (tolerance {tol})")


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3 x 3 convolution (cross-correlation), padding 1, NHWC x KRSC -> NHWK, float64."""
    n, h, wd, _ = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((n, h, wd, w.shape[0]))
    for r in range(3):
        for s in range(3):
            out += np.einsum("nhwc,kc->nhwk", xp[:, r:r + h, s:s + wd, :],
                             w[:, r, s, :].astype(np.float64))
    return out


class GpumsgWork:
    """One thread's work on a gpumsg device: its operands, kept outputs and one call."""

    def __init__(self, dev: Any, kind: int, z: Sizes, rng: np.random.Generator) -> None:
        self.dev, self.kind = dev, kind
        self.keep: list[Any] = []
        if kind == 0:
            k = z.width
            x = rng.standard_normal((k, z.rows)).astype(BF16)  # X^T, column-major
            w = (rng.standard_normal((k, k)) / np.sqrt(k)).astype(BF16)  # W^T stored (out, in)
            b = rng.standard_normal(k).astype(BF16)
            self.host = (x, w, b)
            self.x = dev.to_device(np.asfortranarray(x)).result()
            self.w = dev.to_device(np.asfortranarray(w)).result()
            self.b = dev.to_device(b).result()
            self.out = dev.alloc((k, z.rows), "bf16", order="F").result()
            self.out2 = dev.alloc((k, z.rows), "bf16", order="F").result()
        elif kind == 1:
            shape = z.fft
            h = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
            self.host = (h,)
            self.x = dev.to_device(h).result()
        else:
            n, c, hw = z.conv
            x = rng.standard_normal((n, hw, hw, c)).astype(BF16)
            w = (rng.standard_normal((c, 3, 3, c)) / np.sqrt(9 * c)).astype(BF16)
            self.host = (x, w)
            self.x = dev.to_device(x).result()
            self.w = dev.to_device(w).result()
            self.out = dev.alloc((n, hw, hw, c), "bf16", order="C").result()

    def call(self) -> None:
        dev = self.dev
        if self.kind == 0:
            k = self.w.shape[0]
            dev.cublaslt.matmul(self.w, self.x, self.out, m=k, n=self.x.shape[1], k=k,
                                epilogue="gelu_bias", bias=self.b)
        elif self.kind == 1:
            self.keep[:] = [dev.fft.fft(self.x)]  # a new output; the last one dropped
        else:
            dev.cudnn.conv2d(self.x, self.w, out=self.out, stride=1, padding=1, layout="NHWC")

    def chain(self) -> None:
        """Two GEMM layers, each on the last one's output (kind 0: a square layer)."""
        k = self.w.shape[0]
        for src, dst in ((self.out, self.out2), (self.out2, self.out)):
            self.dev.cublaslt.matmul(self.w, src, dst, m=k, n=self.x.shape[1], k=k,
                                     epilogue="gelu_bias", bias=self.b)

    def check(self) -> None:
        self.call()
        got = self.dev.copy_to_host(self.keep[0] if self.kind == 1 else self.out).result()
        if self.kind == 0:
            x, w, b = (a.astype(np.float64) for a in self.host)
            want = mlp_serving.gelu(w @ x + b[:, None])
            _close("GEMM + bias + GELU", np.asarray(got, np.float64), want, 2e-2)
        elif self.kind == 1:
            want = np.fft.fft(self.host[0].astype(np.complex128), axis=-1)
            _close("FFT", np.asarray(got), want, 1e-5)
        else:
            want = _conv_reference(*self.host)
            _close("conv2d", np.asarray(got, np.float64), want, 2e-2)

    def free(self) -> None:
        self.keep.clear()
        for name in ("x", "w", "b", "out", "out2"):
            buf = getattr(self, name, None)
            if buf is not None:
                buf.free()


def _torch_work(torch: Any, work: GpumsgWork) -> Callable[[], Any]:
    import torch.nn.functional as F

    if work.kind == 0:
        x, w, b = (torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16)
                   for a in work.host)
        xt = x.T.contiguous()  # (rows, in)
        return lambda: F.gelu(F.linear(xt, w, b), approximate="tanh")
    if work.kind == 1:
        x = torch.from_numpy(work.host[0]).cuda()
        return lambda: torch.fft.fft(x, dim=-1)
    x, w = (torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16)
            .permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
            for a in work.host)
    return lambda: F.conv2d(x, w, padding=1)


def _in_turn(calls: list[Callable[[], Any]]) -> Callable[[], None]:
    """One call of each of ``calls``, in turn."""
    def run() -> None:
        for c in calls:
            c()
    return run


def _run_threads(calls: list[Callable[[], Any]], ops: int, finish: Callable[[], Any],
                 around: Callable[[int], Any] | None = None) -> float:
    """Every ``calls[k]`` ``ops`` times on its own thread after a common start (inside
    ``around(k)``, a context manager, when given), then ``finish()``: seconds."""
    start = threading.Barrier(len(calls) + 1)
    failures: list[BaseException] = []

    def client(k: int) -> None:
        try:
            start.wait()
            with around(k) if around is not None else contextlib.nullcontext():
                for _ in range(ops):
                    calls[k]()
        except BaseException as exc:  # noqa: BLE001 - raised again below
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    finish()
    dt = time.perf_counter() - t0
    if failures:
        raise failures[0]
    return dt


def _gpumsg_side(streams: int, threads: int, z: Sizes, ops: int, backend: str,
                 requests: int) -> dict[str, float]:
    """One run of every gpumsg case with a pool of ``streams``: ops/s of ``threads`` threads
    and of one thread, µs per call of the chain, serving requests/s."""
    out: dict[str, float] = {}
    rng = np.random.default_rng(0)
    with configured(streams=streams):
        dev = gpumsg.open_device(0, backend=backend)
    try:
        works = [GpumsgWork(dev, k % 3, z, rng) for k in range(threads)]
        for w in works[:3]:
            w.check()
        sync = lambda: dev.synchronize().result()  # noqa: E731
        _run_threads([w.call for w in works], max(1, ops // 10), sync)  # warm-up
        out["threads"] = threads * ops / _run_threads([w.call for w in works], ops, sync)
        out["one thread"] = 3 * ops / _run_threads([_in_turn([w.call for w in works[:3]])],
                                                   ops, sync)
        chain = works[0]
        for _ in range(20):
            chain.chain()
        sync()
        t0 = time.perf_counter()
        for _ in range(ops):
            chain.chain()
        sync()
        out["chain"] = (time.perf_counter() - t0) / (2 * ops)
        for w in works:
            w.free()
        model = mlp_serving.Model.random(z.width, 16 if z.width < 1024 else 1000, seed=1)
        model.upload(dev)
        out["serving"], _ = mlp_serving.serve(dev, model, z.rows, threads, requests,
                                              check=False, seed=2)
        model.free()
        out["streams used"] = sum(1 for n in dev.stats().result().streams if n) or 1
    finally:
        dev.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--pools", default="1,4,8", help="pool sizes to open the device with")
    ap.add_argument("--ops", type=int, default=None, help="calls per thread per run")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backend", default="auto", choices=("auto", "cuda", "sim"))
    ap.add_argument("--out", default=None, help="output folder (read by _common.results_dir)")
    args = ap.parse_args(argv)
    if args.out:
        os.environ["OUT"] = args.out
    with gpumsg.open_device(0, backend=args.backend) as probe:
        backend = probe.backend
    small = backend != "cuda"
    z = Sizes(small)
    ops = args.ops or (20 if small or args.quick else 400)
    repeats = args.repeats or (1 if small else 3 if args.quick else 5)
    requests = 10 if small else 100
    pools = [int(p) for p in args.pools.split(",")]
    torch = None
    notes: list[str] = []
    if not small:
        try:
            import torch  # type: ignore[no-redef]
        except ImportError:
            notes.append("torch is not installed: its side is skipped")
    runs: dict[int, list[dict[str, float]]] = {p: [] for p in pools}
    torch_runs: dict[str, list[float]] = {"threads": [], "one thread": [], "serving": []}
    t_calls: list[Callable[[], Any]] = []
    if torch is not None:
        with gpumsg.open_device(0) as dev:
            rng = np.random.default_rng(0)
            works = [GpumsgWork(dev, k % 3, z, rng) for k in range(args.threads)]
            t_calls = [_torch_work(torch, w) for w in works]
            for w in works:
                w.free()
        streams = [torch.cuda.Stream() for _ in t_calls]
        tsync = torch.cuda.synchronize
        model = mlp_serving.Model.random(z.width, 1000, seed=1)
        t_infer = _torch_mlp(torch, model)
    for _ in range(repeats):
        for p in pools:
            runs[p].append(_gpumsg_side(p, args.threads, z, ops, backend, requests))
        if torch is not None:
            _run_threads(t_calls, max(1, ops // 10), tsync,
                         lambda k: torch.cuda.stream(streams[k]))
            torch_runs["threads"].append(args.threads * ops / _run_threads(
                t_calls, ops, tsync, lambda k: torch.cuda.stream(streams[k])))
            torch_runs["one thread"].append(3 * ops / _run_threads(
                [_in_turn(t_calls[:3])], ops, tsync))
            rate, _ = mlp_serving.run_clients([t_infer] * args.threads, z.rows, z.width,
                                              requests)
            torch_runs["serving"].append(rate)
    med = {p: {k: statistics.median(r[k] for r in runs[p]) for k in runs[p][0]}
           for p in pools}
    tmed = {k: statistics.median(v) for k, v in torch_runs.items() if v}
    base = med[pools[0]]
    rows: list[dict[str, Any]] = []
    label = f"{args.threads} threads: GEMM+bias+GELU, FFT, conv"
    for p in pools:
        for case, key in ((label, "threads"), ("one thread (the three kinds in turn)",
                                               "one thread")):
            rate = med[p][key]
            rows.append({"case": case, "side": "gpumsg", "streams": p, "ops_per_s": rate,
                         "us_per_op": 1e6 / rate, "vs_one_stream": rate / base[key],
                         "runs": [round(r[key]) for r in runs[p]],
                         **({"vs_torch": rate / tmed[key]} if key in tmed else {})})
        rows.append({"case": "one caller's dependent chain (GEMM layer)", "side": "gpumsg",
                     "streams": p, "us_per_op": med[p]["chain"] * 1e6,
                     "vs_one_stream": base["chain"] / med[p]["chain"],
                     "runs": [round(r["chain"] * 1e6, 2) for r in runs[p]]})
        rows.append({"case": f"serving: MLP + softmax, {args.threads} clients (requests)",
                     "side": "gpumsg", "streams": p, "ops_per_s": med[p]["serving"],
                     "us_per_op": 1e6 / med[p]["serving"],
                     "vs_one_stream": med[p]["serving"] / base["serving"],
                     "runs": [round(r["serving"]) for r in runs[p]],
                     **({"vs_torch": med[p]["serving"] / tmed["serving"]} if tmed else {})})
        rows.append({"case": "compute streams that took work", "side": "gpumsg",
                     "streams": p, "runs": [int(r["streams used"]) for r in runs[p]]})
    for key, case in (("threads", label), ("one thread", "one thread (the three kinds in turn)"),
                      ("serving", f"serving: MLP + softmax, {args.threads} clients (requests)")):
        if key in tmed:
            rows.append({"case": case, "side": "torch (a stream per thread)" if key ==
                         "threads" else "torch", "ops_per_s": tmed[key],
                         "us_per_op": 1e6 / tmed[key],
                         "runs": [round(v) for v in torch_runs[key]]})
    pooled = pools[1:] or pools  # the pools, beside the first size (one stream)
    best = max(pooled, key=lambda p: med[p]["threads"])
    targets = [
        {"case": f"{label}: pool of {best} / one stream", "side": "target",
         "ratio": med[best]["threads"] / base["threads"], "target": ">= 2"},
        {"case": "one caller's chain: one stream's time / the pool's (worst pool)",
         "side": "target", "ratio": min(base["chain"] / med[p]["chain"] for p in pooled),
         "target": ">= 0.97"}]
    if "threads" in tmed:
        targets.insert(1, {"case": f"{label}: pool of {best} / torch with a stream per thread",
                           "side": "target", "ratio": med[best]["threads"] / tmed["threads"],
                           "target": ">= 1"})
    rows += targets
    notes += [f"ops per thread per run: {ops}; {repeats} alternating runs, medians; a device "
              "opened per pool size and run (streams=N); 'one thread' issues the three kinds "
              "in turn on one stream (pool of the row)",
              "ratios: vs_one_stream and vs_torch are rates (above 1: faster); the chain's "
              "vs_one_stream is one stream's time over the pool's"]
    write_results("streams", rows, notes, COLUMNS)
    for r in targets:
        print(f"{r['case']}: {r['ratio']:.2f} (target {r['target']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
