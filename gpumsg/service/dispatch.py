"""The dispatch table: message type -> handler.

A handler is ``handler(ctx, msg, reply)``: ``ctx`` is the device's
:class:`~gpumsg.service.context.DeviceContext`, ``reply`` the future (or any object with
``set_result``/``set_exception``) to answer, or None when nobody waits for the answer. A handler
either answers at once (``ctx.reply_now``) or issues work through the envelope (``ctx.run``),
whose completion answers. Raising a :class:`~gpumsg.errors.GpuError` fails only that message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["HANDLERS", "handles", "COMPUTE", "H2D", "D2H", "STREAM_INDEX"]

#: stream indices of every device
COMPUTE, H2D, D2H = 0, 1, 2
STREAM_INDEX = {"compute": COMPUTE, "h2d": H2D, "d2h": D2H}

Handler = Callable[[Any, Any, Any], None]
HANDLERS: dict[type, Handler] = {}


def handles(*types: type) -> Callable[[Handler], Handler]:
    """Register a handler for one or more message types."""

    def wrap(fn: Handler) -> Handler:
        for t in types:
            if t in HANDLERS:
                raise RuntimeError(f"two handlers for {t.__name__}")
            HANDLERS[t] = fn
        return fn

    return wrap


def dispatch_table() -> dict[type, Handler]:
    """Every registered handler (importing the handler modules registers them)."""
    from .. import libs  # noqa: F401
    from . import handlers  # noqa: F401

    return dict(HANDLERS)
