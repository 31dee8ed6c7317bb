"""A message whose handler answers the device thread's clock (``time.perf_counter_ns``, the
system's monotonic clock: comparable across processes). ``tools/process_legs.py`` sends it;
a worker process imports this module when it unpickles the message, which registers the
handler there too."""

from __future__ import annotations

import time
from typing import Any

from gpumsg.messages.base import Message, message
from gpumsg.service.registry import HANDLERS, handles


@message()
class ClockNow(Message):
    """Reply with the device thread's ``time.perf_counter_ns()`` when it handles this."""


if ClockNow not in HANDLERS:
    @handles(ClockNow)
    def _clock(ctx: Any, msg: ClockNow, reply: Any) -> None:
        ctx.reply_now(reply, time.perf_counter_ns())
