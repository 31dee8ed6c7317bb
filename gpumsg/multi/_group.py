"""Groups of devices: :func:`open_devices`, :class:`DeviceGroup`, placement by load and
:class:`Communicator` (NCCL collectives that fail instead of hang).

Communicator construction: one ``ncclCommInitRank`` per member, each on its own device thread
(the group posts a :class:`~gpumsg.messages.nccl.CommInit` to every member at once; each
device thread blocks only in its own call until all ranks joined). The handles are used only
under their device's executor. The same messages work for process-isolated members (the
128-byte unique id is plain data). A collective is a :class:`~gpumsg.messages.nccl.Collective`
per member, ordered with that device's other work by the usual stream waits: by default the
caller issues every member's part itself, in one NCCL group call, holding every member's turn
(``multi/_turns.py``); otherwise (``multi_issue="members"``, or a member that cannot lend its
turn now) each is posted as a message to its member's device thread.

Never hang: one monitor thread per communicator, alive while batches are outstanding, fails
those past their deadline (``timeout`` seconds) and polls ``ncclCommGetAsyncError``
(``CommPoll``) every ``poll_interval``; done callbacks finish the rest. After each build the
communicator subscribes ``WatchGeneration`` on every member, so a member that is restarted
(process isolation), poisoned or closed fails the outstanding batches at once. A timeout, a
failed member or an asynchronous error aborts the communicator on every member (``CommAbort`` ->
``ncclCommAbort``) and fails every rank's future with :class:`~gpumsg.errors.CollectiveError`;
the next collective builds a new communicator (also when a member's generation changed).
Members are posted to under :data:`~gpumsg.multi._peer.ORDER_LOCK`, like peer copies, so devices
meet their rendezvous in one order.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from ..client import Device, devices, open_device
from ..client._buffers import GpuFuture
from ..errors import CollectiveError, CudaError, GpuError, InvalidMessage
from ..messages._base import BufRef, as_ref
from ..messages.nccl import (
    Collective,
    CollOp,
    CommAbort,
    CommInit,
    CommPoll,
    check_batch,
    coll_op,
)
from ..service._context import dependency_error
from ..service._registry import COMPUTE
from ._peer import ORDER_LOCK, Topology, enable_peer_access, topology
from ._turns import Part, caller_issues, give_turns, leader, take_turns

__all__ = ["DeviceGroup", "Communicator", "CollectiveFuture", "open_devices"]

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

_comm_ids = itertools.count(1)
#: calls a communicator remembers as checked (forgotten all at once when full)
PASSED_CAPACITY = 256


class CollectiveFuture(GpuFuture):
    """Resolves (to None) when every rank's part of a collective is done; ``ranks`` holds one
    Future per rank. On failure every one of them raises :class:`CollectiveError` (or, for a
    collective issued by the caller that found a buffer unusable before issuing anything,
    that buffer's own error: :class:`~gpumsg.errors.DependencyFailed`,
    :class:`~gpumsg.errors.GpuRefStale`)."""

    #: the per-rank futures, made when first asked for: most callers wait on the whole
    _rank_futures: list[GpuFuture] | None = None
    #: a failure of the whole reaches each rank as a CollectiveError naming that rank
    _rank_errors = False

    def __init__(self, nranks: int) -> None:
        super().__init__()
        self._nranks = nranks

    @property
    def ranks(self) -> list[GpuFuture]:
        """One future per rank, each answered when the whole is (a failure as the whole's
        error, or a :class:`CollectiveError` naming the rank); a waiter on one leads the
        members as a waiter on the whole does."""
        found = self._rank_futures
        if found is not None:
            return found
        with _RANKS_LOCK:
            found = self._rank_futures
            if found is not None:
                return found
            found = [GpuFuture() for _ in range(self._nranks)]
            for f in found:
                f._lead, f._nudge = self._lead, self._nudge
            self._rank_futures = found
        self._chain(_answer_ranks)  # at once when the whole is answered already
        return found


#: makes a CollectiveFuture's per-rank futures once
_RANKS_LOCK = threading.Lock()


def _answer_ranks(whole: CollectiveFuture) -> None:
    exc = whole.exception()
    for r, f in enumerate(whole._rank_futures or ()):
        if f.done():
            continue
        if exc is None:
            f.set_result(None)
        elif whole._rank_errors and isinstance(exc, CollectiveError):
            f.set_exception(CollectiveError(str(exc), exc.comm, r))
        else:
            f.set_exception(exc)


class Communicator:
    """A communicator over the devices of a group (rank i = ``devices[i]``).

    Collective calls take one buffer per rank (a GpuBuffer, its future or a BufRef, on that
    rank's device) and return a :class:`CollectiveFuture`. ``count`` is the number of elements
    of the input (all_gather: of each rank's part; reduce_scatter: of each rank's output).
    The ranks' buffers must agree: one dtype, one count (shape and order too where elements
    pair up one to one), the size relations of all_gather / reduce_scatter, a send and its recv
    alike. A call whose buffers disagree raises InvalidMessage naming the argument, the rank and
    what was expected, before anything is enqueued (NCCL itself would read or write out of
    bounds).
    """

    def __init__(self, devices: Sequence[Device], timeout: float = 60.0,
                 poll_interval: float = 0.05) -> None:
        if len(devices) < 1:
            raise InvalidMessage("a communicator needs at least one device", field="devices")
        self.devices = list(devices)
        self.nranks = len(self.devices)
        self.timeout = float(timeout)
        self.poll_interval = poll_interval
        self.comm_id = 0
        self._generations: list[int] = []
        #: short state updates (callbacks take it: never held while waiting for a member)
        self._lock = threading.RLock()
        #: one build or issue at a time; callbacks never take it. A build waits for the
        #: members' CommInit replies, which may be delivered by the same thread that delivers
        #: earlier replies whose callbacks need ``_lock`` (process isolation: one reader thread)
        self._build_lock = threading.RLock()
        self._pending: list[list[CollOp]] | None = None
        self._pending_future: CollectiveFuture | None = None
        self.rebuilds = 0
        #: calls whose ops passed _submit's checks (see there)
        self._passed: set[tuple] = set()
        #: the last collective call: (its kind and arguments, its buffers' references, its
        #: checked operations); see _repeat
        self._last: tuple | None = None
        #: the members' messages of the last batch issued: (its ops, communicator, messages)
        self._messages: tuple | None = None
        self._batches: set[_Batch] = set()
        self._monitor: threading.Thread | None = None
        self._build()

    # -- lifetime
    def _build(self) -> None:
        comm = next(_comm_ids)
        if any(d.backend == "cuda" for d in self.devices):
            from ..libs.nccl._handle import unique_id

            uid = unique_id()
        elif any(d.isolation != "thread" for d in self.devices):
            from ..libs.nccl import _simnet as simnet  # simulated members in several processes

            uid = simnet.unique_id()
        else:
            uid = os.urandom(128)
        gens = [d.generation for d in self.devices]
        futs = []
        with ORDER_LOCK:  # every member meets its peers in the same order (see peer.py)
            for r, d in enumerate(self.devices):
                try:
                    futs.append(d.send(CommInit(comm, r, self.nranks, uid)))
                except GpuError as exc:  # a closed or poisoned member cannot join
                    f: Future = Future()
                    f.set_exception(exc)
                    futs.append(f)
        done, not_done = wait_futures(futs, timeout=self.timeout)
        errors = [f.exception() for f in done if f.exception() is not None]
        if not_done or errors:
            self._abort(comm)
            late = [r for r, f in enumerate(futs) if f in not_done]
            why = f"member(s) {late} did not join within {self.timeout} s" if not_done \
                else f"a member failed to join: {errors[0]!r}"
            raise CollectiveError(f"building communicator {comm}: {why}", comm)
        with self._lock:
            self.comm_id = comm
            self._generations = gens
            self.rebuilds += 1
        for r, d in enumerate(self.devices):  # hear at once of a member's restart or poisoning
            try:
                w = d.watch_generation(gens[r])
            except GpuError:
                continue
            w.add_done_callback(lambda f, comm=comm, r=r: self._member_changed(comm, r, f))

    def _member_changed(self, comm: int, rank: int, f: Future) -> None:
        """Member ``rank``'s generation moved on (restarted, poisoned) or it closed: the
        communicator is stale. Its outstanding batches fail now (not at their deadline); the
        next collective rebuilds it."""
        exc = f.exception()
        why = (f"member {rank} ({self.devices[rank]!r}) is gone: {exc!r}" if exc is not None
               else f"member {rank} moved to generation {f.result()} (restarted or poisoned)")
        with self._lock:
            batches = [b for b in self._batches if b.comm == comm]
            stale = self.comm_id == comm
            if stale:
                self.comm_id = 0
        for b in batches:
            self._fail_batch(b, why)
        if stale and not batches:
            self._abort(comm)

    def _abort(self, comm: int) -> None:
        for d in self.devices:
            with contextlib.suppress(GpuError):
                d.send(CommAbort(comm))

    def _ensure(self) -> bool:
        if self.comm_id == 0 or [d.generation for d in self.devices] != self._generations:
            with self._lock:
                old, self.comm_id = self.comm_id, 0
            if old:
                self._abort(old)
            self._build()
            return True
        return False

    def refresh(self) -> bool:
        """Rebuild the communicator if it was aborted or a member's generation changed (a
        process-isolated member was restarted); every collective does this first. True if it
        was rebuilt; raises CollectiveError if a member cannot join."""
        with self._build_lock:
            return self._ensure()

    def close(self) -> None:
        """Destroy the communicator on every member (after the work already queued)."""
        if self.comm_id:
            for d in self.devices:
                with contextlib.suppress(GpuError):
                    d.send(CommAbort(self.comm_id, destroy=True))
            self.comm_id = 0

    # -- issuing
    def _rank_of(self, buf: Any, field: str) -> int:
        ref = buf if hasattr(buf, "owner") else getattr(buf, "ref", None)
        for r, d in enumerate(self.devices):
            if ref is not None and ref.owner == d._state.token:
                return r
        raise InvalidMessage(f"{field}: the buffer belongs to no device of this communicator",
                             field=field)

    def _per_rank(self, bufs: Sequence[Any], field: str) -> list[Any]:
        if bufs is None or len(bufs) != self.nranks:
            raise InvalidMessage(f"{field} needs one buffer per rank ({self.nranks})",
                                 field=field)
        for r, b in enumerate(bufs):
            if b is not None and self._rank_of(b, f"{field}[{r}]") != r:
                raise InvalidMessage(f"{field}[{r}] is not on rank {r}'s device", field=field)
        return list(bufs)

    def _repeat(self, call: tuple, *grids: Sequence[Any]) -> list[list[CollOp]] | None:
        """The checked operations of the last collective call when this one repeats it, as a
        training step's all-reduce of the same gradients does: the same kind and arguments
        (``call``), and in ``grids`` (one buffer per rank each) the buffers whose references
        that call used. A reference is the buffer's identity: a buffer freed and made again,
        or on a restarted device, has another (and ``ref`` raises for a freed or stale one,
        as the full path's checks do). None otherwise: the call takes the full path."""
        last = self._last
        if last is None or last[0] != call:
            return None
        refs, i, n = last[1], 0, self.nranks
        try:
            for grid in grids:
                if len(grid) != n:
                    return None
                for b in grid:
                    if (b if type(b) is BufRef else b.ref) is not refs[i]:
                        return None
                    i += 1
        except (AttributeError, TypeError):  # not buffers: the full path says what is wrong
            return None
        return last[2]

    def _submit(self, ops: list[list[CollOp]], checked: bool = False) -> CollectiveFuture:
        # refused at the call, also inside group(): each rank's ops as its message will check
        # them (op, root, peer, its own buffers), then the ranks' collectives against rank 0's.
        # Ops are plain data: a call equal to one that passed (the same buffers, counts and
        # op, as a loop repeats it) passes again without the checks; ``checked``: a repeat
        # found by _repeat, which passed them
        if checked:
            if self._pending is not None:
                for r in range(self.nranks):
                    self._pending[r] += ops[r]
                return self._pending_future
            return self._issue(ops)
        try:
            key: Any = tuple(map(tuple, ops))
            seen = key in self._passed
        except TypeError:  # a field that cannot be hashed: checked, not remembered
            key, seen = None, False
        if not seen:
            for r in range(self.nranks):
                if ops[r]:
                    Collective(0, r, self.nranks, tuple(ops[r]))
            check_batch(ops, pairs=False)
            if key is not None:
                if len(self._passed) >= PASSED_CAPACITY:
                    self._passed.clear()
                self._passed.add(key)
        if self._pending is not None:
            for r in range(self.nranks):
                self._pending[r] += ops[r]
            return self._pending_future
        return self._issue(ops)

    def _issue(self, ops: list[list[CollOp]], out: CollectiveFuture | None = None
               ) -> CollectiveFuture:
        # before anything is enqueued: a send or recv without its partner would wait for ever,
        # and one whose partner disagrees would be read or written out of bounds (the
        # collectives were checked call by call, in _submit)
        if _has_p2p(ops):
            check_batch(ops)
        out = out or CollectiveFuture(self.nranks)
        with self._build_lock:
            try:
                self._ensure()
            except CollectiveError as exc:
                _fail_all(out, exc)
                return out
            comm = self.comm_id
            # every op passed its rank's message checks in _submit (they look at one op at a
            # time, so a batch of checked ops needs no second pass); a repeated call's ops
            # (the very list, see _repeat) keep their messages while the communicator stays
            made = self._messages
            if made is not None and made[0] is ops and made[1] == comm:
                msgs = made[2]
            else:
                msgs = [Collective.unchecked(comm, r, self.nranks, tuple(ops[r]))
                        for r in range(self.nranks)]
                self._messages = (ops, comm, msgs)
            inner: list[tuple[int, Future]] = []
            with ORDER_LOCK:
                if caller_issues() and self._issue_here(comm, msgs, out):
                    return out
                for m in msgs:
                    try:
                        inner.append((m.rank, self.devices[m.rank].send(m)))
                    except GpuError as exc:  # a closed or refusing member
                        f: Future = Future()
                        f.set_exception(exc)
                        inner.append((m.rank, f))
        self._watch(comm, inner, out)
        return out

    def _issue_here(self, comm: int, msgs: list[Collective], out: CollectiveFuture) -> bool:
        """Issue the batch (``msgs[r]``: rank r's part) on this thread, holding every
        member's turn (``multi/_turns.py``): each rank's operations through its device's
        envelope on its compute stream, all inside one NCCL group call. False, with nothing
        issued, when a member's turn cannot be had now (the caller posts ``msgs`` instead).
        The caller holds ``ORDER_LOCK``."""
        devices = self.devices
        contexts = take_turns(devices, msgs[0])
        if contexts is None:
            return False
        n = self.nranks
        batch = _Batch(comm, [(r, None) for r in range(n)], out,
                       time.monotonic() + self.timeout)
        parts = [Part(lambda exc, b=batch: self._part_done(b, exc)) for _ in range(n)]
        lead, nudge = leader(devices, parts)
        out._lead, out._nudge = lead, nudge
        for f in out._rank_futures or ():  # asked for before the batch was issued (a group)
            f._lead, f._nudge = lead, nudge
        # failures are told once the turns are given back: whoever hears of them (a
        # done-callback) may post to the members, and the abort is a message to each
        refused: BaseException | None = None
        failed = None
        try:
            try:
                plan = [_resolve_part(ctx, m) for ctx, m in zip(contexts, msgs)]
            except GpuError as exc:
                # nothing issued: every rank hears of the unusable buffer, and the outputs,
                # which will not be written, are marked failed (read as DependencyFailed)
                for ctx, m in zip(contexts, msgs):
                    ctx.mark_outputs_failed(m, exc)
                refused = exc
            else:
                self._track(batch)
                handles = [ctx.library("nccl") for ctx in contexts]
                missing = [r for r, h in enumerate(handles) if not h.has(comm)]
                if missing:
                    failed = f"member(s) {missing} no longer hold the communicator"
                else:
                    failed = self._enqueue_here(contexts, handles, msgs, plan, parts)
        finally:
            give_turns(devices)
        if refused is not None:
            _refuse(out, refused)
        elif failed is not None:
            self._fail_batch(batch, failed)
        return True

    def _enqueue_here(self, contexts: list[Any], handles: list[Any], msgs: list[Collective],
                      plan: list[tuple], parts: list[Part]) -> str | None:
        """The NCCL group call of :meth:`_issue_here`: one ncclGroupStart, each rank's
        operations for its compute stream through its envelope (waits for the buffers'
        earlier uses on that device, tracking of their new use), one ncclGroupEnd, which
        launches every member's kernels. Returns why it failed (the batch is then failed
        and the communicator aborted: a member may have been launched without its peers),
        or None."""
        comm = msgs[0].comm
        made: list[list[int]] = [[] for _ in contexts]
        error: BaseException | None = None
        failed_ctx = None
        issued = []
        first = contexts[0].backend
        token = first.enter_thread()
        try:
            handles[0].group_start()
        except Exception as exc:  # noqa: BLE001 - nothing enqueued
            first.leave_thread(token)
            return f"ncclGroupStart failed: {exc!r}"
        try:
            for r, ctx in enumerate(contexts):
                reads, writes, ptrs = plan[r]
                backend = ctx.backend
                inner = backend.enter_thread() if r else None
                ctx.current = msgs[r]
                try:
                    ctx.run(parts[r], COMPUTE, reads, writes, handles[r].enqueue, comm, ptrs,
                            made[r])
                except BaseException as exc:  # noqa: BLE001 - the group still ends, below
                    error, failed_ctx = exc, ctx
                    break
                finally:
                    ctx.current = None
                    if r:
                        backend.leave_thread(inner)
                issued.append(r)
        finally:
            try:
                handles[0].group_end()
            except BaseException as exc:  # noqa: BLE001
                error = error or exc
            finally:
                first.leave_thread(token)
            for h, m in zip(handles, made):
                if m:
                    h.release(comm, m)
        if error is None:
            return None
        if isinstance(error, CudaError) and error.sticky and failed_ctx is not None:
            failed_ctx.fail_pending(failed_ctx.poison(error, "raised issuing a collective"))
        for r in issued:
            contexts[r].mark_outputs_failed(msgs[r], error)
        return f"issuing it failed: {error!r}"

    def _track(self, batch: _Batch) -> None:
        """Count ``batch`` outstanding: the monitor thread handles its deadline and the
        communicator's asynchronous errors."""
        with self._lock:
            self._batches.add(batch)
            if self._monitor is None:
                self._monitor = threading.Thread(target=self._monitor_loop, daemon=True,
                                                 name="gpumsg-collective-monitor")
                self._monitor.start()

    def _watch(self, comm: int, inner: list[tuple[int, Future]], out: CollectiveFuture) -> None:
        """Finish ``out`` from the members' futures (done callbacks, no thread per batch); the
        monitor thread handles deadlines and asynchronous errors."""
        batch = _Batch(comm, inner, out, time.monotonic() + self.timeout)
        self._track(batch)
        for _, f in inner:
            f.add_done_callback(lambda f, b=batch: self._part_done(b, f.exception()))

    def _part_done(self, batch: _Batch, exc: BaseException | None) -> None:
        """One member's part of ``batch`` completed (``exc`` None) or failed."""
        if exc is not None:
            self._fail_batch(batch, f"a member failed: {exc!r}")
            return
        with self._lock:
            batch.remaining -= 1
            if batch.remaining or batch.finished:
                return
            batch.finished = True
            self._batches.discard(batch)
        batch.out.set_result(None)  # and the per-rank futures made so far (_answer_ranks)

    def _fail_batch(self, batch: _Batch, error: str) -> None:
        with self._lock:
            if batch.finished:
                return
            batch.finished = True
            self._batches.discard(batch)
            if self.comm_id == batch.comm:
                self.comm_id = 0
        self._abort(batch.comm)
        _fail_all(batch.out, CollectiveError(
            f"collective on communicator {batch.comm} failed: {error}; the communicator was "
            "aborted", batch.comm))

    def _monitor_loop(self) -> None:
        """Every ``poll_interval`` while batches are outstanding: fail those past their
        deadline, and poll each outstanding communicator's asynchronous error."""
        while True:
            time.sleep(self.poll_interval)
            with self._lock:
                batches = list(self._batches)
                if not batches:
                    self._monitor = None
                    return
            now = time.monotonic()
            for b in batches:
                if now >= b.deadline:
                    self._fail_batch(b, f"peers did not complete within {self.timeout} s")
            # only communicators with a batch outstanding for a poll interval: the members
            # are asked by message, which a batch that completes at once need not cost them
            old = now - self.poll_interval
            for comm in {b.comm for b in batches if not b.finished and b.started <= old}:
                codes = self._poll(comm)
                if codes:
                    for b in batches:
                        if b.comm == comm:
                            self._fail_batch(b, f"asynchronous NCCL error {codes[0]}")

    def _poll(self, comm: int) -> list[int]:
        codes = []
        for d in self.devices:
            try:
                f = d.send(CommPoll(comm))
                code = f.result(timeout=self.poll_interval)
            except Exception:  # a busy member answers later; a dead one fails the batch
                continue
            if code:
                codes.append(code)
        return codes

    @contextlib.contextmanager
    def group(self) -> Iterator[CollectiveFuture]:
        """Batch every call inside into one NCCL group call per device (send/recv pairs,
        several collectives); the calls return the group's future, issued on exit."""
        if self._pending is not None:
            yield self._pending_future
            return
        self._pending = [[] for _ in range(self.nranks)]
        self._pending_future = fut = CollectiveFuture(self.nranks)
        try:
            yield fut
        except BaseException as exc:
            self._pending = None
            _refuse(fut, exc)  # nothing was issued: whoever holds the future hears why
            raise
        ops, self._pending = self._pending, None
        try:
            self._issue(ops, fut)
        except InvalidMessage as exc:  # refused as a whole (unpaired send/recv): nothing issued
            _refuse(fut, exc)
            raise

    # -- the collectives
    # Each call checks, before anything is enqueued, that the ranks' buffers agree: NCCL reads
    # ``count`` elements of ``dtype`` on every rank and does not check, so a rank whose buffer
    # is shorter or of another dtype would be read or written out of bounds (the simulator
    # would reduce the wrong elements). The reference is rank 0 (broadcast, reduce: the root).

    def _coll(self, kind: str, sends: Any, recvs: Any, count: int, dtype: str,
              call: tuple | None = None, refs: list[BufRef] | None = None, **kw: Any
              ) -> CollectiveFuture:
        """One ``kind`` operation per rank (``sends[r]``, ``recvs[r]``), submitted; ``call``
        and ``refs``: kept for :meth:`_repeat` once the operations passed the checks."""
        ops: list[list[CollOp]] = [[] for _ in range(self.nranks)]
        for r in range(self.nranks):
            ops[r].append(coll_op(kind, sends[r], recvs[r], count, dtype, **kw))
        fut = self._submit(ops)
        if call is not None and refs is not None:  # it passed the checks
            self._last = (call, refs, ops)
        return fut

    def _root(self, root: Any) -> int:
        """``root`` as a rank of this communicator (it picks the reference buffer, so it is
        checked before any buffer is)."""
        try:
            r = None if isinstance(root, bool) else operator.index(root)
        except TypeError:
            r = None
        if r is None or not 0 <= r < self.nranks:
            raise InvalidMessage(f"root must be a rank of this communicator (0 to "
                                 f"{self.nranks - 1}), got {root!r}", field="root")
        return r

    def _refs(self, bufs: Sequence[Any], field: str) -> list[BufRef]:
        return [as_ref(b, f"{field}[{r}]") for r, b in enumerate(bufs)]

    def all_reduce(self, bufs: Sequence[Any], out: Sequence[Any] | None = None,
                   op: str = "sum", scale: float = 1.0) -> CollectiveFuture:
        """out[r] = op over ranks of bufs (in place when ``out`` is None). ``op``: sum, prod,
        max, min, avg or premul_sum (each input times ``scale``, then summed). Every bufs[r]
        and out[r] has rank 0's dtype, shape and order (else InvalidMessage, nothing issued).

        Several buffers at once: ``bufs[r]`` a list (or tuple) of rank r's buffers, the same
        number on every rank (``out[r]`` likewise): the i-th buffers of the ranks are reduced
        together (each i may have its own dtype and shape), all in one NCCL group call, as
        inside :meth:`group`."""
        if bufs is not None and len(bufs) and isinstance(bufs[0], (list, tuple)):
            return self._all_reduce_many(bufs, out, op, scale)
        call = _call("all_reduce", op, scale, out is None)
        again = self._repeat(call, bufs) if out is None else self._repeat(call, bufs, out)
        if again is not None:
            return self._submit(again, checked=True)
        bufs = self._per_rank(bufs, "bufs")
        out = bufs if out is None else self._per_rank(out, "out")
        ins, outs = self._refs(bufs, "bufs"), self._refs(out, "out")
        want = ins[0]
        for r in range(self.nranks):
            _expect("all_reduce", "bufs", r, ins[r], want, want.size, "as rank 0's bufs",
                    layout=True)
            _expect("all_reduce", "out", r, outs[r], want, want.size, "as rank 0's bufs",
                    layout=True)
        return self._coll("all_reduce", bufs, out, want.size, want.dtype, call,
                          ins if out is bufs else ins + outs, op=op, scale=scale)

    def _all_reduce_many(self, bufs: Sequence[Any], out: Sequence[Any] | None, op: str,
                         scale: float) -> CollectiveFuture:
        if len(bufs) != self.nranks:
            raise InvalidMessage(f"bufs needs one list of buffers per rank ({self.nranks})",
                                 field="bufs")
        if out is not None and len(out) != self.nranks:
            raise InvalidMessage(f"out needs one list of buffers per rank ({self.nranks})",
                                 field="out")
        k = None
        for name, grid in (("bufs", bufs), ("out", out)):
            for r, row in enumerate(grid or ()):
                if not isinstance(row, (list, tuple)):
                    raise InvalidMessage(f"{name}[{r}] must be a list of rank {r}'s buffers, "
                                         f"as {name}[0] is", field=f"{name}[{r}]")
                if k is None:
                    k = len(row)
                if len(row) != k or not k:
                    raise InvalidMessage(f"{name}[{r}] holds {len(row)} buffers, expected "
                                         f"{k} (as bufs[0]; at least one)", field=f"{name}[{r}]")
        with self.group() as fut:
            for i in range(k or 0):
                self.all_reduce([row[i] for row in bufs],
                                None if out is None else [row[i] for row in out], op, scale)
        return fut

    def broadcast(self, bufs: Sequence[Any], root: int = 0) -> CollectiveFuture:
        """bufs[r] = bufs[root] on every rank (in place). Every bufs[r] has the root's dtype,
        shape and order."""
        call = _call("broadcast", root)
        again = self._repeat(call, bufs)
        if again is not None:
            return self._submit(again, checked=True)
        bufs = self._per_rank(bufs, "bufs")
        root = self._root(root)
        ins = self._refs(bufs, "bufs")
        want = ins[root]
        for r in range(self.nranks):
            _expect("broadcast", "bufs", r, ins[r], want, want.size, f"as root {root}'s bufs",
                    layout=True)
        return self._coll("broadcast", bufs, bufs, want.size, want.dtype, call, ins, root=root)

    def reduce(self, bufs: Sequence[Any], out: Any, root: int = 0, op: str = "sum",
               scale: float = 1.0) -> CollectiveFuture:
        """out (on ``root``) = op over ranks of bufs. Every bufs[r] and ``out`` have the root's
        bufs' dtype, shape and order."""
        bufs = self._per_rank(bufs, "bufs")
        root = self._root(root)
        if self._rank_of(out, "out") != root:
            raise InvalidMessage(f"reduce: out is not on the root's (rank {root}'s) device",
                                 field="out")
        ins = self._refs(bufs, "bufs")
        want = ins[root]
        for r in range(self.nranks):
            _expect("reduce", "bufs", r, ins[r], want, want.size, f"as root {root}'s bufs",
                    layout=True)
        _expect("reduce", "out", root, as_ref(out, "out"), want, want.size,
                f"as root {root}'s bufs", layout=True, index=False)
        recvs = [out if r == root else None for r in range(self.nranks)]
        return self._coll("reduce", bufs, recvs, want.size, want.dtype, op=op, root=root,
                          scale=scale)

    def all_gather(self, bufs: Sequence[Any], out: Sequence[Any]) -> CollectiveFuture:
        """out[r] = concatenation of bufs over ranks: every bufs[r] holds as many elements of
        one dtype as rank 0's, every out[r] nranks times that."""
        call = _call("all_gather")
        again = self._repeat(call, bufs, out)
        if again is not None:
            return self._submit(again, checked=True)
        bufs, out = self._per_rank(bufs, "bufs"), self._per_rank(out, "out")
        ins, outs = self._refs(bufs, "bufs"), self._refs(out, "out")
        want = ins[0]
        for r in range(self.nranks):
            _expect("all_gather", "bufs", r, ins[r], want, want.size, "as rank 0's bufs")
            _expect("all_gather", "out", r, outs[r], want, want.size * self.nranks,
                    f"{self.nranks} ranks x rank 0's bufs of {want.size}")
        return self._coll("all_gather", bufs, out, want.size, want.dtype, call, ins + outs)

    def reduce_scatter(self, bufs: Sequence[Any], out: Sequence[Any], op: str = "sum",
                       scale: float = 1.0) -> CollectiveFuture:
        """out[r] = part r of (op over ranks of bufs): every out[r] holds as many elements of
        one dtype as rank 0's, every bufs[r] nranks times that."""
        call = _call("reduce_scatter", op, scale)
        again = self._repeat(call, bufs, out)
        if again is not None:
            return self._submit(again, checked=True)
        bufs, out = self._per_rank(bufs, "bufs"), self._per_rank(out, "out")
        ins, outs = self._refs(bufs, "bufs"), self._refs(out, "out")
        want = outs[0]
        for r in range(self.nranks):
            _expect("reduce_scatter", "out", r, outs[r], want, want.size, "as rank 0's out")
            _expect("reduce_scatter", "bufs", r, ins[r], want, want.size * self.nranks,
                    f"{self.nranks} ranks x rank 0's out of {want.size}")
        return self._coll("reduce_scatter", bufs, out, want.size, want.dtype, call,
                          ins + outs, op=op, scale=scale)

    def send(self, buf: Any, peer: int, count: int | None = None) -> CollectiveFuture:
        """Send ``buf`` (its rank is the device it lives on; ``count`` elements, default all)
        to rank ``peer``. Pair it with the peer's :meth:`recv` of the same count and dtype
        inside one :meth:`group` (an unpaired or disagreeing pair is refused when the group
        is issued, nothing enqueued)."""
        return self._p2p("send", buf, peer, count)

    def recv(self, buf: Any, peer: int, count: int | None = None) -> CollectiveFuture:
        """Receive ``count`` elements (default: all of ``buf``) into ``buf`` from rank
        ``peer`` (see :meth:`send`)."""
        return self._p2p("recv", buf, peer, count)

    def _p2p(self, kind: str, buf: Any, peer: int, count: int | None) -> CollectiveFuture:
        r = self._rank_of(buf, "buf")
        ref = as_ref(buf, "buf")
        ops: list[list[CollOp]] = [[] for _ in range(self.nranks)]
        # count 0 is refused by the message's check, never read as "all of buf"
        n = ref.size if count is None else count
        send, recv = (buf, None) if kind == "send" else (None, buf)
        ops[r].append(coll_op(kind, send, recv, n, ref.dtype, peer=peer))
        return self._submit(ops)

    def all_to_all(self, sends: Sequence[Sequence[Any]], recvs: Sequence[Sequence[Any]]
                   ) -> CollectiveFuture:
        """sends[i][j] (on rank i) goes to recvs[j][i] (on rank j), as grouped send/recv; each
        pair must agree in count and dtype (``sends[i][i]`` and ``recvs[i][i]`` are unused)."""
        for name, grid in (("sends", sends), ("recvs", recvs)):
            if len(grid) != self.nranks or any(len(row) != self.nranks for row in grid):
                raise InvalidMessage(f"all_to_all: {name} must be {self.nranks} x "
                                     f"{self.nranks} buffers ({name}[i][j]: rank i's)",
                                     field=name)
        for i in range(self.nranks):  # every pair, before the group issues anything
            for j in range(self.nranks):
                if i != j:
                    sent = as_ref(sends[i][j], f"sends[{i}][{j}]")
                    _expect("all_to_all", f"recvs[{j}][{i}]", j,
                            as_ref(recvs[j][i], f"recvs[{j}][{i}]"), sent, sent.size,
                            f"as sends[{i}][{j}], which rank {i} sends it", index=False)
        with self.group() as fut:
            for i in range(self.nranks):
                for j in range(self.nranks):
                    if i != j:
                        self.send(sends[i][j], peer=j)
                        self.recv(recvs[j][i], peer=i)
        return fut


def _has_p2p(ops: list[list[CollOp]]) -> bool:
    """Whether a batch holds a send or a recv (a plain loop: on every collective's path)."""
    for rank_ops in ops:
        for o in rank_ops:
            if o.kind == "send" or o.kind == "recv":
                return True
    return False


def _call(kind: str, *args: Any) -> tuple:
    """A collective call's kind and arguments, as :meth:`Communicator._repeat` compares them:
    each argument with its type (``root=True`` is refused where ``root=1`` passed)."""
    return (kind, tuple(map(type, args)), args)


def _expect(kind: str, name: str, rank: int, ref: BufRef, want: BufRef, size: int, why: str,
            layout: bool = False, index: bool | int = True) -> None:
    """Refuse ``ref`` (argument ``name``, rank ``rank``'s) unless it holds ``size`` elements of
    ``want``'s dtype and, with ``layout``, has ``want``'s shape and order; ``why`` says where
    the expectation comes from. The error's field is ``name[rank]`` (``name`` alone with
    ``index`` False, ``name[index]`` with an int)."""
    field = name if index is False else f"{name}[{rank if index is True else index}]"
    where = f"{kind}: {field} (rank {rank})"
    if ref.dtype != want.dtype:
        raise InvalidMessage(f"{where} holds {ref.dtype}, expected {want.dtype} ({why})",
                             field=field)
    if ref.size != size:
        raise InvalidMessage(f"{where} holds {ref.size} elements, expected {size} ({why})",
                             field=field)
    if layout and ref.shape != want.shape:
        raise InvalidMessage(f"{where} has shape {ref.shape}, expected {want.shape} ({why})",
                             field=field)
    if layout and len(ref.shape) > 1 and ref.order != want.order:
        # same shape, other element order: the flat elements NCCL pairs are not the same ones
        raise InvalidMessage(f"{where} is {ref.order}-ordered, expected {want.order} ({why})",
                             field=field)


def _resolve_part(ctx: Any, msg: Collective) -> tuple[tuple, tuple, list]:
    """Rank ``msg.rank``'s buffers on its device (its turn held), as the Collective handler
    resolves them: ``(reads, writes, [(op, send ptr, recv ptr)])``. Raises the error of an
    unusable buffer (freed, stale, or written by an operation known to have failed) before
    anything of the batch is issued."""
    reads, writes, ptrs = [], [], []
    for i, o in enumerate(msg.ops):
        s = r = None
        if o.send is not None:
            s = ctx.resolve(o.send, f"ops[{i}].send")
            v = s.verdict
            if v is not None and v.decided and v.error is not None:
                raise dependency_error(s.ref, v.error)
            reads.append(s)
        if o.recv is not None:
            r = ctx.resolve_out(o.recv, f"ops[{i}].recv")
            writes.append(r)
        ptrs.append((o, s.ptr if s is not None else 0, r.ptr if r is not None else 0))
    return tuple(reads), tuple(writes), ptrs


class _Batch:
    """One issued batch: its members' futures, the future the caller holds, its deadline."""

    def __init__(self, comm: int, inner: list[tuple[int, Future]], out: CollectiveFuture,
                 deadline: float) -> None:
        self.comm = comm
        self.inner = inner
        self.out = out
        self.deadline = deadline
        self.started = time.monotonic()
        self.remaining = len(inner)
        self.finished = False


def _refuse(out: CollectiveFuture, exc: BaseException) -> None:
    """Fail a batch that was never issued (``out``, and so every rank's future) with
    ``exc``."""
    if not out.done():
        out.set_exception(exc)


def _fail_all(out: CollectiveFuture, exc: CollectiveError) -> None:
    """Fail ``out`` with ``exc``; each rank's future with a CollectiveError naming it."""
    if not out.done():
        out._rank_errors = True
        out.set_exception(exc)


class DeviceGroup:
    """Devices opened together (rank i = ``group[i]``), closed together."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self.devices = list(devices)
        self._comms: list[Communicator] = []
        self._topology: Topology | None = None

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, i: int) -> Device:
        return self.devices[i]

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices)

    def stats(self) -> list[Any]:
        """Every member's :class:`~gpumsg.service._stats.DeviceLoad`, in rank order."""
        return [f.result() for f in [d.stats() for d in self.devices]]

    def topology(self) -> Topology:
        """Which members can access each other's memory and how (asked once per pair; see
        :class:`~gpumsg.multi._peer.Topology`)."""
        if self._topology is None:
            self._topology = topology(self.devices)
        return self._topology

    def enable_peer_access(self) -> list[list[bool]]:
        """Enable peer access between every pair of members that can be peers, each on the
        accessing device's own thread; ``out[i][j]``: device i can now access j's memory.
        (``copy_peer`` does this for its pair on first use.)"""
        n = len(self.devices)
        futs = [[enable_peer_access(a, b) if i != j else None for j, b in enumerate(self.devices)]
                for i, a in enumerate(self.devices)]
        return [[True if i == j else bool(futs[i][j].result()) for j in range(n)]
                for i in range(n)]

    def nccl(self, timeout: float = 60.0) -> Communicator:
        """A communicator over the whole group (see :class:`Communicator`)."""
        comm = Communicator(self.devices, timeout=timeout)
        self._comms.append(comm)
        return comm

    def least_loaded(self, timeout: float = 0.5) -> Device:
        """The open member with the fewest queued plus in-flight operations, then the most free
        memory (each member's ``Stats``, asked of all at once). A member that does not answer
        within ``timeout`` s (its device thread is busy) ranks after every one that does.
        Raises GpuError when no member is open."""
        asked = []
        for d in self.devices:
            if d.closed:
                continue
            try:
                asked.append((d, d.stats()))
            except GpuError:
                continue
        if not asked:
            raise GpuError("no member of the group is serving")
        deadline = time.monotonic() + timeout
        best, key = None, None
        for i, (d, f) in enumerate(asked):
            try:
                s = f.result(timeout=max(0.0, deadline - time.monotonic()))
                k: tuple = (0, s.queue_depth + s.ops_in_flight, -s.free_bytes, i)
            except Exception:  # noqa: BLE001 - busy or failing: last resort
                k = (1, 0, 0, i)
            if key is None or k < key:
                best, key = d, k
        return best  # type: ignore[return-value]

    def submit(self, fn: Callable[[Device], Any]) -> Any:
        """Call ``fn(device)`` on the least loaded member (see :meth:`least_loaded`) and return
        what it returns (typically a Future of work it sent there)."""
        return fn(self.least_loaded())

    def close(self, timeout: float | None = None) -> None:
        for c in self._comms:
            with contextlib.suppress(Exception):
                c.close()
        for d in self.devices:
            d.close(timeout)

    def __enter__(self) -> DeviceGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_devices(ordinals: Sequence[int] | None = None, backend: str = "auto",
                 **open_device_kwargs: Any) -> DeviceGroup:
    """Open a :class:`DeviceGroup`: ``ordinals`` (default: every device that
    ``devices(backend)`` lists: the GPUs, or the configured simulated devices), each with
    ``open_device(ordinal, backend, ...)``."""
    if ordinals is None:
        ordinals = [d["ordinal"] for d in devices(backend)]
        if not ordinals:
            raise InvalidMessage(f"open_devices: backend {backend!r} offers no device here",
                                 field="backend")
    opened: list[Device] = []
    try:
        for o in ordinals:
            opened.append(open_device(o, backend, **open_device_kwargs))
    except BaseException:
        for d in opened:
            d.close()
        raise
    return DeviceGroup(opened)
