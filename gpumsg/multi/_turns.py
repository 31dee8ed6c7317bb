"""Work that spans devices, issued by one thread that holds every device's turn.

A collective's members and a peer copy's two sides must meet. Posted as one message per
device, each device thread wakes, issues its part and the parts meet in a rendezvous (NCCL's,
or a handshake between the threads), and each side's completion is answered on its own
thread: several thread wake-ups per call, each 10-20 µs on a loaded host, all under one GIL.

Here the caller issues every part itself (``GPUMSG_MULTI_ISSUE=caller``, the default). Under
:data:`~gpumsg.multi._peer.ORDER_LOCK` it takes the turn of every device involved
(:meth:`DeviceWorker.take_turn <gpumsg.service._worker.DeviceWorker.take_turn>`, in the order
of the devices' tokens). A turn is only taken while its device is idle: everything posted to it
before has been handled, so the parts take their place in each device's queue order exactly as
messages posted at that moment would. Each part goes through its device's envelope
(``DeviceContext.run``) on that device's stream, so it waits for the earlier uses of its
buffers on that device and later work there waits for it, as a message's would. NCCL's
collectives of all members are enqueued inside one ``ncclGroupStart/End`` on this thread (NCCL
lets one thread drive several devices' communicators in a group call); a peer copy is a few
driver calls on the two devices' streams. The caller's future then waits for the parts'
completion events itself (:func:`leader`), as a caller that ran its own message does.

A device with queued messages is given up to :data:`TURN_WAIT` to take them (its thread
runs them first). When a turn still cannot be had (a device busy for longer, closed,
poisoned, process-isolated or recording a graph), the turns taken are given back with nothing
issued and the caller posts the messages instead (``GPUMSG_MULTI_ISSUE=members`` always
does): still correct, only slower. The waits are bounded, so a device thread that holds its
lock while it waits for another device (a peer copy's handshake, a communicator's
rendezvous) delays this caller by at most that bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..client import _device as client_device
from ..config import setting
from ..errors import InvalidMessage

__all__ = ["TURN_WAIT", "Part", "caller_issues", "give_turns", "leader", "take_turns"]

#: how long a caller waits for one device's turn (its executor lock, and its thread taking what
#: is queued) before it gives back the turns it took and posts messages instead, in seconds
TURN_WAIT = 2e-3

_MODES = ("caller", "members")


def caller_issues() -> bool:
    """Whether work spanning devices is issued by the caller (``GPUMSG_MULTI_ISSUE``:
    ``caller``, the default) or posted to every member (``members``)."""
    mode = (setting("GPUMSG_MULTI_ISSUE") or "caller").strip().lower() or "caller"
    if mode not in _MODES:
        raise InvalidMessage(f"GPUMSG_MULTI_ISSUE must be one of {', '.join(_MODES)}, got "
                             f"{mode!r}", field="GPUMSG_MULTI_ISSUE")
    return mode == "caller"


def take_turns(devices: Sequence[Any], msg: Any) -> list[Any] | None:
    """Take the turn of every device in ``devices`` on this thread (the caller holds
    ``ORDER_LOCK``): their DeviceContexts, in the order of ``devices``, or None with nothing
    held when one of them cannot be had now (see the module). Give them back with
    :func:`give_turns`. ``msg`` is a message the work stands for: the client's hook run
    before every post runs for it first (``array_api`` computes its pending element-wise
    chains, which may read what this work writes), as it would for the messages posted."""
    for d in devices:
        if d.isolation != "thread" or d._recorder is not None:
            return None
    hook = client_device.before_post
    if hook is not None:
        hook(msg)
    contexts: list[Any] = [None] * len(devices)
    taken = []
    # one order for every caller: two callers never wait for each other's second device
    tokens = [d._state.token for d in devices]
    for i in sorted(range(len(devices)), key=tokens.__getitem__):
        worker = devices[i]._worker
        ctx = worker.take_turn(TURN_WAIT)
        if ctx is None:
            for w in reversed(taken):
                w.give_turn()
            return None
        taken.append(worker)
        contexts[i] = ctx
    return contexts


def give_turns(devices: Sequence[Any]) -> None:
    """End the turns :func:`take_turns` took (each as a caller's message turn ends)."""
    error = None
    for d in devices:
        try:
            d._worker.give_turn()
        except BaseException as exc:  # noqa: BLE001 - every turn is given back, then raised
            error = error or exc
    if error is not None:
        raise error


class Part:
    """One device's part of work issued across devices: the reply its envelope answers
    (``set_result``/``set_exception``) when the part completed on that device, which calls
    ``on(error or None)``; :meth:`done` tells a caller leading that device (:func:`leader`)
    that this part needs it no more."""

    __slots__ = ("answered", "on")

    def __init__(self, on: Callable[[BaseException | None], None]) -> None:
        self.answered = False
        self.on = on

    def set_result(self, value: Any) -> None:
        self.answered = True
        self.on(None)

    def set_exception(self, exc: BaseException) -> None:
        self.answered = True
        self.on(exc)

    def done(self) -> bool:
        return self.answered


def leader(devices: Sequence[Any], parts: Sequence[Part]
           ) -> tuple[Callable[[Any, float | None], float | None],
                      Callable[[Any, float | None], float | None]]:
    """``(lead, nudge)`` for the future of work whose part on ``devices[i]`` is ``parts[i]``
    (``GpuFuture._lead`` and ``_nudge``): a caller waiting for the future answers each
    device's completed batches itself and waits on their events without the GIL
    (``DeviceWorker.lead``), device after device, until its part is answered; a nudge (a
    done-callback, ``wait``) hands what each device keeps to its completion threads."""
    workers = [d._worker for d in devices]

    def lead(fut: Any, timeout: float | None) -> float | None:
        for w, p in zip(workers, parts):
            if fut.done():
                break
            if not p.answered:
                timeout = w.lead(p, timeout)
        return timeout

    def nudge(fut: Any, timeout: float | None) -> float | None:
        for w in workers:
            w.lead(fut, 0.0)
        return timeout

    return lead, nudge
