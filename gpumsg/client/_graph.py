"""``dev.graph()``: record the messages sent inside a ``with`` block, replay them as one graph.

Inside the block, every message the recording thread sends is checked (only GPU work on the
compute stream that needs nothing back on the host can be recorded: the refusal names the
message and nothing is recorded) and kept instead of sent; its future resolves when the graph has
been captured. Leaving the block sends one :class:`~gpumsg.messages.graph.CaptureGraph`. Other
threads' messages are sent as usual.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..errors import GraphCaptureError, InvalidMessage
from ..messages._base import BufRef, _ref
from ..messages.graph import CaptureGraph, DestroyGraph, LaunchGraph, UpdateGraph, refusal

if TYPE_CHECKING:
    from ._core import DeviceCore as Device

__all__ = ["Graph"]

_graph_ids = itertools.count(1)


def _as_ref(value: Any, field: str) -> BufRef:
    if isinstance(value, BufRef):
        return value
    if hasattr(value, "buffer") and not hasattr(value, "ref"):
        value = value.buffer
    try:
        return _ref(None, field, value)
    except InvalidMessage:
        raise InvalidMessage(f"{field}: expected a GpuBuffer, got {type(value).__name__}",
                             field=field) from None


def _destroy(dev: Device, graph: int) -> None:
    state = dev._state
    if state.accepting:
        dev._submit(DestroyGraph(graph), None)


class Graph:
    """A recorded sequence of messages (see the module docstring). ``named`` buffers can be
    re-pointed by name with :meth:`update`. The graph keeps every buffer it uses alive on the
    device until it is dropped (or :meth:`close` d), even if their ``GpuBuffer`` objects go."""

    def __init__(self, dev: Device, named: dict[str, Any]) -> None:
        self._dev = dev
        self.id = next(_graph_ids)
        self._named = {k: _as_ref(v, k) for k, v in named.items()}
        self._messages: list[Any] = []
        self._replies: list[Any] = []
        self._thread: int | None = None
        self.ready: Future | None = None  # resolves to the number of recorded messages
        self._finalizer: Any = None

    # -- recording -------------------------------------------------------------------------------
    def __enter__(self) -> Graph:
        dev = self._dev
        dev._check_open()
        if self._thread is not None or self.ready is not None:
            raise InvalidMessage("a Graph records once; make a new one with dev.graph()")
        if dev._recorder is not None:
            raise InvalidMessage("dev.graph() blocks do not nest")
        self._thread = threading.get_ident()
        dev._set_recorder(self)
        return self

    def screen(self, msg: Any) -> None:
        """Refuse ``msg`` (from the recording thread) if it cannot be recorded."""
        if threading.get_ident() == self._thread:
            why = refusal(msg)
            if why is not None:
                raise GraphCaptureError(why, type(msg).__name__)

    def take(self, msg: Any, reply: Any) -> bool:
        """Record ``msg`` if sent by the recording thread (True), else let it be sent."""
        if threading.get_ident() != self._thread:
            return False
        why = refusal(msg)
        if why is not None:
            raise GraphCaptureError(why, type(msg).__name__)
        self._messages.append(msg)
        self._replies.append(reply)
        return True

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        dev = self._dev
        dev._set_recorder(None)
        replies, self._replies = self._replies, []
        if exc_type is not None:
            err = InvalidMessage(f"graph recording aborted by {exc_type.__name__}: {exc}")
            for r in replies:
                if r is not None:
                    r.set_exception(err)
            return
        if not self._messages:
            raise InvalidMessage("dev.graph(): nothing was recorded")
        self.ready = dev.send(CaptureGraph(self.id, tuple(self._messages)))
        self._finalizer = weakref.finalize(self, _destroy, dev, self.id)

        def answer(f: Future) -> None:
            e = f.exception()
            for r in replies:
                if r is not None:
                    if e is None:
                        r.set_result(None)
                    else:
                        r.set_exception(e)

        self.ready.add_done_callback(answer)

    # -- use -------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self.ready is None:
            raise InvalidMessage("the graph has not been recorded (use it after its with block)")
        if self._finalizer is not None and not self._finalizer.alive:
            raise InvalidMessage("the graph was closed")

    @property
    def messages(self) -> tuple:
        """The recorded messages, in order."""
        return tuple(self._messages)

    def launch(self) -> Future:
        """Replay the graph on the compute stream; a future of None, resolved once the replay
        has completed."""
        self._check()
        return self._dev.send(LaunchGraph(self.id))

    def update(self, mapping: Any = None, **named: Any) -> Future:
        """Re-point recorded buffers: ``update({old: new})`` or, for buffers named in
        ``dev.graph(a=a)``, ``update(a=new_a)``. Each replacement has the old buffer's dtype,
        shape and size. Later replays use the new buffers; a future of None."""
        self._check()
        pairs: list[tuple[BufRef, BufRef]] = []
        items = list(mapping.items()) if isinstance(mapping, dict) else list(mapping or ())
        for old, new in items:
            pairs.append((_as_ref(old, "mapping"), _as_ref(new, "mapping")))
        for name, new in named.items():
            if name not in self._named:
                raise InvalidMessage(f"{name}: no buffer of that name; name buffers with "
                                     f"dev.graph({name}=buffer)", field=name)
            pairs.append((self._named[name], _as_ref(new, name)))
        msg = UpdateGraph(self.id, tuple(pairs))
        fut = self._dev.send(msg)
        for name, new in named.items():
            self._named[name] = _as_ref(new, name)
        return fut

    def close(self) -> None:
        """Drop the graph now (also done when it is garbage collected)."""
        if self._finalizer is not None:
            self._finalizer()
