"""The interpreter's GIL switch interval while gpumsg devices are open (caller's side).

In thread isolation the device thread shares the GIL with the threads that post to it. A
caller posting a burst holds the GIL, and CPython hands it to a waiting thread only when the
holder blocks or after the switch interval, 5 ms by default. The device thread gives the GIL up
in driver and library calls, and each time it wants it back it waits for that interval: while
a caller keeps posting, the device thread issues about one message per interval and the GPU
idles. On an H100, pipelined ResNet-50 convolutions (45-55 us of GPU work each) ran at
0.80-0.84x torch with 5 ms and 1.00-1.01x with 50 us (docs/performance.md). Callers now also
pause on a full mailbox (service/backpressure.py), and with that the interval no longer holds
bursts back (2026-11-24: strided GEMMs and convolutions within 1-4% at 50 us and 5 ms, 64^3
SGEMMs 4-8% faster at 5 ms); it still decides how
eight threads doing round trips share one device (0.95x one thread's rate at 50 us, 0.73x at
5 ms, medians of six runs), so thread isolation keeps :data:`SHORT_S`.

In process isolation the device thread runs in the worker, under the worker's GIL; here only
the callers and the reply reader share one, and a short interval only makes the reader preempt
a posting caller (pipelined SGEMMs 1.29x thread mode's time at 50 us, 0.90x at 5 ms). So a
device of process isolation leaves the interval alone.

While at least one thread-isolation device is open gpumsg sets the interval to
:data:`SHORT_S`, and puts back the previous value when the last one closes (unless someone
else changed it meanwhile). ``GPUMSG_SWITCH_INTERVAL`` in the environment sets another value in
seconds for every device, or ``keep`` leaves the interpreter's own.

The cyclic collector's thresholds are left alone. Each call's objects live until its work
completes, so pipelined calls outlive young collections, and a full collection with torch
imported once stalled a run of 64 Mi sums for 4 ms; but raising the young threshold from 700
to 50,000 while devices were open (H100, 2026-11-28, settings alternating in paired runs beside
torch) moved the array rows by -4% to +4% (sums, element-wise, the fused chain) with no
direction that held across runs, and the workloads within their run-to-run spread. Nor did a
5 ms interval change the single-caller array rows (sums, element-wise, the fused chain, new
`matmul` outputs; H200, 2026-11-28, two paired runs): the differences stayed within the spread
of two runs at one setting. The GPU's own timeline agrees (CUPTI, H200, 2026-11-28, settings
alternating in one process): pipelined fused chains of 64 Mi ran their kernels back to back at
247-250 µs a call with the default thresholds, with 10,000 or 50,000, and with the collector off.
"""

from __future__ import annotations

import sys
import threading

from ..config import setting
from ..errors import InvalidMessage

__all__ = ["SHORT_S", "SwitchInterval", "SWITCH", "configured_interval"]

#: the switch interval while a device of thread isolation is open (seconds)
SHORT_S = 50e-6


def configured_interval(shares_the_gil: bool = True) -> float | None:
    """The interval to set while a device is open, or None to keep the interpreter's:
    ``GPUMSG_SWITCH_INTERVAL`` when set (seconds, or ``keep``); else :data:`SHORT_S` when the
    device thread shares this interpreter's GIL (``shares_the_gil``: thread isolation), None
    when it does not (process isolation). Raises InvalidMessage for a value that is neither a
    positive number of seconds nor ``keep``."""
    text = (setting("GPUMSG_SWITCH_INTERVAL") or "").strip().lower()
    if not text:
        return SHORT_S if shares_the_gil else None
    if text == "keep":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise InvalidMessage(f"GPUMSG_SWITCH_INTERVAL must be a number of seconds in (0, 1] or "
                             f"'keep', got {text!r}", field="GPUMSG_SWITCH_INTERVAL")
    return value


class SwitchInterval:
    """Counts the open devices; the first sets the interval, the last puts the old one back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._saved: float | None = None
        self._set: float | None = None

    def enter(self, value: float | None) -> None:
        """A device opened; ``value``: its :func:`configured_interval` (the first device's
        value is the one set)."""
        with self._lock:
            self._open += 1
            if self._open == 1:
                if value is not None:
                    self._saved = sys.getswitchinterval()
                    sys.setswitchinterval(value)
                    self._set = sys.getswitchinterval()  # as the interpreter rounded it

    def exit(self) -> None:
        """A device closed (once per :meth:`enter`)."""
        with self._lock:
            self._open -= 1
            if self._open == 0 and self._set is not None:
                if sys.getswitchinterval() == self._set:  # nobody else changed it meanwhile
                    sys.setswitchinterval(self._saved)  # type: ignore[arg-type]
                self._saved = self._set = None


SWITCH = SwitchInterval()
