"""Reusing the message of a repeated call (caller's thread).

Messages are immutable, so a call repeated with the same buffers and the same arguments can send
the message it built the first time. Building one runs every field's validation: 10-60 us of
the caller's time for a GEMM or a convolution message, against about 2 us for a lookup here.

Each kept message sits in an *entry*, ``[message, stamp]``: the stamp belongs to the sender
(``Device._send_entry`` writes there the device generation it screened the message for, so that
a repeated call skips the screening too). The memo only makes and keeps entries.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from ._base import BufRef, Message

__all__ = ["MessageMemo", "OutputTemplates", "field_values", "plain", "with_output"]


def plain(value: Any) -> bool:
    """Whether a non-buffer argument may key the memo: an int, float, complex, bool or str,
    None, or a tuple of ints. (Arrays and other objects are not memoized: their checks run
    every time.)"""
    t = type(value)
    if t is int or t is str or t is float or value is None or t is bool or t is complex:
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
    every time. A message is kept only if it holds the very references of its key, so an id in
    a live key is not reused, and a hit needs no check beyond the lookup. At most ``size``
    entries; when full it starts again."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._memo: dict[tuple, list] = {}
        self._names: dict[type, tuple[str, ...]] = {}

    def message(self, msg_type: type, buffers: tuple, args: tuple) -> Message:
        return self.entry(msg_type, buffers, args)[0]

    def entry(self, kind: Any, buffers: tuple, args: tuple,
              build: Callable[[tuple], Message] | None = None,
              names: tuple[str, ...] | None = None) -> list:
        """The entry ``[message, stamp]`` of the call (a new one, stamp None, when the call was
        not seen or may not be kept). Without ``build``, ``kind`` is the message type and
        ``buffers`` its leading fields. A message whose buffers are not its leading fields, or
        that a call derives from its buffers, gives ``build(refs)`` to make it and ``names``,
        the fields that hold ``buffers``, in order; ``kind`` (the message type, or the name of
        a call that builds messages of several types) keeps its keys apart from other calls'."""
        refs = tuple([getattr(b, "ref", b) for b in buffers])
        key, entry = self._find(kind, refs, args)
        if entry is None:
            if build is None:
                entry = [kind(*refs, *args), None]
                names = self._names.get(kind)
                if names is None:
                    names = self._names[kind] = tuple(kind.__dataclass_fields__)[:len(refs)]
            else:
                entry = [build(refs), None]
            self._keep(key, names, refs, args, entry)  # type: ignore[arg-type]
        return entry

    def _find(self, kind: Any, refs: tuple, args: tuple) -> tuple[tuple | None, Any]:
        """The key of a call and its kept entry, or None. The key holds the arguments as
        their marshal encoding (version 2), which writes each value's exact type with it
        (``True``, ``1`` and ``1.0`` differ; ``-0.0`` and ``0.0`` too), items of tuples
        included, in one C call. Only calls whose arguments were all plain were kept, so an
        equal key has plain arguments too. A call marshal refuses (any other object) has no
        key and is never kept."""
        try:
            key = (kind, *map(id, refs), marshal.dumps(args, 2))
        except ValueError:
            return None, None
        return key, self._memo.get(key)

    def _keep(self, key: tuple | None, names: tuple[str, ...], refs: tuple, args: tuple,
              entry: list) -> None:
        """Keep ``entry`` (its message just built, so valid) under ``key`` if its call may key
        the memo and the message holds the references of the key (``names`` are its fields
        that hold them)."""
        if key is None:
            return
        msg = entry[0]
        for name, r in zip(names, refs, strict=True):
            if (type(r) is not BufRef and r is not None) or getattr(msg, name) is not r:
                return
        for a in args:
            if not plain(a):
                return
        memo = self._memo
        if len(memo) >= self.size:
            memo.clear()
        memo[key] = entry


#: per message class: a getter of all its fields, and each field's index
_FIELDS: dict[type, tuple[Callable[[Any], tuple], dict[str, int]]] = {}


def _fields_of(cls: type) -> tuple[Callable[[Any], tuple], dict[str, int]]:
    fields = _FIELDS.get(cls)
    if fields is None:
        names = tuple(cls.__dataclass_fields__)  # type: ignore[attr-defined]
        fields = _FIELDS[cls] = (attrgetter(*names), {n: i for i, n in enumerate(names)})
    return fields


def field_values(msg: Message) -> tuple:
    """Every field of ``msg``, in their order (what ``type(msg).unchecked`` takes)."""
    return _fields_of(type(msg))[0](msg)


def with_output(msg: Message, field: str, ref: BufRef) -> Message:
    """A copy of ``msg`` holding ``ref`` in ``field``, built without validating it again: for
    a message validated with an output of exactly ``ref``'s shape, dtype, order, owner and
    generation (a new output minted as the first was), whose other fields are unchanged."""
    cls = type(msg)
    getter, index = _fields_of(cls)
    values = list(getter(msg))
    values[index[field]] = ref
    return cls.unchecked(*values)  # type: ignore[attr-defined]


class OutputTemplates:
    """The messages of repeated calls that answer a new buffer (``matmul(a, b)``, a draw of a
    new shape): each is built and validated once, with the first output minted for it, and a
    repeated call copies it with its own new output (:func:`with_output`) instead of
    validating every field again.

    ``get(key, refs)`` answers ``(out_shape, message)`` kept under ``key`` if it was built
    from the very references ``refs`` (held by the kept message, so their ids in a key are
    not reused), else None; ``put(key, refs, out_shape, message)`` keeps one. The key must hold
    everything else the message was built from, by value and type. At most ``size`` entries;
    when full it starts again."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._kept: dict[tuple, tuple[tuple, tuple, Message]] = {}

    def get(self, key: tuple, refs: tuple) -> tuple[tuple, Message] | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        for held, r in zip(kept[0], refs, strict=True):
            if held is not r:
                return None
        return kept[1], kept[2]

    def put(self, key: tuple, refs: tuple, out_shape: tuple, message: Message) -> None:
        if len(self._kept) >= self.size:
            self._kept.clear()
        self._kept[key] = (refs, out_shape, message)
