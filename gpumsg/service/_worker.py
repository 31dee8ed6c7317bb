"""The device thread: one OS thread per device drains its mailbox and dispatches each message.

The mailbox holds ``(message, reply)`` pairs; it is FIFO and the device thread is its only
consumer, so a message may use a buffer that an earlier message creates without waiting for it.
Messages are taken in batches (everything waiting, up to ``MAX_BATCH``); at the end of a batch
each stream gets one completion event for all the batch's work on it. Between batches the device
thread answers the batches whose events have completed; before it blocks on an empty mailbox it
waits a little for the last ones (:meth:`DeviceContext.settle`), and hands what still runs to the
completion threads (see :mod:`gpumsg.service._completion`).
"""

from __future__ import annotations

import threading
import time
import traceback
from queue import Empty, SimpleQueue
from typing import Any

from ..config import setting
from ..errors import CudaError, GpuError, InvalidMessage
from ..messages._base import Message
from ..messages.device import AllocThen, OnStream
from ..messages.graph import CAPTURABLE
from . import _handlers as _device_handlers  # noqa: F401  (registers the device messages)
from ._backpressure import Backpressure, configured, exempt_this_thread
from ._context import DeviceContext
from ._executor import INLINE, WATCH, WATCH_IDLE, WATCH_MAX_SECONDS, WATCH_SECONDS, Mailbox
from ._registry import HANDLERS, PLACED

__all__ = ["DeviceWorker", "serve", "STOP", "MAX_BATCH"]

MAX_BATCH = 64
STOP = object()  # the message that ends the loop (queued by close)


def _fail(reply: Any, error: BaseException) -> None:
    if reply is not None:
        reply.set_exception(error)


def _drop_locals(error: BaseException) -> None:
    """Clear the local variables of the finished frames in ``error``'s traceback (and its
    causes'). A failure outlives its message (a buffer's ``failed``, a future's exception), and
    a handler's frame holds the message's reply, which can hold the very buffer that failed:
    kept through the traceback, that buffer was never dropped, so never freed. The traceback's
    lines stay."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)  # the running frame (this loop) is skipped
        error = error.__cause__ or error.__context__  # type: ignore[assignment]


def _detach(error: BaseException) -> None:
    """Keep ``error``'s traceback (and its causes') as text only, in a note. A failure on a
    caller's thread would otherwise keep that thread's whole stack alive: the traceback's
    frames link to their callers' frames (``f_back``), up to the call that posted, whose
    locals hold the reply and the new buffer."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        tb = error.__traceback__
        if tb is not None:
            error.__traceback__ = None
            if hasattr(error, "add_note"):
                error.add_note("device-side traceback (run on the calling thread):\n"
                               + "".join(traceback.format_tb(tb)).rstrip())
        error = error.__cause__ or error.__context__  # type: ignore[assignment]


def _handle(ctx: DeviceContext, msg: Any, reply: Any, caller: bool = False) -> None:
    """Run one message's handler (any executor's turn; ``caller``: on a caller's thread): a
    failure fails only this message, unless it is a sticky CUDA error, which poisons the
    device."""
    handler = HANDLERS.get(type(msg))
    if handler is None:
        _fail(reply, InvalidMessage(f"the device has no handler for {type(msg).__name__}"))
        return
    ctx.current = msg
    placement = ctx.placement
    try:
        if placement is not None and type(msg) in PLACED:  # its compute stream
            placement.enter(msg)  # (service/_placement.py)
        handler(ctx, msg, reply)
    except CudaError as exc:
        _drop_locals(exc)
        if caller:
            _detach(exc)
        if exc.sticky:
            error = ctx.poison(exc, f"raised by {type(msg).__name__}")
            ctx.fail_pending(error)
            _fail(reply, error)
        else:
            ctx.mark_outputs_failed(msg, exc)
            _fail(reply, exc)
    except Exception as exc:  # GpuError, or a bug in a handler: fail only this message
        _drop_locals(exc)
        if caller:
            _detach(exc)
        ctx.mark_outputs_failed(msg, exc)
        _fail(reply, exc)
    finally:
        if placement is not None and ctx.compute is not ctx.home:
            placement.leave()
        # this frame is the failure's traceback's first: it must not keep the message and
        # its reply (which holds the buffer that failed) alive through it
        msg = reply = handler = None  # type: ignore[assignment]


def _end_turn(ctx: DeviceContext, settle: Any = None, backpressure: Any = None,
              lazy: bool = False) -> None:
    """After a turn's messages: one completion event per stream, deferred frees, the pause of
    a full mailbox relieved; then answer what has completed, or with ``settle`` (the mailbox
    is empty, the device thread is about to block) what completes soon, handing the rest to
    the completion threads."""
    if ctx.state.poisoned is not None:
        ctx.fail_pending(ctx.state.poisoned)
        return
    try:
        ctx.flush(lazy)
        if not lazy:  # deferred frees, the pinned cache: a caller's turn of one message leaves
            ctx.poll()  # them to the next full turn
        if backpressure is not None:
            backpressure.relieve()  # after this batch's records, before any wait below
        if settle is None:
            ctx.reap()  # answer what has completed, then on to the next turn
        else:
            ctx.settle(settle)
    except CudaError as exc:
        if exc.sticky:
            ctx.fail_pending(ctx.poison(exc, "observed between batches"))


def _hand_over(ctx: DeviceContext, executor: Any) -> None:
    """A nudge (a done-callback, ``wait``): record what is pending and give every batch the
    executor keeps to the completion threads, which answer it when it completes."""
    executor.nudged = False
    if ctx.state.poisoned is not None:
        return
    try:
        ctx.flush()
        ctx.hand_over()
    except CudaError as exc:
        if exc.sticky:
            ctx.fail_pending(ctx.poison(exc, "observed between batches"))


#: how long a refused allocation waits for the completion threads to answer what they hold
#: (DeviceWorker._reclaim), in seconds
RECLAIM_SECONDS = 0.5
_NO_BATCH: list = []


def serve(ctx: DeviceContext, mailbox: SimpleQueue, shutdown_timeout: float | None,
          on_dispatch: Any = None, backpressure: Backpressure | None = None,
          dropped: list | None = None) -> None:
    """Run the device loop until :data:`STOP` arrives, then shut the context down.

    Each batch is one turn under the executor lock (``service/_executor.py``), which callers
    that find the device idle take too. ``on_dispatch(reply)`` is called as each message
    starts (a worker process counts them for its supervisor). In a worker process the loop
    ends as soon as the context is poisoned: the supervisor replays, on a new worker, what was
    not started. ``backpressure`` (thread isolation) is relieved between batches: callers
    paused on a full mailbox are woken once the device thread has taken most of it.
    ``dropped`` (thread isolation) collects the references of buffers that died unnamed
    (:meth:`DeviceWorker.drop`): they are freed at the start and end of each turn, without a
    message."""
    get, get_nowait, qsize = mailbox.get, mailbox.get_nowait, mailbox.qsize
    state = ctx.state
    executor = ctx.executor
    me = threading.get_ident()
    watching = False  # looking at what callers' turns left running (service/_executor.py)
    seen = idle = 0  # callers' turns at the last look; looks since one
    wait = WATCH_SECONDS  # until the next look: doubled while callers are at work
    stop = False
    while not stop:
        # odd while blocked for the next batch, even while handling one: with an empty mailbox
        # and nothing in flight an unchanged odd value means that every message posted before
        # has been handled and its work completed (client/dlpack.py exports without a message
        # then, when no caller's turn runs either). Between get() returning and the increment
        # no other thread runs, whatever the switch interval: this thread has just taken the
        # GIL, and the two statements neither call Python code nor allocate a tracked object
        # (no garbage collection), so the interpreter reaches no point where it would hand
        # the GIL over. A free-threaded build would need a lock here.
        ctx.epoch += 1
        if not watching:
            item = get()
            ctx.epoch += 1
        else:
            try:
                item = get(True, wait)
                ctx.epoch += 1
            except Empty:
                ctx.epoch += 1
                # a turn holds the lock: a caller is at work and its batches are its own. A
                # look that waited for the lock would take it as that turn ends, and the
                # caller's next message would queue behind the look (service/_executor.py)
                if not executor.lock.acquire(False):
                    wait = min(2 * wait, WATCH_MAX_SECONDS)
                    continue
                try:
                    executor.holder = me
                    if executor.turns != seen:  # callers are at work: their batches are theirs
                        seen, idle = executor.turns, 0
                        wait = min(2 * wait, WATCH_MAX_SECONDS)
                    else:  # callers are away: answer what they left, hand over the rest
                        wait = WATCH_SECONDS
                        _end_turn(ctx, None, backpressure)
                        ctx.hand_over()
                        idle += 1
                        if idle >= WATCH_IDLE and not dropped:
                            watching = executor.watching = False
                    if dropped:
                        _free_dropped(ctx, dropped)
                    executor.holder = None
                finally:
                    executor.lock.release()
                continue
        batch = [item]
        item = None
        n = qsize()
        if n:
            for _ in range(min(n, MAX_BATCH - 1)):
                batch.append(get_nowait())
        # taken from the end, each message leaves the batch as it starts: a handled message's
        # reply is then held by its completion entry alone, and what is left is the rest of
        # the turn (a refused allocation's reclaim reads it: DeviceWorker._reclaim)
        batch.reverse()
        with executor.lock:
            executor.holder = me
            executor.batch = batch
            if dropped:  # died since the last turn's end (before the count: see drop)
                _free_dropped(ctx, dropped)
            executor.taken += len(batch)
            while batch:
                msg, reply = batch.pop()
                if msg is STOP:
                    stop = True
                    continue
                if msg is WATCH:
                    executor.taken -= 1  # never counted as posted
                    executor.watch_posted = False
                    watching = executor.watching = True
                    seen, idle, wait = executor.turns, 0, WATCH_SECONDS
                    continue
                if state.poisoned is not None:
                    if ctx.in_worker_process:
                        return
                    _fail(reply, state.poisoned)
                    continue
                if on_dispatch is not None:
                    on_dispatch(reply)
                _handle(ctx, msg, reply)
            # drop this batch's references before blocking again: a reply that stayed
            # referenced here would keep its buffer alive (and its Free unsent) until the next
            # message came
            batch = item = msg = reply = None  # type: ignore[assignment]
            executor.batch = _NO_BATCH
            ctx.current = None
            if state.poisoned is not None and ctx.in_worker_process:
                ctx.fail_pending(state.poisoned)
                return
            _end_turn(ctx, None if qsize() else qsize, backpressure)
            if executor.nudged:
                _hand_over(ctx, executor)
            if dropped:  # buffers that died in this turn (replies answered, the batch let go)
                _free_dropped(ctx, dropped)
            if stop:
                executor.watching = False
                executor.closed = True  # callers' turns end here
                ctx.shutdown(shutdown_timeout)
            executor.holder = None


def _free_dropped(ctx: DeviceContext, dropped: list) -> None:
    """Free the buffers in ``dropped`` (emptied). Each died on the device thread with no
    message but its producer ever naming it, and that producer was handled (its reply held
    the buffer until answered): nothing left in the mailbox can use it."""
    free = _device_handlers.free_buffer
    while dropped:
        ref = dropped.pop()
        if ctx.state.poisoned is not None:
            continue
        try:
            free(ctx, ref)
        except CudaError as exc:
            if exc.sticky:
                ctx.fail_pending(ctx.poison(exc, "raised freeing a dropped buffer"))
        except GpuError:  # noqa: S110 - as a Free nobody waits for: nothing to answer
            pass


class DeviceWorker:
    """Thread isolation: the device loop on a daemon thread of the calling process."""

    def __init__(self, backend: Any, state: Any, memory: Any, trace: Any = None,
                 allow_fault_injection: bool = False, shutdown_timeout: float | None = 60.0,
                 pinned_staging_limit: int = 256 << 20) -> None:
        self.mailbox: Mailbox = Mailbox()
        #: callers pause on a full mailbox (service/backpressure.py says why)
        self.backpressure = Backpressure(self.mailbox.qsize, *configured())
        self.state = state
        self.ctx: DeviceContext | None = None
        self._startup_error: BaseException | None = None
        self._ready = threading.Event()
        self._late_lock = threading.Lock()
        self._finished = False  # the loop ended and drained the mailbox
        #: buffers that died on the device thread, never named by a message but their
        #: producer's; the loop frees them (see drop)
        self.dropped: list = []
        self._lead = self.lead  # one bound method, given to the futures of inline turns
        #: callers may run their own messages on an idle device (``caller_runs``; off: every
        #: message goes through the mailbox and the device thread, as many threads may prefer)
        self.caller_runs = (setting("GPUMSG_CALLER_RUNS") or "1").strip().lower() not in (
            "0", "no", "off", "false")
        self._thread = threading.Thread(
            target=self._run, name=f"gpumsg-device-{backend.ordinal}", daemon=True,
            args=(backend, memory, trace, allow_fault_injection, shutdown_timeout,
                  pinned_staging_limit))
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def _run(self, backend: Any, memory: Any, trace: Any, allow_fault_injection: bool,
             shutdown_timeout: float | None, pinned_staging_limit: int) -> None:
        exempt_this_thread()  # its own done-callbacks' posts must not wait for itself
        try:
            self.ctx = DeviceContext(backend, self.state, memory, trace, allow_fault_injection,
                                     queue_depth=self.mailbox.qsize,
                                     pinned_staging_limit=pinned_staging_limit)
        except BaseException as exc:  # noqa: BLE001 - reported to the opener
            self._startup_error = exc if isinstance(exc, (GpuError, Exception)) else \
                RuntimeError(repr(exc))
            self._ready.set()
            return
        self.ctx.reclaim = self._reclaim
        self._ready.set()
        try:
            profile_to = setting("GPUMSG_PROFILE")
            if profile_to:  # a cProfile of the device thread, for performance work
                import cProfile

                prof = cProfile.Profile()
                prof.runcall(serve, self.ctx, self.mailbox, shutdown_timeout,
                             backpressure=self.backpressure, dropped=self.dropped)
                prof.dump_stats(f"{profile_to}.device{backend.ordinal}")
            else:
                serve(self.ctx, self.mailbox, shutdown_timeout, backpressure=self.backpressure,
                      dropped=self.dropped)
        finally:
            self.backpressure.release()  # nothing will relieve a pause any more
            with self._late_lock:
                self._drain()
                self._finished = True

    def _reclaim(self) -> bool:
        """``ctx.reclaim``: an allocation was refused inside a turn. Buffers nobody holds any
        more may still be alive, held by their producer's reply until it is answered (a
        caller's turn answers lazily; a completion thread may have the batch). Answer every
        batch the executor keeps, waiting for the work still running, wait up to
        :data:`RECLAIM_SECONDS` for the completion threads to answer theirs, free the buffers
        that died meanwhile, and say whether any buffer was freed.

        Never a buffer that the message being handled or a later one of its turn names (they
        have not run yet): those wait for the turn's end, as every buffer dropped during a
        turn does. A message posted later cannot name a buffer that died before it."""
        ctx = self.ctx
        executor = ctx.executor  # type: ignore[union-attr]
        current = ctx.current  # type: ignore[union-attr]
        if current is None or ctx.capture is not None:  # nothing recorded inside a capture
            return False
        turn = [current]  # a caller's turn: its one message
        if executor.holder == self._thread.ident:  # the device thread: the rest of its batch
            turn += [msg for msg, _ in executor.batch if isinstance(msg, Message)]
        held = len(ctx.buffers)  # type: ignore[union-attr]
        executor.reclaiming = True
        try:
            ctx.flush()  # type: ignore[union-attr]
            while (running := ctx.reap()) is not None:  # type: ignore[union-attr]
                ctx.backend.event_synchronize(running)  # type: ignore[union-attr]
            deadline = time.monotonic() + RECLAIM_SECONDS
            for slot in ctx.active:  # type: ignore[union-attr]
                while slot.watcher is not None and slot.watcher.batches < slot.handed and \
                        time.monotonic() < deadline:
                    time.sleep(20e-6)
        except CudaError:
            return False  # the refusal stands; the next turn reports the error
        finally:
            executor.reclaiming = False
        dropped = self.dropped
        if dropped:
            named = {ref.id for msg in turn for ref in msg.refs()}
            now: list = []
            later: list = []
            while dropped:  # pops: a drop appended by another thread meanwhile is not lost
                ref = dropped.pop()
                (later if ref.id in named else now).append(ref)
            _free_dropped(ctx, now)  # type: ignore[arg-type]
            dropped.extend(later)
        return len(ctx.buffers) < held  # type: ignore[union-attr]

    def _drain(self) -> None:
        """Fail what is left in the mailbox after the loop ended (posts that raced close)."""
        get = self.mailbox.get_nowait
        while True:
            try:
                msg, reply = get()
            except Empty:
                return
            if reply is not None and msg is not STOP:
                _fail(reply, self.state.refusal)

    def late_post(self) -> None:
        """A post found the device refusing work just after putting its message: it may lie
        behind STOP. If the loop has already drained the mailbox, drain it here; otherwise the
        loop's own drain, when it ends, answers it."""
        with self._late_lock:
            if self._finished:
                self._drain()

    @property
    def props(self) -> Any:
        return self.ctx.props  # type: ignore[union-attr]

    @property
    def pinned(self) -> Any:
        """The device's page-locked host pool (the client stages copies through it)."""
        return self.ctx.pinned  # type: ignore[union-attr]

    def submit(self, msg: Any, reply: Any) -> None:
        self.mailbox.put((msg, reply))

    def run_inline(self, msg: Any, reply: Any) -> bool:
        """Run ``msg`` on the calling thread if the device is idle: the executor lock free and
        everything posted before taken (``service/_executor.py``); whether it ran. A message
        run so is answered as the device thread would answer it; work it leaves running is
        answered by the next turn, by a caller waiting for it (:meth:`lead`) or, when callers
        are away, by the device thread. The caller has checked that the device accepts
        messages (checked again here, under the lock)."""
        if not self.caller_runs:
            return False
        inner = msg.then if type(msg) is OnStream else msg  # the message a stream carries
        t = type(inner)
        if t not in INLINE and t not in CAPTURABLE:
            if t is not AllocThen:
                return False
            then = type(inner.then)
            if then not in INLINE and then not in CAPTURABLE:
                return False
        ctx = self.ctx
        executor = ctx.executor  # type: ignore[union-attr]
        if not executor.lock.acquire(False):
            return False
        try:
            if executor.taken != self.mailbox.posted:  # queued messages go first
                return False
            state = self.state
            if not state.accepting:  # closed or poisoned meanwhile
                raise state.refusal
            if getattr(reply, "_lead", 0) is None:  # a GpuFuture: its waiter may answer it
                reply._lead = reply._nudge = self._lead
            self._turn(ctx, executor, msg, reply)  # type: ignore[arg-type]
        finally:
            executor.lock.release()
        return True

    def _turn(self, ctx: DeviceContext, executor: Any, msg: Any, reply: Any) -> None:
        """A caller's turn under the executor lock: ``msg`` (if any), then what completed."""
        executor.holder = threading.get_ident()
        executor.turns += 1
        dropped = self.dropped
        token = ctx.backend.enter_thread()
        try:
            if dropped:
                _free_dropped(ctx, dropped)
            msg_turn = msg is not None
            if msg_turn:
                _handle(ctx, msg, reply, True)
                msg = reply = None
                ctx.current = None
            # a paused caller may post again; a message's entries may wait for a later event
            _end_turn(ctx, None, self.backpressure, msg_turn)
            if executor.nudged:  # someone is to be told, not waiting: the watchers answer
                _hand_over(ctx, executor)
            if dropped:
                _free_dropped(ctx, dropped)
        finally:
            ctx.backend.leave_thread(token)
            executor.holder = None
            if not executor.watching and not executor.watch_posted and ctx.keeps_batches():
                executor.watch_posted = True  # the device thread answers them if nobody does
                SimpleQueue.put(self.mailbox, (WATCH, None))  # not counted: nothing to order

    def lead(self, fut: Any, timeout: float | None) -> float | None:
        """``fut.result()``'s wait (``GpuFuture._lead``) for a message a caller ran: answer
        the batches that completed, and wait on the oldest still running, with neither the
        executor lock nor the GIL, until ``fut`` is answered, no batch is left to the
        executor (a completion thread or the device thread answers then), or ``timeout``
        runs out. Returns what is left of ``timeout``.

        A ``timeout`` of 0 is a nudge (``GpuFuture`` gives it when a done-callback, ``wait``
        or ``as_completed`` is to be told of the answer, rather than a caller waiting): one
        turn, and what is still running goes to the completion threads, which answer it."""
        ctx = self.ctx
        executor = ctx.executor  # type: ignore[union-attr]
        if executor.holder == threading.get_ident():  # a done-callback inside a turn
            return timeout
        if timeout is not None and timeout <= 0:
            # never waits for the lock: a nudge may come from concurrent.futures.wait, which
            # holds other futures' conditions that the turn running may be answering
            if not executor.lock.acquire(False):
                executor.nudged = True  # the turn running hands over at its end
                return timeout
            try:
                if not executor.closed:
                    executor.nudged = True
                    self._turn(ctx, executor, None, None)  # type: ignore[arg-type]
            finally:
                executor.lock.release()
            return timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        backend = ctx.backend  # type: ignore[union-attr]
        while not fut.done():
            if not executor.lock.acquire(True, -1 if deadline is None else
                                         max(0.0, deadline - time.monotonic())):
                break
            try:
                if executor.closed:
                    break
                self._turn(ctx, executor, None, None)  # type: ignore[arg-type]
                running = ctx.oldest_running()  # type: ignore[union-attr]
            finally:
                executor.lock.release()
            if running is None or fut.done():
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            token = backend.enter_thread()
            try:
                backend.event_synchronize(running)  # no lock, no GIL (a reused event: later)
            except GpuError:
                pass  # the next turn's query reports it
            finally:
                backend.leave_thread(token)
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def take_turn(self, timeout: float) -> DeviceContext | None:
        """Begin a turn of the calling thread's own, for work that spans devices and is
        issued by one thread holding every device's turn (a collective's members, a peer
        copy's two sides: ``multi/_turns.py``). The turn is taken only while the device is
        idle (everything posted before has been taken, so nothing is overtaken) and
        accepting; the caller waits up to ``timeout`` s for the executor lock and for the
        device thread to take what is queued. Returns the context, the caller's until
        :meth:`give_turn`, or None with nothing held. The caller makes the device's context
        current (``ctx.backend.enter_thread``) around what it issues."""
        ctx = self.ctx
        executor = ctx.executor  # type: ignore[union-attr]
        if executor.holder == threading.get_ident():  # inside this device's turn (a callback)
            return None
        lock, mailbox, state = executor.lock, self.mailbox, self.state
        deadline = time.monotonic() + timeout
        while True:
            if not lock.acquire(True, max(0.0, deadline - time.monotonic())):
                return None
            if executor.closed or not state.accepting:
                lock.release()
                return None
            if executor.taken == mailbox.posted:
                break
            lock.release()  # queued messages go first: let the device thread take them
            if time.monotonic() >= deadline:
                return None
            time.sleep(20e-6)
        executor.holder = threading.get_ident()
        executor.turns += 1
        return ctx

    def give_turn(self) -> None:
        """End a turn begun with :meth:`take_turn`, as a caller's message turn ends (an event
        per stream once enough is pending, what completed answered, the device thread told
        to look if batches are left), and release the executor lock."""
        ctx = self.ctx
        executor = ctx.executor  # type: ignore[union-attr]
        dropped = self.dropped
        try:
            token = ctx.backend.enter_thread()  # type: ignore[union-attr]
            try:
                if dropped:
                    _free_dropped(ctx, dropped)  # type: ignore[arg-type]
                _end_turn(ctx, None, self.backpressure, True)  # type: ignore[arg-type]
                if executor.nudged:
                    _hand_over(ctx, executor)  # type: ignore[arg-type]
                if dropped:
                    _free_dropped(ctx, dropped)  # type: ignore[arg-type]
            finally:
                ctx.backend.leave_thread(token)  # type: ignore[union-attr]
        finally:
            executor.holder = None
            if not executor.watching and not executor.watch_posted and \
                    ctx.keeps_batches():  # type: ignore[union-attr]
                executor.watch_posted = True
                SimpleQueue.put(self.mailbox, (WATCH, None))
            executor.lock.release()

    def drop(self, ref: Any, named: bool = False) -> bool:
        """A buffer's last reference went (its finalizer); whether the executor frees it at
        its next turn's start or end, without a ``Free`` message (else the caller posts one).
        Only where a turn will come and nothing posted can still name the buffer: on a thread
        taking a turn now (a reply answered, a batch let go), or while the device thread
        watches callers' turns; and for a buffer that no message but its producer names
        (``named`` false: the producer was handled, since its reply held the buffer), or whose
        every message has been taken into a turn (``named``: the mailbox's count is the
        executor's; a message posted later that names it finds it freed, as behind a
        ``Free``). A drop that races the device thread's last look is freed at the next
        turn."""
        executor = self.ctx.executor  # type: ignore[union-attr]
        if executor.holder != threading.get_ident() and not executor.watching and \
                not executor.reclaiming:
            return False
        if named and executor.taken != self.mailbox.posted:
            return False
        self.dropped.append(ref)
        return True

    def stop(self) -> None:
        self.mailbox.put((STOP, None))

    def join(self, timeout: float | None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def alive(self) -> bool:
        return self._thread.is_alive()
