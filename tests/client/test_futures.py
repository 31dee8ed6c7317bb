"""GpuFuture: a concurrent.futures.Future whose waiters in result() sleep on bare locks and
whose condition (and the lists of waiters and callbacks) are made only for callbacks, wait() and
as_completed() (client/buffers.py).
Answers from other threads must never be lost, and everything that takes a Future (wait,
as_completed, callbacks, exception) must work as with the standard one."""

from __future__ import annotations

import concurrent.futures as cf
import random
import threading
import time

import pytest

from gpumsg.client._buffers import BufferFuture, GpuFuture


def test_an_answer_before_any_wait_makes_no_condition() -> None:
    f = GpuFuture()
    assert not f.done()
    f.set_result(5)
    assert f.done() and f.result() == 5 and f.exception() is None
    assert f._cond is None  # the saving: nobody waited, so no Condition was made
    # nor the lists of wait()'s waiters and of done-callbacks
    assert f._waiter_list is None and f._callback_list is None
    with pytest.raises(cf.InvalidStateError):
        f.set_result(6)
    assert not f.cancel() and not f.cancelled()


def test_exceptions_reach_result_and_exception() -> None:
    f = GpuFuture()
    f.set_exception(ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        f.result()
    assert isinstance(f.exception(), ValueError)
    g = GpuFuture()
    with pytest.raises(cf.TimeoutError):
        g.result(timeout=0.01)  # slept, then timed out: its lock is no longer registered
    assert g._sleepers == [] and g._cond is None
    g.set_exception(KeyError("k"))  # wakes nobody, keeps the answer
    with pytest.raises(KeyError):
        g.result(timeout=1)


def test_every_sleeper_wakes_without_a_condition() -> None:
    f = GpuFuture()
    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(f.result(timeout=10)))
               for _ in range(6)]
    e = threading.Thread(target=lambda: got.append(f.exception(timeout=10) is None))
    for t in [*threads, e]:
        t.start()
    deadline = time.monotonic() + 10
    while len(f._sleepers or ()) < 7 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(f._sleepers) == 7  # all seven asleep on their own locks
    f.set_result(3)
    for t in [*threads, e]:
        t.join(10)
    assert sorted(got) == [True] + [3] * 6 and f._cond is None and f._sleepers is None


def test_a_sleeper_and_a_condition_waiter_both_wake() -> None:
    f = GpuFuture()
    got: list[object] = []
    sleeper = threading.Thread(target=lambda: got.append(f.result(timeout=10)))
    sleeper.start()
    while not f._sleepers:
        time.sleep(0.001)
    waiter = threading.Thread(target=lambda: got.append(len(cf.wait([f], timeout=10).done)))
    waiter.start()
    time.sleep(0.02)  # wait() has made the condition by now (or the answer is seen at once)
    f.set_result("x")  # through the condition, then the sleepers
    sleeper.join(10)
    waiter.join(10)
    assert sorted(map(str, got)) == ["1", "x"]


def test_callbacks_before_and_after_the_answer() -> None:
    seen = []
    f = GpuFuture()
    f.add_done_callback(lambda fut: seen.append(("before", fut.result())))
    f.set_result(1)
    f.add_done_callback(lambda fut: seen.append(("after", fut.result())))
    assert seen == [("before", 1), ("after", 1)]


def test_answers_from_other_threads_are_never_lost() -> None:
    """Waiters that arrive before, during and after the answer, over many futures: each
    result() returns the answer (a lost wakeup would hang until the timeout and fail)."""
    n = 3000
    futures = [GpuFuture() for _ in range(n)]
    got: list[int | None] = [None] * n
    errors: list[BaseException] = []

    def answer() -> None:
        rng = random.Random(1)
        for i, f in enumerate(futures):
            if rng.random() < 0.01:
                time.sleep(0)  # let the waiters get ahead now and then
            f.set_result(i)

    def wait(start: int) -> None:
        try:
            for i in range(start, n, 4):
                got[i] = futures[i].result(timeout=10)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=wait, args=(k,)) for k in range(4)]
    threads.append(threading.Thread(target=answer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and got == list(range(n))


def test_wait_and_as_completed_take_gpu_futures() -> None:
    futures = [GpuFuture() for _ in range(20)]
    futures[0].set_result(0)  # answered before wait() made its condition

    def answer() -> None:
        for i, f in enumerate(futures[1:], 1):
            f.set_exception(RuntimeError(str(i))) if i % 5 == 0 else f.set_result(i)

    done, not_done = cf.wait(futures[:1], timeout=1)
    assert done == {futures[0]} and not not_done
    t = threading.Thread(target=answer)
    t.start()
    seen = {f.result() if f.exception() is None else -1 for f in cf.as_completed(futures, 10)}
    t.join()
    assert seen == {i for i in range(20) if i == 0 or i % 5} | {-1}
    done, _ = cf.wait(futures, timeout=1, return_when=cf.FIRST_EXCEPTION)
    assert len(done) == 20


def test_buffer_future_answers_with_its_buffer() -> None:
    class _Buf:
        _ptr = 0

    buf = _Buf()
    f = BufferFuture(buf)  # type: ignore[arg-type]
    f.set_result(0x1000)  # the device answers an allocation with its pointer
    assert f.result() is buf and buf._ptr == 0x1000
