"""The fault campaign, in process isolation: faults of every kind (illegal address, worker
exit, hang caught by the watchdog, out of memory) injected one after another while client
threads submit checked work. Checked:

* the fault's own future fails with its typed error (ContextPoisoned code 700, WorkerDied,
  OperationTimeout, OutOfMemory);
* the clients see only typed errors (ContextPoisoned and its subclasses, GpuRefStale,
  DependencyFailed, OutOfMemory) and never a wrong value or an unanswered future;
* a buffer made before a restart raises GpuRefStale after it;
* recovery: from the moment the client sees the fault's error to the completion of the next
  successful operation, median and p99 (and the supervisor's own restart times);
* the restart bound: a device with ``max_restarts=2`` closes for good (Unrecoverable) on the
  third fault within its window;
* after close: no shared-memory segment, host block or child process left behind.

With ``array_threads``, further clients keep the array layer's operations in flight (chains of
``gpumsg.array_api`` calls queued without a wait, then read and compared with NumPy): matrix
products, transposed views, FFTs, solves, element-wise chains, reductions and sorts, whose
generated kernels every new worker must load again. A device whose worker cannot run them gets
no array clients, and the figures say so (``array_kernels`` False).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing import shared_memory
from typing import Any

import numpy as np

import gpumsg
import gpumsg.array_api as xp

WAIT_S = 60.0
KINDS = ("illegal_address", "exit", "hang", "oom")
EXPECTED = {"illegal_address": gpumsg.ContextPoisoned, "exit": gpumsg.WorkerDied,
            "hang": gpumsg.OperationTimeout, "oom": gpumsg.OutOfMemory}
#: what a client may see while faults happen
ALLOWED = (gpumsg.ContextPoisoned, gpumsg.GpuRefStale, gpumsg.DependencyFailed,
           gpumsg.OutOfMemory)


@dataclasses.dataclass
class FaultReport:
    faults: int = 0
    by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    fault_typed: int = 0
    client_ops: int = 0
    client_typed_errors: int = 0
    #: the array layer's chains checked during the faults, and whether they included the
    #: layer's generated kernels (element-wise, reductions, sorts)
    array_ops: int = 0
    array_typed_errors: int = 0
    array_kernels: bool | None = None
    lost: int = 0
    wrong: int = 0
    untyped: int = 0
    stale_checked: int = 0
    #: watchdog restarts that no injected fault caused (an operation past the limit), and what
    #: each interrupted
    unplanned_restarts: int = 0
    unplanned: list[str] = dataclasses.field(default_factory=list)
    recovery_s: list[float] = dataclasses.field(default_factory=list)
    recovery_by_kind: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    #: from submitting the fault (includes the watchdog's limit for hangs)
    from_inject_s: list[float] = dataclasses.field(default_factory=list)
    #: waits for the standby worker before each fault (steady state: faults are rare)
    spare_wait_s: list[float] = dataclasses.field(default_factory=list)
    supervisor_restart_s: list[float] = dataclasses.field(default_factory=list)
    restart_bound_holds: bool | None = None
    leaked_shm: list[str] = dataclasses.field(default_factory=list)
    leaked_blocks: int = 0
    leaked_children: list[int] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    _kinds: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        def pct(xs: list[float], q: float) -> float | None:
            if not xs:
                return None
            xs = sorted(xs)
            return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3, 1)

        out = {k: v for k, v in dataclasses.asdict(self).items()
               if k not in ("_kinds", "problems", "recovery_s", "recovery_by_kind", "unplanned",
                            "supervisor_restart_s", "from_inject_s", "spare_wait_s")}
        out["recovery_median_ms"] = (round(statistics.median(self.recovery_s) * 1e3, 1)
                                     if self.recovery_s else None)
        out["recovery_p99_ms"] = pct(self.recovery_s, 0.99)
        out["recovery_median_ms_by_kind"] = {
            k: round(statistics.median(v) * 1e3, 1) for k, v in self.recovery_by_kind.items()}
        out["from_inject_median_ms_by_kind"] = {
            k: round(statistics.median(
                [v for v, kk in zip(self.from_inject_s, self._kinds) if kk == k]) * 1e3, 1)
            for k in self.recovery_by_kind}
        out["spare_wait_median_ms"] = (round(statistics.median(self.spare_wait_s) * 1e3, 1)
                                       if self.spare_wait_s else None)
        out["supervisor_restart_median_ms"] = (
            round(statistics.median(self.supervisor_restart_s) * 1e3, 1)
            if self.supervisor_restart_s else None)
        return out


class ShmTracker:
    """Records the names of the shared-memory segments this process creates while active
    (other processes on the machine create theirs in the same /dev/shm)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._orig = shared_memory.SharedMemory.__init__

    def __enter__(self) -> ShmTracker:
        orig, names = self._orig, self.names

        def init(seg: Any, name: Any = None, create: bool = False, size: int = 0) -> None:
            orig(seg, name, create, size)
            if create:
                names.append(seg.name)

        shared_memory.SharedMemory.__init__ = init  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        shared_memory.SharedMemory.__init__ = self._orig  # type: ignore[method-assign]

    def leaked(self) -> list[str]:
        return sorted(n for n in self.names if os.path.exists("/dev/shm/" + n.lstrip("/")))


def _resource_tracker_pid() -> int | None:
    """multiprocessing's resource tracker: a helper process of the standard library, started
    with the first shared-memory segment, that lives as long as this interpreter."""
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_pid", None)


def _fork_server_pid() -> int | None:
    """multiprocessing's fork server, which forks gpumsg's workers: a helper process of the
    standard library that, once started, lives as long as this interpreter."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def child_pids() -> list[int]:
    """Processes (zombies included) whose parent is this process or the fork server (whose
    children the workers are), from /proc; the standard library's two helpers not counted."""
    helpers = {_resource_tracker_pid(), _fork_server_pid()} - {None}
    parents, out = {os.getpid()} | helpers, []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) in parents and int(name) not in helpers:
            out.append(int(name))
    return out


def _check_sgemm(dev: Any, rng: np.random.Generator) -> bool:
    return _sgemm_detail(dev, rng) is None


def _sgemm_detail(dev: Any, rng: np.random.Generator) -> str | None:
    """A checked SGEMM of random size: None when right, else what was wrong (sizes, error,
    how the SGEMM's own future ended, generations) so that a wrong value can be diagnosed."""
    m, n, k = (int(v) for v in rng.integers(1, 40, 3))
    a = rng.standard_normal((m, k)).astype(np.float32, order="F")
    b = rng.standard_normal((k, n)).astype(np.float32, order="F")
    gen = dev.generation
    c = dev.alloc((m, n), np.float32)
    done = dev.sgemm(dev.to_device(a), dev.to_device(b), c, m, n, k)
    out = dev.copy_to_host(c).result(WAIT_S)
    ref = a.astype(np.float64) @ b
    err = float(np.linalg.norm(out - ref))
    if err <= 1e-5 * np.linalg.norm(ref):
        return None
    try:
        done.result(WAIT_S)
        how = "succeeded"
    except Exception as exc:  # noqa: BLE001 - described, not raised
        how = f"raised {type(exc).__name__}: {exc}"
    try:
        where = str(c.result().ref)
    except Exception as exc:  # noqa: BLE001
        where = type(exc).__name__
    return (f"sgemm {m}x{n}x{k}: relative error {err / np.linalg.norm(ref):.3g}, "
            f"{int((out == 0).sum())} of {out.size} zeros; the SGEMM "
            f"{how}; generation {gen} -> {dev.generation}, buffer {where}")


def _client(dev: Any, stop: threading.Event, report: FaultReport, lock: threading.Lock) -> None:
    rng = np.random.default_rng()
    while not stop.is_set():
        try:
            if rng.random() < 0.5:
                what = "round trip"
                x = rng.standard_normal(int(rng.integers(1, 5000)))
                got = dev.copy_to_host(dev.to_device(x)).result(WAIT_S)
                ok = bool(np.array_equal(got, x))
                if not ok:
                    what += (f" of {x.size} float64: {int((got != x).sum())} differ, gen "
                             f"{dev.generation}, first bad {int(np.argmax(got != x))}, "
                             f"zeros {int((got == 0).sum())}")
            else:
                detail = _sgemm_detail(dev, rng)
                ok = detail is None
                what = detail or "sgemm"
        except FutureTimeout:
            with lock:
                report.lost += 1
                report.problems.append("a client future was not answered in time")
            continue
        except ALLOWED:
            with lock:
                report.client_typed_errors += 1
            continue
        except gpumsg.DeviceClosed:
            return
        except Exception as exc:  # noqa: BLE001
            with lock:
                report.untyped += 1
                report.problems.append(f"client: {type(exc).__name__}: {exc}")
            continue
        with lock:
            report.client_ops += 1
            if not ok:
                report.wrong += 1
                report.problems.append(f"client: wrong value ({what})")


def _array_chain(dev: Any, rng: np.random.Generator, kernels: bool) -> str | None:
    """A chain of array operations queued without a wait, then read: None when every result
    matches NumPy's, else what differed."""
    m, k, n = (int(v) for v in rng.integers(2, 24, 3))
    dt = np.float64
    ha, hb = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    a, b = xp.asarray(ha, device=dev), xp.asarray(hb, device=dev)
    outs = {"matmul": (a @ b, ha @ hb), "matmul_T": (b.T @ a.T, (ha @ hb).T),
            "fft": (xp.fft.fft(xp.asarray(ha.astype(np.result_type(dt, np.complex64)),
                                          device=dev)), np.fft.fft(ha))}
    sq = (ha[:, :min(m, k)][:min(m, k)] + 4 * np.eye(min(m, k))).astype(dt)
    outs["solve"] = (xp.linalg.solve(xp.asarray(sq, device=dev),
                                     xp.asarray(ha[:min(m, k), :1], device=dev)),
                     np.linalg.solve(sq, ha[:min(m, k), :1]))
    if kernels:
        c = a @ b
        hc = ha @ hb
        outs["elementwise"] = (xp.sin(c) * 2.0 + c, np.sin(hc) * 2.0 + hc)
        outs["sum"] = (xp.sum(xp.exp(a), axis=0), np.exp(ha).sum(axis=0))
        outs["sort"] = (xp.sort(a, axis=-1), np.sort(ha, axis=-1))
    tol = 1e-9
    for name, (got, ref) in outs.items():
        g = np.asarray(got)
        if g.shape != ref.shape or not np.allclose(g, ref, rtol=tol, atol=tol * (
                1 + np.abs(ref).max())):
            return f"array {name} {ha.shape}x{hb.shape}: differs from NumPy's"
    return None


def _array_client(dev: Any, stop: threading.Event, report: FaultReport,
                  lock: threading.Lock) -> None:
    rng = np.random.default_rng()
    while not stop.is_set():
        try:
            detail = _array_chain(dev, rng, bool(report.array_kernels))
        except FutureTimeout:
            with lock:
                report.lost += 1
                report.problems.append("an array result was not answered in time")
            continue
        except ALLOWED:
            with lock:
                report.array_typed_errors += 1
            continue
        except gpumsg.DeviceClosed:
            return
        except Exception as exc:  # noqa: BLE001
            with lock:
                report.untyped += 1
                report.problems.append(f"array client: {type(exc).__name__}: {exc}")
            continue
        with lock:
            report.array_ops += 1
            if detail is not None:
                report.wrong += 1
                report.problems.append(f"array client: wrong value ({detail})")


def array_kernels_run(dev: Any) -> bool:
    """Whether ``dev`` runs the array layer's generated kernels (a simulator's worker needs
    their NumPy versions, which travel in the modules' images)."""
    try:
        x = xp.asarray(np.arange(4.0), device=dev)
        return bool(np.allclose(np.asarray(xp.sin(x) + 1.0), np.sin(np.arange(4.0)) + 1.0))
    except gpumsg.InvalidMessage:
        return False


def _wait_spare(dev: Any, limit: float = 60.0) -> None:
    """Wait until the supervisor has a worker again and its standby worker is ready (faults
    in steady state). The old spare stays in place until the recovery takes it, so the worker
    is checked too."""
    sup = dev._worker
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if sup._worker is not None and (not sup.standby or sup._spare is not None):
            return
        time.sleep(0.01)


def _first_success(dev: Any, rng: np.random.Generator, t0: float) -> float:
    """Seconds from ``t0`` to the completion of the first successful checked SGEMM."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if _check_sgemm(dev, rng):
                return time.monotonic() - t0
        except ALLOWED:
            continue
    raise AssertionError("the device did not recover")


def restart_bound_holds(backend: str) -> bool:
    """A device allowed 2 restarts in its window refuses for good after the third fault."""
    dev = gpumsg.open_device(0, backend=backend, isolation="process",
                             allow_fault_injection=True, max_restarts=2, restart_window=600)
    try:
        for _ in range(3):
            try:
                dev.inject_fault("exit").result(WAIT_S)
            except (gpumsg.WorkerDied, gpumsg.Unrecoverable):
                pass
            _wait_spare(dev, 30)
        deadline = time.monotonic() + WAIT_S
        while dev._state.accepting and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            dev.stats()
        except gpumsg.Unrecoverable:
            return True
        return False
    finally:
        dev.close(timeout=30)


def campaign(faults: int = 100, backend: str = "sim", threads: int = 4,
             watchdog: float = 1.0, time_budget: float | None = None,
             log: Any = print, array_threads: int = 0) -> FaultReport:
    """``faults`` faults in turn (kinds round-robin) under ``threads`` clients of copies and
    SGEMMs and ``array_threads`` clients of array-layer chains; with ``time_budget`` (s) it
    stops injecting when the budget is spent, and the report says how many were injected."""
    report = FaultReport()
    log(f"faults: {faults} faults of {len(KINDS)} kinds, {threads} client threads and "
        f"{array_threads} array threads, backend {backend}, watchdog {watchdog} s")
    shm = ShmTracker().__enter__()
    children_before = set(child_pids())
    rng = np.random.default_rng()
    t_start = time.perf_counter()
    dev = gpumsg.open_device(0, backend=backend, isolation="process",
                             allow_fault_injection=True, watchdog=watchdog,
                             max_restarts=10 * faults + 10, restart_window=3600)
    sup = dev._worker
    lock = threading.Lock()
    stop = threading.Event()
    clients = [threading.Thread(target=_client, args=(dev, stop, report, lock))
               for _ in range(threads)]
    if array_threads:
        report.array_kernels = array_kernels_run(dev)
        if report.array_kernels:
            clients += [threading.Thread(target=_array_client, args=(dev, stop, report, lock))
                        for _ in range(array_threads)]
        else:
            log("faults: this device's worker does not run the array layer's kernels: no "
                "array clients")
    try:
        for c in clients:
            c.start()
        for i in range(faults):
            if time_budget is not None and time.perf_counter() - t_start > time_budget:
                report.problems.append(f"time budget of {time_budget} s spent after {i} faults")
                break
            kind = KINDS[i % len(KINDS)]
            t_w = time.monotonic()
            _wait_spare(dev)
            report.spare_wait_s.append(time.monotonic() - t_w)
            old = None
            for _attempt in range(3):
                try:
                    old = dev.to_device(rng.standard_normal(64)).result(WAIT_S)
                    break
                except gpumsg.OperationTimeout as exc:
                    # a restart nobody injected: some operation ran past the watchdog (a
                    # starved host can do that to the simulator); counted, then retried
                    report.unplanned_restarts += 1
                    report.unplanned.append(f"before fault {i} ({kind}): {exc}")
                    _first_success(dev, rng, time.monotonic())
                except Exception as exc:  # noqa: BLE001 - a defect: counted, the campaign goes on
                    report.problems.append(f"fault {i} ({kind}): the copy before it failed: "
                                           f"{type(exc).__name__}: {exc}")
                    _first_success(dev, rng, time.monotonic())
                    break
            if old is None:
                continue
            gen = dev.generation
            t_inject = time.monotonic()
            if kind == "oom":
                dev.inject_fault("oom", count=2).result(WAIT_S)
                try:  # the next allocation attempt fails (a client's, or this one)
                    dev.alloc((256,), np.float32).result(WAIT_S)
                except gpumsg.OutOfMemory:
                    pass
                t_fault = time.monotonic()
                report.fault_typed += 1
            else:
                fut = dev.inject_fault(kind)
                try:
                    fut.result(WAIT_S)
                    report.problems.append(f"fault {i} ({kind}) succeeded")
                except EXPECTED[kind] as exc:
                    report.fault_typed += 1
                    if kind == "illegal_address" and exc.code != 700:
                        report.problems.append(f"fault {i}: code {exc.code}, not 700")
                except FutureTimeout:
                    report.lost += 1
                    report.problems.append(f"fault {i} ({kind}): no answer")
                except Exception as exc:  # noqa: BLE001
                    report.problems.append(f"fault {i} ({kind}): {type(exc).__name__}: {exc}")
                t_fault = time.monotonic()
            rec = _first_success(dev, rng, t_fault)
            report.from_inject_s.append(t_fault + rec - t_inject)
            report._kinds.append(kind)
            report.recovery_s.append(rec)
            report.recovery_by_kind.setdefault(kind, []).append(rec)
            report.faults += 1
            report.by_kind[kind] = report.by_kind.get(kind, 0) + 1
            if kind != "oom":
                if dev.generation <= gen:
                    report.problems.append(f"fault {i} ({kind}): no new generation")
                try:
                    dev.copy_to_host(old)
                    report.problems.append(f"fault {i} ({kind}): a stale buffer was accepted")
                except gpumsg.GpuRefStale:
                    report.stale_checked += 1
        report.supervisor_restart_s = list(sup.restart_times)
    finally:
        stop.set()
        for c in clients:
            c.join(WAIT_S)
        pool = sup._pool
        dev.close(timeout=60)
    try:
        report.restart_bound_holds = restart_bound_holds(backend)
    finally:
        shm.__exit__()
    # leaks, after close: checked, not assumed
    time.sleep(0.2)
    report.leaked_shm = shm.leaked()
    report.leaked_blocks = len(list(pool.blocks()))
    report.leaked_children = sorted(set(child_pids()) - children_before)
    report.seconds = time.perf_counter() - t_start
    return report
