"""Diagnostic (H100): where a pipelined allocation's time goes.

``bench_overhead``'s "alloc pipelined" row (2000 ``dev.alloc`` issued back to back and kept, the
last awaited) sums the client's Python, the device thread's Python, the driver call and what
the two threads lose handing the GIL to each other. This measures the pieces apart, on the idle
device, in one process:

- ``client``: ``dev.alloc`` with the mailbox replaced by a list (the client's work alone);
- ``handler``: the ``Alloc`` handler run on this thread over those messages (the device
  thread's work per message, without the loop);
- ``memory.allocate``: the device's memory stack alone; ``binding``: ``cuMemAllocFromPoolAsync``
  through cuda.bindings; ``ctypes CDLL`` / ``ctypes PyDLL``: the same call through ctypes,
  releasing / holding the GIL;
- the pipelined rates, switched in place round by round: gpumsg as it is; gpumsg with the
  backend's pool allocation through a ctypes call that holds the GIL; both with the cyclic
  garbage collector off; the bare service of ``bench_overhead`` (collector on and off).

    PYTHONPATH=$PWD python3 tools/alloc_legs.py [--rounds 9]

Writes ``$OUT/alloc_legs.json`` and ``.md`` when OUT is set.
"""
# ruff: noqa: B023 - each closure runs at once, within its round
from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, save_diagnostic  # noqa: E402
from bench_overhead import alloc_pipelined, start_bare  # noqa: E402

import gpumsg  # noqa: E402
from gpumsg.service.handlers import _alloc  # noqa: E402

N = 2000


def per_call_us(fn: Any, n: int = N) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n / 1e3


def held_pool_alloc() -> Any:
    """A CudaBackend.pool_alloc through ctypes that holds the GIL."""
    fn = ctypes.PyDLL("libcuda.so.1").cuMemAllocFromPoolAsync
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)
    fn.restype = ctypes.c_int
    out = ctypes.c_uint64()
    ref = ctypes.byref(out)

    def pool_alloc(pool: Any, nbytes: int, stream: Any) -> int:
        err = fn(ref, nbytes, int(pool), int(stream))
        if err:
            raise RuntimeError(f"cuMemAllocFromPoolAsync: {err}")
        return out.value

    return pool_alloc


def main() -> None:
    from cuda.bindings import driver as cu

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    opts = ap.parse_args()
    env = environment()
    rng = np.random.default_rng()
    host = [rng.standard_normal((64, 64)).astype(np.float32, order="F") for _ in range(2)]
    xh, yh = (rng.standard_normal(1 << 10).astype(np.float32) for _ in range(2))
    doc: dict[str, Any] = {"env": env, "legs": {}, "rates": {}}
    with gpumsg.open_device(0) as dev:
        svc, ops = start_bare(cu, host, xh, yh)
        post = svc.post
        dev.synchronize().result()
        ctx = dev._worker.ctx
        backend = ctx.backend
        stream = ctx.compute.obj
        pool = ctx.memory.upstream.pool if hasattr(ctx.memory, "upstream") else ctx.memory.pool

        # -- the pieces, on this thread (the device thread idles in its mailbox; start_bare
        # made the primary context current here) -----------------------------------------------
        legs: dict[str, list[float]] = {}

        def leg(name: str, value: float) -> None:
            legs.setdefault(name, []).append(value)

        cdll = ctypes.CDLL("libcuda.so.1").cuMemAllocFromPoolAsync
        pydll = ctypes.PyDLL("libcuda.so.1").cuMemAllocFromPoolAsync
        free_raw = ctypes.CDLL("libcuda.so.1").cuMemFreeAsync
        for f in (cdll, pydll):
            f.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)
            f.restype = ctypes.c_int
        free_raw.argtypes, free_raw.restype = (ctypes.c_uint64, ctypes.c_void_p), ctypes.c_int
        raw_pool, raw_stream = int(pool), int(stream)
        for _ in range(opts.rounds):
            sink: list = []
            put = dev._put
            dev._put = sink.append
            keep: list = []
            leg("client: dev.alloc, mailbox a list", per_call_us(
                lambda: keep.append(dev.alloc(256, np.float32))))
            dev._put = put
            it = iter(sink)
            leg("device: the Alloc handler", per_call_us(lambda: _alloc(ctx, *next(it))))
            for msg, _ in sink:
                a = ctx.buffers.pop(msg.out.id)
                ctx.memory.deallocate(a.ptr, msg.out.nbytes, stream)
            for f in keep:
                f.buffer._freed = True  # freed above: no Free from the finalizer
            keep.clear()
            ptrs: list[int] = []
            leg("memory.allocate (the stack)", per_call_us(
                lambda: ptrs.append(ctx.memory.allocate(1024, stream))))
            for p in ptrs:
                ctx.memory.deallocate(p, 1024, stream)
            ptrs.clear()
            leg("binding cuMemAllocFromPoolAsync", per_call_us(
                lambda: ptrs.append(int(cu.cuMemAllocFromPoolAsync(1024, pool, stream)[1]))))
            for name, fn in (("ctypes CDLL (GIL released)", cdll),
                             ("ctypes PyDLL (GIL held)", pydll)):
                for p in ptrs:
                    free_raw(p, raw_stream)
                ptrs.clear()
                out = ctypes.c_uint64()
                ref = ctypes.byref(out)

                def raw(fn: Any = fn, out: Any = out, ref: Any = ref) -> None:
                    fn(ref, 1024, raw_pool, raw_stream)
                    ptrs.append(out.value)

                leg(name, per_call_us(raw))
            for p in ptrs:
                free_raw(p, raw_stream)
            cu.cuStreamSynchronize(stream)
        doc["legs"] = {k: statistics.median(v) for k, v in legs.items()}

        # -- pipelined, switched in place -------------------------------------------------------
        binding_alloc = backend.pool_alloc
        held_alloc = held_pool_alloc()

        def release_ours(keep: list) -> None:
            keep.clear()
            dev.synchronize().result()

        def release_bare(keep: list) -> None:
            for f in keep:
                post(ops.free, f.result())
            post(ops.stats).result()

        def ours() -> float:
            return alloc_pipelined(lambda: dev.alloc(256, np.float32), release_ours)

        def bare() -> float:
            return alloc_pipelined(lambda: post(ops.alloc, 1024), release_bare)

        def with_alloc(fn: Any, measure: Any) -> Any:
            def run() -> float:
                dev.synchronize().result()
                backend.pool_alloc = fn
                try:
                    return measure()
                finally:
                    dev.synchronize().result()
                    backend.pool_alloc = binding_alloc
            return run

        def gc_off(measure: Any) -> Any:
            def run() -> float:
                gc.disable()
                try:
                    return measure()
                finally:
                    gc.enable()
            return run

        cases = {
            "gpumsg": with_alloc(binding_alloc, ours),
            "gpumsg, pool alloc holding the GIL": with_alloc(held_alloc, ours),
            "bare": bare,
            "gpumsg, collector off": gc_off(with_alloc(binding_alloc, ours)),
            "gpumsg, GIL held, collector off": gc_off(with_alloc(held_alloc, ours)),
            "bare, collector off": gc_off(bare),
        }
        seen: dict[str, list[float]] = {k: [] for k in cases}
        names = list(cases)
        for r in range(opts.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                seen[name].append(cases[name]())
        doc["rates"] = {k: {"median_us": statistics.median(v), "runs": v}
                        for k, v in seen.items()}
        svc.close()
        ops.close()
    lines = [
        "# where a pipelined allocation's time goes",
        "",
        f"{env.get('device', '?')} · driver {env.get('driver', '?')} · {env['date']} · "
        f"Python {env['python']}",
        "",
        "## the pieces (µs per call, this thread, device idle; medians of "
        f"{opts.rounds} rounds of {N})",
        "",
        "| piece | µs |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v:.2f} |" for k, v in doc["legs"].items()]
    lines += ["", f"## pipelined, µs per allocation ({N} issued and kept, the last awaited; "
              f"median of 3 repeats), medians of {opts.rounds} rounds switched in place", "",
              "| case | µs | min | max |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['median_us']:.2f} | {min(v['runs']):.2f} | {max(v['runs']):.2f} |"
              for k, v in doc["rates"].items()]
    text = "\n".join(lines)
    print(text)
    save_diagnostic("alloc_legs", doc, text)


if __name__ == "__main__":
    main()
