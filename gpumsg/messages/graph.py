"""CUDA graphs of message sequences: record messages once, replay them with one message.

``CaptureGraph`` carries the recorded messages; the device thread captures them into a CUDA graph
(stream capture on the compute stream; the simulator keeps the list of calls) and instantiates it
once. ``LaunchGraph`` replays it, ``UpdateGraph`` re-points recorded buffers to others of the same
dtype and shape, ``DestroyGraph`` drops it (the buffers it kept alive are freed then if their
owners already let them go).

Only messages that enqueue GPU work on the compute stream and need nothing back on the host can
be recorded: :data:`CAPTURABLE` lists them, with the libraries whose handles must exist before the
capture starts (a handle creates its workspace, which cannot happen during a capture). A library
whose messages can be captured adds them with :func:`capturable`.
"""

from __future__ import annotations

from ._base import BufRef, Message, _fail, _int, _ref, message
from .device import CopyDevice, Memset

__all__ = ["CAPTURABLE", "capturable", "refusal", "CaptureGraph", "LaunchGraph", "UpdateGraph",
           "DestroyGraph"]

#: message type -> library handles it needs (created before the capture begins)
CAPTURABLE: dict[type, tuple[str, ...]] = {}

#: why some messages can never be recorded (named in the refusal)
_WHY = {
    "Alloc": "allocations inside a graph are refused (allocate before recording)",
    "Free": "frees inside a graph are refused (the graph keeps its buffers alive; free after)",
    "CopyFromHost": "host-to-device copies run on the h2d stream and are not recorded; copy "
                    "before recording or use a device copy inside",
    "CopyToHost": "it reads a result back to the host mid-sequence",
    "Dot": "it reads a result back to the host", "Nrm2": "it reads a result back to the host",
    "Asum": "it reads a result back to the host", "Iamax": "it reads a result back to the host",
    "Iamin": "it reads a result back to the host",
    "Stats": "it answers from the host at once", "Synchronize": "it waits for the device",
    "GemmBatched": "it stages pointer arrays through host memory for each call",
}


def capturable(*types: type, libraries: tuple[str, ...] = ()) -> None:
    """Allow messages of ``types`` inside ``dev.graph()``; ``libraries`` are the library
    handles their handlers use."""
    for t in types:
        CAPTURABLE[t] = tuple(libraries)


def refusal(msg: object) -> str | None:
    """Why ``msg`` cannot be recorded in a graph, or None when it can."""
    t = type(msg)
    name = t.__name__
    if t in CAPTURABLE:
        # a capturable type whose fields can ask for more (FftExec's ``preserve``)
        check = getattr(t, "capture_refusal", None)
        why = check(msg) if check is not None else None
        return None if why is None else f"{name} cannot be recorded in a graph: {why}"
    why = _WHY.get(name, "it is not a capturable GPU operation")
    return f"{name} cannot be recorded in a graph: {why}"


capturable(CopyDevice, Memset)  # each library folder adds its own (libs/<lib>/__init__.py)


def _inner_refs(messages: tuple) -> list[BufRef]:
    seen: dict[int, BufRef] = {}
    for m in messages:
        for r in m.refs():
            seen.setdefault(r.id, r)
    return list(seen.values())


@message()
class CaptureGraph(Message):
    """Record ``messages`` (each capturable) as graph ``graph`` and instantiate it. Replies the
    number of recorded operations."""

    graph: int
    messages: tuple

    def __post_init__(self) -> None:
        _int(self, "graph", self.graph)
        if not isinstance(self.messages, (tuple, list)):
            raise _fail(self, "messages", f"expected a tuple of messages, got "
                        f"{type(self.messages).__name__}")
        msgs = tuple(self.messages)
        if not msgs:
            raise _fail(self, "messages", "a graph needs at least one recorded message")
        for m in msgs:
            if not isinstance(m, Message):
                raise _fail(self, "messages", f"expected messages, got {type(m).__name__}")
            why = refusal(m)
            if why is not None:
                raise _fail(self, "messages", why)
        object.__setattr__(self, "messages", msgs)

    def refs(self) -> list[BufRef]:
        return _inner_refs(self.messages)

    def written(self) -> list[BufRef]:
        return []


@message()
class LaunchGraph(Message):
    """Replay graph ``graph`` on the compute stream (after the other streams' uses of its
    buffers). Replies None when the replay has completed."""

    graph: int

    def __post_init__(self) -> None:
        _int(self, "graph", self.graph)


@message()
class UpdateGraph(Message):
    """Re-point graph ``graph``: each ``(old, new)`` pair replaces a recorded buffer by another of
    the same dtype, shape and size. Replies None."""

    graph: int
    pairs: tuple

    def __post_init__(self) -> None:
        _int(self, "graph", self.graph)
        pairs = []
        if not isinstance(self.pairs, (tuple, list)):
            raise _fail(self, "pairs",
                        f"expected (old, new) pairs, got {type(self.pairs).__name__}")
        for i, pair in enumerate(self.pairs):
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise _fail(self, "pairs", f"entry {i}: expected (old, new) buffers")
            old = _ref(self, "pairs", pair[0])
            new = _ref(self, "pairs", pair[1])
            if (old.dtype, old.shape, old.nbytes) != (new.dtype, new.shape, new.nbytes):
                raise _fail(self, "pairs", f"{new.describe()} cannot replace {old.describe()}: "
                            "dtype, shape and size must agree")
            pairs.append((old, new))
        if not pairs:
            raise _fail(self, "pairs", "nothing to update")
        object.__setattr__(self, "pairs", tuple(pairs))

    def refs(self) -> list[BufRef]:
        return [new for _old, new in self.pairs]


@message()
class DestroyGraph(Message):
    """Drop graph ``graph`` (its executable and the keep-alive of its buffers). Replies None."""

    graph: int

    def __post_init__(self) -> None:
        _int(self, "graph", self.graph)
