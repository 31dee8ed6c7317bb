"""Per-message overhead: Stats round trip beside a bare thread+queue+Future echo; 64^3 SGEMM
round trip and pipelined beside torch ``mm``, CuPy ``matmul`` and a raw ctypes
``cublasSgemm_v2`` call (issue rate, and issue + synchronize)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from queue import SimpleQueue

import numpy as np
from _common import median_us, rate_us, write_results

import gpumsg

N_RT = 3000
N_PIPE = 5000


def bare_echo() -> tuple[float, float]:
    q: SimpleQueue = SimpleQueue()

    def worker() -> None:
        while True:
            fut = q.get()
            if fut is None:
                return
            fut.set_result(None)

    t = threading.Thread(target=worker, daemon=True)
    t.start()

    def round_trip() -> None:
        f: Future = Future()
        q.put(f)
        f.result()

    last: list[Future] = [Future()]

    def issue() -> None:
        f: Future = Future()
        q.put(f)
        last[0] = f

    rt = median_us(round_trip, N_RT)
    pipe = rate_us(issue, lambda: last[0].result(), N_PIPE)
    q.put(None)
    return rt, pipe


def main() -> None:
    rows, notes = [], []
    echo_rt, echo_pipe = bare_echo()
    dev = gpumsg.open_device(0)
    try:
        stats_rt = median_us(lambda: dev.stats().result(), N_RT)
        last = [dev.stats()]

        def stats_issue() -> None:
            last[0] = dev.stats()

        stats_pipe = rate_us(stats_issue, lambda: last[0].result(), N_PIPE)
        rows.append({"case": "Stats round trip", "gpumsg_us": stats_rt,
                     "peer": "thread+SimpleQueue+Future echo", "peer_us": echo_rt,
                     "ratio": stats_rt / echo_rt, "target": "<= 1.3x echo"})
        rows.append({"case": "Stats pipelined", "gpumsg_us": stats_pipe,
                     "peer": "thread+SimpleQueue+Future echo", "peer_us": echo_pipe,
                     "ratio": stats_pipe / echo_pipe, "target": ""})

        rng = np.random.default_rng()
        host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
        a, b = (dev.to_device(h).result() for h in host)
        c = dev.alloc((64, 64), np.float32).result()
        sg_rt = median_us(lambda: dev.sgemm(a, b, c, 64, 64, 64).result(), N_RT)
        lastg = [dev.sgemm(a, b, c, 64, 64, 64)]

        def sg_issue() -> None:
            lastg[0] = dev.sgemm(a, b, c, 64, 64, 64)

        sg_pipe = rate_us(sg_issue, lambda: lastg[0].result(), N_PIPE)
        out = dev.copy_to_host(c).result()
        err = np.abs(out - host[0].astype(np.float64) @ host[1]).max()
        notes.append(f"64^3 SGEMM result checked against NumPy float64: max abs error {err:.2e}")

        peers: dict[str, tuple[float, float]] = {}
        try:
            import torch

            torch.backends.cuda.matmul.allow_tf32 = False
            ta, tb = (torch.from_numpy(np.ascontiguousarray(h)).cuda() for h in host)
            tc = torch.empty(64, 64, device="cuda")
            peers["torch mm"] = (
                rate_us(lambda: torch.mm(ta, tb, out=tc), torch.cuda.synchronize, N_PIPE),
                median_us(lambda: (torch.mm(ta, tb, out=tc), torch.cuda.synchronize()), N_RT))
        except Exception as exc:  # noqa: BLE001
            notes.append(f"torch unavailable: {exc!r}")
        try:
            import cupy

            ca, cb = (cupy.asarray(h) for h in host)
            cc = cupy.empty((64, 64), cupy.float32)
            sync = cupy.cuda.Device().synchronize
            peers["CuPy matmul"] = (
                rate_us(lambda: cupy.matmul(ca, cb, out=cc), sync, N_PIPE),
                median_us(lambda: (cupy.matmul(ca, cb, out=cc), sync()), N_RT))
        except Exception as exc:  # noqa: BLE001
            notes.append(f"CuPy unavailable: {exc!r}")
        try:
            peers["ctypes cublasSgemm_v2"] = raw_cublas(a, b, c)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"raw cuBLAS unavailable: {exc!r}")
        for name, (issue_rate, issue_sync) in peers.items():
            rows.append({"case": "64^3 SGEMM pipelined (per op)", "gpumsg_us": sg_pipe,
                         "peer": f"{name} issue rate", "peer_us": issue_rate,
                         "ratio": sg_pipe / issue_rate, "target": "<= 15 us"})
            rows.append({"case": "64^3 SGEMM round trip", "gpumsg_us": sg_rt,
                         "peer": f"{name} issue+sync", "peer_us": issue_sync,
                         "ratio": sg_rt / issue_sync, "target": ""})
        if not peers:
            rows.append({"case": "64^3 SGEMM pipelined (per op)", "gpumsg_us": sg_pipe})
            rows.append({"case": "64^3 SGEMM round trip", "gpumsg_us": sg_rt})
    finally:
        dev.close()
    notes.append(f"medians; round trips over {N_RT} calls, pipelined = {N_PIPE} calls issued "
                 "then the last awaited, median of 5 runs")
    write_results("overhead", rows, notes,
                  ["case", "gpumsg_us", "peer", "peer_us", "ratio", "target"])


def raw_cublas(a: gpumsg.GpuBuffer, b: gpumsg.GpuBuffer, c: gpumsg.GpuBuffer
               ) -> tuple[float, float]:
    """The bare library call through ctypes on a stream of its own: the floor for any Python
    front end that calls cuBLAS per operation."""
    import ctypes

    from cuda.bindings import driver as cu

    from gpumsg.libs.loader import load

    lib = load("cublas")
    h = ctypes.c_void_p()
    lib.cublasCreate_v2(ctypes.byref(h))
    stream = cu.cuStreamCreate(1)[1]
    lib.cublasSetStream_v2(h, int(stream))
    fn = lib.cublasSgemm_v2
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    pa, pb = ctypes.byref(one), ctypes.byref(zero)
    A, B, C = a.raw_device_ptr(), b.raw_device_ptr(), c.raw_device_ptr()
    hv = h.value

    def issue() -> None:
        fn(hv, 0, 0, 64, 64, 64, pa, A, 64, B, 64, pb, C, 64)

    def sync() -> None:
        cu.cuStreamSynchronize(stream)

    out = (rate_us(issue, sync, N_PIPE), median_us(lambda: (issue(), sync()), N_RT))
    lib.cublasDestroy_v2(hv)
    cu.cuStreamDestroy(stream)
    return out


if __name__ == "__main__":
    main()
