"""Peer copies between devices of this process, and the peer topology.

``d1.copy_peer(dst, src=x0)`` posts, under :data:`ORDER_LOCK`, a
:class:`~gpumsg.messages.peer.PeerCopySend` to ``x0``'s device d0 and a
:class:`~gpumsg.messages.peer.PeerCopyRecv` to d1. The two device threads meet in a
:class:`_Handshake` (this process's registry, named by an id in the messages):

1. d1 (destination): its H2D stream waits for ``dst``'s earlier uses on d1 (the envelope), then
   records event ``pre`` and hands it, with ``dst``'s address and d1's context, to d0.
2. d0 (source): its D2H stream waits for ``src``'s last write on d0 (the envelope) and for
   ``pre``; it copies (``cuMemcpyPeerAsync`` into d1's memory, or, when the devices are not
   peers, into pinned host memory) and records event ``ready``.
3. d1: its H2D stream waits for ``ready`` (a cross-device event wait; legal in CUDA), then, when
   staged, copies from the pinned host memory into ``dst``. ``dst`` counts as written there: later
   uses on d1 follow the copy; ``src`` counts as read on d0's D2H stream: later writes (and the
   free) on d0 follow the copy.

By default (``multi_issue="caller"``) the caller does all three steps itself, holding both
devices' executor turns (``multi/_turns.py``: taken only while both are idle, so each step
keeps its place in its device's queue order), with the same events, streams and buffer
tracking: no device thread wakes and no handshake is needed, and the caller's ``result()``
waits on the events itself. The messages below serve ``multi_issue="members"`` and a caller
that cannot have both turns now (a busy device, say).

Both device threads wait only for each other's host-side step (never for the GPU), up to the
copy's ``timeout``; a side that gives up (or fails) cancels the handshake, and the other side
fails at once with :class:`PeerCopyError`. Events and the staging block are released when both
sides' work has completed. Posting every cross-device message set (peer copies, collectives)
under one lock keeps the order in which any two devices meet the same on both, so the
rendezvous cannot deadlock.

Needs thread isolation on both devices (the rendezvous is in-process).
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..client._buffers import BufferFuture, GpuBuffer, GpuFuture
from ..client._device import Device
from ..errors import CudaError, GpuError, InvalidMessage
from ..memory._resource import AsyncPoolResource
from ..messages._base import BufRef
from ..messages.peer import (
    EnablePeerAccess,
    GrantPoolAccess,
    PeerCopyRecv,
    PeerCopySend,
    PeerQuery,
)
from ..service._context import dependency_error
from ..service._registry import D2H, H2D, handles
from ._turns import Part, caller_issues, give_turns, leader, take_turns

__all__ = ["ORDER_LOCK", "PeerCopyError", "Topology", "copy_peer", "peer_link",
           "enable_peer_access", "topology"]

#: held while posting a set of messages to several devices that meet each other (a peer copy's
#: two halves, a collective's members): every device then sees these sets in one global order
ORDER_LOCK = threading.RLock()


class PeerCopyError(GpuError):
    """A peer copy failed: the other side did not arrive within the timeout, or failed."""


# -- the rendezvous --------------------------------------------------------------------------------
@dataclasses.dataclass
class _Pre:
    event: Any
    ptr: int
    peer: Any  # the destination's context (cuda) or backend (sim)


class _Handshake:
    """Where the two halves of one peer copy meet (see the module docstring)."""

    def __init__(self, staged: bool) -> None:
        self.cond = threading.Condition()
        self.staged = staged
        self.pre: _Pre | None = None
        self.ready: Any = None
        self.host = 0
        self.cancelled: BaseException | None = None
        self.entered = 0
        self.finished = 0
        self.cleanups: list[tuple[Callable[[Any], Any], Any]] = []

    def error(self) -> PeerCopyError:
        cause = self.cancelled
        if isinstance(cause, PeerCopyError):
            return PeerCopyError(str(cause))
        return PeerCopyError(f"the other side of the peer copy failed: {cause!r}")

    def cancel(self, exc: BaseException) -> None:
        with self.cond:
            if self.cancelled is None and self.ready is None:
                self.cancelled = exc
            self.cond.notify_all()
        _forget(self)

    def _wait(self, what: Callable[[], Any], timeout: float, step: str) -> Any:
        with self.cond:
            self.cond.wait_for(lambda: what() is not None or self.cancelled is not None, timeout)
            value = what()
            if value is not None:
                return value
            if self.cancelled is not None:
                raise self.error()
            self.cancelled = PeerCopyError(f"peer copy: the other device did not {step} within "
                                           f"{timeout} s")
            self.cond.notify_all()
        _forget(self)
        raise PeerCopyError(str(self.cancelled))

    def post_pre(self, pre: _Pre) -> None:
        with self.cond:
            if self.cancelled is not None:
                raise self.error()
            self.pre = pre
            self.cond.notify_all()

    def wait_pre(self, timeout: float) -> _Pre:
        return self._wait(lambda: self.pre, timeout, "arrive")

    def wait_ready(self, timeout: float) -> Any:
        return self._wait(lambda: self.ready, timeout, "issue its copy")

    def add_cleanup(self, fn: Callable[[Any], Any], arg: Any) -> None:
        with self.cond:
            self.cleanups.append((fn, arg))

    def side_done(self) -> None:
        """One side's work completed (or failed): release the events and the staging block
        once every side that entered is done and no other can enter."""
        with self.cond:
            self.finished += 1
            last = self.finished >= self.entered and (self.entered == 2 or
                                                      self.cancelled is not None)
            cleanups, self.cleanups = (self.cleanups, []) if last else ([], self.cleanups)
        for fn, arg in cleanups:
            try:
                fn(arg)
            except Exception:  # noqa: BLE001 - a poisoned context cannot release; nothing to do
                pass


_REGISTRY: dict[int, _Handshake] = {}
_REGISTRY_LOCK = threading.Lock()
_handshake_ids = itertools.count(1)


def _new_handshake(staged: bool, hid: int) -> int:
    with _REGISTRY_LOCK:
        _REGISTRY[hid] = _Handshake(staged)
    return hid


def _enter(hid: int) -> _Handshake:
    with _REGISTRY_LOCK:
        h = _REGISTRY.get(hid)
        if h is None:
            raise PeerCopyError(f"peer copy {hid}: the other device gave up on it (timed out or "
                                "failed), or it is not a copy of this process")
        h.entered += 1
        if h.entered == 2:
            del _REGISTRY[hid]
    return h


def _forget(h: _Handshake) -> None:
    with _REGISTRY_LOCK:
        for k, v in list(_REGISTRY.items()):
            if v is h:
                del _REGISTRY[k]


def _once(h: _Handshake) -> Callable[[Any, BaseException | None], Any]:
    """A finish callback that counts this side done once (at completion or failure)."""
    done = [False]

    def finish(value: Any, exc: BaseException | None) -> Any:
        if not done[0]:
            done[0] = True
            h.side_done()
        return value

    return finish


# -- handlers (device threads) ---------------------------------------------------------------------
@handles(PeerCopyRecv)
def _recv(ctx: Any, msg: PeerCopyRecv, reply: Any) -> None:
    h = _enter(msg.handshake)
    finish = _once(h)
    backend = ctx.backend
    try:
        dst = ctx.resolve_out(msg.dst, "dst")
        ptr = dst.ptr + msg.dst_offset

        def issue(stream: Any) -> None:
            ev = backend.event_create()
            h.add_cleanup(backend.event_destroy, ev)
            backend.event_record(ev, stream)  # after dst's earlier uses on this device
            h.post_pre(_Pre(ev, ptr, backend.peer_handle()))
            ready = h.wait_ready(msg.timeout)
            backend.stream_wait_event(stream, ready)  # recorded on the source device
            if h.staged:
                backend.copy_htod(stream, ptr, h.host, msg.nbytes)

        ctx.run(reply, H2D, (), (dst,), issue, finish=finish)
    except BaseException as exc:
        h.cancel(exc)
        finish(None, exc)
        raise


@handles(PeerCopySend)
def _send(ctx: Any, msg: PeerCopySend, reply: Any) -> None:
    h = _enter(msg.handshake)
    finish = _once(h)
    backend = ctx.backend
    n = msg.nbytes
    try:
        src = ctx.resolve(msg.src, "src")
        pre = h.wait_pre(msg.timeout)
        sptr = src.ptr + msg.src_offset

        def issue(stream: Any) -> None:
            with h.cond:
                if h.cancelled is not None:
                    raise h.error()
                if h.staged:
                    host = backend.host_alloc(n)
                    h.cleanups.append((backend.host_free, host))
                    h.host = host
                    backend.copy_dtoh(stream, host, sptr, n)
                else:
                    backend.stream_wait_event(stream, pre.event)  # dst is free to be written
                    backend.copy_peer(stream, pre.peer, pre.ptr, sptr, n)
                ev = backend.event_create()
                h.cleanups.append((backend.event_destroy, ev))
                backend.event_record(ev, stream)
                h.ready = ev
                h.cond.notify_all()

        ctx.run(reply, D2H, (src,), (), issue, finish=finish)
    except BaseException as exc:
        h.cancel(exc)
        finish(None, exc)
        raise


@handles(PeerQuery)
def _peer_query(ctx: Any, msg: PeerQuery, reply: Any) -> None:
    ctx.reply_now(reply, ctx.backend.peer_query(msg.peer))


@handles(EnablePeerAccess)
def _enable_peer_access(ctx: Any, msg: EnablePeerAccess, reply: Any) -> None:
    ctx.reply_now(reply, ctx.backend.enable_peer_access(msg.peer_context))


@handles(GrantPoolAccess)
def _grant_pool_access(ctx: Any, msg: GrantPoolAccess, reply: Any) -> None:
    pools = [r for r in ctx.memory.stack() if isinstance(r, AsyncPoolResource)]
    for r in pools:
        ctx.backend.pool_grant_access(r.pool, msg.peer)
    ctx.reply_now(reply, len(pools))


# -- topology (client side) ------------------------------------------------------------------------
#: (source device token, destination device token) -> the link's properties
_LINKS: dict[tuple[int, int], dict[str, Any]] = {}
#: (source token, destination token) pairs whose peer access was enabled (or refused)
_ENABLED: dict[tuple[int, int], Future] = {}
_TOPO_LOCK = threading.Lock()


def _nvlink(a: int, b: int) -> bool | None:
    """Whether NVML reports an NVLink path between GPUs ``a`` and ``b`` (None: no NVML)."""
    try:
        import pynvml  # optional
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        ha, hb = pynvml.nvmlDeviceGetHandleByIndex(a), pynvml.nvmlDeviceGetHandleByIndex(b)
        status = pynvml.nvmlDeviceGetP2PStatus(ha, hb, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        return status == pynvml.NVML_P2P_STATUS_OK
    except Exception:  # noqa: BLE001 - NVML is an optional refinement
        return None


def peer_link(src_dev: Any, dst_dev: Any, timeout: float = 30.0) -> dict[str, Any]:
    """The link from ``src_dev`` to ``dst_dev``, asked once per pair: ``can_access``,
    ``perf_rank`` (-1 when not peers; lower is faster), ``native_atomics`` and ``kind``
    (``"self"``, ``"nvlink"`` (NVML), ``"p2p"``, or ``"host"``: copies are staged)."""
    key = (src_dev._state.token, dst_dev._state.token)
    link = _LINKS.get(key)
    if link is not None:
        return link
    if src_dev is dst_dev:
        link = {"can_access": True, "perf_rank": 0, "native_atomics": True, "kind": "self"}
    elif src_dev.backend != dst_dev.backend:
        link = {"can_access": False, "perf_rank": -1, "native_atomics": False, "kind": "host"}
    else:
        link = dict(src_dev.send(PeerQuery(dst_dev.ordinal)).result(timeout))
        kind = "host"
        if link["can_access"]:
            kind = "p2p"
            if src_dev.backend == "cuda" and _nvlink(src_dev.ordinal, dst_dev.ordinal):
                kind = "nvlink"
        link["kind"] = kind
    with _TOPO_LOCK:
        _LINKS[key] = link
    return link


def enable_peer_access(src_dev: Any, dst_dev: Any, timeout: float = 30.0) -> Future:
    """Let ``src_dev`` access ``dst_dev``'s memory (once per pair): cuCtxEnablePeerAccess on
    ``src_dev``'s thread and cuMemPoolSetAccess of ``dst_dev``'s pools on ``dst_dev``'s thread,
    each ahead of any later message to that device. Resolves to True when enabled, False when
    the devices cannot be peers."""
    key = (src_dev._state.token, dst_dev._state.token)
    with _TOPO_LOCK:
        fut = _ENABLED.get(key)
    if fut is not None:
        return fut
    if not peer_link(src_dev, dst_dev, timeout)["can_access"]:
        fut = GpuFuture()
        fut.set_result(False)
    else:
        handle = dst_dev.snapshot_context().result(timeout)
        enabled = src_dev.send(EnablePeerAccess(dst_dev.ordinal, int(handle)))
        granted = dst_dev.send(GrantPoolAccess(src_dev.ordinal))
        fut = GpuFuture()

        def both(_f: Future) -> None:
            if not (enabled.done() and granted.done()) or fut.done():
                return
            exc = enabled.exception() or granted.exception()
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(bool(enabled.result()))

        enabled.add_done_callback(both)
        granted.add_done_callback(both)
    with _TOPO_LOCK:
        return _ENABLED.setdefault(key, fut)


@dataclasses.dataclass(frozen=True)
class Topology:
    """The links between the devices of a group, by rank: ``can_access[i][j]`` (device i can
    access device j's memory), ``perf_rank[i][j]`` (CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
    -1 when not peers), ``native_atomics[i][j]``, ``kind[i][j]`` (``"self"``, ``"nvlink"``,
    ``"p2p"``, ``"host"``)."""

    can_access: tuple[tuple[bool, ...], ...]
    perf_rank: tuple[tuple[int, ...], ...]
    native_atomics: tuple[tuple[bool, ...], ...]
    kind: tuple[tuple[str, ...], ...]

    def peers_of(self, i: int) -> list[int]:
        """The ranks device ``i`` can access directly, fastest link first."""
        out = [j for j in range(len(self.kind)) if j != i and self.can_access[i][j]]
        return sorted(out, key=lambda j: self.perf_rank[i][j])


def topology(devices: list[Any], timeout: float = 30.0) -> Topology:
    """The :class:`Topology` of ``devices`` (every pair asked once, cached)."""
    links = [[peer_link(a, b, timeout) for b in devices] for a in devices]

    def table(field: str) -> tuple:
        return tuple(tuple(link[field] for link in row) for row in links)

    return Topology(table("can_access"), table("perf_rank"), table("native_atomics"),
                    table("kind"))


# -- the copy (client side) ------------------------------------------------------------------------
def _buffer(x: Any, field: str) -> GpuBuffer:
    if isinstance(x, BufferFuture):
        return x.buffer
    if isinstance(x, GpuBuffer):
        return x
    raise InvalidMessage(f"{field} must be a GpuBuffer or its future, got {type(x).__name__}",
                         field=field)


def _first_error(futs: list[Future]) -> BaseException | None:
    errors = [f.exception() for f in futs if f.exception() is not None]
    if not errors:
        return None
    own = [e for e in errors if not (isinstance(e, PeerCopyError) and "other side" in str(e)
                                     or "gave up" in str(e))]
    return (own or errors)[0]


def copy_peer(dst_dev: Any, dst: Any = None, src: Any = None, nbytes: int | None = None,
              dst_offset: int = 0, src_offset: int = 0, timeout: float = 60.0) -> Future:
    """Copy ``src`` (a buffer on any device of this process) into ``dst`` on ``dst_dev``;
    ``dst=None`` allocates a buffer of ``src``'s shape, dtype and order on ``dst_dev`` and the
    future resolves to it (a :class:`BufferFuture`, usable at once). ``nbytes`` (default: all of
    ``src``) and the offsets are in bytes. The copy follows ``src``'s last write and ``dst``'s
    earlier uses; later uses of ``dst`` on ``dst_dev`` and writes of ``src`` on its device
    follow the copy. Peer to peer when the devices can access each other (enabled on first use),
    else staged through pinned host memory. The future resolves once the data is in ``dst``;
    it fails with :class:`PeerCopyError` when a side does not take part within ``timeout`` s.
    Raises InvalidMessage (bad buffers, sizes, offsets; a process-isolated device)."""
    if src is None:
        raise InvalidMessage("copy_peer needs src", field="src")
    sbuf = _buffer(src, "src")
    src_dev = sbuf.device
    sref = sbuf.ref  # raises GpuRefStale when freed or stale
    if dst is not None and src_dev is not dst_dev:
        again = _repeat(dst_dev, dst, src_dev, sbuf, sref,
                        (nbytes, dst_offset, src_offset, timeout))
        if again is not None:
            return again
    for d, field in ((dst_dev, "dst"), (src_dev, "src")):
        if d.isolation != "thread":
            raise InvalidMessage(f"{field}: peer copies need thread isolation (device "
                                 f"{d.ordinal} is isolated by {d.isolation!r}); copy through "
                                 "the host with copy_to_host / copy_from_host", field=field)
    if not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidMessage("timeout must be a positive number of seconds", field="timeout")
    dbuf = None
    if dst is not None:
        dbuf = _buffer(dst, "dst")
        if dbuf.device is not dst_dev:
            raise InvalidMessage(f"dst must be a buffer of device {dst_dev.ordinal}", field="dst")
        dref: BufRef = dbuf.ref
    for name, value in (("src_offset", src_offset), ("dst_offset", dst_offset)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise InvalidMessage(f"{name} must be a non-negative int (bytes), got {value!r}",
                                 field=name)
    src_offset, dst_offset = int(src_offset), int(dst_offset)
    n = sref.nbytes - src_offset if nbytes is None else nbytes
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidMessage(f"nbytes must be a positive int, got {n!r}", field="nbytes")
    if src_dev is dst_dev:  # one device: an ordinary device-to-device copy
        if dst is None:
            out = dst_dev.alloc(sref.shape, sref.dtype, sref.order)
            return dst_dev.buffer_after(
                dst_dev.copy_bytes(out, sbuf, n, dst_offset, src_offset), out)
        return dst_dev.copy_bytes(dbuf, sbuf, n, dst_offset, src_offset)
    link = peer_link(src_dev, dst_dev)
    staged = not link["can_access"]
    if not staged:
        enable_peer_access(src_dev, dst_dev)  # queued ahead of the copy on the source
    hid = next(_handshake_ids)
    with ORDER_LOCK:
        if dst is None:
            out_buf = dst_dev.alloc(sref.shape, sref.dtype, sref.order)
            dbuf, dref = out_buf.buffer, out_buf.ref
        # both checked here, at the call site, before anything is sent
        send = PeerCopySend(sref, hid, src_offset, n, staged, float(timeout))
        recv = PeerCopyRecv(dref, hid, dst_offset, n, staged, float(timeout))
        if dst is not None:
            _LAST[dst_dev._state.token] = (dref, sref, (nbytes, dst_offset, src_offset, timeout),
                                           _typed((nbytes, dst_offset, src_offset, timeout)),
                                           send, recv)
        return _issue(src_dev, dst_dev, sbuf, dbuf, send, recv, dst is None)


def _issue(src_dev: Any, dst_dev: Any, sbuf: GpuBuffer, dbuf: GpuBuffer, send: PeerCopySend,
           recv: PeerCopyRecv, allocating: bool) -> Future:
    """Issue a checked copy: by the caller when it can have both turns, else by messages.
    The caller holds ``ORDER_LOCK``."""
    if caller_issues():
        here = _copy_here(src_dev, dst_dev, sbuf, dbuf, send, recv, allocating)
        if here is not None:
            return here
    return _copy_by_messages(src_dev, dst_dev, sbuf, dbuf, send, recv, allocating)


#: the last copy into a given buffer, by its device's token: (dst's reference, src's, the
#: arguments as given and with their types, the two checked halves); see _repeat
_LAST: dict[int, tuple] = {}


def _typed(args: tuple) -> tuple:
    return tuple(map(type, args))


def _repeat(dst_dev: Any, dst: Any, src_dev: Any, sbuf: GpuBuffer, sref: BufRef, args: tuple
            ) -> Future | None:
    """Issue a copy that repeats the last one into the same buffer (the same source, both
    references unchanged, the same arguments and their types) without checking it again:
    its halves passed their checks then, and a copy's checks depend on nothing else (a freed
    or stale buffer has another reference, or ``ref`` raises). None when it is no repeat."""
    last = _LAST.get(dst_dev._state.token)
    if last is None or last[1] is not sref or last[2] != args or last[3] != _typed(args):
        return None
    try:
        dbuf = dst.buffer if isinstance(dst, BufferFuture) else dst
        if dbuf.ref is not last[0] or dbuf.device is not dst_dev:
            return None
    except AttributeError:  # not a buffer: the full path says what is wrong
        return None
    send, recv = last[4], last[5]
    hid = next(_handshake_ids)  # a handshake of its own, should it go by messages
    send = PeerCopySend.unchecked(send.src, hid, send.src_offset, send.nbytes, send.staged,
                                  send.timeout)
    recv = PeerCopyRecv.unchecked(recv.dst, hid, recv.dst_offset, recv.nbytes, recv.staged,
                                  recv.timeout)
    with ORDER_LOCK:
        return _issue(src_dev, dst_dev, sbuf, dbuf, send, recv, False)


def _copy_by_messages(src_dev: Any, dst_dev: Any, sbuf: GpuBuffer, dbuf: GpuBuffer,
                      send: PeerCopySend, recv: PeerCopyRecv, allocating: bool) -> Future:
    """The copy as two messages meeting in a handshake (see the module); the caller holds
    ``ORDER_LOCK``."""
    hid = _new_handshake(send.staged, send.handshake)
    try:
        f_send = src_dev.send(send)
        f_recv = dst_dev.send(recv)
    except BaseException as exc:
        with _REGISTRY_LOCK:
            h = _REGISTRY.get(hid)
        if h is not None:
            h.cancel(exc)
        raise
    out: Future = BufferFuture(dbuf) if allocating else GpuFuture()
    keep = [sbuf, dbuf]  # both buffers stay alive until the copy completed
    pending = [f_send, f_recv]
    lock = threading.Lock()
    answered = [False]

    def done(f: Future) -> None:
        # a failure answers at once (the other side fails promptly or completes); the
        # buffers stay referenced until both sides are done
        with lock:
            finished = all(p.done() for p in pending)
            exc = f.exception() if not finished else _first_error(pending)
            if answered[0] or (exc is None and not finished):
                if finished:
                    keep.clear()
                return
            answered[0] = True
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(dbuf if allocating else None)
        if finished:
            keep.clear()

    for f in pending:
        f.add_done_callback(done)
    return out


def _copy_here(src_dev: Any, dst_dev: Any, sbuf: GpuBuffer, dbuf: GpuBuffer,
               send: PeerCopySend, recv: PeerCopyRecv, allocating: bool) -> Future | None:
    """The copy issued on this thread, holding both devices' turns (``multi/_turns.py``):
    the destination's H2D stream, after ``dst``'s earlier uses there, records ``pre``; the
    source's D2H stream, after ``src``'s last write, waits for ``pre`` and copies (peer to
    peer, or into pinned host memory when staged), then records ``ready``; the destination's
    H2D stream waits for ``ready`` (and, staged, copies in from the host). Both sides go
    through their device's envelope, so later uses of ``dst`` and writes of ``src`` follow
    the copy. None, with nothing issued, when a turn cannot be had now (the caller posts the
    messages instead). The caller holds ``ORDER_LOCK``."""
    devices = [dst_dev, src_dev]
    contexts = take_turns(devices, recv)
    if contexts is None:
        return None
    dctx, sctx = contexts
    sref, dref, n, staged = send.src, recv.dst, send.nbytes, send.staged
    out: Future = BufferFuture(dbuf) if allocating else GpuFuture()
    cleanups: list[tuple[Callable[[Any], Any], Any]] = []
    state = {"left": 2, "error": None}
    lock = threading.Lock()
    keep = [sbuf, dbuf]  # both buffers stay alive until both sides are done

    def side(exc: BaseException | None) -> None:
        # a failure answers at once; the events and the host block go once both are done
        with lock:
            state["left"] -= 1
            last = not state["left"]
            first_error = exc is not None and state["error"] is None
            if first_error:
                state["error"] = exc
        if first_error:
            out.set_exception(exc)
        elif last and state["error"] is None:
            out.set_result(dbuf if allocating else None)
        if last:
            keep.clear()
            for fn, arg in cleanups:
                try:
                    fn(arg)
                except Exception:  # noqa: BLE001, S110 - a poisoned context cannot release
                    pass

    dpart, spart = Part(side), Part(side)
    out._lead, out._nudge = leader(devices, [dpart, spart])  # type: ignore[attr-defined]
    sb, db = sctx.backend, dctx.backend
    where = [dctx]
    # failures are told once the turns are given back (a done-callback may post to them)
    fail: list[tuple[Part, BaseException]] = []
    try:
        try:
            src = sctx.resolve(sref, "src")
            v = src.verdict
            if v is not None and v.decided and v.error is not None:
                raise dependency_error(sref, v.error)
            dst = dctx.resolve_out(dref, "dst")
        except GpuError as exc:  # nothing issued
            alloc = dctx.buffers.get(dref.id)
            if alloc is not None and not alloc.alloc_failed and dref.owner == dctx.token:
                alloc.failed = exc
            fail += [(spart, exc), (dpart, exc)]
            return out
        sptr, dptr = src.ptr + send.src_offset, dst.ptr + recv.dst_offset
        ready: list[Any] = []
        host = [0]

        def src_side(stream: Any, pre: Any) -> None:
            if staged:
                host[0] = sb.host_alloc(n)
                cleanups.append((sb.host_free, host[0]))
                sb.copy_dtoh(stream, host[0], sptr, n)
            else:
                sb.stream_wait_event(stream, pre)  # dst is free to be written
                sb.copy_peer(stream, db.peer_handle(), dptr, sptr, n)
            ev = _spare_event(sctx, D2H, cleanups)
            sb.event_record(ev, stream)
            ready.append(ev)

        def dst_side(stream: Any) -> None:
            pre = _spare_event(dctx, H2D, cleanups)
            db.event_record(pre, stream)  # after dst's earlier uses on this device
            where[0] = sctx
            token = sb.enter_thread()
            try:
                sctx.run(spart, D2H, (src,), (), src_side, pre)
            finally:
                sb.leave_thread(token)
            where[0] = dctx
            db.stream_wait_event(stream, ready[0])  # recorded on the source device
            if staged:
                db.copy_htod(stream, dptr, host[0], n)

        token = db.enter_thread()
        try:
            dctx.run(dpart, H2D, (), (dst,), dst_side)
            if ready:
                # the source side's completion event now, right behind the copy: a caller
                # waiting for the destination side (which waits for the copy) then finds the
                # source side done, with no second wait
                inner = sb.enter_thread()
                try:
                    sctx.flush()
                finally:
                    sb.leave_thread(inner)
        except BaseException as exc:  # noqa: BLE001 - answered through the future
            ctx = where[0]
            if isinstance(exc, CudaError) and exc.sticky:
                ctx.fail_pending(ctx.poison(exc, "raised issuing a peer copy"))
            if not dst.alloc_failed and not dst.readonly:
                dst.failed = exc
            if not ready:  # the source side issued nothing
                fail.append((spart, exc))
            fail.append((dpart, exc))
        finally:
            db.leave_thread(token)
    finally:
        give_turns(devices)
        for part, exc in fail:
            part.set_exception(exc)
    return out


def _spare_event(ctx: Any, stream: int, cleanups: list[tuple[Callable[[Any], Any], Any]]
                 ) -> Any:
    """An event of ``ctx``'s device for a copy, taken from the spare events of its stream
    ``stream`` (or made); it goes back there once both sides of the copy are done (no
    cuEventCreate and cuEventDestroy per copy)."""
    spare = ctx.streams[stream].spare_events
    ev = spare.pop() if spare else ctx.backend.event_create()
    cleanups.append((spare.append, ev))
    return ev


Device._peer_copy = staticmethod(copy_peer)  # Device.copy_peer (the client is a layer below)
