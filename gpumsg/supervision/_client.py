"""Process isolation: the supervisor of a worker process (``open_device(isolation="process")``).

The client side of a process-isolated device. It keeps every message it sent until its reply
arrives, in order. A worker is replaced when

* its context is poisoned (the worker says so: the 700-719 family), or
* it dies (the pipe reaches end of file: killed, crashed, ``InjectFault("exit")``), or
* an operation runs past the watchdog limit (``watchdog=`` seconds; the worker is killed).

Then the messages the worker had started fail (``ContextPoisoned``, ``WorkerDied`` or
``OperationTimeout``), the generation moves on (old buffers raise ``GpuRefStale``;
``WatchGeneration`` subscribers hear of it), a new worker is spawned, the client's shared-memory
segments are registered with it, and every message that was queued but never started is sent
again in order. A buffer whose ``Alloc`` had not started yet belongs to the new generation: its
allocation is among the replayed messages. More than ``max_restarts`` restarts within
``restart_window`` seconds close the device for good (``Unrecoverable``).

With ``standby=True`` (the default) a spare worker, started and initialized for the next
generation ahead of time, takes over at once: recovery does not wait for a new process and
CUDA context. The spare holds a CUDA context of its own meanwhile.

Workers are forked by a fork server (``multiprocessing``'s ``forkserver``): a fresh interpreter,
started once, that imports gpumsg and never touches CUDA. A worker then starts with gpumsg
imported (tens of ms, where a spawned interpreter takes a second to import it on the H100's
host) and spends its start on the CUDA context (0.3 s). That is what faults one right after
another wait for: the standby of the previous recovery is still starting.
``GPUMSG_WORKER_START=spawn`` spawns each worker instead (:func:`configured_start_method`).
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..config import environ as config_environ
from ..config import setting
from ..errors import (
    DeviceClosed,
    GpuError,
    InvalidMessage,
    OperationTimeout,
    Unrecoverable,
    WorkerDied,
)
from ..messages._base import BufRef, HostRef
from ..messages.device import (
    Alloc,
    OpenLibraries,
    RegisterHostMemory,
    UnregisterHostMemory,
    WatchGeneration,
)
from ..messages.nvrtc import LoadModule
from ._codec import register, registered
from ._shm import SharedHostPool, SharedSegment, close_quietly
from ._wire import Receiver, Sender, decode_replies, dumps, immutable, loads, message_frame
from ._worker import STOP_SEQ, configured_settle, configured_spin, worker_main

__all__ = ["ProcessWorker"]

_START_TIMEOUT = 120.0
#: the pickles of messages sent, by the message's identity (a message object sent again, as the
#: client's memoized SGEMMs are, is not pickled again): at most this many, of at most this size
_PICKLED_MAX = 512
_PICKLED_BYTES = 1024
_STOP_FRAME = message_frame(STOP_SEQ, dumps(None))
#: a caller waiting for an answer reads the socket itself (see ProcessWorker._lead); False
#: leaves every answer to the reader thread (a switch for measuring the difference)
LEAD = True
#: after a lead ends, the reader thread stays off the socket until leads have stopped for this
#: long (seconds), unless the leader left answers outstanding: a caller doing round trips
#: back to back then never wakes it. 0: the reader returns to the socket after every lead.
#: The cost: an answer that nobody leads for, sent within this time after a lead, is read up
#: to this much later (by the reader; at once by any caller that waits).
PARK_SECONDS = 500e-6
#: a leader sleeps in ``poll`` for at most this long before it looks at its future again (its
#: future is answered by what it reads; this bounds the wait if something else answers it)
_LEAD_SLICE = 0.05
_EMPTY_PICKLES: dict[type, bytes] = {}
_HAS_FIELDS: set[type] = set()


#: PF_EXITING in /proc/<pid>/task/<tid>/stat's flags: the task has begun to exit
_PF_EXITING = 0x4


def _stopped_running(pid: int | None) -> bool | None:
    """True when no thread of process ``pid`` can run user code any more (exiting, a zombie or
    gone), False while one can, None where /proc cannot tell."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if fields[0] not in "ZXx" and not int(fields[6]) & _PF_EXITING:
            return False
    return True


#: what starts a worker: ``forkserver`` (a clean server process, started once, that has imported
#: the worker's modules and never touched CUDA, forks each worker) or ``spawn`` (a new
#: interpreter that imports everything itself: about a second more per worker on the H100's host)
START_METHODS = ("forkserver", "spawn")
#: modules the fork server imports once, so that a forked worker starts with them imported
#: (adding ``cuda.bindings.driver``, 54 ms to import, showed no gain in a worker's start)
_PRELOAD = ["gpumsg.supervision._worker"]


def configured_start_method() -> str:
    """How workers start: ``GPUMSG_WORKER_START`` (``forkserver`` or ``spawn``); unset,
    ``forkserver`` where the platform has it, else ``spawn``. Neither ever forks a process that
    may hold CUDA: the fork server is a fresh interpreter that imports gpumsg and nothing else
    runs there. Raises InvalidMessage for any other value."""
    value = (setting("GPUMSG_WORKER_START") or "").strip().lower()
    if not value:
        have = multiprocessing.get_all_start_methods()
        return "forkserver" if "forkserver" in have else "spawn"
    if value not in START_METHODS:
        raise InvalidMessage(f"GPUMSG_WORKER_START must be one of {START_METHODS}, got "
                             f"{value!r}", field="GPUMSG_WORKER_START")
    return value


def _start_context(method: str) -> Any:
    """The multiprocessing context for ``method``. The fork server is the interpreter's own
    (one per process, shared with the application's forkserver workers): gpumsg's modules are
    added to its preload list, keeping what the application put there, and take effect only
    if the server starts after this."""
    mp = multiprocessing.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        # the list has no public getter; without it, keep multiprocessing's default
        have = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
        if any(name not in have for name in _PRELOAD):
            mp.set_forkserver_preload(have + [n for n in _PRELOAD if n not in have])
    return mp


class _Worker:
    """One worker process, its socket, and what was sent to it."""

    def __init__(self, process: Any, sock: socket.socket, counter: shared_memory.SharedMemory,
                 generation: int) -> None:
        self.process = process
        self.sock = sock
        self.tx = Sender(sock, f"gpumsg-client-{generation}")
        self.rx = Receiver(sock)
        self.generation = generation
        self._counter_shm = counter
        self._counter = np.frombuffer(counter.buf, np.int64, 1)
        #: sequence numbers, in the order they went down the socket
        self.sent: list[int] = self.tx.sent
        self.first_open = 0  # index into sent: everything before it has been answered
        self.props: Any = None
        self.kind = ""
        self.said_bye = False
        self.reader: threading.Thread | None = None
        #: whoever reads the socket and answers what it read holds this: the reader thread,
        #: or a caller waiting for its answer (ProcessWorker._lead)
        self.rx_lock = threading.Lock()
        #: callers leading or queued to lead; the reader stays off the socket while any are
        self.leaders = 0
        self.lead_cond = threading.Condition(threading.Lock())
        #: a leader wakes the reader out of its poll, to step aside (a closed socket object
        #: refuses a late write instead of writing to whatever reuses its descriptor)
        self.kick_rx, self.kick_tx = socket.socketpair()
        self.kick_rx.setblocking(False)
        self.kick_tx.setblocking(False)
        #: a leader read a frame that did not decode: the reader treats the worker as dead
        self.broken = False
        #: the reader is in (or on its way into) its poll of the socket: a leader must kick it
        self.polling = True
        #: when the last lead ended (time.monotonic); -inf: the reader is wanted at once
        self.lead_end = float("-inf")

    def kick(self) -> None:
        try:
            self.kick_tx.send(b"\0")
        except OSError:  # full (the reader will wake anyway) or closed (it has exited)
            pass

    def started(self) -> int:
        """How many of the sent messages the worker has started."""
        return int(self._counter[0]) if self._counter is not None else 0

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.tx.close()
        try:
            self.sock.close()
        except OSError:
            pass

    def stop_running(self) -> bool:
        """SIGKILL, waiting only until the process can run none of its own code (Linux: every
        thread is marked exiting): its start counter is final then. Reaping (:meth:`kill`)
        waits for the driver to tear the dead process's CUDA context down, hundreds of ms on a
        GPU, which recovery need not wait for. False where /proc cannot tell: then it has
        been reaped here."""
        if self.process.is_alive():
            self.process.kill()
        pid = self.process.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            done = _stopped_running(pid)
            if done is None:
                break
            if done:
                return True
            time.sleep(0.0005)
        self.kill()
        return False

    def release(self) -> None:
        self.kick_rx.close()  # the reader, if any, has its own wake-up: the socket's end
        self.kick_tx.close()
        self._counter = None  # type: ignore[assignment]
        # unlink first: close() raises BufferError while a view is alive, and the name in
        # /dev/shm must go in any case (the mapping goes with the last view)
        try:
            self._counter_shm.unlink()
        except (FileNotFoundError, OSError):
            pass
        try:
            close_quietly(self._counter_shm)
        except OSError:
            pass


class ProcessWorker:
    """The transport and supervisor behind a process-isolated :class:`~gpumsg.Device`."""

    def __init__(self, backend: Any, state: Any, memory: Any, trace: Any,
                 allow_fault_injection: bool, shutdown_timeout: float | None,
                 pinned_staging_limit: int, watchdog: float | None = None,
                 max_restarts: int = 3, restart_window: float = 60.0,
                 standby: bool = True) -> None:
        if trace is not None:
            raise InvalidMessage("trace hooks run on the device's own threads, which with "
                                 "isolation='process' live in another process; trace with "
                                 "isolation='thread'", field="trace")
        if not isinstance(backend, str):
            raise InvalidMessage("isolation='process' takes a backend name ('auto', 'cuda' or "
                                 "'sim'): the worker process builds its own", field="backend")
        if watchdog is not None and not watchdog > 0:
            raise InvalidMessage("watchdog must be a positive number of seconds",
                                 field="watchdog")
        self._state = state
        self._config = {"ordinal": state.ordinal, "token": state.token, "backend": backend,
                        "memory": memory, "allow_fault_injection": allow_fault_injection,
                        "shutdown_timeout": shutdown_timeout,
                        "pinned_staging_limit": pinned_staging_limit,
                        "spin": configured_spin(), "settle": configured_settle()}
        self._lock = threading.RLock()
        self._pending: dict[int, list] = {}  # seq -> [message, reply], in seq order
        self._pickled: dict[int, tuple[Any, bytes]] = {}  # id(message) -> (message, pickle)
        self._seq = itertools.count(1)
        self._closing = False
        self._gave_up = False
        self._restarts: deque[float] = deque()
        self.max_restarts = max_restarts
        self.restart_window = restart_window
        self.watchdog = watchdog
        self.restart_times: list[float] = []  # seconds from each fault to the new worker
        #: each worker's start, standbys included, in seconds: ``process`` (a fork, or a new
        #: interpreter and its imports, up to the worker's entry point), ``backend`` (the
        #: backend made: for CUDA, cuInit), ``context`` (the device context: the CUDA context,
        #: streams, memory pool) and ``total`` (start to ready, as the supervisor saw it)
        self.startup_times: list[dict[str, float]] = []
        #: the libraries the device has opened, in order (each standby opens them too)
        self._opened: list[str] = []
        #: the modules loaded on the device (user kernels, the array layer's generated ones):
        #: each new worker loads them before the replayed messages that launch their kernels,
        #: and the standby ahead of time
        self._modules: dict[tuple, Any] = {}
        #: called with each BufRef moved to a new generation (the Device updates its handle)
        self.rebase: Callable[[BufRef], None] | None = None
        self._pool = SharedHostPool(self._register_block, self._unregister_block,
                                    staging_limit=pinned_staging_limit)
        self._recovery: threading.Thread | None = None
        self._reapers: list[threading.Thread] = []  # reaping replaced workers (kill_now)
        self._lead_bound = self._lead  # given to every future sent (one bound method)
        #: seconds a leading caller polls the socket before it sleeps in ``poll``: the same
        #: spin as the worker's (an answer that comes within it needs no wake-up)
        self.lead_spin = self._config["spin"]
        self.start_method = configured_start_method()
        self._worker: _Worker | None = self._spawn(state.generation)
        self.props = self._worker.props
        self.kind = self._worker.kind
        self.standby = standby
        self._spare: _Worker | None = None
        self._spare_thread: threading.Thread | None = None
        if standby:
            self._start_spare(state.generation + 1)
        if watchdog is not None:
            threading.Thread(target=self._watch, name=f"gpumsg-watchdog-{state.ordinal}",
                             daemon=True).start()

    # -- the transport interface of Device ------------------------------------------------------
    def host_pool(self, device: Any) -> SharedHostPool:
        return self._pool

    def submit(self, msg: Any, reply: Any) -> None:
        if type(msg) is WatchGeneration:  # generations are the supervisor's business
            if reply is not None:
                self._state.watch(msg.after, reply)
            return
        pickled = self._pickle(msg)
        if getattr(reply, "_lead", 0) is None:  # a GpuFuture: its waiter may read the answer
            reply._lead = self._lead_bound
        with self._lock:
            if type(msg) is LoadModule and (msg.key, msg.symbols) not in self._modules:
                self._modules[(msg.key, msg.symbols)] = msg
                if self._spare is not None:
                    self._send(self._spare, [(next(self._seq), msg)])
            seq = next(self._seq)
            self._pending[seq] = [msg, reply]
            worker = self._worker
        # Sent outside the lock, so that the reader thread does not wait for the system call
        # (one thread's messages still go in the order it posted them). A worker replaced
        # meanwhile has been killed first: what it did not start is replayed from _pending.
        if worker is not None:
            try:
                worker.tx.send(message_frame(seq, pickled), seq)
            except OSError:
                pass  # the worker is gone: its reader notices; this is replayed

    def _pickle(self, msg: Any) -> bytes:
        """The pickle of ``msg``; a message object sent before is not pickled again."""
        hit = self._pickled.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        cls = type(msg)
        data = _EMPTY_PICKLES.get(cls)
        if data is not None:
            return data
        if not registered(cls):
            register(cls)
        if cls not in _HAS_FIELDS:
            # a message without fields (Stats, Synchronize): every one pickles the same
            if getattr(cls, "__dataclass_fields__", None) == {} and \
                    not hasattr(msg, "__dict__"):
                data = _EMPTY_PICKLES[cls] = dumps(msg)
                return data
            _HAS_FIELDS.add(cls)
        try:
            data = dumps(msg)
        except Exception as exc:  # noqa: BLE001 - said at the call site, nothing was queued
            raise InvalidMessage(f"{type(msg).__name__} cannot be sent to a worker process: "
                                 f"{exc}") from exc
        # a message is immutable, but an array or a list inside one is not: those are pickled
        # each time
        if len(data) <= _PICKLED_BYTES and immutable(data):
            cache = self._pickled
            if len(cache) >= _PICKLED_MAX:
                cache.clear()
            cache[id(msg)] = (msg, data)
        return data

    def stop(self) -> None:
        with self._lock:
            self._closing = True
            worker = self._worker
            if worker is not None:
                try:
                    worker.tx.send(_STOP_FRAME)
                except OSError:
                    pass

    def join(self, timeout: float | None) -> bool:
        try:
            return self._join(timeout)
        finally:
            self._pool.close()  # the client's segments go whatever happened above

    def _join(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._recovery is not None:
            self._recovery.join(timeout)
        self._drop_spare()
        worker = self._worker
        clean = True
        if worker is not None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            worker.process.join(left)
            if worker.process.is_alive():
                clean = False
            worker.kill()
            if worker.reader is not None:
                worker.reader.join(5)
            worker.release()
        for reaper in self._reapers:
            reaper.join(30)
        with self._lock:
            leftovers, self._pending = list(self._pending.values()), {}
        err = self._state.refusal if not self._state.accepting else DeviceClosed("device closed")
        for _msg, reply in leftovers:
            if reply is not None:
                reply.set_exception(err)
        return clean

    # -- workers -----------------------------------------------------------------------------------
    def _spawn(self, generation: int) -> _Worker:
        mp = _start_context(self.start_method)
        parent, child = socket.socketpair()
        counter = SharedSegment(create=True, size=8)
        np.frombuffer(counter.buf, np.int64, 1)[0] = 0
        # the environment as it is now: a forked worker inherits the fork server's, as it was
        # when the server started
        config = dict(self._config, generation=generation, counter=counter.name,
                      environ={**config_environ(), **os.environ})
        process = mp.Process(target=worker_main, args=(child, config), daemon=True,
                             name=f"gpumsg-worker-{self._state.ordinal}")
        asked = time.monotonic()
        process.start()
        child.close()
        worker = _Worker(process, parent, counter, generation)
        if not select.select([parent], [], [], _START_TIMEOUT)[0]:
            worker.kill()
            worker.release()
            raise WorkerDied(f"device {self._state.ordinal}: the worker process did not start "
                             f"within {_START_TIMEOUT:.0f} s")
        try:
            frames = worker.rx.frames()
            first = loads(frames[0])
        except (EOFError, OSError) as exc:
            worker.kill()
            worker.release()
            raise WorkerDied(f"device {self._state.ordinal}: the worker process exited while "
                             f"starting (exit code {process.exitcode})") from exc
        if first[0] == "failed":
            worker.kill()
            worker.release()
            raise first[1]
        worker.props, worker.kind = first[1], first[2]
        entered, made_backend, made_context = first[3]
        self.startup_times.append({
            "process": entered - asked, "backend": made_backend - entered,
            "context": made_context - made_backend, "total": time.monotonic() - asked})
        worker.reader = threading.Thread(target=self._read, args=(worker, frames[1:]),
                                         daemon=True,
                                         name=f"gpumsg-reader-{self._state.ordinal}")
        worker.reader.start()
        return worker

    def _start_spare(self, generation: int) -> None:
        """Start a standby worker for ``generation`` in the background."""
        def run() -> None:
            try:
                spare = self._spawn(generation)
            except BaseException:  # noqa: BLE001 - recovery spawns one itself then
                return
            with self._lock:
                if self._closing or self._gave_up:
                    stale = spare
                else:
                    self._spare, stale = spare, None
                    if self._opened:  # the libraries the device uses, opened while it waits
                        self._send(spare, [(next(self._seq), OpenLibraries(tuple(self._opened)))])
                    # and its modules (loading one loaded already reuses it)
                    self._send(spare, [(next(self._seq), m) for m in self._modules.values()])
            if stale is not None:
                stale.kill()
                stale.release()

        # Started before it is published: a give-up or a recovery on another thread joins
        # whatever thread it finds here, and joining one not yet started raises.
        thread = threading.Thread(target=run, daemon=True, name="gpumsg-standby")
        thread.start()
        self._spare_thread = thread

    def _library_opened(self, worker: _Worker, name: str) -> None:
        """The active worker made its handle of library ``name``: the standby makes its own now,
        so that after a recovery the first call does not wait for it (cuBLAS's: 150-190 ms on
        the H100). The standby's own notices are not the device's."""
        with self._lock:
            if worker is not self._worker or name in self._opened:
                return
            self._opened.append(name)
            if self._spare is not None:
                self._send(self._spare, [(next(self._seq), OpenLibraries((name,)))])

    def _take_spare(self, generation: int) -> _Worker | None:
        """The standby worker, if it was made for ``generation`` (waits for one starting)."""
        if self._spare_thread is not None:
            self._spare_thread.join(_START_TIMEOUT)
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None and (spare.generation != generation or
                                  not spare.process.is_alive()):
            spare.kill()
            spare.release()
            spare = None
        return spare

    def _drop_spare(self) -> None:
        if self._spare_thread is not None:
            self._spare_thread.join(_START_TIMEOUT)
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.kill()
            spare.release()

    def _send(self, worker: _Worker, items: list) -> None:
        """Send ``(seq, message)`` items, in one write (the caller holds the lock)."""
        for seq, msg in items:
            try:
                worker.tx.send(message_frame(seq, self._pickle(msg)), seq)
            except OSError:
                return  # the worker is gone: its reader notices; these are replayed

    def _answer(self, worker: _Worker, frames: list) -> bool:
        """Answer the futures of frames read from ``worker`` (a frame is a batch of answers,
        taken from the pending table under one lock) and hear its notices; False when a frame
        does not decode (the worker is then treated as dead). The caller holds ``rx_lock``."""
        for frame in frames:
            try:
                batch = decode_replies(frame)
            except Exception:  # noqa: BLE001 - a frame that does not decode: fail closed
                return False
            with self._lock:
                pop = self._pending.pop
                got = [(key, value, pop(key if key > 0 else -key, None))
                       for key, value in batch]
            for key, value, entry in got:
                if entry is not None:
                    reply = entry[1]
                    if reply is not None:
                        try:
                            if key > 0:
                                reply.set_result(value)
                            else:
                                reply.set_exception(value)
                        except Exception:  # noqa: BLE001 - answered already: keep reading
                            pass
                elif key == 0:
                    if value[0] == "poisoned":
                        self._fault(worker, "poisoned", value[1])
                    elif value[0] == "opened":
                        self._library_opened(worker, value[1])
                    elif value[0] == "bye":
                        worker.said_bye = True
        return True

    def _read(self, worker: _Worker, frames: list) -> None:
        """The reader thread of one worker: reads and answers whatever arrives while no caller
        is leading (:meth:`_lead`), and tells a dead worker from one that said goodbye."""
        rx, lock, cond = worker.rx, worker.rx_lock, worker.lead_cond
        with lock:
            ok = self._answer(worker, frames)
        poller = select.poll()
        poller.register(worker.sock, select.POLLIN)
        poller.register(worker.kick_rx, select.POLLIN)
        drain = worker.kick_rx.recv
        try:
            while ok:
                with cond:
                    self._park(worker)
                    worker.polling = True
                if worker.broken:
                    ok = False
                    break
                poller.poll()  # the socket or a leader's kick
                try:
                    drain(4096)
                except OSError:
                    pass
                if worker.leaders:
                    continue
                with lock:
                    try:
                        frames = rx.frames(False)
                    except (EOFError, OSError):
                        break
                    ok = self._answer(worker, frames)
                frames = None  # type: ignore[assignment]  (its replies keep buffers alive)
        finally:
            worker.kick_rx.close()
            worker.kick_tx.close()
        if not ok:
            worker.said_bye = False  # the worker is replaced as if it had died
        if not worker.said_bye:
            self._fault(worker, "died", None)

    @staticmethod
    def _park(worker: _Worker) -> None:
        """The reader (holding ``lead_cond``) waits while callers lead, and until leads have
        stopped for :data:`PARK_SECONDS` (a lead that leaves answers outstanding, or a broken
        socket, ends the wait at once)."""
        cond = worker.lead_cond
        worker.polling = False
        while not worker.broken:
            park = PARK_SECONDS
            if worker.leaders:
                cond.wait(park or None)
                continue
            quiet = time.monotonic() - worker.lead_end
            if quiet >= park:
                return
            cond.wait(park - quiet)

    def _lead(self, fut: Any, timeout: float | None) -> float | None:
        """``fut.result()`` is about to wait: read the socket in this thread until ``fut`` is
        answered (answering whatever else arrives too), so that the answer needs no hand-over
        from the reader thread, one wake-up less per round trip. Before each sleep in ``poll``
        it polls without waiting for ``lead_spin`` seconds, so that an answer coming soon needs
        no wake-up either. Returns what is left of ``timeout``. Gives up, leaving the rest to
        the reader thread, when the socket ends or fails (the reader then handles the worker's
        death) or a frame does not decode."""
        worker = self._worker
        if worker is None or not LEAD or worker.broken:
            return timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        cond = worker.lead_cond
        with cond:
            worker.leaders += 1
            polling = worker.polling
        try:
            if polling:  # else the reader is parked, off the socket
                worker.kick()
            if not worker.rx_lock.acquire(True, -1 if timeout is None else max(0.0, timeout)):
                return 0.0
            try:
                rx, spin = worker.rx, self.lead_spin
                while not fut.done():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    if not (spin and rx.spin(spin if left is None else min(spin, left))) \
                            and not rx.wait(_LEAD_SLICE if left is None else
                                            min(left, _LEAD_SLICE)):
                        continue
                    try:
                        frames = rx.frames(False)
                    except (EOFError, OSError):
                        break  # the reader thread reads it too, and handles it
                    if not self._answer(worker, frames):
                        worker.broken = True
                        break
            finally:
                worker.rx_lock.release()
        finally:
            with cond:
                worker.leaders -= 1
                if not worker.leaders:
                    if self._pending or worker.broken or not PARK_SECONDS:
                        worker.lead_end = float("-inf")  # answers outstanding: read them now
                        cond.notify_all()
                    else:
                        worker.lead_end = time.monotonic()
            if worker.broken:
                worker.kick()
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _watch(self) -> None:
        """The watchdog: the oldest started, unanswered message may not stay so for longer
        than the limit."""
        limit = self.watchdog
        assert limit is not None
        watched, since = None, 0.0
        while not self._closing and not self._gave_up:
            time.sleep(min(limit / 4, 0.25))
            with self._lock:
                worker = self._worker
                if worker is None:
                    watched = None
                    continue
                started = worker.started()
                oldest = None
                while worker.first_open < min(started, len(worker.sent)):
                    seq = worker.sent[worker.first_open]
                    if seq in self._pending:
                        oldest = seq
                        break
                    worker.first_open += 1
            now = time.monotonic()
            if oldest != watched:
                watched, since = oldest, now
            elif oldest is not None and now - since > limit:
                self._fault(worker, "timeout", None)
                watched = None

    # -- recovery ----------------------------------------------------------------------------------
    def _fault(self, worker: _Worker, kind: str, error: BaseException | None) -> None:
        with self._lock:
            if worker is not self._worker or self._closing:
                return
            self._worker = None  # from now on messages wait for the next worker
            t0 = time.monotonic()
        self._recovery = threading.Thread(target=self._recover, args=(worker, kind, error, t0),
                                          daemon=True, name="gpumsg-recovery")
        self._recovery.start()

    def _recover(self, worker: _Worker, kind: str, error: BaseException | None,
                 t0: float) -> None:
        reap_later = worker.stop_running()
        started = worker.started()
        worker.release()
        ordinal = self._state.ordinal
        if kind == "poisoned":
            err: GpuError = error  # type: ignore[assignment]
        elif kind == "died":
            err = WorkerDied(f"device {ordinal}: the worker process died (exit code "
                             f"{worker.process.exitcode}) while this operation was in flight; "
                             "a new worker replaces it")
        else:
            err = OperationTimeout(f"device {ordinal}: an operation ran past the watchdog limit "
                                   f"of {self.watchdog} s; the worker was replaced")
        in_flight = set(worker.sent[:started])
        with self._lock:
            failed = [self._pending.pop(seq) for seq in list(self._pending) if seq in in_flight]
        # A copy between a host block and the device may still be moving until the dead
        # context is torn down: its reply (which gives the block back) waits for the reaping.
        late = []
        for msg, reply in failed:
            if reply is None:
                continue
            if reap_later and (type(getattr(msg, "src", None)) is HostRef
                               or type(getattr(msg, "dst", None)) is HostRef):
                late.append(reply)
            else:
                reply.set_exception(err)
        if reap_later:
            def reap() -> None:
                worker.kill()
                for reply in late:
                    reply.set_exception(err)

            reaper = threading.Thread(target=reap, daemon=True, name="gpumsg-reaper")
            reaper.start()
            self._reapers.append(reaper)
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > self.restart_window:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            self._give_up(f"its worker failed {len(self._restarts) + 1} times within "
                          f"{self.restart_window:.0f} s (last: {err})")
            return
        self._restarts.append(now)
        generation = self._state.generation + 1
        new = self._take_spare(generation) if self.standby else None
        self._state.bump(generation)
        if new is None:
            try:
                new = self._spawn(generation)
            except BaseException as exc:  # noqa: BLE001
                self._give_up(f"a new worker could not start: {exc}")
                return
        with self._lock:
            if self._closing:
                new.kill()
                new.release()
                return
            blocks = self._pool.blocks()
            items = [(next(self._seq), RegisterHostMemory(b.id, b.handle.name, b.nbytes))
                     for b in blocks]
            # the device's modules, before the replayed launches (a standby has them already:
            # loading again reuses them)
            items += [(next(self._seq), m) for m in self._modules.values()]
            told = {b.id for b in blocks}
            moved: dict[int, BufRef] = {}
            for seq, entry in list(self._pending.items()):
                msg = entry[0]
                if type(msg) is RegisterHostMemory and msg.block in told:
                    # told above: a second registration would map the segment twice
                    del self._pending[seq]
                    if entry[1] is not None:
                        entry[1].set_result(None)
                    continue
                entry[0] = self._rebase_message(msg, generation, moved)
                items.append((seq, entry[0]))
            self._send(new, items)
            self._worker = new
            self.restart_times.append(time.monotonic() - t0)
            # Under the lock: the new worker may die at once (a replayed fault), and the
            # recovery for that, which may give up and drop the spare, begins under this lock.
            if self.standby:
                self._start_spare(generation + 1)

    def _rebase_message(self, msg: Any, generation: int, moved: dict[int, BufRef]) -> Any:
        """A message that never started, for the new generation: an allocation that had not
        happened happens there; later messages name the moved buffer."""
        if type(msg) is Alloc:
            ref = msg.out
            if ref.generation == generation:
                return msg
            new = dataclasses.replace(ref, generation=generation)
            moved[ref.id] = new
            if self.rebase is not None:
                self.rebase(new)
            return Alloc(new)
        if not moved:
            return msg
        changes = {}
        for name in type(msg).__buffers__:
            value = getattr(msg, name)
            if type(value) is BufRef and value.id in moved:
                changes[name] = moved[value.id]
            elif isinstance(value, tuple) and any(
                    type(v) is BufRef and v.id in moved for v in value):
                changes[name] = tuple(moved.get(v.id, v) for v in value)
        return dataclasses.replace(msg, **changes) if changes else msg

    def _give_up(self, reason: str) -> None:
        err = Unrecoverable(f"device {self._state.ordinal} is closed for good: {reason}")
        self._gave_up = True
        self._drop_spare()
        self._state.refuse(err)
        with self._lock:
            leftovers, self._pending = list(self._pending.values()), {}
            self._worker = None
        for _msg, reply in leftovers:
            if reply is not None:
                reply.set_exception(err)
        self._state.drop_watchers(err)

    # -- shared memory ---------------------------------------------------------------------------
    def _register_block(self, block: Any) -> None:
        self.submit(RegisterHostMemory(block.id, block.handle.name, block.nbytes), None)

    def _unregister_block(self, block: Any) -> None:
        if not self._closing and not self._gave_up:
            self.submit(UnregisterHostMemory(block.id), None)
