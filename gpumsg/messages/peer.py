"""Messages between devices: the peer topology, enabling peer access, and the two halves of a
peer copy (see :mod:`gpumsg.multi._peer`).

A peer copy ``d1.copy_peer(dst, src=x0)`` is a :class:`PeerCopySend` on the source device and a
:class:`PeerCopyRecv` on the destination, posted together; they meet through the in-process
rendezvous named by ``handshake`` (an id, so the messages stay plain data). The destination
records an event after ``dst``'s earlier uses; the source's copy stream waits on it, copies
(peer to peer, or into pinned host memory when the devices are not peers) and records an event
that the destination's stream waits on (then, when staged, copies from the host).
"""

from __future__ import annotations

from typing import Any

from ._base import BufRef, Message, _bool, _fail, _int, check_extent, message

__all__ = ["PeerQuery", "EnablePeerAccess", "GrantPoolAccess", "PeerCopySend", "PeerCopyRecv"]


@message()
class PeerQuery(Message):
    """Answer the link from this device to device ``peer`` (an ordinal of the same backend):
    ``{"can_access": bool, "perf_rank": int, "native_atomics": bool}`` (cuDeviceCanAccessPeer,
    cuDeviceGetP2PAttribute)."""

    peer: int

    def __post_init__(self) -> None:
        # an ordinal is a C int for the driver: a larger one is refused here, not overflowed there
        _int(self, "peer", self.peer, 0, 2**31 - 1)


@message()
class EnablePeerAccess(Message):
    """Let this device's context access the memory of peer ``peer`` (ordinal), whose context
    handle is ``peer_context`` (cuCtxEnablePeerAccess, on this device's thread). Answers True
    when access is enabled (now or before), False when the devices cannot be peers."""

    peer: int
    peer_context: int

    def __post_init__(self) -> None:
        _int(self, "peer", self.peer, 0, 2**31 - 1)
        _int(self, "peer_context", self.peer_context)


@message()
class GrantPoolAccess(Message):
    """Let device ``peer`` (ordinal) read and write this device's memory-pool allocations
    (cuMemPoolSetAccess; stream-ordered pool memory does not follow cuCtxEnablePeerAccess).
    Answers the number of pools granted (0 with ``memory="direct"``)."""

    peer: int

    def __post_init__(self) -> None:
        _int(self, "peer", self.peer)


def _check_copy(msg: Message, field: str, ref: BufRef, offset: int, nbytes: int,
                handshake: int) -> None:
    if type(ref) is not BufRef:
        raise _fail(msg, field, f"must be a BufRef, got {type(ref).__name__}")
    _int(msg, "handshake", handshake, lo=1)
    _int(msg, "nbytes", nbytes, lo=1)
    _int(msg, field + "_offset", offset)
    check_extent(msg, field, ref, offset, ((nbytes, 1),), f"{nbytes} bytes", unit="bytes")


def _check_timeout(msg: Any) -> None:
    t = msg.timeout
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
        raise _fail(msg, "timeout", "must be a positive number of seconds")


@message(buffers=("src",))
class PeerCopySend(Message):
    """The source half of a peer copy: ``nbytes`` of ``src`` from byte ``src_offset``, after
    its last write, towards the destination met at ``handshake``. ``staged``: through pinned
    host memory (the devices are not peers)."""

    src: BufRef
    handshake: int
    src_offset: int
    nbytes: int
    staged: bool = False
    timeout: float = 60.0

    def __post_init__(self) -> None:
        _check_timeout(self)
        _check_copy(self, "src", self.src, self.src_offset, self.nbytes, self.handshake)
        _bool(self, "staged", self.staged)


@message(buffers=("dst",), writes=("dst",))
class PeerCopyRecv(Message):
    """The destination half of a peer copy: ``nbytes`` into ``dst`` at byte ``dst_offset``,
    after ``dst``'s earlier uses; later uses of ``dst`` on this device follow the copy."""

    dst: BufRef
    handshake: int
    dst_offset: int
    nbytes: int
    staged: bool = False
    timeout: float = 60.0

    def __post_init__(self) -> None:
        _check_timeout(self)
        _check_copy(self, "dst", self.dst, self.dst_offset, self.nbytes, self.handshake)
        _bool(self, "staged", self.staged)
