"""Backpressure on a device's mailbox (thread isolation): a caller that finds many messages
waiting pauses until the device thread has taken most of them.

Why: under the GIL, the device thread competes with every posting thread. It gives the GIL up
in each driver or library call and then waits up to a switch interval to get it back, so while
callers post back to back it issues about one message per interval, and with eight posting
threads one handover in nine. A caller that pauses sleeps on a lock, not on the GIL: the device
thread then runs its batches without waiting for the GIL at every call. Paused callers are
woken one at a time, longest waiting first, the next once the last woken has paused again: one
caller refills the mailbox while the others sleep, where waking them all made eight callers
hand the GIL to each other while the device thread waited. Measured on the H100
(docs/performance.md): pipelined bursts no longer fall into a slow regime, convolutions at the
host floor gain a little, and eight pipelining threads send 4-29% more calls than when a relief
woke them all, blocking as often per op as one caller.

Two sides, two threads:

* the caller's thread, after its put, calls :meth:`Backpressure.pause` when the mailbox holds
  ``high`` messages or more; it waits until the device thread wakes it, or until the device
  thread has finished no batch for ``timeout`` seconds (bounded: a pause can cost latency,
  never a deadlock);
* the device thread calls :meth:`Backpressure.relieve` after each batch; when a caller waits,
  ``low`` messages or fewer are left and the caller woken before has paused again (or none
  are left, or :data:`WAKE_GRACE` batches have passed), it wakes the caller that has waited
  longest.

The service's own threads (the device thread, the completion threads, which may run callers'
done-callbacks that post) never pause: :func:`exempt_this_thread` marks them.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from ..config import setting

__all__ = ["Backpressure", "exempt_this_thread", "configured", "HIGH", "LOW", "PAUSE_TIMEOUT",
           "WAKE_GRACE"]

#: a caller pauses when the mailbox holds this many messages after its put ...
HIGH = 128
#: ... until the device thread has left this many or fewer: half, so that the device thread
#: still has work queued while woken callers take the GIL back (16 starved convolutions on
#: the H100; docs/performance.md, "Backpressure on the mailbox")
LOW = 64
#: a pause ends early when the device thread has finished no batch for this long, in seconds
#: (it is stuck, or its done-callback waits for something the paused caller holds). While
#: batches finish, a caller keeps its place until its turn: with a plain 5 ms bound, more than
#: half the pauses of eight pipelining threads ended at the bound (their turns are further
#: apart), and each such caller went on posting beside the one whose turn it was. A paused
#: caller looks at the device thread's progress once per bound, and each look takes the GIL:
#: at 5 ms those looks doubled the GIL handovers of eight pipelining threads against 50 ms
#: (H100); 20 ms keeps them rare and a stuck device thread's callers waiting briefly
PAUSE_TIMEOUT = 0.02

#: batches a woken caller has to refill the mailbox and pause again before the next paused
#: caller is woken anyway (it may have stopped posting while another caller, who never pauses,
#: keeps the mailbox from running dry): one or two batches are its usual time
WAKE_GRACE = 2

_local = threading.local()
_allocate_lock = threading.Lock


def configured() -> tuple[int, int]:
    """(high, low) from ``GPUMSG_BACKPRESSURE``: ``off`` (or ``0``) turns the pause off,
    ``HIGH/LOW`` sets both; unset, the defaults. Anything else raises ValueError naming it."""
    value = (setting("GPUMSG_BACKPRESSURE") or "").strip()
    if not value:
        return HIGH, LOW
    if value in ("off", "0"):
        return 0, 0
    try:
        high, low = (int(v) for v in value.split("/"))
    except ValueError:
        raise ValueError(f"GPUMSG_BACKPRESSURE must be 'off' or 'HIGH/LOW' (two ints), got "
                         f"{value!r}") from None
    if not 0 <= low < high:
        raise ValueError(f"GPUMSG_BACKPRESSURE needs 0 <= LOW < HIGH, got {value!r}")
    return high, low


def exempt_this_thread() -> None:
    """Mark the calling thread (one of the service's own) as never pausing."""
    _local.exempt = True


class Backpressure:
    """The pause and the wake-up of one mailbox (see the module). ``qsize`` is the mailbox's
    ``qsize``; ``high`` 0 turns the pause off."""

    __slots__ = ("_qsize", "high", "low", "timeout", "_mutex", "_turns", "_woken_at", "batches",
                 "pauses", "timeouts")

    def __init__(self, qsize: Any, high: int = HIGH, low: int = LOW,
                 timeout: float = PAUSE_TIMEOUT) -> None:
        if high and not 0 <= low < high:
            raise ValueError(f"backpressure needs 0 <= low < high, got low={low}, high={high}")
        self._qsize = qsize
        self.high = high
        self.low = low
        self.timeout = timeout
        self._mutex = threading.Lock()
        #: one held lock per paused caller, longest waiting first: a relief releases the first
        self._turns: deque[Any] = deque()
        # the batch after which a relief woke a caller, while no caller has paused since (that
        # one is refilling the mailbox); -1: none
        self._woken_at = -1
        #: batches the device thread has finished (a paused caller's sign of its progress)
        self.batches = 0
        #: pauses taken so far, and those of them that ended at ``timeout`` (statistics)
        self.pauses = self.timeouts = 0

    @property
    def waiting(self) -> int:
        """Callers paused now."""
        return len(self._turns)

    def pause(self) -> None:
        """Caller's thread: wait until the device thread has taken most of the mailbox and it
        is this caller's turn (callers are woken one at a time, longest waiting first). The
        wait ends early only when the device thread finishes no batch for ``timeout`` seconds
        (it is stuck, or waits for something this caller holds): a caller whose turn is merely
        far off keeps its place."""
        if getattr(_local, "exempt", False):
            return
        turn = _allocate_lock()
        turn.acquire()
        with self._mutex:  # the lock relieve() takes its turns under: none is missed
            # not if the device thread has caught up since the put, or is finishing
            if not self.high or self._qsize() <= self.low:
                return
            self._turns.append(turn)
            self.pauses += 1
            self._woken_at = -1  # the caller whose turn it was has stopped, or another came
        while True:
            seen = self.batches
            if turn.acquire(True, self.timeout):
                return  # this caller's turn, or release()
            if self.batches == seen:
                break  # no batch finished meanwhile
        with self._mutex:
            self.timeouts += 1
            try:
                self._turns.remove(turn)
            except ValueError:  # a relief took it just now: nothing to undo
                pass

    def relieve(self) -> None:
        """Device thread, after each batch: count it, and once ``low`` or fewer messages are
        left wake the caller that has waited longest, unless the caller woken before is still
        refilling (no caller has paused since, within :data:`WAKE_GRACE` batches) and messages
        are left: one caller posts at a time. An empty mailbox wakes the next caller whatever
        happened to the last one."""
        batches = self.batches = self.batches + 1
        turns = self._turns
        if turns:
            left = self._qsize()
            if left <= self.low and (not left or self._woken_at < 0
                                     or batches - self._woken_at > WAKE_GRACE):
                with self._mutex:
                    if turns:
                        self._woken_at = batches
                        turns.popleft().release()

    def release(self) -> None:
        """The device thread is finishing: no pause from now on, and none left waiting."""
        self.high = 0
        with self._mutex:
            while self._turns:
                self._turns.popleft().release()
