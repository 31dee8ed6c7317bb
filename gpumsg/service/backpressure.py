"""Backpressure on a device's mailbox (thread isolation): a caller that finds many messages
waiting pauses until the device thread has taken most of them.

Why: under the GIL, the device thread competes with every posting thread. It gives the GIL up
in each driver or library call and then waits up to a switch interval to get it back, so while
callers post back to back it issues about one message per interval, and with eight posting
threads one handover in nine. A caller that pauses sleeps on an event, not on the GIL: the
device thread then runs its batches without waiting for the GIL at every call. Measured on the
H100 (docs/performance.md): pipelined bursts no longer fall into a slow regime, and
convolutions at the host floor gain a little; eight posting threads gain nothing (their
handovers are among themselves).

Two sides, two threads:

* the caller's thread, after its put, calls :meth:`Backpressure.pause` when the mailbox holds
  ``high`` messages or more; it waits until the device thread opens the way or ``timeout``
  seconds pass (bounded: a pause can cost latency, never a deadlock);
* the device thread calls :meth:`Backpressure.relieve` between batches; when a caller waits
  and ``low`` messages or fewer are left, it wakes the waiting callers.

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
#: the longest single pause, in seconds (the device thread wakes callers sooner)
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
        self._room = threading.Event()
        #: a caller waits (read by the device thread without a lock: a stale False costs at
        #: most one pause's timeout, a stale True one needless set)
        self.waiting = False
        #: pauses taken so far (statistics)
        self.pauses = 0

    def pause(self) -> None:
        """Caller's thread: wait until the device thread has taken most of the mailbox."""
        if getattr(_local, "exempt", False):
            return
        room = self._room
        room.clear()
        self.waiting = True  # after the clear: a wake-up from here on is not lost
        if self._qsize() > self.low:  # the device thread has not caught up since the put
            self.pauses += 1
            room.wait(self.timeout)

    def relieve(self) -> None:
        """Device thread, between batches: wake the waiting callers once ``low`` or fewer
        messages are left."""
        if self.waiting and self._qsize() <= self.low:
            self.waiting = False
            self._room.set()

    def release(self) -> None:
        """The device thread is finishing: no pause from now on, and none left waiting."""
        self.high = 0
        self.waiting = False
        self._room.set()
