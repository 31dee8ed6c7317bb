"""Backpressure on a device's mailbox (thread isolation): a caller that finds many messages
waiting pauses until the device thread has taken most of them.

Why: under the GIL, the device thread competes with every posting thread. It gives the GIL up
in each driver or library call and then waits up to a switch interval to get it back, so while
callers post back to back it issues about one message per interval, and with eight posting
threads one handover in nine. A caller that pauses sleeps on a lock, not on the GIL: the device
thread then runs its batches without waiting for the GIL at every call. Paused callers are
woken one at a time, longest waiting first: one caller refills the mailbox while the others
sleep, where waking them all made eight callers hand the GIL to each other while the device
thread waited. Measured on the H100 (docs/performance.md): pipelined bursts no longer fall into
a slow regime, convolutions at the host floor gain a little, and eight pipelining threads
issue 11-16% more than when a relief woke them all.

Two sides, two threads:

* the caller's thread, after its put, calls :meth:`Backpressure.pause` when the mailbox holds
  ``high`` messages or more; it waits until the device thread wakes it or ``timeout`` seconds
  pass (bounded: a pause can cost latency, never a deadlock);
* the device thread calls :meth:`Backpressure.relieve` between batches; when a caller waits
  and ``low`` messages or fewer are left, it wakes the caller that has waited longest (one per
  batch).

The service's own threads (the device thread, the completion threads, which may run callers'
done-callbacks that post) never pause: :func:`exempt_this_thread` marks them.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["Backpressure", "exempt_this_thread", "configured", "HIGH", "LOW", "PAUSE_TIMEOUT"]

#: a caller pauses when the mailbox holds this many messages after its put ...
HIGH = 128
#: ... until the device thread has left this many or fewer: half, so that the device thread
#: still has work queued while woken callers take the GIL back (16 starved convolutions on
#: the H100; docs/performance.md, "Backpressure on the mailbox")
LOW = 64
#: the longest single pause, in seconds (the device thread wakes callers sooner). With callers
#: woken one per batch, eight pipelining threads did as well at 5 ms as at 100 ms (H100, stop 30)
PAUSE_TIMEOUT = 0.005

_local = threading.local()


def configured() -> tuple[int, int]:
    """(high, low) from ``GPUMSG_BACKPRESSURE``: ``off`` (or ``0``) turns the pause off,
    ``HIGH/LOW`` sets both; unset, the defaults. Anything else raises ValueError naming it."""
    value = os.environ.get("GPUMSG_BACKPRESSURE", "").strip()
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

    __slots__ = ("_qsize", "high", "low", "timeout", "_room", "waiting", "pauses")

    def __init__(self, qsize: Any, high: int = HIGH, low: int = LOW,
                 timeout: float = PAUSE_TIMEOUT) -> None:
        if high and not 0 <= low < high:
            raise ValueError(f"backpressure needs 0 <= low < high, got low={low}, high={high}")
        self._qsize = qsize
        self.high = high
        self.low = low
        self.timeout = timeout
        # a plain lock under the condition: its waiters are woken in the order they came
        self._room = threading.Condition(threading.Lock())
        #: callers paused now (read by the device thread without the lock: a stale count costs
        #: one needless wake-up, or a wake-up one batch later)
        self.waiting = 0
        #: pauses taken so far (statistics)
        self.pauses = 0

    def pause(self) -> None:
        """Caller's thread: wait until the device thread has taken most of the mailbox and it
        is this caller's turn (callers are woken one at a time, longest waiting first), or
        ``timeout`` seconds pass."""
        if getattr(_local, "exempt", False):
            return
        room = self._room
        with room:
            # counted before the look at the mailbox, under the lock that relieve() notifies
            # under: a relief from here on finds this caller waiting
            self.waiting += 1
            try:
                # not if the device thread has caught up since the put, or is finishing
                if self.high and self._qsize() > self.low:
                    self.pauses += 1
                    room.wait(self.timeout)
            finally:
                self.waiting -= 1

    def relieve(self) -> None:
        """Device thread, between batches: once ``low`` or fewer messages are left, wake the
        caller that has waited longest. One per batch: a woken caller refills the mailbox on
        its own, and the next batch wakes the next caller if it has not."""
        if self.waiting and self._qsize() <= self.low:
            with self._room:
                self._room.notify()

    def release(self) -> None:
        """The device thread is finishing: no pause from now on, and none left waiting."""
        self.high = 0
        with self._room:
            self._room.notify_all()
