"""Where the per-operation time goes (performance work on the GPU machine).

Times the pieces a message is made of (driver calls, ctypes cuBLAS, futures, queues), the round
trips of trivial and Stats messages, and profiles the pipelined 64^3 SGEMM on the client and on
the device thread. Prints a report; writes it to $OUT/profile.txt when OUT is set.
"""

from __future__ import annotations

import cProfile
import ctypes
import io
import os
import pstats
import sys
import threading
import time
from concurrent.futures import Future
from queue import SimpleQueue

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

import numpy as np  # noqa: E402
from _common import median_us, rate_us  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.messages import SnapshotContext  # noqa: E402

lines: list[str] = []


def say(text: str) -> None:
    print(text, flush=True)
    lines.append(text)


def pieces(dev: gpumsg.Device) -> None:
    from cuda.bindings import driver as cu

    from gpumsg.libs.loader import load

    ctx = dev._worker.ctx
    cu.cuCtxSetCurrent(cu.cuDevicePrimaryCtxRetain(cu.cuDeviceGet(0)[1])[1])
    pool = [r for r in ctx.memory.stack() if hasattr(r, "pool")][0].pool
    attr = cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT
    s = cu.cuStreamCreate(1)[1]
    ev = cu.cuEventCreate(2)[1]
    say(f"cuMemGetInfo                 {median_us(cu.cuMemGetInfo, 2000):7.2f} us")
    say(f"cuMemPoolGetAttribute        {median_us(lambda: cu.cuMemPoolGetAttribute(pool, attr), 2000):7.2f} us")
    say(f"cuEventRecord                {median_us(lambda: cu.cuEventRecord(ev, s), 2000):7.2f} us")
    say(f"cuEventQuery                 {median_us(lambda: cu.cuEventQuery(ev), 2000):7.2f} us")
    say(f"cuStreamWaitEvent            {median_us(lambda: cu.cuStreamWaitEvent(s, ev, 0), 2000):7.2f} us")
    say(f"Future()                     {median_us(Future, 5000):7.2f} us")
    say(f"Future().set_result          {median_us(lambda: Future().set_result(1), 5000):7.2f} us")
    q: SimpleQueue = SimpleQueue()
    say(f"SimpleQueue put+get          {median_us(lambda: (q.put(1), q.get()), 5000):7.2f} us")
    a = dev.alloc((64, 64)).result()
    b = dev.alloc((64, 64)).result()
    c = dev.alloc((64, 64)).result()
    say(f"Sgemm message construction   {median_us(lambda: gpumsg.messages.Sgemm(a.ref, b.ref, c.ref, 64, 64, 64), 5000):7.2f} us")
    lib = load("cublas")
    h = ctypes.c_void_p()
    lib.cublasCreate_v2(ctypes.byref(h))
    lib.cublasSetStream_v2(h, int(s))
    one, zero = ctypes.c_float(1), ctypes.c_float(0)
    A, B, C = a.raw_device_ptr(), b.raw_device_ptr(), c.raw_device_ptr()
    fn, hv = lib.cublasSgemm_v2, h.value
    pa, pb = ctypes.byref(one), ctypes.byref(zero)
    rate = rate_us(lambda: fn(hv, 0, 0, 64, 64, 64, pa, A, 64, B, 64, pb, C, 64),
                   lambda: cu.cuStreamSynchronize(s), 5000)
    say(f"ctypes cublasSgemm issue rate {rate:7.2f} us/op (own stream)")
    t0 = time.perf_counter_ns()
    for _ in range(2000):
        fn(hv, 0, 0, 64, 64, 64, pa, A, 64, B, 64, pb, C, 64)
    t1 = time.perf_counter_ns()
    cu.cuStreamSynchronize(s)
    say(f"ctypes cublasSgemm call (host) {(t1 - t0) / 2000 / 1e3:6.2f} us/op before sync")
    lib.cublasDestroy_v2(hv)


def round_trips(dev: gpumsg.Device) -> None:
    import bench_overhead

    rt, pipe = bench_overhead.bare_echo()
    say(f"bare echo round trip         {rt:7.2f} us   pipelined {pipe:6.2f} us")
    say(f"SnapshotContext round trip   {median_us(lambda: dev.send(SnapshotContext()).result(), 3000):7.2f} us")
    say(f"Stats round trip             {median_us(lambda: dev.stats().result(), 3000):7.2f} us")


def pipelined(dev: gpumsg.Device, label: str) -> None:
    a = dev.to_device(np.random.rand(64, 64).astype(np.float32, order="F")).result()
    c = dev.alloc((64, 64)).result()
    last = [dev.synchronize()]

    def issue() -> None:
        last[0] = dev.sgemm(a, a, c, 64, 64, 64)

    r = rate_us(issue, lambda: last[0].result(), 5000)
    rt = median_us(lambda: dev.sgemm(a, a, c, 64, 64, 64).result(), 2000)
    say(f"[{label}] 64^3 sgemm pipelined {r:6.2f} us/op, round trip {rt:6.2f} us")


def profile_client(dev: gpumsg.Device) -> None:
    a = dev.to_device(np.random.rand(64, 64).astype(np.float32, order="F")).result()
    c = dev.alloc((64, 64)).result()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5000):
        f = dev.sgemm(a, a, c, 64, 64, 64)
    f.result()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    say("client profile (pipelined sgemm):\n" + out.getvalue())


def main() -> None:
    dev = gpumsg.open_device(0)
    say(repr(dev))
    pieces(dev)
    round_trips(dev)
    pipelined(dev, "switchinterval 5ms")
    old = sys.getswitchinterval()
    sys.setswitchinterval(20e-6)
    pipelined(dev, "switchinterval 20us")
    sys.setswitchinterval(old)
    profile_client(dev)
    dev.close()
    # the device thread under cProfile
    os.environ["GPUMSG_PROFILE"] = "/tmp/gpumsg-prof"
    dev = gpumsg.open_device(0)
    pipelined(dev, "device thread profiled")
    dev.close()
    out = io.StringIO()
    pstats.Stats("/tmp/gpumsg-prof.device0", stream=out).sort_stats("tottime").print_stats(15)
    say("device thread profile:\n" + out.getvalue())
    threads = [t.name for t in threading.enumerate()]
    say(f"threads alive at the end: {threads}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "profile.txt"), "w") as f:
            f.write("\n".join(lines))


if __name__ == "__main__":
    main()
