"""The interpreter's GIL switch interval while gpumsg devices are open (caller's side).

A device thread shares the GIL with the threads that post to it. A caller posting a burst holds
the GIL, and CPython hands it to a waiting thread only when the holder blocks or after the
switch interval, 5 ms by default. The device thread gives the GIL up in driver and library
calls, and each time it wants it back it waits for that interval.

Two remedies, measured on the H100 (docs/performance.md):

* a short interval (50 µs): the device thread gets the GIL back within 50 µs while a caller
  posts. Pipelined ResNet-50 convolutions went from 0.80-0.84x torch to 1.00-1.01x. It costs
  many posting threads dearly: nine threads hand the GIL round every 50 µs, and eight callers
  reached 0.71-0.87x one caller's rate;
* a caller that finds the mailbox full pauses on an event (service/backpressure.py, later):
  the device thread then runs alone. With that in place, the interval no longer matters for
  bursts (50 µs, 1 ms and 5 ms within 2% on every pipelined case), and eight callers reach
  one caller's rate at 5 ms.

So by default gpumsg leaves the interpreter's interval alone, and sets :data:`SHORT_S` only
for thread isolation with the pause turned off (``GPUMSG_BACKPRESSURE=off``), putting back the
previous value when the last such device closes (unless someone else changed it meanwhile).
``GPUMSG_SWITCH_INTERVAL`` in the environment sets a value in seconds for every device, or
``keep`` leaves the interpreter's own.
"""

from __future__ import annotations

import os
import sys
import threading

from ..errors import InvalidMessage

__all__ = ["SHORT_S", "SwitchInterval", "SWITCH", "configured_interval"]

#: the switch interval while a device whose callers never pause is open (seconds)
SHORT_S = 50e-6


def configured_interval(callers_pause: bool = True) -> float | None:
    """The interval to set while a device is open, or None to keep the interpreter's:
    ``GPUMSG_SWITCH_INTERVAL`` when set (seconds, or ``keep``); else None when the device's
    callers pause on a full mailbox (``callers_pause``), :data:`SHORT_S` when they do not.
    Raises InvalidMessage for a value that is neither a positive number of seconds nor
    ``keep``."""
    text = os.environ.get("GPUMSG_SWITCH_INTERVAL", "").strip().lower()
    if not text:
        return None if callers_pause else SHORT_S
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
