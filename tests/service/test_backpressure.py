"""Backpressure on the mailbox (gpumsg/service/_backpressure.py): a caller that finds the
mailbox full pauses until the device thread has taken most of it; the service's own threads
never pause; a pause is bounded."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest

from gpumsg.messages.device import Stats
from gpumsg.service._backpressure import WAKE_GRACE, Backpressure, exempt_this_thread


class _HeldReply(Future):
    """A reply whose answer blocks the device thread until ``gate`` opens (the device thread
    answers Stats itself): the mailbox fills behind it."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self._gate = gate
        self.entered = threading.Event()

    def set_result(self, result: object) -> None:
        self.entered.set()
        self._gate.wait(30)
        super().set_result(result)


def _hold(dev) -> tuple[threading.Event, Future]:
    gate = threading.Event()
    reply = _HeldReply(gate)
    dev._worker.submit(Stats(), reply)  # into the mailbox: the device thread runs it
    # the device thread holds: whatever is posted from here on stays in the mailbox
    assert reply.entered.wait(10)
    return gate, reply


def test_pause_waits_for_relieve_and_is_bounded() -> None:
    depth = [200]
    bp = Backpressure(lambda: depth[0], high=100, low=10, timeout=0.3)
    t0 = time.perf_counter()
    bp.pause()  # nobody relieves: the pause ends at its timeout
    assert 0.25 < time.perf_counter() - t0 < 5
    assert bp.waiting == 0 and bp.pauses == 1 and bp.timeouts == 1
    woke: list = []
    bp.timeout = 30
    t = threading.Thread(target=lambda: (bp.pause(), woke.append(time.perf_counter())))
    t.start()
    time.sleep(0.2)
    assert not woke and bp.waiting == 1  # paused
    bp.relieve()  # more than `low` left: nobody is woken yet
    time.sleep(0.1)
    assert not woke
    depth[0] = 10
    t_relieve = time.perf_counter()
    bp.relieve()
    t.join(5)
    assert woke and woke[0] - t_relieve < 1 and bp.waiting == 0
    assert bp.pauses == 2 and bp.timeouts == 1  # woken, not timed out
    depth[0] = 5  # the device thread caught up before the pause looked: no pause at all
    t0 = time.perf_counter()
    bp.pause()
    assert time.perf_counter() - t0 < 1 and bp.pauses == 2
    with pytest.raises(ValueError, match="low"):
        Backpressure(lambda: 0, high=8, low=8)
    # a device thread that finishes releases whoever waits, and nobody pauses after
    depth[0] = 200
    woke.clear()
    t = threading.Thread(target=lambda: (bp.pause(), woke.append(time.perf_counter())))
    t.start()
    time.sleep(0.2)
    assert not woke
    bp.release()
    t.join(5)
    assert woke and bp.high == 0
    t0 = time.perf_counter()
    bp.pause()  # after release: no pause even with a full mailbox
    assert time.perf_counter() - t0 < 1 and bp.pauses == 3


def test_a_relief_wakes_one_caller_longest_waiting_first() -> None:
    """Paused callers are woken one at a time, in the order they paused, and the next only
    once a caller has paused again (or the mailbox ran dry, or WAKE_GRACE batches passed): one
    caller refills the mailbox while the others sleep (service/backpressure.py says why)."""
    depth = [200]
    bp = Backpressure(lambda: depth[0], high=100, low=10, timeout=30)
    woke: list[int] = []

    def pause_as(i: int) -> threading.Thread:
        t = threading.Thread(target=lambda: (bp.pause(), woke.append(i)))
        before = bp.waiting
        t.start()
        deadline = time.monotonic() + 10
        while bp.waiting < before + 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert bp.waiting == before + 1
        return t

    def relieve_expect(expected: list[int]) -> None:
        bp.relieve()
        deadline = time.monotonic() + 10
        while len(woke) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # a second wake-up would show here
        assert woke == expected

    callers = [pause_as(i) for i in range(3)]
    depth[0] = 10
    relieve_expect([0])  # the longest waiting
    relieve_expect([0])  # 0 is still refilling (it has not paused again): nobody
    depth[0] = 0
    relieve_expect([0, 1])  # the mailbox ran dry: the next one, whatever 0 does
    depth[0] = 10
    for _ in range(WAKE_GRACE):  # 1 neither paused again nor let the mailbox run dry ...
        relieve_expect([0, 1])
    relieve_expect([0, 1, 2])  # ... within the grace: the next one is woken anyway
    depth[0] = 200
    callers.append(pause_as(4))  # a caller pausing: the one woken has stopped refilling
    depth[0] = 10
    relieve_expect([0, 1, 2, 4])  # at once, without waiting out the grace
    for t in callers:
        t.join(5)
    assert bp.pauses == 4 and bp.timeouts == 0 and bp.waiting == 0


def test_a_paused_caller_keeps_its_place_while_batches_finish() -> None:
    """The bound ends a pause only when the device thread finishes no batch for that long (it
    is stuck): while batches finish, a caller whose turn is far off keeps waiting in its place."""
    depth = [200]
    bp = Backpressure(lambda: depth[0], high=100, low=10, timeout=0.2)
    woke: list[float] = []
    t = threading.Thread(target=lambda: (bp.pause(), woke.append(time.perf_counter())))
    t.start()
    deadline = time.monotonic() + 10
    while bp.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    end = time.monotonic() + 1.0  # five bounds, a batch every 10 ms, the mailbox still full
    while time.monotonic() < end:
        bp.relieve()
        time.sleep(0.01)
    assert not woke and bp.waiting == 1 and bp.timeouts == 0
    t0 = time.perf_counter()  # no more batches: the pause ends at its bound
    t.join(5)
    assert woke and woke[0] - t0 < 1 and bp.waiting == 0
    assert bp.pauses == 1 and bp.timeouts == 1


def test_an_exempt_thread_never_pauses() -> None:
    bp = Backpressure(lambda: 10**6, high=1, low=0, timeout=30)
    took = []

    def service_thread() -> None:
        exempt_this_thread()
        t0 = time.perf_counter()
        bp.pause()
        took.append(time.perf_counter() - t0)

    t = threading.Thread(target=service_thread)
    t.start()
    t.join(10)
    assert took and took[0] < 1 and bp.pauses == 0


def test_a_caller_pauses_on_a_full_mailbox_and_is_woken(dev) -> None:
    bp = dev._worker.backpressure
    bp.high, bp.low, bp.timeout = 16, 4, 30.0
    gate, held = _hold(dev)
    posted: list[Future] = []

    def caller() -> None:
        for _ in range(64):
            posted.append(dev.stats())

    t = threading.Thread(target=caller)
    t.start()
    deadline = time.monotonic() + 10
    while dev._worker.mailbox.qsize() < 16 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    # the 16th post put its message and paused before returning its future
    assert dev._worker.mailbox.qsize() == 16 and len(posted) == 15 and t.is_alive()
    t_open = time.perf_counter()
    gate.set()
    t.join(10)
    assert not t.is_alive() and time.perf_counter() - t_open < 10  # woken, not timed out
    assert held.result(10).total_bytes > 0
    assert all(f.result(10).total_bytes > 0 for f in posted) and len(posted) == 64
    assert bp.pauses >= 1


def test_posts_from_a_done_callback_do_not_pause(dev) -> None:
    """The device thread (or a completion thread) runs done-callbacks: their posts into a full
    mailbox must not wait for the thread that posts them."""
    bp = dev._worker.backpressure
    bp.high, bp.low, bp.timeout = 4, 1, 30.0
    gate, held = _hold(dev)
    first = dev.stats()  # answered on the device thread, after the gate opens
    later: list[Future] = []
    first.add_done_callback(lambda f: later.extend(dev.stats() for _ in range(20)))
    # fill the mailbox from other threads, which do pause (the gate holds the device thread)
    fillers = [threading.Thread(target=lambda: [dev.stats() for _ in range(4)])
               for _ in range(3)]
    for t in fillers:
        t.start()
    time.sleep(0.2)
    t0 = time.perf_counter()
    gate.set()
    assert first.result(10).total_bytes > 0
    for t in fillers:
        t.join(10)
    deadline = time.monotonic() + 10
    while len(later) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(later) == 20 and all(f.result(10).total_bytes > 0 for f in later)
    assert time.perf_counter() - t0 < 10  # no 30 s pause on the service's own thread
    held.result(10)


def test_the_environment_sets_or_turns_off_the_pause(monkeypatch) -> None:
    import gpumsg
    from gpumsg.service._backpressure import HIGH, LOW, configured

    monkeypatch.delenv("GPUMSG_BACKPRESSURE", raising=False)
    assert configured() == (HIGH, LOW)
    for value, want in (("off", (0, 0)), ("0", (0, 0)), ("256/32", (256, 32))):
        monkeypatch.setenv("GPUMSG_BACKPRESSURE", value)
        assert configured() == want
    monkeypatch.setenv("GPUMSG_BACKPRESSURE", "64/8")
    with gpumsg.open_device(backend="sim") as dev:
        bp = dev._worker.backpressure
        assert (bp.high, bp.low) == (64, 8)
    for bad in ("fast", "8/8", "8/16", "1/2/3"):
        monkeypatch.setenv("GPUMSG_BACKPRESSURE", bad)
        with pytest.raises(ValueError, match="GPUMSG_BACKPRESSURE"):
            configured()
