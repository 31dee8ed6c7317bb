"""Where the per-operation time goes (performance work on the GPU machine).

Times the pieces a message is made of (driver calls, raw library calls, futures), the round
trips of trivial and Stats messages, and the pipelined 64^3 SGEMM under the variants being
weighed: GEMM engine (cuBLASLt cached plan or cublasGemmEx) x client yielding the GIL after a
post; then large GEMMs per engine beside torch. Writes $OUT/profile.txt when OUT is set.
``--hot``: only cProfiles of the client and device threads over 64^3 SGEMMs
($OUT/profile_hot.txt).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from concurrent.futures import Future
from types import SimpleNamespace

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))

import numpy as np  # noqa: E402
from _common import median_us, rate_us  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.client import device as client_mod  # noqa: E402
from gpumsg.libs.cublas import handlers as cublas_mod  # noqa: E402
from gpumsg.messages import SnapshotContext  # noqa: E402

lines: list[str] = []


def say(text: str) -> None:
    print(text, flush=True)
    lines.append(text)


def raw_calls(dev: gpumsg.Device) -> None:
    from cuda.bindings import driver as cu

    from gpumsg.libs.cublaslt.handle import LtHandle
    from gpumsg.libs.loader import load

    cu.cuCtxSetCurrent(cu.cuDevicePrimaryCtxRetain(cu.cuDeviceGet(0)[1])[1])
    s = cu.cuStreamCreate(1)[1]
    say(f"cuMemGetInfo                  {median_us(cu.cuMemGetInfo, 2000):7.2f} us")
    say(f"Future() + set_result         {median_us(lambda: Future().set_result(1), 5000):7.2f} us")
    a, b, c = (dev.alloc((64, 64)).result() for _ in range(3))
    A, B, C = a.raw_device_ptr(), b.raw_device_ptr(), c.raw_device_ptr()
    lib = load("cublas")
    h = ctypes.c_void_p()
    lib.cublasCreate_v2(ctypes.byref(h))
    lib.cublasSetStream_v2(h, int(s))
    one, zero = ctypes.c_float(1), ctypes.c_float(0)
    pa, pb = ctypes.byref(one), ctypes.byref(zero)
    fn, hv = lib.cublasSgemm_v2, h.value
    sync = lambda: cu.cuStreamSynchronize(s)  # noqa: E731
    r = rate_us(lambda: fn(hv, 0, 0, 64, 64, 64, pa, A, 64, B, 64, pb, C, 64), sync, 5000)
    say(f"raw cublasSgemm_v2 issue rate {r:7.2f} us/op")
    gex = lib.cublasGemmEx
    r = rate_us(lambda: gex(hv, 0, 0, 64, 64, 64, pa, A, 0, 64, B, 0, 64, pb, C, 0, 64, 68, -1),
                sync, 5000)
    say(f"raw cublasGemmEx issue rate   {r:7.2f} us/op")
    mem = SimpleNamespace(allocate=lambda n, st: int(cu.cuMemAlloc(n)[1]),
                          deallocate=lambda p, n, st: cu.cuMemFree(p))
    fake = SimpleNamespace(memory=mem, compute=SimpleNamespace(obj=s), library=lambda n: None)
    lt = LtHandle(fake)
    lt.gemm(s, "f32", "default", "N", "N", 64, 64, 64, 1.0, A, 64, B, 64, 0.0, C, 64)
    r = rate_us(lambda: lt.gemm(s, "f32", "default", "N", "N", 64, 64, 64, 1.0, A, 64, B, 64,
                                0.0, C, 64), sync, 5000)
    say(f"LtHandle.gemm issue rate      {r:7.2f} us/op")
    plan = lt.cache.get(("f32", "default", "N", "N", 64, 64, 64, 64, 64, 64))
    alpha, beta = lt._scalars.get("f32", 1.0), lt._scalars.get("f32", 0.0)
    L = plan.layouts
    mm, lh, ws = lt.lib.cublasLtMatmul, lt.raw_handle, lt._ws
    algo = ctypes.byref(plan.algo)
    si = int(s)
    r = rate_us(lambda: mm(lh, plan.desc, alpha, A, L[0], B, L[1], beta, C, L[2], C, L[3], algo,
                           ws, plan.workspace, si), sync, 5000)
    say(f"raw cublasLtMatmul issue rate {r:7.2f} us/op")
    lt.close()
    lib.cublasDestroy_v2(hv)


def round_trips(dev: gpumsg.Device) -> None:
    import bench_overhead

    rt, pipe = bench_overhead.bare_echo()
    say(f"bare echo round trip          {rt:7.2f} us   pipelined {pipe:6.2f} us")
    snap = median_us(lambda: dev.send(SnapshotContext()).result(), 3000)
    say(f"SnapshotContext round trip    {snap:7.2f} us")
    say(f"Stats round trip              {median_us(lambda: dev.stats().result(), 3000):7.2f} us")


def pipelined(dev: gpumsg.Device, label: str) -> None:
    a = dev.to_device(np.random.rand(64, 64).astype(np.float32, order="F")).result()
    c = dev.alloc((64, 64)).result()
    last = [dev.synchronize()]

    def issue() -> None:
        last[0] = dev.sgemm(a, a, c, 64, 64, 64)

    r = rate_us(issue, lambda: last[0].result(), 5000)
    rt = median_us(lambda: dev.sgemm(a, a, c, 64, 64, 64).result(), 2000)
    x = dev.to_device(np.random.rand(4096).astype(np.float32)).result()
    lastd = [dev.synchronize()]

    def dot() -> None:
        lastd[0] = dev.cublas.dot(x, x)

    d = rate_us(dot, lambda: lastd[0].result(), 3000)
    stats_rt = median_us(lambda: dev.stats().result(), 2000)
    say(f"[{label}] sgemm64 pipelined {r:6.2f} us/op, round trip {rt:6.2f} us; dot pipelined "
        f"{d:6.2f} us/op; Stats rt {stats_rt:6.2f} us")


def big(dev: gpumsg.Device, torch: object) -> None:
    import bench_blas

    for name in ("tf32", "fp16", "bf16"):
        for engine in ("lt", "gemmex"):
            cublas_mod.GEMM_ENGINE = engine
            row = bench_blas.gemm_case(dev, torch, name, 4096)
            say(f"GEMM 4096 {name} engine={engine}: {row['gpumsg']:.1f} vs torch "
                f"{row['torch']:.1f} TFLOP/s (ratio {row['ratio']:.3f})")
    cublas_mod.GEMM_ENGINE = "auto"


def hot(out_dir: str, strided: bool = False) -> None:
    """cProfile of the client thread and of the device thread over pipelined 64^3 SGEMMs, then
    round trips (``--hot``): where the Python time per message goes, per function. With
    ``strided``, strided-batched 512 x 128^3 bf16 GEMMs instead (``--hot-strided``)."""
    import cProfile
    import io
    import pstats

    base = os.path.join(out_dir, "hot")
    # Python 3.12's cProfile (on sys.monitoring) sees every thread and allows one profiler at a
    # time: there the client's profile covers the device thread too. Before 3.12 each thread
    # needs its own (GPUMSG_PROFILE, read when the device thread starts).
    per_thread = sys.version_info < (3, 12)
    if per_thread:
        os.environ["GPUMSG_PROFILE"] = base
    dev = gpumsg.open_device(0)
    os.environ.pop("GPUMSG_PROFILE", None)
    if strided:
        s, batch = 128, 512
        bf16 = gpumsg.as_dtype("bf16")
        a = dev.to_device(np.random.rand(batch, s, s).astype(bf16)).result()
        c = dev.alloc((batch, s, s), "bf16", order="C").result()

        def call() -> Future:
            return dev.cublas.gemm_strided_batched(a, a, c, s, s, s, batch, s * s, s * s, s * s)
    else:
        a = dev.to_device(np.random.rand(64, 64).astype(np.float32, order="F")).result()
        c = dev.alloc((64, 64)).result()

        def call() -> Future:
            return dev.sgemm(a, a, c, 64, 64, 64)
    for _ in range(500):
        call()
    dev.synchronize().result()
    prof = cProfile.Profile()
    prof.enable()
    last = None
    for _ in range(10000):
        last = call()
    last.result()  # type: ignore[union-attr]
    for _ in range(2000):
        call().result()
    prof.disable()
    dev.close()
    profiles = [("client thread", pstats.Stats(prof))]
    if per_thread:
        profiles.append(("device thread", pstats.Stats(f"{base}.device0")))
    else:
        profiles[0] = ("all threads", profiles[0][1])
    what = "512 x 128^3 bf16 strided GEMMs" if strided else "64^3 SGEMMs"
    for label, stats in profiles:
        buf = io.StringIO()
        stats.stream = buf  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(30)
        say(f"== {label}: 10000 pipelined + 2000 round-trip {what} (cProfile) ==")
        say(buf.getvalue())


def main() -> None:
    if "--hot" in sys.argv or "--hot-strided" in sys.argv:
        strided = "--hot-strided" in sys.argv
        hot(os.environ.get("OUT", "."), strided)
        if os.environ.get("OUT"):
            name = "profile_hot_strided.txt" if strided else "profile_hot.txt"
            with open(os.path.join(os.environ["OUT"], name), "w") as f:
                f.write("\n".join(lines))
        return
    import torch

    dev = gpumsg.open_device(0)
    say(repr(dev))
    raw_calls(dev)
    round_trips(dev)
    for engine in ("lt", "gemmex"):
        for yielding in (False, True):
            cublas_mod.GEMM_ENGINE = engine
            client_mod.YIELD_AFTER_POST = yielding
            pipelined(dev, f"engine={engine} yield={yielding}")
    client_mod.YIELD_AFTER_POST = False
    cublas_mod.GEMM_ENGINE = "auto"
    big(dev, torch)
    dev.close()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "profile.txt"), "w") as f:
            f.write("\n".join(lines))
    time.sleep(0)


if __name__ == "__main__":
    main()
