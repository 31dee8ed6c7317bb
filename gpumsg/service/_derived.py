"""What a handler derives from a repeated message, kept by the message's identity (device thread).

The client sends a repeated call as the same message object (``messages/memo.py``), so a handler
that builds something from a message's fields (a library's call description, a plan key) can
build it once per message. What it builds may also depend on the device pointers of the
message's buffers: those are fixed for a buffer's life, but they are the handler's to pass as
``stamp``, and an entry is used only where the stamp is equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DerivedMemo"]


class DerivedMemo:
    """``get(msg, stamp, build)``: ``build()`` the first time ``msg`` comes with ``stamp``, the
    kept value after that. An entry holds its message, so the id that keys it is not reused
    while it lives. At most ``size`` entries; when full it starts again (a handler's messages
    in flight are few, the repeated ones fewer)."""

    __slots__ = ("size", "_kept", "_values", "once")

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._kept: dict[int, tuple[Any, Any, Any]] = {}
        self._values: dict[tuple, Any] = {}
        #: true while a handler runs a message that is never sent again (``AllocThen``'s,
        #: whose output is new): ``get`` builds without keeping, so such messages neither
        #: cost an entry nor push out the entries of repeated ones
        self.once = False

    def get(self, msg: Any, stamp: Any, build: Callable[[], Any]) -> Any:
        if self.once:
            return build()
        kept = self._kept.get(id(msg))
        if kept is not None and kept[0] is msg and kept[1] == stamp:
            return kept[2]
        value = build()
        if len(self._kept) >= self.size:
            self._kept.clear()
        self._kept[id(msg)] = (msg, stamp, value)
        return value

    def by_value(self, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()`` the first time ``key`` comes, the kept value after: for what a handler
        derives from plain values alone (its tag first, then every value the result depends
        on, pointers included), so that a message sent once finds what an earlier one with
        the same values built (a new output at an address the pool hands out again)."""
        value = self._values.get(key)
        if value is None:
            value = build()
            if len(self._values) >= self.size:
                self._values.clear()
            self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._kept)
