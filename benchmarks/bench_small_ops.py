"""Small, host-bound operations of every library beside torch and CuPy in the same run: what
one message costs once the GPU work is a few microseconds.

Each case is timed two ways, gpumsg's and the peers' runs alternating (medians of 5):
pipelined (``N_PIPE`` calls issued, then one wait; µs per call) and round trip (each call
waited for; median µs). The cases write into preallocated outputs where the API allows one
(``execute(plan, x, out)``, ``spmv(m, x, y)``, ``normal(out=)``, ...), as the peer does with
``out=`` or an in-place method; the NumPy-shaped FFT allocates its output per call on every
side. A peer without the call leaves its column empty. Every gpumsg result is checked
against NumPy/SciPy in float64 first. SMALL_OPS_N_PIPE and SMALL_OPS_N_RT shorten a trial run.

``--profile``: cProfile (Python 3.12 sees every thread) of each gpumsg case's pipelined
calls, the top functions by own time, written to ``small_ops_profile.txt``. ``--cpu``: per
pipelined call, the wall time beside the CPU time of the calling thread and of the device
thread, and the process's voluntary context switches (written to ``small_ops_cpu.md``).

Writes ``small_ops.{json,md}`` to the output folder.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from _common import api, median_us, results_dir, write_results

import gpumsg

N_PIPE = int(os.environ.get("SMALL_OPS_N_PIPE", "2000"))
N_RT = int(os.environ.get("SMALL_OPS_N_RT", "1000"))
RUNS = 5
#: outputs the cycling SGEMM case writes in turn
CYCLE = 100
KERNEL = r"""
extern "C" __global__ void scale(float* a, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= s;
}
"""

def per_call_pipelined(issue: Callable[[], Any], finish: Callable[[Any], Any]) -> float:
    t0 = time.perf_counter()
    last = None
    for _ in range(N_PIPE):
        last = issue()
    finish(last)
    return (time.perf_counter() - t0) / N_PIPE * 1e6


def alternate(timers: list[Callable[[], float] | None]) -> list[float | None]:
    """Medians of ``RUNS`` runs of each timer (None: no such side), the runs alternating."""
    runs: list[list[float]] = [[] for _ in timers]
    for _ in range(RUNS):
        for timer, out in zip(timers, runs):
            if timer is not None:
                out.append(timer())
    return [statistics.median(r) if r else None for r in runs]


@dataclass
class Case:
    """One small operation: gpumsg's call and the peers' calls doing the same work (None where
    the peer has no counterpart)."""

    name: str
    ours: Callable[[], Any]
    torch: Callable[[], Any] | None = None
    torch_name: str = ""
    cupy: Callable[[], Any] | None = None
    cupy_name: str = ""


def _peer(fn: Any) -> Callable[[], Any] | None:
    """``fn`` if one call of it works (a peer's version may lack the call), else None."""
    if not fn:
        return None
    try:
        fn()
    except Exception:  # noqa: BLE001 - a missing peer call shows as an empty column
        return None
    return fn


def build_cases(dev: Any, torch: Any, cupy: Any) -> tuple[list[Case], list[str]]:
    """The cases, each checked once against a float64 reference; and notes. A library whose
    gpumsg call fails to build is left out with a note (the others still run)."""
    rng = np.random.default_rng()
    notes: list[str] = []
    cases: list[Case] = []
    for builder in (_gemm_cases, _fft_cases, _sparse_cases, _rng_cases, _blas1_cases,
                    _kernel_cases, _driver_cases):
        try:
            cases += builder(dev, torch, cupy, rng)
        except Exception as exc:  # noqa: BLE001 - say so and go on with the other libraries
            notes.append(f"{builder.__name__[1:]} left out: {type(exc).__name__}: {exc}")
            print(notes[-1], flush=True)
    notes.append("every gpumsg case was checked once against NumPy/SciPy in float64 (the FFTs to "
                 "1e-4 of the largest magnitude, SpMV and axpy to 1e-4/1e-5, the kernel to 1e-6, "
                 "the copy exactly, the normal draw's mean and std to 0.1)")
    return cases, notes


def _gemm_cases(dev: Any, torch: Any, cupy: Any, rng: Any) -> list[Case]:
    cases = []
    # the reference: 64^3 SGEMM, gpumsg's leanest path (bench_overhead's case)
    ha, hb = (rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2))
    ga, gb = dev.to_device(ha).result(), dev.to_device(hb).result()
    gc = dev.alloc((64, 64), np.float32, order="F").result()
    sgemm = api(dev, "sgemm", "cublas.sgemm")
    sgemm(ga, gb, gc, 64, 64, 64).result()
    got = dev.copy_to_host(gc).result()
    assert np.allclose(got, ha.astype(np.float64) @ hb, rtol=1e-4, atol=1e-4), "sgemm"
    ta_ = tb_ = tc_ = ca_ = cb_ = cc_ = None
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 math on every side
        ta_, tb_ = torch.from_numpy(ha).cuda(), torch.from_numpy(hb).cuda()
        tc_ = torch.empty(64, 64, device="cuda")
    if cupy is not None:
        ca_, cb_ = cupy.asarray(ha), cupy.asarray(hb)
        cc_ = cupy.empty((64, 64), np.float32)
    cases.append(Case("SGEMM 64^3 (reference)", lambda: sgemm(ga, gb, gc, 64, 64, 64),
                      _peer(torch and (lambda: torch.mm(ta_, tb_, out=tc_))), "torch.mm(out=)",
                      _peer(cupy and (lambda: cupy.matmul(ca_, cb_, out=cc_))),
                      "cupy.matmul(out=)"))

    # the same product NumPy-shaped: `matmul(a, b)` of C-ordered buffers, a new output
    matmul = api(dev, "linalg.matmul", "linalg.matmul")
    ca, cb = (dev.to_device(np.ascontiguousarray(h)).result() for h in (ha, hb))
    got = dev.copy_to_host(matmul(ca, cb)).result()
    assert np.allclose(got, ha.astype(np.float64) @ hb, rtol=1e-4, atol=1e-4), "matmul"
    cases.append(Case("matmul 64^3 f32, new output", lambda: matmul(ca, cb),
                      _peer(torch and (lambda: torch.mm(ta_, tb_))), "torch.mm",
                      _peer(cupy and (lambda: cupy.matmul(ca_, cb_))), "cupy.matmul"))
    co = dev.alloc((64, 64), np.float32, order="C").result()
    cases.append(Case("matmul 64^3 f32 into out", lambda: matmul(ca, cb, out=co),
                      _peer(torch and (lambda: torch.mm(ta_, tb_, out=tc_))), "torch.mm(out=)",
                      _peer(cupy and (lambda: cupy.matmul(ca_, cb_, out=cc_))),
                      "cupy.matmul(out=)"))

    # the same SGEMM into 100 outputs in turn: more distinct repeated calls than a small cache
    # of replayed graphs would hold
    outs = [dev.alloc((64, 64), np.float32, order="F").result() for _ in range(CYCLE)]
    turn = [0]

    def cycling() -> Any:
        i = turn[0] = (turn[0] + 1) % CYCLE
        return sgemm(ga, gb, outs[i], 64, 64, 64)

    tcycling = ccycling = None
    if torch is not None:
        touts = [torch.empty(64, 64, device="cuda") for _ in range(CYCLE)]
        tturn = [0]

        def tcycling() -> Any:
            i = tturn[0] = (tturn[0] + 1) % CYCLE
            return torch.mm(ta_, tb_, out=touts[i])

    if cupy is not None:
        couts = [cupy.empty((64, 64), np.float32) for _ in range(CYCLE)]
        cturn = [0]

        def ccycling() -> Any:
            i = cturn[0] = (cturn[0] + 1) % CYCLE
            return cupy.matmul(ca_, cb_, out=couts[i])

    cases.append(Case(f"SGEMM 64^3 into {CYCLE} outputs in turn", cycling, _peer(tcycling),
                      "torch.mm(out=)", _peer(ccycling), "cupy.matmul(out=)"))
    return cases


def _fft_cases(dev: Any, torch: Any, cupy: Any, rng: Any) -> list[Case]:
    """cuFFT: 4 x 4096 c64, explicit plan into a kept output, and NumPy-shaped."""
    hx = (rng.standard_normal((4, 4096)) + 1j * rng.standard_normal((4, 4096))).astype(np.complex64)
    x = dev.to_device(hx).result()
    out = dev.alloc(hx.shape, np.complex64, order="C").result()
    plan = api(dev, "cufft.plan", "cufft.plan")((4096,), 4, "c2c", "c64")
    plan.result()
    execute = api(dev, "cufft.execute", "cufft.execute")
    ref = np.fft.fft(hx.astype(np.complex128), axis=-1)
    execute(plan, x, out).result()
    got = dev.copy_to_host(out).result().reshape(hx.shape)
    assert np.abs(got - ref).max() < 1e-4 * np.abs(ref).max(), "fft execute"
    got = dev.copy_to_host(dev.fft.fft(x).result()).result()
    assert np.abs(got.reshape(hx.shape) - ref).max() < 1e-4 * np.abs(ref).max(), "fft"
    tx = to = cx = None
    if torch is not None:
        tx = torch.from_numpy(hx).cuda()
        to = torch.empty_like(tx)
    if cupy is not None:
        cx = cupy.asarray(hx)
    return [
        Case("FFT c64 4 x 4096, explicit plan into out", lambda: execute(plan, x, out),
             _peer(torch and (lambda: torch.fft.fft(tx, out=to))), "torch.fft.fft(out=)"),
        Case("FFT c64 4 x 4096, NumPy-shaped (new output)", lambda: dev.fft.fft(x),
             _peer(torch and (lambda: torch.fft.fft(tx))), "torch.fft.fft",
             _peer(cupy and (lambda: cupy.fft.fft(cx))), "cupy.fft.fft"),
        # the NumPy-shaped FFT's other part alone: an output allocated, then dropped
        Case("new 128 KiB buffer, dropped at once",
             lambda: dev.alloc(hx.shape, np.complex64, order="C"),
             _peer(torch and (lambda: torch.empty(hx.shape, dtype=torch.complex64,
                                                  device="cuda"))), "torch.empty",
             _peer(cupy and (lambda: cupy.empty(hx.shape, np.complex64))), "cupy.empty"),
    ]


def _sparse_cases(dev: Any, torch: Any, cupy: Any, rng: Any) -> list[Case]:
    """cuSPARSE: SpMV 10k x 10k, 10 per row, f32, into a kept y."""
    n = 10_000
    a = sp.random(n, n, density=10 / n, format="csr", dtype=np.float32, random_state=rng)
    hv = rng.standard_normal(n).astype(np.float32)
    m = api(dev, "cusparse.csr", "cusparse.csr")(a)
    spmv = api(dev, "cusparse.spmv", "cusparse.spmv")
    v = dev.to_device(hv).result()
    yv = dev.alloc((n,), np.float32, order="C").result()
    spmv(m, v, yv).result()
    ref_y = a.astype(np.float64) @ hv.astype(np.float64)
    got = dev.copy_to_host(yv).result()
    assert np.abs(got - ref_y).max() < 1e-4 * (1 + np.abs(ref_y).max()), "spmv"
    theirs = cupys = None
    if torch is not None:
        ta = torch.sparse_csr_tensor(torch.from_numpy(a.indptr.astype(np.int64)),
                                     torch.from_numpy(a.indices.astype(np.int64)),
                                     torch.from_numpy(a.data), size=a.shape).cuda()
        tv = torch.from_numpy(hv).cuda()
        ty = torch.empty(n, device="cuda")

        def theirs() -> Any:
            return torch.mv(ta, tv, out=ty)

    if cupy is not None:
        import cupyx.cusparse
        import cupyx.scipy.sparse

        ca = cupyx.scipy.sparse.csr_matrix(a)
        cv, cy = cupy.asarray(hv), cupy.empty(n, np.float32)

        def cupys() -> Any:
            return cupyx.cusparse.spmv(ca, cv, y=cy)

    return [Case("SpMV CSR 10k x 10k, 10/row, f32, into y", lambda: spmv(m, v, yv),
                 _peer(theirs), "torch.mv(csr, out=)", _peer(cupys), "cupyx.cusparse.spmv(y=)")]


def _rng_cases(dev: Any, torch: Any, cupy: Any, rng: Any) -> list[Case]:
    """cuRAND: 4096 normal f32 into a kept buffer, and a new output."""
    gen = api(dev, "curand.generator", "curand.generator")("philox", seed=1234)
    r = dev.alloc((4096,), np.float32, order="C").result()
    gen.normal(out=r, mean=0.0, std=1.0).result()
    got = dev.copy_to_host(r).result()
    assert abs(got.mean()) < 0.1 and abs(got.std() - 1) < 0.1, "normal"
    got = dev.copy_to_host(gen.normal(4096)).result()
    assert abs(got.mean()) < 0.1 and abs(got.std() - 1) < 0.1, "normal, new output"
    tr = torch.empty(4096, device="cuda") if torch is not None else None
    cgen = cr = None
    if cupy is not None:
        cgen = cupy.random.default_rng(1234)
        cr = cupy.empty(4096, np.float32)
    return [
        Case("cuRAND normal f32 4096 into out", lambda: gen.normal(out=r),
             _peer(torch and (lambda: tr.normal_())), "tensor.normal_()",
             _peer(cupy and (lambda: cgen.standard_normal(4096, np.float32, out=cr))),
             "Generator.standard_normal(out=)"),
        Case("cuRAND normal f32 4096, new output", lambda: gen.normal(4096),
             _peer(torch and (lambda: torch.randn(4096, device="cuda"))), "torch.randn",
             _peer(cupy and (lambda: cgen.standard_normal(4096, np.float32))),
             "Generator.standard_normal"),
    ]


def _blas1_cases(dev: Any, torch: Any, cupy: Any, rng: Any) -> list[Case]:
    """cuBLAS level 1: axpy 4096 f32."""
    hp, hq = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    p, q = dev.to_device(hp).result(), dev.to_device(hq).result()
    axpy = api(dev, "cublas.axpy", "cublas.axpy")
    axpy(p, q, 0.5).result()
    got = dev.copy_to_host(q).result()
    assert np.allclose(got, hq.astype(np.float64) + 0.5 * hp, rtol=1e-5, atol=1e-5), "axpy"
    theirs = cupys = None
    if torch is not None:
        tp, tq = torch.from_numpy(hp).cuda(), torch.from_numpy(hq).cuda()

        def theirs() -> Any:
            return tq.add_(tp, alpha=0.5)

    if cupy is not None:
        import cupy.cublas

        cp_, cq = cupy.asarray(hp), cupy.asarray(hq)
        alpha = np.float32(0.5)

        def cupys() -> Any:
            return cupy.cublas.axpy(alpha, cp_, cq)

    return [Case("axpy f32 4096", lambda: axpy(p, q, 0.5), _peer(theirs),
                 "tensor.add_(alpha=)", _peer(cupys), "cupy.cublas.axpy")]


def _kernel_cases(dev: Any, torch: Any, cupy: Any, rng: Any) -> list[Case]:
    """A compiled kernel: scale 4096 f32 (the GPU only: the simulator compiles nothing)."""
    if dev.backend != "cuda":
        return []
    kern = dev.compile(KERNEL, "scale").result()
    hk = rng.standard_normal(4096).astype(np.float32)
    k = dev.to_device(hk).result()
    dev.launch(kern, (16,), (256,), (k, np.float32(1.5), np.int32(4096))).result()
    got = dev.copy_to_host(k).result()
    assert np.allclose(got, hk.astype(np.float64) * 1.5, rtol=1e-6), "launch"
    cupys = None
    if cupy is not None:
        ck = cupy.RawKernel(KERNEL, "scale")
        ck_arr = cupy.asarray(hk)

        def cupys() -> Any:
            return ck((16,), (256,), (ck_arr, np.float32(1.0), np.int32(4096)))

    args = (k, np.float32(1.0), np.int32(4096))
    return [Case("kernel launch, 4096 f32 scale", lambda: dev.launch(kern, (16,), (256,), args),
                 cupy=_peer(cupys), cupy_name="cupy.RawKernel")]


def _driver_cases(dev: Any, torch: Any, cupy: Any, rng: Any) -> list[Case]:
    """The driver: memset and device-to-device copy of 4 KiB; 1 KiB to a new buffer and back
    to a new array (the round trips of a small upload and download)."""
    hs = rng.standard_normal(1024).astype(np.float32)
    s, d = dev.to_device(hs).result(), dev.alloc((1024,), np.float32).result()
    dev.copy_bytes(d, s, 4096).result()
    assert np.array_equal(dev.copy_to_host(d).result(), hs), "copy"
    h1 = rng.standard_normal(256).astype(np.float32)  # 1 KiB
    g1 = dev.to_device(h1).result()
    assert np.array_equal(dev.copy_to_host(g1).result(), h1), "1 KiB copies"
    ts = td = cs = cd = t1 = c1 = None
    if torch is not None:
        ts, td = torch.from_numpy(hs).cuda(), torch.empty(1024, device="cuda")
        t1 = torch.from_numpy(h1).cuda()
    if cupy is not None:
        cs, cd = cupy.asarray(hs), cupy.empty(1024, np.float32)
        c1 = cupy.asarray(h1)
    return [
        Case("to_device 1 KiB (new buffer)", lambda: dev.to_device(h1),
             _peer(torch and (lambda: torch.from_numpy(h1).cuda())), "from_numpy(h).cuda()",
             _peer(cupy and (lambda: cupy.asarray(h1))), "cupy.asarray"),
        Case("copy_to_host 1 KiB (new array)", lambda: dev.copy_to_host(g1),
             _peer(torch and (lambda: t1.cpu())), "tensor.cpu()",
             _peer(cupy and (lambda: cupy.asnumpy(c1))), "cupy.asnumpy"),
        Case("device-to-device copy 4 KiB", lambda: dev.copy_bytes(d, s, 4096),
             _peer(torch and (lambda: td.copy_(ts))), "tensor.copy_",
             _peer(cupy and (lambda: cupy.copyto(cd, cs))), "cupy.copyto"),
        Case("memset 4 KiB", lambda: dev.memset(d, 0),
             _peer(torch and (lambda: td.zero_())), "tensor.zero_()",
             _peer(cupy and (lambda: cd.fill(0))), "ndarray.fill(0)"),
    ]


def _pipelined(fn: Callable[[], Any], sync: Callable[[], Any] | None) -> float:
    """µs per call of ``N_PIPE`` calls then one wait (gpumsg: the last future; a peer: its
    device synchronize)."""
    if sync is None:
        return per_call_pipelined(fn, lambda last: last.result())
    return per_call_pipelined(fn, lambda _last: sync())


def _round_trip(fn: Callable[[], Any], sync: Callable[[], Any] | None) -> float:
    """Median µs of a call waited for."""
    if sync is None:
        return median_us(lambda: fn().result(), N_RT, warmup=20)
    return median_us(lambda: (fn(), sync()), N_RT, warmup=20)


def measure(cases: list[Case], torch: Any, cupy: Any) -> list[dict[str, Any]]:
    tsync = torch.cuda.synchronize if torch is not None else None
    csync = cupy.cuda.runtime.deviceSynchronize if cupy is not None else None
    rows = []
    for case in cases:
        sides = [(case.ours, None), (case.torch, tsync), (case.cupy, csync)]
        for _ in range(200):  # warm: plans, memos, the peers' caches
            for fn, _sync in sides:
                if fn is not None:
                    fn()
        case.ours().result()
        for sync in (tsync, csync):
            if sync is not None:
                sync()
        row: dict[str, Any] = {"case": case.name, "peer": case.torch_name if case.torch else "",
                               "cupy": case.cupy_name if case.cupy else ""}
        for label, timer in (("pipelined", _pipelined), ("round_trip", _round_trip)):
            ours, theirs, cupys = alternate(
                [functools.partial(timer, fn, sync) if fn is not None else None
                 for fn, sync in sides])
            assert ours is not None
            row[f"{label}_us"] = round(ours, 2)
            row[f"peer_{label}_us"] = round(theirs, 2) if theirs else ""
            row[f"{label}_ratio"] = round(theirs / ours, 3) if theirs else ""
            row[f"cupy_{label}_us"] = round(cupys, 2) if cupys else ""
            row[f"cupy_{label}_ratio"] = round(cupys / ours, 3) if cupys else ""
        rows.append(row)
        print(row, flush=True)
    return rows

def profile(cases: list[Case], path: str) -> None:
    import cProfile
    import io
    import pstats

    text = []
    for case in cases:
        name, ours = case.name, case.ours
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
    for case in cases:
        name, ours = case.name, case.ours
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
        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no CuPy, or no GPU for it
        cupy = None
    dev = gpumsg.open_device(0)
    try:
        cases, notes = build_cases(dev, torch, cupy)
        if "--cpu" in sys.argv:
            cpu_legs(dev, cases, os.path.join(results_dir(), "small_ops_cpu.md"))
            return
        if "--profile" in sys.argv:
            profile(cases, os.path.join(results_dir(), "small_ops_profile.txt"))
            return
        rows = measure(cases, torch, cupy)
    finally:
        dev.close()
    notes = [
        f"pipelined: {N_PIPE} calls issued, then one wait (gpumsg: the last future; torch and "
        f"CuPy: their device synchronize), µs per call; round trip: each call waited for, "
        f"median of {N_RT}; gpumsg's and the peers' runs alternate, medians of {RUNS}",
        "ratio = peer time / gpumsg time (> 1: gpumsg faster); peer = torch",
        f"backend: {dev.backend}",
        *notes,
    ]
    write_results("small_ops", rows, notes,
                  ["case", "pipelined_us", "peer_pipelined_us", "cupy_pipelined_us",
                   "round_trip_us", "peer_round_trip_us", "cupy_round_trip_us", "peer", "cupy"])


if __name__ == "__main__":
    main()
