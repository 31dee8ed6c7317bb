"""Placement: which compute stream of the device's pool a message runs on.

A device has a pool of compute streams (the option ``streams``, one by default). Before a
message's handler runs, :meth:`Placement.enter` chooses its stream and makes it the context's
compute stream (``ctx.compute``): the envelope issues COMPUTE work there, ``ctx.library``
answers that stream's own handles of the per-stream libraries, ``ctx.derived`` its launchers.
Handlers do not know about the pool.

The rule, for a message of a type that may run anywhere (``service._registry.placed``):

1. A message that reads a buffer whose last write is in flight on a stream of the pool, or
   writes a buffer with a write or a read in flight there, follows that work on its stream.
   Where it conflicts with work on several streams it follows the stream the last message was
   placed on if that is one of them, else the first it finds; the envelope makes it wait for
   the others with events (read-after-write, write-after-read, write-after-write).
2. A message that conflicts with nothing in flight goes to the first stream of the pool with
   nothing in flight, else to the least recently used stream. (The first idle one, not the
   least recently used: a call repeated on a quiet device lands where it ran before, where
   that stream's handles already hold its plans.)
3. ``Alloc`` goes where the last message went: the buffer's first user, usually the caller's
   next message, then follows it there with no event. ``AllocThen`` is placed by its message.
   (So code that allocates a buffer and then writes it in two messages, as the array layer
   does, starts no new chain: its work follows the last message's stream. A single
   ``AllocThen`` is placed by what writes the buffer.)

"In flight" means issued and not yet seen complete (``StreamSlot.done_seq``, which lags a
little behind the GPU): a conflict that has in fact completed only costs an event that is
already reached. So a single caller's dependent chain stays on one stream, with no event,
and independent work of several callers, or independent calls of one caller, spreads over
the pool. Every other message (graphs, cuRAND, cuSPARSE, NCCL, interop, the device messages
without GPU work) runs on the first compute stream, as with one stream. A ``Free`` goes to a
stream where the buffer is in flight, after every use on every stream.

Explicit streams (``dev.stream()``, :class:`~gpumsg.messages.device.OnStream`) are compute
streams of their own, outside the pool: what is sent on one runs there, ordered against
everything else by the same tracking (messages that keep device-wide state run on the first
compute stream there too).
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidMessage
from ..messages._base import BufRef, Message
from ..messages.device import Alloc, AllocThen, OnStream
from ._registry import PLACED, PLACED_FIELDS

__all__ = ["Placement", "POOLED", "EXPLICIT"]

#: ``StreamSlot.compute`` of a compute stream of the pool, and of an explicit stream
POOLED, EXPLICIT = 1, 2


def _fields(t: type) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The fields a message type reads only and writes, where its ``refs``/``written`` are
    the base class's or it declared them (None: ask the message)."""
    if t in PLACED_FIELDS:
        return PLACED_FIELDS[t]
    if t.refs is not Message.refs or t.written is not Message.written:  # type: ignore[attr-defined]
        return None
    writes = tuple(t.__writes__)  # type: ignore[attr-defined]
    return tuple(f for f in t.__buffers__ if f not in writes), writes  # type: ignore[attr-defined]


class Placement:
    """The placement of one device's messages on its pool of compute streams (see the
    module); ``auto`` false places only what is sent on an explicit stream."""

    __slots__ = ("ctx", "pool", "home", "last", "clock", "auto", "explicit", "_fields",
                 "_counts")

    def __init__(self, ctx: Any, auto: bool) -> None:
        self.ctx = ctx
        self.pool: list[Any] = list(ctx.pool)
        for slot in self.pool:
            slot.compute = POOLED
        self.home = ctx.home
        self.last = ctx.home  # the stream the last message was placed on
        self.clock = 0
        self.auto = auto
        self.explicit: dict[int, Any] = {}  # explicit stream id -> its StreamSlot
        self._fields: dict[type, Any] = {}
        self._counts: tuple[int, tuple[int, ...]] = (-1, ())  # (clock, counts) of the last ask

    def enter(self, msg: Any) -> None:
        """Before the handler of ``msg`` (of a type in ``PLACED``): make the compute stream
        it is placed on current (the first compute stream stays current for a message that
        is not placed)."""
        t = type(msg)
        if t is OnStream:
            slot = self.explicit.get(msg.stream)
            if slot is None:
                raise InvalidMessage(f"stream: no stream {msg.stream} on this device (closed, "
                                     "or opened on another device)", field="stream")
            then = msg.then
            if type(then) not in PLACED or (type(then) is AllocThen
                                           and type(then.then) not in PLACED):
                return  # device-wide library state: the first compute stream, as always
        elif not self.auto:
            return
        elif t is AllocThen:
            then = msg.then
            if type(then) not in PLACED:
                return
            slot = self.choose(then)
        elif t is Alloc:
            slot = self.last
        else:
            slot = self.choose(msg)
        slot.placed += 1
        self.clock = slot.used = self.clock + 1
        if slot.compute == POOLED:
            self.last = slot
        ctx = self.ctx  # DeviceContext.enter, inlined
        ctx.compute = slot
        ctx.derived = slot.derived

    def leave(self) -> None:
        """After the handler: the first compute stream is current again."""
        ctx = self.ctx
        ctx.compute = home = self.home
        ctx.derived = home.derived

    def choose(self, msg: Any) -> Any:
        """The stream of the pool that ``msg`` goes to (rules 1 and 2 of the module). On the
        path of every placed message: the common fields are looked at inline."""
        fields = self._fields.get(type(msg), False)
        if fields is False:
            fields = self._fields[type(msg)] = _fields(type(msg))
        last = self.last
        found = None
        if fields is not None:
            buffers = self.ctx.buffers
            streams = self.ctx.streams
            reads, writes = fields
            for name in reads:  # read after write
                v = getattr(msg, name)
                if type(v) is BufRef:
                    a = buffers.get(v.id)
                    if a is not None and a.write_stream >= 0:
                        s = streams[a.write_stream]
                        if s.compute == POOLED and s.done_seq < a.write_seq:
                            if s is last:
                                return last
                            if found is None:
                                found = s
                elif type(v) is tuple:
                    s = self._scan(v, False)
                    if s is last:
                        return last
                    if found is None:
                        found = s
            for name in writes:  # write after write or read
                v = getattr(msg, name)
                if type(v) is BufRef:
                    a = buffers.get(v.id)
                    s = None if a is None else self.follow(a)
                elif type(v) is tuple:
                    s = self._scan(v, True)
                else:
                    continue
                if s is last:
                    return last
                if found is None:
                    found = s
        else:
            written = {r.id for r in msg.written()}
            for r in msg.refs():
                s = self._used(r) if r.id in written else self._written(r)
                if s is not None:
                    if s is last:
                        return last
                    found = found or s
        if found is not None:
            return found
        return self.idle()

    def _scan(self, refs: tuple, write: bool) -> Any:
        """Rule 1 over a tuple of buffers: a pool stream they conflict with (None: none)."""
        found = None
        for r in refs:
            if type(r) is BufRef:
                s = self._used(r) if write else self._written(r)
                if s is not None:
                    if s is self.last:
                        return s
                    found = found or s
        return found

    def idle(self) -> Any:
        """Rule 2: the first stream with nothing in flight, else the least recently used."""
        for s in self.pool:
            # nothing issued on it is still to be seen complete (allocations, which count in
            # its sequence without a batch of their own, need nothing)
            if s.seq == s.done_seq or not (s.pending or s.local or
                                           s.handed != s.watcher.batches):
                return s
        return min(self.pool, key=_last_used)

    def _written(self, ref: BufRef) -> Any:
        """The pool stream where ``ref``'s last write is in flight (None: none)."""
        a = self.ctx.buffers.get(ref.id)
        if a is None or a.write_stream < 0:
            return None
        s = self.ctx.streams[a.write_stream]
        if s.compute == POOLED and s.done_seq < a.write_seq:
            return s
        return None

    def _used(self, ref: BufRef) -> Any:
        """A pool stream where ``ref``'s last write or a read since is in flight (None)."""
        a = self.ctx.buffers.get(ref.id)
        if a is None:
            return None
        return self.follow(a)

    def follow(self, a: Any) -> Any:
        """A pool stream where allocation ``a`` has a write or a read in flight, the last
        stream first (None: none)."""
        streams = self.ctx.streams
        found = None
        if a.write_stream >= 0:
            s = streams[a.write_stream]
            if s.compute == POOLED and s.done_seq < a.write_seq:
                if s is self.last:
                    return s
                found = s
        for t, seq in a.reads.items():
            s = streams[t]
            if s.compute == POOLED and s.done_seq < seq:
                if s is self.last:
                    return s
                found = found or s
        return found

    def counts(self) -> tuple[int, ...]:
        """Messages placed on each stream of the pool, the first stream first."""
        clock, counts = self._counts
        if clock != self.clock:  # something was placed since the last ask
            counts = tuple([s.placed for s in self.pool])
            self._counts = (self.clock, counts)
        return counts


def _last_used(slot: Any) -> int:
    return slot.used
