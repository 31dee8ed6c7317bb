"""Small, host-bound operations of every library beside torch (CuPy for a raw kernel launch)
in the same run: what one message costs once the GPU work is a few microseconds.

Each case is timed two ways, gpumsg's and the peer's runs alternating (medians of 5):
pipelined (``N_PIPE`` calls issued, then one wait; µs per call) and round trip (each call
waited for; median µs). The cases write into preallocated outputs where the API allows one
(``execute(plan, x, out)``, ``spmv(m, x, y)``, ``normal(out=)``, ...), as the peer does with
``out=`` or an in-place method; the NumPy-shaped FFT allocates its output per call on both
sides. Every gpumsg result is checked against NumPy/SciPy in float64 first.

``--profile``: cProfile (Python 3.12 sees every thread) of each gpumsg case's pipelined
calls, the top functions by own time, written to ``small_ops_profile.txt``. ``--cpu``: per
pipelined call, the wall time beside the CPU time of the calling thread and of the device
thread, and the process's voluntary context switches (written to ``small_ops_cpu.md``).

Writes ``benchmarks/results/small_ops.{json,md}`` (or ``$OUT``).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from _common import median_us, write_results

import gpumsg

N_PIPE = 2000
N_RT = 1000
RUNS = 5
#: outputs the cycling SGEMM case writes in turn
CYCLE = 100
KERNEL = r"""
extern "C" __global__ void scale(float* a, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= s;
}
"""

#: (name, gpumsg issue, peer issue, peer name); filled by the case builders below
Case = tuple[str, Callable[[], Any], Callable[[], Any] | None, str]


def per_call_pipelined(issue: Callable[[], Any], finish: Callable[[Any], Any]) -> float:
    t0 = time.perf_counter()
    last = None
    for _ in range(N_PIPE):
        last = issue()
    finish(last)
    return (time.perf_counter() - t0) / N_PIPE * 1e6


def alternate(ours: Callable[[], float], theirs: Callable[[], float] | None
              ) -> tuple[float, float | None]:
    """Medians of ``RUNS`` alternating runs of two timings."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(RUNS):
        a.append(ours())
        if theirs is not None:
            b.append(theirs())
    return statistics.median(a), (statistics.median(b) if b else None)


def build_cases(dev: Any, torch: Any, cupy: Any) -> tuple[list[Case], list[str]]:
    """The cases, each checked once against a float64 reference; and notes."""
    rng = np.random.default_rng()
    notes: list[str] = []
    cases: list[Case] = []
    cuda = torch is not None

    # -- the reference: 64^3 SGEMM, gpumsg's leanest path (bench_overhead's case) -------------
    ha, hb = (rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2))
    ga, gb = dev.to_device(ha).result(), dev.to_device(hb).result()
    gc = dev.alloc((64, 64), np.float32).result()
    dev.sgemm(ga, gb, gc, 64, 64, 64).result()
    got = dev.copy_to_host(gc).result()
    assert np.allclose(got, ha.astype(np.float64) @ hb, rtol=1e-4, atol=1e-4), "sgemm"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 math on both sides
        ta_, tb_ = torch.from_numpy(ha).cuda(), torch.from_numpy(hb).cuda()
        tc_ = torch.empty(64, 64, device="cuda")
    cases.append(("SGEMM 64^3 (reference)", lambda: dev.sgemm(ga, gb, gc, 64, 64, 64),
                  (lambda: torch.mm(ta_, tb_, out=tc_)) if cuda else None, "torch.mm(out=)"))

    # -- the same product NumPy-shaped: `matmul(a, b)` of C-ordered buffers, a new output -----
    ca, cb = dev.to_device(np.ascontiguousarray(ha)).result(), \
        dev.to_device(np.ascontiguousarray(hb)).result()
    got = dev.copy_to_host(dev.linalg.matmul(ca, cb)).result()
    assert np.allclose(got, ha.astype(np.float64) @ hb, rtol=1e-4, atol=1e-4), "matmul"
    cases.append(("matmul 64^3 f32, new output", lambda: dev.linalg.matmul(ca, cb),
                  (lambda: torch.mm(ta_, tb_)) if cuda else None, "torch.mm"))
    co = dev.alloc((64, 64), np.float32, order="C").result()
    cases.append(("matmul 64^3 f32 into out", lambda: dev.linalg.matmul(ca, cb, out=co),
                  (lambda: torch.mm(ta_, tb_, out=tc_)) if cuda else None, "torch.mm(out=)"))

    # -- the same SGEMM into 100 outputs in turn: more distinct repeated calls than the GEMM
    # replays held graphs for (64) before stop 35 ------------------------------------------------
    outs = [dev.alloc((64, 64), np.float32).result() for _ in range(CYCLE)]
    turn = [0]

    def cycling() -> Any:
        i = turn[0] = (turn[0] + 1) % CYCLE
        return dev.sgemm(ga, gb, outs[i], 64, 64, 64)

    if cuda:
        touts = [torch.empty(64, 64, device="cuda") for _ in range(CYCLE)]
        tturn = [0]

        def tcycling() -> Any:
            i = tturn[0] = (tturn[0] + 1) % CYCLE
            return torch.mm(ta_, tb_, out=touts[i])

    cases.append((f"SGEMM 64^3 into {CYCLE} outputs in turn", cycling,
                  tcycling if cuda else None, "torch.mm(out=)"))

    # -- cuFFT: 4 x 4096 c64, explicit plan into a kept output, and NumPy-shaped ---------------
    hx = (rng.standard_normal((4, 4096)) + 1j * rng.standard_normal((4, 4096))).astype(np.complex64)
    x = dev.to_device(hx).result()
    out = dev.alloc(hx.shape, np.complex64, order="C").result()
    plan = dev.cufft.plan((4096,), 4, "c2c", "c64")
    plan.result()
    ref = np.fft.fft(hx.astype(np.complex128), axis=-1)
    dev.cufft.execute(plan, x, out).result()
    got = dev.copy_to_host(out).result().reshape(hx.shape)
    assert np.abs(got - ref).max() < 1e-4 * np.abs(ref).max(), "fft execute"
    got = dev.copy_to_host(dev.fft.fft(x).result()).result()
    assert np.abs(got.reshape(hx.shape) - ref).max() < 1e-4 * np.abs(ref).max(), "fft"
    tx = to = None
    if cuda:
        tx = torch.from_numpy(hx).cuda()
        to = torch.empty_like(tx)
    cases.append(("FFT c64 4 x 4096, explicit plan into out",
                  lambda: dev.cufft.execute(plan, x, out),
                  (lambda: torch.fft.fft(tx, out=to)) if cuda else None, "torch.fft.fft(out=)"))
    cases.append(("FFT c64 4 x 4096, NumPy-shaped (new output)", lambda: dev.fft.fft(x),
                  (lambda: torch.fft.fft(tx)) if cuda else None, "torch.fft.fft"))
    # the NumPy-shaped FFT's two other messages alone: an output allocated, then dropped (its
    # Free posted by the finalizer)
    cases.append(("new 128 KiB buffer, dropped at once",
                  lambda: dev.alloc(hx.shape, np.complex64, order="C"),
                  (lambda: torch.empty(hx.shape, dtype=torch.complex64, device="cuda"))
                  if cuda else None, "torch.empty"))

    # -- cuSPARSE: SpMV 10k x 10k, 10 per row, f32, into a kept y ------------------------------
    n = 10_000
    a = sp.random(n, n, density=10 / n, format="csr", dtype=np.float32, random_state=rng)
    hv = rng.standard_normal(n).astype(np.float32)
    m = dev.cusparse.csr(a)
    v = dev.to_device(hv).result()
    yv = dev.alloc((n,), np.float32).result()
    dev.cusparse.spmv(m, v, yv).result()
    ref_y = a.astype(np.float64) @ hv.astype(np.float64)
    got = dev.copy_to_host(yv).result()
    assert np.abs(got - ref_y).max() < 1e-4 * (1 + np.abs(ref_y).max()), "spmv"
    if cuda:
        ta = torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                     torch.from_numpy(a.indices.astype(np.int64)),
                                     torch.from_numpy(a.data), size=a.shape).cuda()
        tv = torch.from_numpy(hv).cuda()
        ty = torch.empty(n, device="cuda")
    cases.append(("SpMV CSR 10k x 10k, 10/row, f32, into y", lambda: dev.cusparse.spmv(m, v, yv),
                  (lambda: torch.mv(ta, tv, out=ty)) if cuda else None, "torch.mv(csr, out=)"))

    # -- cuRAND: 4096 normal f32 into a kept buffer --------------------------------------------
    gen = dev.curand.generator("philox", seed=1234)
    r = dev.alloc((4096,), np.float32).result()
    gen.normal(out=r, mean=0.0, std=1.0).result()
    got = dev.copy_to_host(r).result()
    assert abs(got.mean()) < 0.1 and abs(got.std() - 1) < 0.1, "normal"
    tr = torch.empty(4096, device="cuda") if cuda else None
    cases.append(("cuRAND normal f32 4096 into out", lambda: gen.normal(out=r),
                  (lambda: tr.normal_()) if cuda else None, "tensor.normal_()"))
    got = dev.copy_to_host(gen.normal(4096)).result()
    assert abs(got.mean()) < 0.1 and abs(got.std() - 1) < 0.1, "normal, new output"
    cases.append(("cuRAND normal f32 4096, new output", lambda: gen.normal(4096),
                  (lambda: torch.randn(4096, device="cuda")) if cuda else None, "torch.randn"))

    # -- cuBLAS level 1: axpy 4096 f32 ---------------------------------------------------------
    hp, hq = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    p, q = dev.to_device(hp).result(), dev.to_device(hq).result()
    dev.cublas.axpy(p, q, 0.5).result()
    got = dev.copy_to_host(q).result()
    assert np.allclose(got, hq.astype(np.float64) + 0.5 * hp, rtol=1e-5, atol=1e-5), "axpy"
    if cuda:
        tp, tq = torch.from_numpy(hp).cuda(), torch.from_numpy(hq).cuda()
    cases.append(("axpy f32 4096", lambda: dev.cublas.axpy(p, q, 0.5),
                  (lambda: tq.add_(tp, alpha=0.5)) if cuda else None, "tensor.add_(alpha=)"))

    # -- a compiled kernel: scale 4096 f32 -----------------------------------------------------
    kern = None
    if dev.backend == "cuda":
        kern = dev.compile(KERNEL, "scale").result()
        hk = rng.standard_normal(4096).astype(np.float32)
        k = dev.to_device(hk).result()
        dev.launch(kern, (16,), (256,), (k, np.float32(1.5), np.int32(4096))).result()
        got = dev.copy_to_host(k).result()
        assert np.allclose(got, hk.astype(np.float64) * 1.5, rtol=1e-6), "launch"
        ck = ck_arr = None
        if cupy is not None:
            ck = cupy.RawKernel(KERNEL, "scale")
            ck_arr = cupy.asarray(hk)
        args = (k, np.float32(1.0), np.int32(4096))
        cases.append(("kernel launch, 4096 f32 scale",
                      lambda: dev.launch(kern, (16,), (256,), args),
                      (lambda: ck((16,), (256,), (ck_arr, np.float32(1.0), np.int32(4096))))
                      if ck is not None else None, "cupy.RawKernel"))

    # -- the driver: memset and device-to-device copy of 4 KiB ---------------------------------
    hs = rng.standard_normal(1024).astype(np.float32)
    s, d = dev.to_device(hs).result(), dev.alloc((1024,), np.float32).result()
    dev.copy(d, s, 4096).result()
    assert np.array_equal(dev.copy_to_host(d).result(), hs), "copy"
    if cuda:
        ts, td = torch.from_numpy(hs).cuda(), torch.empty(1024, device="cuda")
    cases.append(("device-to-device copy 4 KiB", lambda: dev.copy(d, s, 4096),
                  (lambda: td.copy_(ts)) if cuda else None, "tensor.copy_"))
    cases.append(("memset 4 KiB", lambda: dev.memset(d, 0),
                  (lambda: td.zero_()) if cuda else None, "tensor.zero_()"))
    notes.append("every gpumsg case was checked once against NumPy/SciPy in float64 (the FFTs to "
                 "1e-4 of the largest magnitude, SpMV and axpy to 1e-4/1e-5, the kernel to 1e-6, "
                 "the copy exactly, the normal draw's mean and std to 0.1)")
    return cases, notes


def measure(cases: list[Case], torch: Any) -> list[dict[str, Any]]:
    sync = torch.cuda.synchronize if torch is not None else (lambda: None)
    rows = []
    for name, ours, theirs, peer in cases:
        for _ in range(200):  # warm: plans, memos, the peer's caches
            ours()
            if theirs is not None:
                theirs()
        ours().result()
        sync()

        def our_pipe(fn: Callable[[], Any] = ours) -> float:
            return per_call_pipelined(fn, lambda last: last.result())

        def their_pipe(fn: Callable[[], Any] | None = theirs) -> float:
            return per_call_pipelined(fn, lambda _last: sync())  # type: ignore[arg-type]

        def our_rt(fn: Callable[[], Any] = ours) -> float:
            return median_us(lambda: fn().result(), N_RT, warmup=20)

        def their_rt(fn: Callable[[], Any] | None = theirs) -> float:
            return median_us(lambda: (fn(), sync()), N_RT, warmup=20)  # type: ignore[misc]

        have = theirs is not None
        pipe = alternate(our_pipe, their_pipe if have else None)
        rt = alternate(our_rt, their_rt if have else None)
        row: dict[str, Any] = {"case": name, "peer": peer if have else "",
                               "pipelined_us": round(pipe[0], 2),
                               "peer_pipelined_us": round(pipe[1], 2) if have else "",
                               "pipelined_ratio": round(pipe[1] / pipe[0], 3) if have else "",
                               "round_trip_us": round(rt[0], 2),
                               "peer_round_trip_us": round(rt[1], 2) if have else "",
                               "round_trip_ratio": round(rt[1] / rt[0], 3) if have else ""}
        rows.append(row)
        print(row, flush=True)
    return rows


def profile(cases: list[Case], path: str) -> None:
    import cProfile
    import io
    import pstats

    text = []
    for name, ours, _theirs, _peer in cases:
        prof = cProfile.Profile()
        prof.enable()
        per_call_pipelined(ours, lambda last: last.result())
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
        text.append(f"== {name}: {N_PIPE} pipelined calls, all threads ==\n{buf.getvalue()}")
    with open(path, "w") as f:
        f.write("\n".join(text))


def _blocks(tid: int) -> int:
    """Voluntary context switches of thread ``tid`` (native id) of this process."""
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(int(line.split()[1]) for line in f
                    if line.startswith("voluntary_ctxt_switches"))


def cpu_legs(dev: Any, cases: list[Case], path: str) -> None:
    """Per pipelined call: wall, the caller's CPU, the device thread's CPU (µs), and the device
    thread's voluntary switches (blocks: on the mailbox, the GIL, an event)."""
    thread = dev._worker._thread
    clock = time.pthread_getcpuclockid(thread.ident)
    lines = ["| case | wall µs | caller CPU µs | device thread CPU µs | device blocks per call |",
             "|---|---|---|---|---|"]
    for name, ours, _theirs, _peer in cases:
        per_call_pipelined(ours, lambda last: last.result())
        walls, callers, devices, blocks = [], [], [], []
        for _ in range(RUNS):
            s0, d0, c0 = _blocks(thread.native_id), time.clock_gettime(clock), time.thread_time()
            walls.append(per_call_pipelined(ours, lambda last: last.result()))
            c1, d1, s1 = time.thread_time(), time.clock_gettime(clock), _blocks(thread.native_id)
            callers.append((c1 - c0) / N_PIPE * 1e6)
            devices.append((d1 - d0) / N_PIPE * 1e6)
            blocks.append((s1 - s0) / N_PIPE)
        med = statistics.median
        lines.append(f"| {name} | {med(walls):.1f} | {med(callers):.1f} | {med(devices):.1f} | "
                     f"{med(blocks):.3f} |")
        print(lines[-1], flush=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    try:
        import torch
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    try:
        import cupy
    except ImportError:
        cupy = None
    if torch is None:
        cupy = None
    dev = gpumsg.open_device(0)
    try:
        cases, notes = build_cases(dev, torch, cupy)
        if "--cpu" in sys.argv:
            cpu_legs(dev, cases, os.path.join(os.environ.get("OUT", "."), "small_ops_cpu.md"))
            return
        if "--profile" in sys.argv:
            profile(cases, os.path.join(os.environ.get("OUT", "."), "small_ops_profile.txt"))
            return
        rows = measure(cases, torch)
    finally:
        dev.close()
    notes = [
        f"pipelined: {N_PIPE} calls issued, then one wait (gpumsg: the last future; the peer: "
        f"torch.cuda.synchronize), µs per call; round trip: each call waited for, median of "
        f"{N_RT}; gpumsg's and the peer's runs alternate, medians of {RUNS}",
        "ratio = peer time / gpumsg time (> 1: gpumsg faster)",
        f"backend: {dev.backend}",
        *notes,
    ]
    write_results("small_ops", rows, notes,
                  ["case", "peer", "pipelined_us", "peer_pipelined_us", "pipelined_ratio",
                   "round_trip_us", "peer_round_trip_us", "round_trip_ratio"])


if __name__ == "__main__":
    main()
