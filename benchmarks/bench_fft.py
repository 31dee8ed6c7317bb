"""cuFFT beside torch.fft (and CuPy, reported) in the same run: 1-D c64 2^20 x 16 batch, 2-D
4096^2 c64, 3-D 256^3 R2C, plus one inverse with the default ("backward") normalization and one
small, host-bound transform. Steady state, pipelined: n calls issued, then one wait.

gpumsg is timed two ways: the explicit plan path (``dev.cufft.plan`` once, then
``dev.cufft.execute(plan, x, out)`` into a preallocated output: one message per call) and the
NumPy-shaped path (``dev.fft.fft(x)``: a new output per call, like torch, so an Alloc and a Free
message ride along). The plan-cache rows time ``dev.cufft.plan(...).result()`` round trips on a hit
and on a miss (cache emptied before each), beside torch's cuFFT plan cache emptied / not.
Writes ``fft.{json,md}`` to the output folder.

The size sweep (``fft_sizes.{json,md}``): 1-D c64 transforms of 2^8 to 2^22 points, batched to
2^22 points per call, NumPy-shaped on every side (a new output per call): gpumsg's
``dev.fft.fft`` beside ``torch.fft.fft`` and ``cupy.fft.fft``.

    python benchmarks/bench_fft.py [--headline] [--out DIR]
        --headline: the sweep and the fixed cases, without the profiler's kernel report
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import numpy as np
from _common import api, compare, compare_many, write_results

import gpumsg
from gpumsg.libs.cufft import _client as fft_client

CASES = [
    # (name, kind, host shape, gpumsg call, torch call, cupy call)
    ("1-D c64 2^20 x16", "c2c", (16, 1 << 20), "fft", "fft", "fft"),
    ("1-D c64 2^20 x16 ifft (norm backward: 1/n)", "c2c-inv", (16, 1 << 20), "ifft", "ifft",
     "ifft"),
    ("2-D c64 4096^2", "c2c", (4096, 4096), "fft2", "fft2", "fft2"),
    ("3-D f32 256^3 R2C", "r2c", (256, 256, 256), "rfftn", "rfftn", "rfftn"),
    ("1-D c64 4096 x4 (host-bound)", "c2c", (4, 4096), "fft", "fft", "fft"),
]


def _data(rng, kind: str, shape: tuple) -> np.ndarray:
    if kind == "r2c":
        return rng.standard_normal(shape).astype(np.float32)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _explicit(dev, kind: str, shape: tuple, x) -> tuple:
    """The plan and output buffer of the explicit path for the same transform."""
    plan_of = api(dev, "cufft.plan", "cufft.plan")
    if kind == "r2c":
        plan = plan_of(shape, 1, "r2c", "f32")
        out_shape = shape[:-1] + (shape[-1] // 2 + 1,)
    elif len(shape) == 2 and shape[0] == shape[1] == 4096:
        plan = plan_of(shape, 1, "c2c", "c64")
        out_shape = shape
    else:
        plan = plan_of(shape[1:], shape[0], "c2c", "c64")
        out_shape = shape
    plan.result()
    out = dev.alloc(out_shape, np.complex64, order="C")
    return plan, out


def case(dev, torch, cupy, name: str, kind: str, shape: tuple, ours: str, theirs: str,
         cp_name: str) -> list[dict]:
    rng = np.random.default_rng()
    h = _data(rng, kind, shape)
    x = dev.to_device(h)
    tx = torch.from_numpy(h).cuda()
    fn_t = getattr(torch.fft, theirs)
    direction = "inverse" if kind == "c2c-inv" else "forward"
    last = [dev.synchronize()]

    def numpy_path() -> None:
        last[0] = getattr(dev.fft, ours)(x)

    def torch_call() -> None:
        fn_t(tx)

    rows = []
    ours_s, torch_s = compare((numpy_path, lambda: last[0].result()),
                              (torch_call, torch.cuda.synchronize), repeats=7, warmup_s=0.5)
    got = dev.copy_to_host(last[0].result()).result()
    # the 1-D batches: two rows are enough (and quick on the host)
    sub = h[:2] if ours in ("fft", "ifft") else h
    ref = getattr(np.fft, ours)(sub.astype(np.complex128 if kind != "r2c" else np.float64))
    got = got[:len(sub)]
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    rows.append({"case": name, "path": f"NumPy-shaped dev.fft.{ours}", "gpumsg_us": ours_s * 1e6,
                 "peer": "torch", "peer_us": torch_s * 1e6, "ratio": torch_s / ours_s,
                 "rel_err": err, "target": ">= 0.97"})
    print(rows[-1], flush=True)
    del got, ref
    if kind != "c2c-inv":
        plan, out = _explicit(dev, kind, shape, x)
        ex = api(dev, "cufft.execute", "cufft.execute")

        def explicit() -> None:
            last[0] = ex(plan, x, out, direction)

        ours_s, torch_s = compare((explicit, lambda: last[0].result()),
                                  (torch_call, torch.cuda.synchronize), repeats=7,
                                  warmup_s=0.5)
        rows.append({"case": name, "path": "explicit plan dev.cufft.execute",
                     "gpumsg_us": ours_s * 1e6, "peer": "torch", "peer_us": torch_s * 1e6,
                     "ratio": torch_s / ours_s, "target": ">= 0.97"})
        print(rows[-1], flush=True)
        out.buffer.free()
    if cupy is not None:
        cx = cupy.asarray(h)
        fn_c = getattr(cupy.fft, cp_name)
        cp_s, torch_s = compare((lambda: fn_c(cx), cupy.cuda.runtime.deviceSynchronize),
                                (torch_call, torch.cuda.synchronize), repeats=7, warmup_s=0.5)
        rows.append({"case": name, "path": f"CuPy cupy.fft.{cp_name}", "gpumsg_us": "",
                     "peer": "torch", "peer_us": torch_s * 1e6, "cupy_us": cp_s * 1e6,
                     "ratio": torch_s / cp_s, "target": "(reported)"})
        print(rows[-1], flush=True)
    x.buffer.free()
    return rows


def plan_cost(dev, torch) -> list[dict]:
    """Round trip of dev.cufft.plan(...).result() on a hit and on a miss; torch beside it."""
    shape, batch = (1 << 16,), 8

    plan_of = api(dev, "cufft.plan", "cufft.plan")
    clear = api(dev, "cufft.cache_config", "cufft.cache_config")

    def make():
        return plan_of(shape, batch, "c2c", "c64").result()

    make()
    hits = []
    for _ in range(300):
        t0 = time.perf_counter_ns()
        make()
        hits.append(time.perf_counter_ns() - t0)
    misses = []
    for _ in range(30):
        clear(clear=True).result()
        dev.synchronize().result()
        t0 = time.perf_counter_ns()
        info = make()
        misses.append(time.perf_counter_ns() - t0)
        assert not info["hit"]
    tx = torch.randn(batch, *shape, dtype=torch.complex64, device="cuda")
    cache = torch.backends.cuda.cufft_plan_cache
    torch.fft.fft(tx)
    torch.cuda.synchronize()
    t_hit, t_miss = [], []
    for _ in range(30):
        t0 = time.perf_counter_ns()
        torch.fft.fft(tx)
        torch.cuda.synchronize()
        t_hit.append(time.perf_counter_ns() - t0)
        cache.clear()
        t0 = time.perf_counter_ns()
        torch.fft.fft(tx)
        torch.cuda.synchronize()
        t_miss.append(time.perf_counter_ns() - t0)
    med = statistics.median
    return [
        {"case": "plan 2^16 x8 c64: cache hit", "path": "dev.cufft.plan(...).result()",
         "gpumsg_us": med(hits) / 1e3, "peer": "torch fft+sync, plan cached",
         "peer_us": med(t_hit) / 1e3, "target": "(reported)"},
        {"case": "plan 2^16 x8 c64: fresh plan", "path": "dev.cufft.plan(...).result()",
         "gpumsg_us": med(misses) / 1e3, "peer": "torch fft+sync, plan cache cleared",
         "peer_us": med(t_miss) / 1e3, "target": "(reported)"},
    ]


def _profile(torch, label: str, issue, wait, calls: int) -> list[str]:
    """Run ``issue`` ``calls`` times under torch's profiler: wall per call, every GPU kernel
    with count and mean time, and the GPU's busy time against the span of the kernels."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        issue()
    wait()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            issue()
        wait()
        wall = (time.perf_counter() - t0) / calls * 1e6
    times: dict[str, list[float]] = defaultdict(list)
    starts, ends = [], []
    for ev in prof.events():
        if ev.device_type.name == "CUDA":
            times[ev.name].append(ev.device_time_total)
            starts.append(ev.time_range.start)
            ends.append(ev.time_range.end)
    busy = sum(sum(v) for v in times.values())
    span = (max(ends) - min(starts)) if starts else 0.0
    lines = [f"{label}: {wall:.1f} us wall per call; GPU busy {busy / calls:.1f} us per call "
             f"over a span of {span / calls:.1f} us per call"]
    for k, v in times.items():
        lines.append(f"    {len(v):3d} x {np.mean(v):8.1f} us  {k[:140]}")
    return lines


def _kernels_of(dev, torch, name: str, shape: tuple, n: tuple, batch: int,
                calls: int) -> list[str]:
    h = _data(np.random.default_rng(), "c2c", shape)
    x = dev.to_device(h)
    out = dev.alloc(shape, np.complex64, order="C")
    plan = api(dev, "cufft.plan", "cufft.plan")(n, batch, "c2c", "c64")
    plan.result()
    tx = torch.from_numpy(h).cuda()
    last = [dev.synchronize()]
    fn = torch.fft.fft if len(n) == 1 else torch.fft.fft2
    execute = api(dev, "cufft.execute", "cufft.execute")

    def ours() -> None:
        last[0] = execute(plan, x, out)

    lines = _profile(torch, f"{name} gpumsg explicit", ours, lambda: last[0].result(), calls)
    numpy_fn = dev.fft.fft if len(n) == 1 else dev.fft.fft2

    def numpy_path() -> None:
        last[0] = numpy_fn(x)

    lines += _profile(torch, f"{name} gpumsg NumPy-shaped", numpy_path,
                      lambda: last[0].result(), calls)
    lines += _profile(torch, f"{name} torch", lambda: fn(tx), torch.cuda.synchronize, calls)
    x.buffer.free()
    out.buffer.free()
    return lines


def kernel_report(dev, torch, calls: int = 20) -> list[str]:
    """The cuFFT kernels each side runs for the 1-D 2^20 x16 and 2-D 4096^2 transforms (torch's
    profiler reads CUPTI, which sees every kernel of the process), with the mean GPU time of
    each, the GPU's busy time over the span from the first kernel's start to the last one's
    end (idle gaps between kernels show as busy < span), and the loaded libcufft files."""
    lines = _kernels_of(dev, torch, "1-D c64 2^20 x16", (16, 1 << 20), (1 << 20,), 16, calls)
    lines += _kernels_of(dev, torch, "2-D c64 4096^2", (4096, 4096), (4096, 4096), 1, calls)
    with open("/proc/self/maps") as f:
        libs = sorted({ln.split()[-1] for ln in f if "libcufft" in ln})
    lines.append("libcufft files mapped: " + ", ".join(libs))
    from gpumsg.libs._loader import load

    lines.append(f"gpumsg's cufft: {load('cufft').path} version {load('cufft').version()}")
    return lines


def long_runs(dev, torch, case: tuple) -> dict:
    """The explicit path with runs 5x longer: a fixed cost per run (filling and draining the
    pipeline) shrinks, a cost per call does not."""
    h = _data(np.random.default_rng(), case[1], case[2])
    x = dev.to_device(h)
    tx = torch.from_numpy(h).cuda()
    plan, out = _explicit(dev, case[1], case[2], x)
    last = [dev.synchronize()]
    execute = api(dev, "cufft.execute", "cufft.execute")

    def explicit() -> None:
        last[0] = execute(plan, x, out)

    ours_s, torch_s = compare((explicit, lambda: last[0].result()),
                              (lambda: torch.fft.fft(tx), torch.cuda.synchronize),
                              repeats=5, warmup_s=0.5, min_run_s=0.15)
    x.buffer.free()
    out.buffer.free()
    return {"case": case[0] + " (runs of 150 ms)", "path": "explicit plan dev.cufft.execute",
            "gpumsg_us": ours_s * 1e6, "peer": "torch", "peer_us": torch_s * 1e6,
            "ratio": torch_s / ours_s, "target": "(diagnostic)"}


#: points per transform of the size sweep; each call transforms SWEEP_POINTS points in all
SWEEP_SIZES = tuple(1 << p for p in range(8, 23, 2))
SWEEP_POINTS = 1 << 22


def sweep(dev: Any, torch: Any, cupy: Any, sizes: tuple[int, ...] = SWEEP_SIZES,
          points: int = SWEEP_POINTS) -> list[dict[str, Any]]:
    """1-D c64 FFTs by length, ``points // n`` of them per call; the NumPy-shaped call on every
    side (a new output each time). GFLOP/s by the usual 5 n log2(n) count per transform."""
    rng = np.random.default_rng()
    return [_sweep_row(dev, torch, cupy, rng, n, points) for n in sizes]


def _sweep_row(dev: Any, torch: Any, cupy: Any, rng: Any, n: int, points: int
               ) -> dict[str, Any]:
    batch = max(1, points // n)
    h = _data(rng, "c2c", (batch, n))
    x = dev.to_device(h)
    last = [dev.synchronize()]

    def ours() -> None:
        last[0] = dev.fft.fft(x)

    sides = [(ours, lambda: last[0].result())]
    if cupy is not None:
        cx = cupy.asarray(h)
        sides.append((lambda: cupy.fft.fft(cx), cupy.cuda.runtime.deviceSynchronize))
    if torch is not None:
        tx = torch.from_numpy(h).cuda()
        sides.append((lambda: torch.fft.fft(tx), torch.cuda.synchronize))
    times = compare_many(sides if len(sides) > 1 else sides * 2,
                         min_run_s=0.03 if torch is not None else 0.0)
    got = dev.copy_to_host(last[0].result()).result()[:2]
    ref = np.fft.fft(h[:2].astype(np.complex128))
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    flop = 5.0 * n * np.log2(n) * batch
    row: dict[str, Any] = {"n": n, "batch": batch, "gpumsg_us": times[0] * 1e6,
                           "torch_us": "", "cupy_us": "", "ratio_torch": "",
                           "ratio_cupy": "", "gpumsg_gflops": flop / times[0] / 1e9,
                           "torch_gflops": "", "cupy_gflops": "", "rel_err": err}
    if torch is not None:
        row.update(torch_us=times[-1] * 1e6, ratio_torch=times[-1] / times[0],
                   torch_gflops=flop / times[-1] / 1e9)
        del tx
        torch.cuda.empty_cache()
    if cupy is not None:
        row.update(cupy_us=times[1] * 1e6, ratio_cupy=times[1] / times[0],
                   cupy_gflops=flop / times[1] / 1e9)
        del cx
        cupy.get_default_memory_pool().free_all_blocks()
    x.result().free()
    print(row, flush=True)
    return row


def write_sweep(rows: list[dict[str, Any]], backend: str) -> None:
    write_results("fft_sizes", rows, [
        f"1-D c64 FFTs of n points, batched to {SWEEP_POINTS} points per call; each side's "
        "NumPy-shaped call (a new output per call): dev.fft.fft, torch.fft.fft, cupy.fft.fft",
        "µs per call in steady state: calls issued back to back, then one wait; every side "
        "warmed up 0.3 s, then 5 alternating runs, medians",
        "ratio_torch, ratio_cupy = the peer's time / gpumsg's (> 1: gpumsg faster); GFLOP/s "
        "counts 5 n log2(n) per transform",
        "rel_err: gpumsg's first two transforms against numpy.fft in float64",
        f"backend: {backend}"],
        ["n", "batch", "gpumsg_us", "torch_us", "cupy_us", "ratio_torch", "ratio_cupy",
         "gpumsg_gflops", "rel_err"])


def main() -> None:
    import torch

    headline = "--headline" in sys.argv
    try:
        import cupy
    except Exception:  # noqa: BLE001
        cupy = None
    rows: list[dict] = []
    with gpumsg.open_device(0) as dev:
        write_sweep(sweep(dev, torch, cupy), dev.backend)
        torch.cuda.empty_cache()
        for c in CASES:
            rows += case(dev, torch, cupy, *c)
            torch.cuda.empty_cache()
            if cupy is not None:
                cupy.get_default_memory_pool().free_all_blocks()
        rows += plan_cost(dev, torch)
        print(rows[-2:], flush=True)
        info = api(dev, "cufft.cache_info", "cufft.cache_info")().result()
        kern: list[str] = []
        if not headline:
            rows.append(long_runs(dev, torch, CASES[0]))
            print(rows[-1], flush=True)
            try:
                kern = kernel_report(dev, torch)
            except Exception as exc:  # noqa: BLE001 - a diagnostic: report, do not fail
                kern = [f"kernel report failed: {type(exc).__name__}: {exc}"]
            print("\n".join(kern), flush=True)
    notes = [
        "ratio = torch time / other time (> 1: faster than torch); wall time of n pipelined "
        "calls then one wait, n sized for >= 30 ms of torch's work; both warmed up, then 7 "
        "alternating runs, medians; times are per call",
        "NumPy-shaped path: dev.fft.<f>(x) allocates its output per call (Alloc + FftExec "
        "messages; the output's Free follows when the caller drops it), as torch.fft does; "
        "explicit path: dev.cufft.execute(plan, x, out) into one preallocated output",
        "ifft row: both scale by 1/n after the transform (gpumsg: one cuBLAS scal in the same "
        "message; torch: a mul_)",
        "rel_err: NumPy-shaped output vs numpy.fft in float64 (leading rows)",
        f"gpumsg plan cache at the end: {info}",
        "the client yields the GIL after posting a transform with >= "
        f"{fft_client.YIELD_BYTES} bytes of output (libs/cufft/client.py YIELD_BYTES)",
    ] + ["kernels: " + ln.strip() for ln in kern]
    write_results("fft", rows, notes, ["case", "path", "gpumsg_us", "peer", "peer_us",
                                       "cupy_us", "ratio", "rel_err", "target"])


if __name__ == "__main__":
    main()
