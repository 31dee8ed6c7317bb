"""Reusing the message of a repeated call (caller's thread).

Messages are immutable, so a call repeated with the same buffers and the same arguments can send
the message it built the first time. Building one runs every field's validation: 10-60 us of
the caller's time for a GEMM or a convolution message, against about 2 us for a lookup here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import BufRef, Message

__all__ = ["MessageMemo", "plain"]


def plain(value: Any) -> bool:
    """Whether a non-buffer argument may key the memo: an int, float or str, None, or a tuple
    of ints. (Bools, arrays, complex numbers and other objects are not memoized: their checks
    run every time.)"""
    t = type(value)
    if t is int or t is str or t is float or value is None:
        return True
    return t is tuple and all(type(v) is int for v in value)


class MessageMemo:
    """``message(msg_type, buffers, args)`` is ``msg_type(*refs, *args)``, built once per
    distinct call.

    ``buffers`` are the message's leading fields, in order: GpuBuffers, their futures, BufRefs
    or None. Each buffer's ``ref`` raises here if it is freed or stale; the caller's ``send``
    checks owner and generation as for any message. The key holds the buffers by identity and
    the other arguments by value *and type*, so that ``1 == 1.0`` cannot let a float through
    where the message refuses one. A call with another kind of argument builds its message
    every time. The memo holds its messages, and so their references: an id in a live key is
    not reused. At most ``size`` entries; when full it starts again."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._memo: dict[tuple, Message] = {}
        self._names: dict[type, tuple[str, ...]] = {}

    def message(self, msg_type: type, buffers: tuple, args: tuple) -> Message:
        names = self._names.get(msg_type)
        if names is None:
            names = self._names[msg_type] = tuple(msg_type.__dataclass_fields__)[:len(buffers)]
        refs = tuple([getattr(b, "ref", b) for b in buffers])
        types = tuple(map(type, args))
        key = (msg_type, *map(id, refs), *args, types)
        msg = self._hit(key, names, refs, args, types)
        if msg is None:
            msg = msg_type(*refs, *args)
            self._keep(key, refs, args, msg)
        return msg

    def built(self, msg_type: type, names: tuple[str, ...], buffers: tuple, args: tuple,
              build: Callable[[tuple], Message]) -> Message:
        """:meth:`message` for a message whose buffers are not its leading fields:
        ``build(refs)`` makes it, and ``names`` are the fields that hold ``buffers``, in order."""
        refs = tuple([getattr(b, "ref", b) for b in buffers])
        types = tuple(map(type, args))
        key = (msg_type, *map(id, refs), *args, types)
        msg = self._hit(key, names, refs, args, types)
        if msg is None:
            msg = build(refs)
            self._keep(key, refs, args, msg)
        return msg

    def _hit(self, key: tuple, names: tuple[str, ...], refs: tuple, args: tuple,
             types: tuple[type, ...]) -> Any:
        """The kept message of ``key`` if its buffers are ``refs`` themselves, else None. Only
        calls whose arguments were all plain were kept, and the key holds each argument's type:
        an equal key has plain arguments too, except a tuple, whose items are checked here."""
        try:
            msg = self._memo.get(key)
        except TypeError:  # an unhashable argument: never kept
            return None
        if msg is None:
            return None
        for name, r in zip(names, refs, strict=True):
            if getattr(msg, name) is not r:
                return None
        if tuple in types:
            for a in args:
                if type(a) is tuple and not plain(a):
                    return None
        return msg

    def _keep(self, key: tuple, refs: tuple, args: tuple, msg: Message) -> None:
        """Keep ``msg`` (just built, so valid) under ``key`` if its call may key the memo."""
        for r in refs:
            if type(r) is not BufRef and r is not None:
                return
        for a in args:
            if not plain(a):
                return
        memo = self._memo
        if len(memo) >= self.size:
            memo.clear()
        memo[key] = msg
