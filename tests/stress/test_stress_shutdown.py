"""Exit and shutdown under load: interpreter exit with open devices in thread and process
mode (busy or hung), close() while threads submit, close() from a future's callback, Ctrl-C
during a long wait. Each returns within a bounded time, and what did not run
fails with a typed error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gpumsg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ISOLATIONS = ["thread", "process"]


def _python(code: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, limit: float) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"did not exit within {limit} s\n{out}\n{err}")
    return proc.returncode, out, err, time.monotonic() - t0


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_interpreter_exit_with_busy_and_hung_devices(isolation: str) -> None:
    """Exit with two open devices: one with work in flight, one whose kernel hangs for ever.
    The process exits in bounded time, leaves no child process and no shared memory."""
    proc = _python(f"""
        import os, numpy as np, gpumsg
        busy = gpumsg.open_device(0, backend="sim", isolation={isolation!r})
        hung = gpumsg.open_device(0, backend="sim", isolation={isolation!r},
                                  allow_fault_injection=True, shutdown_timeout=1.0)
        futs = [busy.to_device(np.random.rand(20000)) for _ in range(20)]
        c = busy.alloc((64, 64))
        futs += [busy.sgemm(busy.alloc((64, 64)), busy.alloc((64, 64)), c, 64, 64, 64)
                 for _ in range(50)]
        stuck = hung.inject_fault("hang")
        hung.stats().result(timeout=30)
        print("PID", os.getpid(), flush=True)
    """)
    rc, out, err, took = _finish(proc, 90)
    assert rc == 0, err
    assert "PID" in out and "Traceback" not in err, err
    assert took < 60
    pid = int(out.split("PID", 1)[1].split()[0])
    time.sleep(0.5)
    orphans = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                orphans.append(name)
    assert not orphans


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_close_while_threads_submit_checked(isolation: str) -> None:
    """Four threads submit checked work while close() runs: each result is right or fails with
    DeviceClosed; nothing is left unanswered; close() returns in bounded time."""
    dev = gpumsg.open_device(0, backend="sim", isolation=isolation)
    bad: list[str] = []
    counts = {"ok": 0, "closed": 0}
    lock = threading.Lock()
    started = threading.Barrier(5)

    def client() -> None:
        rng = np.random.default_rng()
        started.wait()
        pending = []
        while True:
            x = rng.standard_normal(int(rng.integers(1, 3000)))
            try:
                pending.append((x, dev.copy_to_host(dev.to_device(x))))
            except gpumsg.DeviceClosed:
                break
            except Exception as exc:  # noqa: BLE001
                bad.append(f"submit: {exc!r}")
                break
        for x, fut in pending:
            try:
                got = fut.result(timeout=60)
            except gpumsg.DeviceClosed:
                with lock:
                    counts["closed"] += 1
                continue
            except Exception as exc:  # noqa: BLE001
                bad.append(f"result: {exc!r}")
                continue
            with lock:
                counts["ok"] += 1
            if not np.array_equal(got, x):
                bad.append("wrong value")

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.5)
    t0 = time.monotonic()
    dev.close(timeout=60)
    assert time.monotonic() - t0 < 60
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not bad, bad[:5]
    assert counts["ok"] > 0


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_close_from_a_future_callback(isolation: str) -> None:
    """A done-callback runs on the thread that answers the future (the device's completion
    thread, or the supervisor's reader); close() from there must not wait for itself."""
    dev = gpumsg.open_device(0, backend="sim", isolation=isolation)
    x = np.arange(1000.0)
    closed = threading.Event()
    errors: list[BaseException] = []

    def cb(_f: object) -> None:
        try:
            dev.close(timeout=30)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        closed.set()

    first = dev.copy_to_host(dev.to_device(x))
    first.add_done_callback(cb)
    later = []
    for _ in range(20):
        try:
            later.append(dev.stats())
        except gpumsg.DeviceClosed:
            break  # the callback closed the device already: refused at the call site
    assert closed.wait(45), "close() from a callback did not return"
    assert not errors, errors
    np.testing.assert_array_equal(first.result(timeout=10), x)
    for f in later:  # each answered or refused, none left hanging
        try:
            f.result(timeout=30)
        except gpumsg.DeviceClosed:
            pass
    with pytest.raises(gpumsg.DeviceClosed):
        dev.stats()
    dev.close()  # idempotent


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_ctrl_c_during_a_long_wait(isolation: str) -> None:
    """SIGINT while the main thread waits on a future that never completes (a hung kernel):
    KeyboardInterrupt reaches the caller, atexit closes the device, the process ends. The
    child sets Python's own SIGINT handler first: a process started in the background by a
    non-interactive shell inherits SIGINT ignored, which Python keeps, and the signal would
    then never reach it (a CI started that way hung here for 60 s)."""
    proc = _python(f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import gpumsg
        dev = gpumsg.open_device(0, backend="sim", isolation={isolation!r},
                                 allow_fault_injection=True, shutdown_timeout=1.0)
        fut = dev.inject_fault("hang")
        print("WAITING", flush=True)
        try:
            fut.result()
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True)
            dev.close(timeout=10)
            print("AFTER CLOSE", type(fut.exception(timeout=10)).__name__, flush=True)
            raise
    """)
    line = proc.stdout.readline()
    assert "WAITING" in line, proc.stderr.read() if proc.poll() is not None else line
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc, out, err, _ = _finish(proc, 60)
    assert time.monotonic() - t0 < 45
    assert "INTERRUPTED" in out, err
    assert "AFTER CLOSE DeviceClosed" in out, out + err  # what did not run: typed
    assert "KeyboardInterrupt" in err and rc != 0


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_close_with_a_hung_kernel_fails_what_did_not_run(isolation: str) -> None:
    """close() gives up on a kernel that never ends after ``shutdown_timeout``; the hung
    operation and what queued behind it fail with DeviceClosed (none is left unanswered)."""
    dev = gpumsg.open_device(0, backend="sim", isolation=isolation, allow_fault_injection=True,
                             shutdown_timeout=1.0)
    stuck = dev.inject_fault("hang")
    behind = [dev.copy_to_host(dev.to_device(np.ones(100))) for _ in range(5)]
    time.sleep(0.3)
    t0 = time.monotonic()
    dev.close(timeout=30)
    assert time.monotonic() - t0 < 20
    for f in [stuck, *behind]:
        with pytest.raises(gpumsg.DeviceClosed):
            f.result(timeout=10)


def test_a_pinned_block_freed_by_close_right_after_it_was_made_raises_device_closed() -> None:
    """The race the submit-during-close test above once hit (an AttributeError from the staging
    path): the device thread answers AllocPinned, then close() frees the pool before the caller
    looks the new block up. The caller gets the device's refusal, DeviceClosed."""
    from gpumsg.client._staging import DevicePinnedPool

    class ClosedRightAfter:
        """A device that made block 7, then closed (and freed its pool) at once."""

        def _request(self, msg) -> int:
            return 7

        def _check_open(self) -> None:
            raise gpumsg.DeviceClosed("the device was closed")

    class EmptyPool:
        def get(self, block_id: int):
            return None

    with pytest.raises(gpumsg.DeviceClosed):
        DevicePinnedPool(ClosedRightAfter(), EmptyPool()).grow(1024, staging=True)
