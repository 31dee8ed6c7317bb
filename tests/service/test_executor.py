"""The executor (gpumsg/service/_executor.py): a caller that finds the device idle runs its
message on its own thread, in queue order; a caller waiting for it answers its batch itself;
what callers leave is answered when they are away; the rest of the device stays as it was."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import InvalidMessage
from gpumsg.messages.device import Stats
from gpumsg.service import _worker
from gpumsg.service._executor import (
    INLINE,
    WATCH_MAX_SECONDS,
    WATCH_SECONDS,
    Executor,
    Mailbox,
)


def _counts(dev) -> tuple[int, int]:
    """(callers' turns, mailbox items taken by the device thread)."""
    ex = dev._worker.ctx.executor
    return ex.turns, ex.taken


def _inline(dev, call):
    """``call()`` run on this thread: retried while the device thread holds the lock for one
    of its looks (the call then goes through the mailbox, as it should)."""
    for _ in range(200):
        dev.synchronize().result(timeout=60)
        turns, taken = _counts(dev)
        fut = call()
        after_turns, after_taken = _counts(dev)
        if after_turns == turns + 1 and after_taken == taken:  # no mailbox, no device thread
            return fut
        fut.exception(timeout=60)
        time.sleep(0.002)
    raise AssertionError("no call ran on the caller's thread")


def test_an_idle_device_runs_the_call_on_the_callers_thread(dev) -> None:
    fut = _inline(dev, dev.stats)
    assert fut.done() and fut.result().total_bytes > 0  # answered before the call returned


def test_a_waiting_caller_answers_its_own_work(dev, rng) -> None:
    """A matmul run on the caller's thread: its result() waits on the batch's event and
    answers it (no completion thread hands it over), with the right numbers."""
    a0, b0 = rng.standard_normal((32, 16)), rng.standard_normal((16, 8))
    a, b = dev.to_device(a0).result(), dev.to_device(b0).result()
    watcher = dev._worker.ctx.compute.watcher
    for _ in range(3):  # a loaded host may leave every call of a round to the device thread
        handed = watcher.batches
        for _ in range(20):
            c = dev.linalg.matmul(a, b)
            np.testing.assert_allclose(
                dev.copy_to_host(c.result(timeout=60)).result(timeout=60), a0 @ b0,
                rtol=1e-12, atol=1e-12)
        # the callers answered their own batches: few or none went to the completion thread
        # (the device thread hands over only what callers leave for 300 µs or more)
        if watcher.batches - handed < 20:
            return
    raise AssertionError("every batch of three rounds went to the completion thread")


def test_queued_messages_run_before_a_later_call(dev, rng) -> None:
    """While the device thread is held, calls are queued; a call made after them (the device
    idle again by then) never overtakes them: the upload lands before the download."""
    x0 = rng.standard_normal(64)
    buf = dev.to_device(np.zeros(64)).result()
    stalled = dev.inject_fault("stall", seconds=0.3)  # runs on the device thread
    dev.copy_from_host(buf, x0)  # queued behind the stall
    assert not stalled.done()
    got = dev.copy_to_host(buf)  # queued as well: nothing may run ahead of the upload
    np.testing.assert_array_equal(got.result(timeout=60), x0)
    stalled.result(timeout=60)


def test_order_holds_across_threads(dev, rng) -> None:
    """Thread A queues an upload behind a held device thread and signals B; B's download,
    made after the signal, sees the upload."""
    x0 = rng.standard_normal(256)
    buf = dev.to_device(np.zeros(256)).result()
    signalled = threading.Event()
    out: list = []

    def a() -> None:
        dev.inject_fault("stall", seconds=0.2)
        dev.copy_from_host(buf, x0)
        signalled.set()

    def b() -> None:
        signalled.wait(10)
        out.append(dev.copy_to_host(buf).result(timeout=60))

    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    tb.start()
    ta.start()
    ta.join(30)
    tb.join(30)
    np.testing.assert_array_equal(out[0], x0)


def test_work_left_by_callers_is_answered_without_a_waiter(dev, rng) -> None:
    """Futures nobody waits on are answered all the same: by a done-callback's nudge, by
    concurrent.futures.wait, and by the device thread when callers are away."""
    a = dev.to_device(rng.standard_normal((16, 16))).result()
    called = threading.Event()
    dev.linalg.matmul(a, a).add_done_callback(lambda f: called.set())
    assert called.wait(10)
    done, pending = concurrent.futures.wait([dev.linalg.matmul(a, a)], timeout=10)
    assert done and not pending
    left = dev.linalg.matmul(a, a)  # nobody asks: the device thread takes it over
    deadline = time.monotonic() + 10
    while not left.done() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert left.done() and left.exception() is None


def test_looks_back_off_while_a_caller_is_at_work(monkeypatch, rng) -> None:
    """The device thread's looks at what callers' turns left: while a caller keeps taking
    turns (a loop of round trips) each look doubles the wait, up to WATCH_MAX_SECONDS, so it
    looks far less often than every WATCH_SECONDS; once the caller is away the wait is
    WATCH_SECONDS again. The waits are read from the mailbox's timed gets."""
    waits: list[float] = []

    class Recording(Mailbox):
        def get(self, block: bool = True, timeout: float | None = None):  # type: ignore[override]
            if timeout is not None:
                waits.append(timeout)
            return Mailbox.get(self, block, timeout)

    monkeypatch.setattr(_worker, "Mailbox", Recording)
    a0, b0 = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    with gpumsg.open_device(0, backend="sim") as dev:
        a, b = dev.to_device(a0).result(timeout=60), dev.to_device(b0).result(timeout=60)
        busy_for = 0.3
        start = time.monotonic()
        while time.monotonic() - start < busy_for:  # round trips: a turn each, work left
            dev.linalg.matmul(a, b).result(timeout=60)
        busy = list(waits)
        time.sleep(0.1)  # the caller is away
        away = waits[len(busy):]
    assert busy, "the device thread never looked"
    assert max(busy) == pytest.approx(WATCH_MAX_SECONDS)
    assert len(busy) < busy_for / WATCH_SECONDS / 4, len(busy)
    assert WATCH_SECONDS in away, away[:8]


def test_a_failure_on_the_callers_thread_is_typed_and_keeps_its_traceback_as_text(
        dev, rng) -> None:
    """A call that fails on the caller's thread: a typed error, its device-side traceback
    kept as a note (its frames would keep the caller's stack alive), the device serving."""
    from gpumsg.messages.device import CopyDevice

    a = dev.to_device(rng.standard_normal((4, 4))).result()
    freed = dev.to_device(rng.standard_normal((4, 4))).result()
    ref = freed.ref
    freed.free().result(timeout=60)
    bad = _inline(dev, lambda: dev.send(CopyDevice(ref, a.ref)))  # refused on the device
    with pytest.raises(gpumsg.GpuError) as info:
        bad.result(timeout=60)
    assert any("device-side traceback" in n for n in getattr(info.value, "__notes__", ()))
    np.testing.assert_array_equal(dev.copy_to_host(a).result(timeout=60).shape, (4, 4))


def test_device_thread_only_messages_never_run_inline() -> None:
    """A message whose handler waits for another thread (a peer copy, a rendezvous) or
    stands for a stuck device thread must stay off callers' threads."""
    from gpumsg.messages.device import InjectFault
    from gpumsg.messages.graph import CAPTURABLE
    from gpumsg.multi._peer import PeerCopyRecv, PeerCopySend

    for t in (InjectFault, PeerCopySend, PeerCopyRecv):
        assert t not in INLINE and t not in CAPTURABLE
    assert Stats in INLINE


def test_mailbox_counts_every_put() -> None:
    box = Mailbox()
    for i in range(5):
        box.put((i, None))
    assert box.posted == 5 and box.qsize() == 5 and box.get() == (0, None)
    ex = Executor()
    ex.taken = 5
    assert ex.idle(box) and not Executor().idle(box)


def test_eight_threads_of_inline_and_queued_calls_keep_every_chain(dev, rng) -> None:
    """Eight threads, each a chain upload -> matmul (new output) -> download, some of them
    around held turns of the device thread: every result is right."""
    a0 = rng.standard_normal((8, 8))
    a = dev.to_device(a0).result()
    errors: list = []

    def client(seed: int) -> None:
        r = np.random.default_rng(seed)
        for i in range(60):
            x0 = r.standard_normal((8, 8))
            if i % 20 == 0:
                dev.inject_fault("stall", seconds=0.01)
            y = dev.linalg.matmul(dev.to_device(x0), a)
            got = dev.copy_to_host(y).result(timeout=60)
            if not np.allclose(got, x0 @ a0, rtol=1e-12, atol=1e-12):
                errors.append((seed, i))

    threads = [threading.Thread(target=client, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors


def test_closing_refuses_later_calls(backend) -> None:
    dev = gpumsg.open_device(0, backend=backend)
    dev.stats().result(timeout=60)
    dev.close()
    with pytest.raises(gpumsg.DeviceClosed):
        dev.stats()
    with pytest.raises(InvalidMessage):
        dev.send("not a message")


@pytest.mark.gpu
def test_a_callers_current_context_is_left_as_it_was(backend, rng) -> None:
    """The CUDA backend pushes the device's context for a caller's turn and pops it after:
    the calling thread's current context is the same after its calls as before."""
    if backend != "cuda":
        pytest.skip("the simulator has no CUDA context")
    from cuda.bindings import driver as cu

    out: list = []
    x0 = rng.standard_normal((4, 4))
    with gpumsg.open_device(0, backend="cuda") as d:
        def worker() -> None:
            before = int(cu.cuCtxGetCurrent()[1])
            x = d.to_device(x0)
            got = d.copy_to_host(d.linalg.matmul(x, x)).result(timeout=60)
            d.stats().result(timeout=60)
            out.append((before, int(cu.cuCtxGetCurrent()[1]), got))

        t = threading.Thread(target=worker)
        t.start()
        t.join(120)
    assert out and out[0][0] == out[0][1]
    np.testing.assert_allclose(out[0][2], x0 @ x0, rtol=1e-12, atol=1e-12)


def test_caller_runs_off_sends_every_call_through_the_device_thread(backend, rng) -> None:
    """``caller_runs=False``: no call runs on a caller's thread; the answers are the same."""
    a0, b0 = rng.standard_normal((16, 8)), rng.standard_normal((8, 4))
    with gpumsg.config.configured(caller_runs=False):
        with gpumsg.open_device(0, backend=backend) as d:
            a, b = d.to_device(a0), d.to_device(b0)
            got = d.copy_to_host(d.linalg.matmul(a, b)).result(timeout=60)
            d.stats().result(timeout=60)
            turns, taken = _counts(d)
            assert turns == 0 and taken >= 4
    np.testing.assert_allclose(got, a0 @ b0, rtol=1e-12, atol=1e-12)
