"""Diagnostic (GPU): what a 64 MiB host<->device copy costs by the kind of page-locked host
memory it uses, outside gpumsg and inside it.

Raw part (cuda.bindings, one stream, no gpumsg): the same copy from and to host memory that is
``cuMemHostAlloc``'d (thread isolation's pinned blocks), a shared-memory segment page-locked
with ``cuMemHostRegister`` (process isolation's blocks), the same with transparent huge pages
asked for (``madvise(MADV_HUGEPAGE)`` before first touch), and anonymous ``mmap`` memory, with
and without huge pages. Per kind: the DMA's own time (events around each copy), the wall time of
a copy and its ``cuStreamSynchronize``, and four copies in flight per wait; medians, the kinds
measured in turn, round by round. Also the machine's THP settings and how much of each buffer
the kernel did back with huge pages (``/proc/self/smaps``).

gpumsg part: ``copy_from_host``/``copy_to_host`` of a pinned buffer (``alloc_pinned``), one copy
per wait, thread isolation beside process isolation, alternating.

    PYTHONPATH=$PWD python3 tools/host_dma_probe.py [--mib 64] [--rounds 5] [--copies 10]

Writes ``$OUT/host_dma_probe.json`` and ``.md`` when OUT is set.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time
from multiprocessing import shared_memory
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
from _common import environment, save_diagnostic  # noqa: E402

MiB = 1 << 20


def _check(result: Any, what: str) -> Any:
    err = result[0] if isinstance(result, tuple) else result
    if int(err):
        raise RuntimeError(f"{what}: {err}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def thp_settings() -> dict[str, str]:
    out = {}
    for name in ("enabled", "shmem_enabled", "defrag"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as f:
                out[name] = f.read().strip()
        except OSError as exc:
            out[name] = f"unreadable ({exc})"
    try:
        with open("/proc/meminfo") as f:
            out["meminfo"] = "; ".join(line.strip() for line in f
                                       if "Huge" in line or "ShmemPmd" in line)
    except OSError:
        pass
    return out


def huge_kib(addr: int, nbytes: int) -> int:
    """KiB of [addr, addr+nbytes) the kernel maps with huge pages (AnonHugePages or
    ShmemPmdMapped of the mappings that overlap it)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo < addr + nbytes and hi > addr
            elif inside and head in ("AnonHugePages:", "ShmemPmdMapped:", "FilePmdMapped:"):
                total += int(line.split()[1])
    return total


class Host:
    """One page-locked host buffer of a kind: ``ptr``, ``array`` (uint8), ``close()``."""

    def __init__(self, cu: Any, kind: str, nbytes: int) -> None:
        self.cu, self.kind, self.nbytes = cu, kind, nbytes
        self._keep: Any = None
        self.registered = False
        if kind == "hostalloc":
            self.ptr = int(_check(cu.cuMemHostAlloc(nbytes, 1), "cuMemHostAlloc"))
            import ctypes

            self.array = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(self.ptr))
        else:
            if kind.startswith("shm"):
                seg = shared_memory.SharedMemory(create=True, size=nbytes)
                mm = seg._mmap  # type: ignore[attr-defined]
                self._keep = seg
            else:
                mm = mmap.mmap(-1, nbytes)
                self._keep = mm
            if kind.endswith("_thp"):
                mm.madvise(mmap.MADV_HUGEPAGE)
            self.array = np.frombuffer(mm, np.uint8, nbytes)
            self.ptr = self.array.ctypes.data
        self.array[:] = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
        if kind != "hostalloc":
            _check(cu.cuMemHostRegister(self.ptr, nbytes, 1), "cuMemHostRegister")
            self.registered = True
        self.huge_kib = huge_kib(self.ptr, nbytes) if kind != "hostalloc" else -1

    def close(self) -> None:
        cu = self.cu
        if self.kind == "hostalloc":
            self.array = None
            cu.cuMemFreeHost(self.ptr)
            return
        if self.registered:
            cu.cuMemHostUnregister(self.ptr)
        self.array = None
        if isinstance(self._keep, shared_memory.SharedMemory):
            self._keep.close()
            self._keep.unlink()
        else:
            self._keep.close()


def raw_part(mib: int, rounds: int, copies: int) -> tuple[list[dict], dict]:
    from cuda.bindings import driver as cu

    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(0), "cuDeviceGet")
    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    stream = _check(cu.cuStreamCreate(1), "cuStreamCreate")
    nbytes = mib * MiB
    dptr = _check(cu.cuMemAlloc(nbytes), "cuMemAlloc")
    ev0 = _check(cu.cuEventCreate(0), "cuEventCreate")
    ev1 = _check(cu.cuEventCreate(0), "cuEventCreate")
    kinds = ["hostalloc", "shm", "shm_thp", "anon", "anon_thp"]
    hosts = {k: Host(cu, k, nbytes) for k in kinds}
    huge = {k: h.huge_kib for k, h in hosts.items()}
    samples: dict[tuple[str, str, str], list[float]] = {}

    def one(direction: str, ptr: int) -> None:
        if direction == "H2D":
            _check(cu.cuMemcpyHtoDAsync(dptr, ptr, nbytes, stream), "HtoD")
        else:
            _check(cu.cuMemcpyDtoHAsync(ptr, dptr, nbytes, stream), "DtoH")

    for r in range(rounds + 1):  # round 0: warm-up, not kept
        order = kinds if r % 2 else kinds[::-1]
        for kind in order:
            ptr = hosts[kind].ptr
            for direction in ("H2D", "D2H"):
                dma, wall, four = [], [], []
                for _ in range(copies):
                    t0 = time.perf_counter()
                    _check(cu.cuEventRecord(ev0, stream), "rec")
                    one(direction, ptr)
                    _check(cu.cuEventRecord(ev1, stream), "rec")
                    _check(cu.cuStreamSynchronize(stream), "sync")
                    wall.append(time.perf_counter() - t0)
                    dma.append(_check(cu.cuEventElapsedTime(ev0, ev1), "elapsed") / 1e3)
                for _ in range(max(2, copies // 4)):
                    t0 = time.perf_counter()
                    for _ in range(4):
                        one(direction, ptr)
                    _check(cu.cuStreamSynchronize(stream), "sync")
                    four.append((time.perf_counter() - t0) / 4)
                if r:
                    for name, vals in (("dma", dma), ("wall", wall), ("x4", four)):
                        samples.setdefault((kind, direction, name), []).extend(vals)
    rows = []
    for kind in kinds:
        for direction in ("H2D", "D2H"):
            row: dict[str, Any] = {"kind": kind, "direction": direction,
                                   "huge_kib": huge[kind]}
            for name in ("dma", "wall", "x4"):
                med = statistics.median(samples[(kind, direction, name)])
                row[f"{name}_us"] = round(med * 1e6, 1)
                row[f"{name}_gbps"] = round(nbytes / med / 1e9, 2)
            rows.append(row)
    for h in hosts.values():
        h.close()
    cu.cuMemFree(dptr)
    cu.cuStreamDestroy(stream)
    cu.cuDevicePrimaryCtxRelease(dev)
    return rows, huge


def gpumsg_part(mib: int, rounds: int, copies: int) -> list[dict]:
    import gpumsg

    nbytes = mib * MiB
    devs = {iso: gpumsg.open_device(0, isolation=iso) for iso in ("thread", "process")}
    ops = {}
    for iso, dev in devs.items():
        buf = dev.alloc((nbytes // 4,), np.float32).result()
        pin = dev.alloc_pinned((nbytes // 4,), np.float32).result()
        pin.array[:] = np.random.default_rng(2).standard_normal(nbytes // 4, dtype=np.float32)
        arr = pin.array
        ops[(iso, "H2D")] = (lambda d=dev, b=buf, p=arr: d.copy_from_host(b, p).result())
        ops[(iso, "D2H")] = (lambda d=dev, b=buf, p=arr: d.copy_to_host(b, out=p).result())
    samples: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds + 1):
        for key in (sorted(ops) if r % 2 else sorted(ops, reverse=True)):
            fn = ops[key]
            for _ in range(copies):
                t0 = time.perf_counter()
                fn()
                dt = time.perf_counter() - t0
                if r:
                    samples.setdefault(key, []).append(dt)
    rows = []
    for (iso, direction), vals in sorted(samples.items()):
        med = statistics.median(vals)
        rows.append({"isolation": iso, "direction": direction, "wall_us": round(med * 1e6, 1),
                     "gbps": round(nbytes / med / 1e9, 2)})
    for dev in devs.values():
        dev.close()
    return rows


class LegsTrace:
    """Stamps (perf_counter_ns) each hook of the last traced operation, and the thread that
    observed its completion."""

    def __init__(self) -> None:
        self.stamps: dict[str, int] = {}
        self.completer = ""

    def before_enqueue(self, op: Any) -> None:
        self.stamps["enqueue"] = time.perf_counter_ns()

    def after_enqueue(self, op: Any) -> None:
        self.stamps["issued"] = time.perf_counter_ns()

    def before_complete(self, op: Any) -> None:
        import threading

        self.stamps["complete"] = time.perf_counter_ns()
        self.completer = threading.current_thread().name

    def after_complete(self, op: Any, latency_s: float) -> None:
        self.stamps["answered"] = time.perf_counter_ns()


def legs_part(mib: int, copies: int) -> dict[str, Any]:
    """Thread isolation with a trace: per 64 MiB copy (one per wait), the legs post -> device
    thread's enqueue -> issued -> completion seen -> answered -> result() returned (medians),
    and who saw the completion."""
    import collections

    import gpumsg
    from gpumsg.service.trace import KernelTrace

    class Trace(LegsTrace, KernelTrace):
        pass

    trace = Trace()
    dev = gpumsg.open_device(0, trace=trace)
    nbytes = mib * MiB
    buf = dev.alloc((nbytes // 4,), np.float32).result()
    pin = dev.alloc_pinned((nbytes // 4,), np.float32).result()
    arr = pin.array
    arr[:] = 1.0
    out: dict[str, Any] = {}
    for direction in ("H2D", "D2H"):
        legs: dict[str, list[float]] = collections.defaultdict(list)
        who: collections.Counter = collections.Counter()
        for i in range(copies * 3 + 2):
            t0 = time.perf_counter_ns()
            if direction == "H2D":
                dev.copy_from_host(buf, arr).result()
            else:
                dev.copy_to_host(buf, out=arr).result()
            t1 = time.perf_counter_ns()
            if i < 2:
                continue
            s = trace.stamps
            legs["post->enqueue"].append((s["enqueue"] - t0) / 1e3)
            legs["enqueue->issued"].append((s["issued"] - s["enqueue"]) / 1e3)
            legs["issued->complete seen"].append((s["complete"] - s["issued"]) / 1e3)
            legs["complete->answered"].append((s["answered"] - s["complete"]) / 1e3)
            legs["answered->returned"].append((t1 - s["answered"]) / 1e3)
            legs["total"].append((t1 - t0) / 1e3)
            who[trace.completer.rsplit("-", 1)[-1] if "completion" in trace.completer
                else trace.completer] += 1
        out[direction] = {"legs_us": {k: round(statistics.median(v), 1)
                                      for k, v in legs.items()}, "completed_on": dict(who)}
    dev.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--skip-gpumsg", action="store_true")
    parser.add_argument("--legs-only", action="store_true",
                        help="only thread isolation's legs (of each size in --legs-mib)")
    parser.add_argument("--legs-mib", default="", help="sizes for the legs, comma-separated "
                        "(default: --mib)")
    args = parser.parse_args()
    legs_sizes = [int(v) for v in args.legs_mib.split(",") if v] or [args.mib]
    if args.legs_only:
        text = [f"# thread isolation's legs per copy, {legs_sizes} MiB", ""]
        result_legs = {}
        for mib in legs_sizes:
            legs = legs_part(mib, args.copies)
            result_legs[mib] = legs
            for direction, d in legs.items():
                text.append(f"- {mib} MiB {direction}: " + ", ".join(
                    f"{k} {v}" for k, v in d["legs_us"].items())
                    + f"; completion seen on {d['completed_on']}")
        print("\n".join(text), flush=True)
        save_diagnostic("host_dma_legs", {"environment": environment(), "legs": result_legs},
                        "\n".join(text) + "\n")
        return
    thp = thp_settings()
    print("THP:", thp, flush=True)
    raw, huge = raw_part(args.mib, args.rounds, args.copies)
    lines = [f"# host DMA probe, {args.mib} MiB", "", f"THP: `{thp}`", "",
             "## raw (cuda.bindings): per copy, medians", "",
             "| memory | dir | huge KiB | DMA us | DMA GB/s | wall us | wall GB/s | x4 us | "
             "x4 GB/s |", "|---|---|---|---|---|---|---|---|---|"]
    for row in raw:
        lines.append(f"| {row['kind']} | {row['direction']} | {row['huge_kib']} | "
                     f"{row['dma_us']} | {row['dma_gbps']} | {row['wall_us']} | "
                     f"{row['wall_gbps']} | {row['x4_us']} | {row['x4_gbps']} |")
    print("\n".join(lines), flush=True)
    result: dict[str, Any] = {"environment": environment(), "thp": thp, "raw": raw,
                              "mib": args.mib, "rounds": args.rounds, "copies": args.copies}
    if not args.skip_gpumsg:
        rows = gpumsg_part(args.mib, args.rounds, args.copies)
        result["gpumsg"] = rows
        more = ["", "## gpumsg, a pinned buffer, one copy per wait", "",
                "| isolation | dir | wall us | GB/s |", "|---|---|---|---|"]
        more += [f"| {r['isolation']} | {r['direction']} | {r['wall_us']} | {r['gbps']} |"
                 for r in rows]
        print("\n".join(more), flush=True)
        lines += more
    legs = legs_part(args.mib, args.copies)
    result["thread_legs"] = legs
    more = ["", "## thread isolation, one traced copy per wait: legs (medians, us)", ""]
    for direction, d in legs.items():
        more.append(f"- {direction}: " + ", ".join(f"{k} {v}" for k, v in d["legs_us"].items())
                    + f"; completion seen on {d['completed_on']}")
    print("\n".join(more), flush=True)
    lines += more
    save_diagnostic("host_dma_probe", result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
