"""Who runs a device's messages: the one owner of "what runs where".

Every turn that touches the device's state (handlers, the envelope, its completion lists, the
buffer table) runs under the device's :class:`Executor` lock, one turn at a time. Three kinds of
thread take turns:

- **the device thread** (``service/_worker.py: serve``) takes a batch from the mailbox and runs
  it, as before: it is the executor whenever messages are queued;
- **a caller that finds the device idle** (nothing posted that the executor has not taken, the
  lock free) runs its own message on its own thread (:meth:`DeviceWorker.run_inline
  <gpumsg.service._worker.DeviceWorker.run_inline>`): no mailbox, no wake-up of the device
  thread, no GIL handed back and forth. Only message types that only enqueue work and answer
  (:data:`INLINE` and the capturable ones) run so: a handler that waits for another thread (a
  peer copy's handshake, a communicator's rendezvous) would wait for a message its caller has
  not sent yet;
- **a caller waiting for a future that such a turn left running** (:meth:`DeviceWorker.lead
  <gpumsg.service._worker.DeviceWorker.lead>`): it answers the completed batches itself and
  waits on the batch's event with neither the lock nor the GIL, instead of being woken by a
  completion thread.

Queue order is kept by counting: the mailbox counts what is put in it (:class:`Mailbox`), the
executor what it has taken; a caller runs inline only while the two agree, under the lock, so
a message never overtakes one posted before it (by any thread). Batches a caller's turn left
running stay with the executor lock (``StreamSlot.local``) for the next turn or a waiting
caller to answer; when callers are away the device thread drains them: a turn that leaves some
puts :data:`WATCH` in the mailbox (once), and the device thread then looks after
:data:`WATCH_SECONDS`, handing what callers left to the completion threads when no caller has
taken a turn since its last look; while callers are at work the wait doubles, up to
:data:`WATCH_MAX_SECONDS`.

Measured on an H200 (array calls pipelined, each dropping the previous result): once one
message waits in the mailbox, the caller's next posts queue behind it while the device thread
catches up, and 97-99% of the calls went through the mailbox; forcing callers to wait for the
device thread (``GPUMSG_BACKPRESSURE=1/0``: 86% of small reductions inline) did not make a call
cheaper (77-79 µs either way). The Python work per message, not the hand-over, sets that cost.
The device thread's look never waits for the lock: a look that did took the lock as a caller's
turn ended, and the caller's next message, finding it taken, queued behind the look; the wait
for that message then crossed two threads (the device thread woken to run it, the caller woken
by its answer). In a loop of round trips, 20-40% of the waits went so, at 130-230 µs each
against one inline turn's wait (H200 VM, 2026-11-28, CG on the Poisson matrix and the upload /
matmul / download step). A look that finds the lock taken skips: a caller is at work, and what
its turns leave running is its own. Paired runs (two rounds each, the same VM): a round trip of
``float(sum(x))`` 172-223 µs before, 114-118 after; the kept-buffer upload / matmul / download
step 139-155 µs, 115-121; 50 spectral steps with one wait 295-307 µs a step, 195-198;
pipelined calls and one thread issuing GEMM, FFT and convolution calls in turn within the runs'
spread. Nor did callers
that waited for the lock of a device thread that was only settling or looking (up to 1 ms, the
settling ending at once) instead of posting behind it: pipelined sums, element-wise calls, new
`matmul` outputs and GEMM/FFT/convolution rounds moved by -20% to +30% between paired runs on an
H200 VM, the same spread as two runs of one tree. What each call costs there (per-thread CPU
time from ``/proc``, 2026-11-28): the caller 30-55 µs and the device thread 35-55 µs for a sum
or an element-wise call, their sum about the call's wall time, the GIL serializing them; with
the whole process pinned to one core some rows ran 20-30% faster and others 10-15% slower.
"""

from __future__ import annotations

import threading
from queue import SimpleQueue
from typing import Any

__all__ = ["Executor", "Mailbox", "WATCH", "WATCH_SECONDS", "WATCH_MAX_SECONDS", "WATCH_IDLE",
           "INLINE", "runs_inline"]

#: how soon the device thread first looks at what callers' turns left running, in seconds
WATCH_SECONDS = 300e-6
#: the longest wait between two looks: each look that finds callers at work (a turn taken
#: since the last, or the lock held) doubles the wait up to this; one that finds them away
#: goes back to WATCH_SECONDS. A look wakes the device thread, which then needs the GIL: a
#: caller in a loop of round trips (it waits for its own answers) lost the GIL to a look
#: every 300 µs (see the module)
WATCH_MAX_SECONDS = 2.4e-3
#: looks with no caller turn after which the device thread stops looking (and blocks)
WATCH_IDLE = 32
#: the message that sets the device thread looking (see the module)
WATCH = object()
#: message types a caller may run on its own thread (besides the capturable ones,
#: ``messages.graph.CAPTURABLE``, which only enqueue GPU work): they enqueue work or answer at
#: once, and never wait for another thread
INLINE: set[type] = set()


def runs_inline(*types: type) -> None:
    """Let messages of ``types`` run on a caller's thread when the device is idle (their
    handlers never wait for another thread)."""
    INLINE.update(types)


class Mailbox(SimpleQueue):
    """A device's mailbox (a SimpleQueue) that counts what was put in it: ``posted``."""

    def __init__(self) -> None:
        self.posted = 0
        self._count = threading.Lock()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        # counted first: a caller that reads the count between the two waits for the item
        with self._count:
            self.posted += 1
        SimpleQueue.put(self, item)


class Executor:
    """The executor lock of one device and what the turns under it share (see the module).

    ``holder``: the thread id of the turn running (None between turns); ``taken``: mailbox
    items the device thread has taken into a turn; ``turns``: callers' turns so far (the
    device thread compares it between looks); ``watching``: the device thread looks at what
    callers left; ``watch_posted``: :data:`WATCH` is in the mailbox."""

    __slots__ = ("lock", "holder", "taken", "turns", "watching", "watch_posted", "closed",
                 "nudged", "reclaiming", "batch")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: int | None = None
        self.taken = 0
        self.turns = 0
        self.watching = False
        self.watch_posted = False
        self.closed = False  # the device shut down: no more turns
        #: someone is to be told of an answer rather than wait for it (GpuFuture's nudge): the
        #: turn's end hands what it keeps to the completion threads
        self.nudged = False
        #: a refused allocation is reclaiming memory (DeviceWorker._reclaim): buffers that die
        #: on any thread meanwhile are the executor's to free
        self.reclaiming = False
        #: the device thread's batch being handled, ``[(message, reply), ...]``
        self.batch: list = []

    def idle(self, mailbox: Any) -> bool:
        """Under the lock: whether everything posted has been taken (and so handled)."""
        return getattr(mailbox, "posted", -1) == self.taken
