"""The caller's side of ``gpumsg.ray``: :class:`RemoteDevice` (the Device API over a Ray actor),
:class:`RemoteBuffer`, :class:`RemoteFuture`, :class:`RemoteDeviceGroup` and
:class:`RemoteCommunicator`.

Every call is forwarded by name (``rd.to_device(x)``, ``rd.cublas.gemm(a, b, c)``, ...): remote
buffers and futures in the arguments travel as :class:`~gpumsg.ray._handles.Handle` values,
NumPy arrays through Ray's object store (arguments over 100 KiB are put there by Ray), and the
result comes back as a :class:`RemoteFuture` (a ``concurrent.futures.Future`` over the call's
``ObjectRef.future()``). Errors are the actor's gpumsg errors, re-raised as the same types; an
actor that dies with the call in flight fails it with :class:`~gpumsg.errors.WorkerDied`.

Generations: the device's ``generation`` starts at 0 and grows each time the actor is seen to
die or come back as a new life (``max_restarts``). A remote buffer belongs to the generation it
was made in; using it afterwards raises :class:`~gpumsg.errors.GpuRefStale` at the call site
(or on the actor, when the caller had not yet seen the restart).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

import numpy as np
import ray

from ..client._buffers import _FINISHED, GpuFuture
from ..errors import CollectiveError, GpuError, GpuRefStale, InvalidMessage, WorkerDied
from ..messages.nccl import CollOp, check_batch
from ._actor import THREADS, DeviceActor
from ._handles import Handle, pack, unpack

__all__ = ["RemoteDevice", "RemoteBuffer", "RemoteFuture", "RemoteDeviceGroup",
           "RemoteCommunicator", "open_devices"]

#: this client's prefix of call ids: keys minted here never collide with another client's
_CLIENT = uuid.uuid4().hex[:12]


def _translate(exc: BaseException, what: str) -> BaseException:
    """A Ray failure as the gpumsg error the caller expects."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and isinstance(exc, ray.exceptions.RayTaskError):
        return cause  # the actor's own error, the same type
    if isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)):
        return WorkerDied(f"{what}: the device actor died with the call in flight ({exc})")
    if isinstance(exc, ray.exceptions.RayError):
        return GpuError(f"{what}: {type(exc).__name__}: {exc}")
    return exc


class RemoteBuffer:
    """A buffer on a device actor. Pass it to that device's calls; ``free()`` releases it.
    Using it after a free or after the actor restarted raises GpuRefStale."""

    __slots__ = ("device", "key", "incarnation", "generation", "shape", "dtype", "order",
                 "_freed", "__weakref__")

    def __init__(self, device: RemoteDevice, h: Handle, generation: int) -> None:
        self.device = device
        self.key = h.key
        self.incarnation = h.incarnation
        self.generation = generation
        self.shape = tuple(h.shape) if h.shape is not None else None
        self.dtype = np.dtype(h.dtype) if h.dtype is not None else None
        self.order = h.order
        self._freed = False

    @property
    def handle(self) -> Handle:
        if self._freed:
            raise GpuRefStale(f"remote buffer {self.key} was freed")
        if self.generation != self.device.generation:
            raise GpuRefStale(f"remote buffer {self.key} is from generation {self.generation}; "
                              f"actor {self.device.index} is at {self.device.generation} (it "
                              "died or restarted)")
        return Handle(self.key, self.incarnation)

    def is_stale(self) -> bool:
        return self._freed or self.generation != self.device.generation

    @property
    def ndim(self) -> int:
        return len(self.shape or ())

    @property
    def size(self) -> int:
        return int(np.prod(self.shape or (), dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * (self.dtype.itemsize if self.dtype is not None else 0)

    def free(self) -> Future:
        """Release it on the actor (stream-ordered there, like ``GpuBuffer.free``)."""
        fut = self.device._call("free", (self,), {})
        self._freed = True
        return fut

    def __del__(self) -> None:
        if not self._freed:
            self._freed = True
            try:
                self.device._drop(self.key, self.generation)
            except Exception:  # noqa: BLE001 - interpreter shutdown, Ray gone
                pass

    def __repr__(self) -> str:
        state = "freed" if self._freed else ("stale" if self.is_stale() else "live")
        return (f"<RemoteBuffer {self.key[1:]} {self.dtype}{list(self.shape or ())} "
                f"actor={self.device.index} gen={self.generation} {state}>")


class RemoteFuture(GpuFuture):
    """The future of a remote call. When the call makes a buffer, the future can be passed to
    later calls of the same device before it resolves (like a BufferFuture)."""

    def __init__(self, device: RemoteDevice, key: tuple, generation: int) -> None:
        super().__init__()
        self.device = device
        self.key = key
        self.generation = generation
        self._ref: Any = None
        self._n = 0
        self._what = ""
        self._settled = False
        self._watched = False

    def _bind(self, ref: Any, n: int, what: str) -> None:
        self._ref, self._n, self._what = ref, n, what

    def _from_ray(self, f: Future) -> None:
        exc = f.exception()
        self.device._settle(self, self._n, self._what, None if exc else f.result(), exc)

    # The answer is taken when asked for: by result() (ray.get), by done() (a look), or, for
    # a done-callback, wait() or as_completed, by the ObjectRef's own future, asked for then.
    # Registering that future for every call cost a round trip about 0.2 ms (Ray's callback
    # thread fetches the reply and takes the GIL from the caller).
    def _lead(self, fut: Any, timeout: float | None) -> float | None:  # type: ignore[override]
        """GpuFuture's hook: a caller waits on a future chained to this one (take the
        answer, then let the chained future answer)."""
        if self._settled or self._ref is None:
            return timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self.result(timeout)
        except BaseException:  # noqa: BLE001 - the chained future reports it
            pass
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _nudge(self, fut: Any, timeout: float | None) -> None:  # type: ignore[override]
        """GpuFuture's hook: someone is to be told of the answer (watch the ObjectRef)."""
        if not self._settled and self._ref is not None:
            self._watch()

    def _watch(self) -> None:
        with self.device._lock:
            if self._watched or self._settled:
                return
            self._watched = True
        self._ref.future().add_done_callback(self._from_ray)

    def _chain(self, fn: Any) -> None:
        self._watch()
        super()._chain(fn)

    def done(self) -> bool:
        if self._state is not _FINISHED and not self._settled and self._ref is not None:
            ready, _ = ray.wait([self._ref], timeout=0, fetch_local=False)
            if ready:
                self._take(None)
        return super().done()

    def __del__(self) -> None:
        # never answered here: the call's number leaves the outstanding set once it has run
        # (it bounds how far the actor may skip after a restart), through the ObjectRef
        if not self._settled and self._ref is not None and not self._watched:
            try:
                n, device = self._n, self.device
                self._ref.future().add_done_callback(lambda _f: device._forget_call(n))
            except Exception:  # noqa: BLE001 - interpreter shutdown, Ray gone
                pass

    def _take(self, timeout: float | None) -> None:
        try:
            reply = ray.get(self._ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(f"{self._what}: no answer within {timeout} s") from exc
        except Exception as exc:  # noqa: BLE001 - the call's failure
            self.device._settle(self, self._n, self._what, None, exc)
        else:
            self.device._settle(self, self._n, self._what, reply, None)

    def result(self, timeout: float | None = None) -> Any:
        """The call's result. A caller that waits takes it with ``ray.get`` itself (one
        thread hop less than the ObjectRef's future callback)."""
        if self._state is not _FINISHED and not self._settled and self._ref is not None:
            self._take(timeout)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except BaseException:  # noqa: BLE001 - reported below
            pass
        return super().exception(0)

    @property
    def handle(self) -> Handle:
        if self.done() and self.exception() is None and isinstance(self.result(), RemoteBuffer):
            return self.result().handle
        if self.generation != self.device.generation:
            raise GpuRefStale(f"the buffer of call {self.key} is from generation "
                              f"{self.generation}; actor {self.device.index} is at "
                              f"{self.device.generation}")
        return Handle(self.key, None)


class _Method:
    """``rd.name`` / ``rd.ns.name``: calls forward by dotted name."""

    __slots__ = ("_dev", "_name")

    def __init__(self, dev: RemoteDevice, name: str) -> None:
        self._dev, self._name = dev, name

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self._dev, f"{self._name}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> RemoteFuture:
        return self._dev._call(self._name, args, kwargs)

    def __repr__(self) -> str:
        return f"<remote method {self._name} of actor {self._dev.index}>"


class RemoteDevice:
    """The :class:`~gpumsg.client._device.Device` API of a device owned by a Ray actor. Any
    public Device method or namespace method (``rd.cublas.gemm``) is forwarded by name and
    returns a :class:`RemoteFuture`; buffers are :class:`RemoteBuffer` handles."""

    def __init__(self, actor: Any, index: int, timeout: float = 120.0) -> None:
        self.actor = actor
        self.index = index
        incarnation, self.info = ray.get(actor.info.remote(), timeout=timeout)
        self._incarnation: str | None = incarnation
        self._dead: set[str] = set()
        self.generation = 0
        self._lock = threading.RLock()  # RLock: a finalizer may release inside a call
        self._seq = 0
        self._outstanding: set[int] = set()
        self._oldest = 1  # no outstanding call is older (see _next_seq)
        self._live: weakref.WeakValueDictionary[tuple, RemoteBuffer] = \
            weakref.WeakValueDictionary()
        self._closed = False

    @property
    def name(self) -> str:
        return self.info["name"]

    @property
    def backend(self) -> str:
        return self.info["backend"]

    def __repr__(self) -> str:
        return (f"<gpumsg.ray.RemoteDevice {self.index} {self.name!r} backend={self.backend} "
                f"gen={self.generation}>")

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    # -- generations
    def _observe(self, incarnation: str) -> None:
        with self._lock:
            if incarnation in self._dead or incarnation == self._incarnation:
                return
            if self._incarnation is not None:  # a restart not seen through a failure
                self._dead.add(self._incarnation)
                self.generation += 1
            self._incarnation = incarnation

    def _died(self) -> None:
        with self._lock:
            if self._incarnation is not None:
                self._dead.add(self._incarnation)
                self._incarnation = None
                self.generation += 1

    # -- calls
    def _arg(self, value: Any) -> Any:
        if isinstance(value, (RemoteBuffer, RemoteFuture)):
            if value.device is not self:
                raise InvalidMessage(f"a remote buffer of actor {value.device.index} was passed "
                                     f"to actor {self.index}")
            return value.handle
        if type(value) in (list, tuple):
            return type(value)(self._arg(v) for v in value)
        if type(value) is dict:
            return {k: self._arg(v) for k, v in value.items()}
        return value

    def _result(self, value: Any) -> Any:
        if type(value) is Handle:
            buf = self._live.get(value.key)
            if buf is None or buf.is_stale():
                buf = RemoteBuffer(self, value, self.generation)
                self._live[value.key] = buf
            return buf
        if type(value) in (list, tuple):
            return type(value)(self._result(v) for v in value)
        if type(value) is dict:
            return {k: self._result(v) for k, v in value.items()}
        return value

    def _call(self, name: str, args: tuple, kwargs: dict) -> RemoteFuture:
        if self._closed:
            from ..errors import DeviceClosed

            raise DeviceClosed(f"remote device {self.index} is closed")
        args, kwargs = self._arg(args), self._arg(kwargs)
        with self._lock:
            seq = self._next_seq()
            fut = RemoteFuture(self, ((_CLIENT, seq[1]), 0), self.generation)
            try:
                ref = self.actor.call.remote(pack((seq, name, args, kwargs)))
            except BaseException:
                self._outstanding.discard(seq[1])
                raise
        fut._bind(ref, seq[1], f"{name} on actor {self.index}")
        return fut

    def _settle(self, fut: RemoteFuture, n: int, what: str, reply: Any,
                exc: BaseException | None) -> None:
        """Answer ``fut`` from the actor's reply (once: the Ray callback and a waiting
        ``result()`` may both try)."""
        with self._lock:
            if fut._settled:
                return
            fut._settled = True
            self._outstanding.discard(n)
        if exc is not None:
            if isinstance(exc, (ray.exceptions.RayActorError,
                                ray.exceptions.ActorUnavailableError)):
                self._died()
            fut.set_exception(_translate(exc, what))
            return
        incarnation, value = unpack(reply)
        self._observe(incarnation)
        try:
            fut.set_result(self._result(value))
        except BaseException as err:  # noqa: BLE001 - reach the caller
            fut.set_exception(err)

    def _forget_call(self, n: int) -> None:
        """Call ``n`` has run, and nobody will read its answer."""
        with self._lock:
            self._outstanding.discard(n)

    def _next_seq(self) -> tuple[str, int, int]:
        """(client, n, floor) of the next call (hold the lock): the actor starts calls in n
        order; floor is the oldest call still unanswered."""
        self._seq += 1
        n = self._seq
        outstanding = self._outstanding
        outstanding.add(n)
        # the oldest outstanding call: numbers leave the set and never come back, so the
        # search moves forward only (min() of the set cost a pipelined burst of k calls k^2/2)
        oldest = self._oldest
        while oldest not in outstanding:
            oldest += 1
        self._oldest = oldest
        return (_CLIENT, n, oldest)

    def _drop(self, key: tuple, generation: int) -> None:
        """A RemoteBuffer went away: let the actor drop it (in order; nobody waits)."""
        if not self._closed and generation == self.generation:
            with self._lock:
                seq = self._next_seq()
                self._outstanding.discard(seq[1])
                self.actor.release.remote(seq, [key])

    def wait_ready(self, timeout: float = 120.0) -> int:
        """Block until the actor answers (after a restart: its new life); returns the
        generation. Calls sent while Ray restarts the actor fail with WorkerDied; call this
        after such a failure before sending more. Raises WorkerDied if the actor is dead for
        good or does not answer within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                incarnation, self.info = ray.get(self.actor.info.remote(), timeout=max(left, 0))
            except ray.exceptions.ActorUnavailableError as exc:
                if time.monotonic() > deadline:
                    raise WorkerDied(f"actor {self.index} did not come back within {timeout} "
                                     "s") from exc
                time.sleep(0.1)
                continue
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                self._died()
                raise WorkerDied(f"actor {self.index} is not serving: {exc}") from exc
            self._observe(incarnation)
            return self.generation

    def free(self, buffer: Any) -> Future:
        """Free a remote buffer (the same as ``buffer.free()``)."""
        if isinstance(buffer, RemoteFuture):
            buffer = buffer.result()
        if not isinstance(buffer, RemoteBuffer):
            raise InvalidMessage(f"free() takes a RemoteBuffer, got {type(buffer).__name__}")
        return buffer.free()

    def close(self) -> None:
        """Close the device in the actor (the actor itself stays until the group closes)."""
        if not self._closed:
            self._closed = True
            try:
                ray.get(self.actor.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - a dead actor has nothing to close
                pass


class RemoteCommunicator:
    """NCCL across device actors: the unique id is made by rank 0's actor and sent to every
    rank through Ray; each actor joins with ``CommInit`` on its own device thread. Collectives
    take one remote buffer per rank and return a Future that resolves when every rank is done;
    a failed or timed-out rank aborts the communicator on every rank and fails it with
    :class:`~gpumsg.errors.CollectiveError`."""

    def __init__(self, devices: Sequence[RemoteDevice], timeout: float = 60.0) -> None:
        self.devices = list(devices)
        self.nranks = len(self.devices)
        if self.nranks < 1:
            raise InvalidMessage("a communicator needs at least one device", field="devices")
        if self.nranks > 1 and any(d.backend != "cuda" for d in self.devices):
            raise InvalidMessage("simulated ranks meet inside one process: across Ray actors a "
                                 "communicator of more than one rank needs CUDA devices "
                                 "(use gpumsg.multi for simulated groups)", field="devices")
        self.timeout = timeout
        self.comm = int.from_bytes(os.urandom(6), "little") | 1
        try:
            uid = ray.get(self.devices[0].actor.nccl_unique_id.remote(), timeout=timeout)
        except ray.exceptions.RayError as exc:
            raise CollectiveError(f"building a communicator across actors: rank 0 gave no "
                                  f"NCCL unique id ({_translate(exc, 'nccl_unique_id')!r})",
                                  self.comm) from exc
        refs = [d.actor.comm_init.remote(self.comm, r, self.nranks, uid)
                for r, d in enumerate(self.devices)]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        errors = []
        for ref in ready:
            try:
                ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        if pending or errors:
            self.abort()
            why = f"{len(pending)} rank(s) did not join within {timeout} s" if pending else \
                repr(_translate(errors[0], "CommInit"))
            raise CollectiveError(f"building communicator {self.comm} across actors: {why}",
                                  self.comm)

    def abort(self) -> None:
        for d in self.devices:
            try:
                d.actor.comm_abort.remote(self.comm)
            except Exception:  # noqa: BLE001 - a dead actor has nothing to abort
                pass

    def _run(self, per_rank: list[list[tuple]]) -> Future:
        # before anything is sent: NCCL trusts each rank's count and dtype, so ranks that
        # disagree would read and write out of bounds (InvalidMessage names the rank)
        check_batch([[CollOp(kind, None, None, count, dtype, **extra)
                      for kind, _, _, count, dtype, extra in ops] for ops in per_rank])
        out: Future = GpuFuture()
        futs = []
        for r, d in enumerate(self.devices):
            futs.append(d.actor.collective.remote(self.comm, r, self.nranks,
                                                  per_rank[r]).future())

        def watch() -> None:
            done, pending = wait_futures(futs, timeout=self.timeout)
            errors = [f.exception() for f in done if f.exception() is not None]
            if pending or errors:
                self.abort()
                why = f"{len(pending)} rank(s) not done within {self.timeout} s" if pending \
                    else repr(_translate(errors[0], "collective"))
                out.set_exception(CollectiveError(f"communicator {self.comm}: {why}",
                                                  self.comm))
            else:
                out.set_result(None)

        threading.Thread(target=watch, daemon=True, name="gpumsg-ray-collective").start()
        return out

    def all_reduce(self, bufs: Sequence[Any], op: str = "sum") -> Future:
        """In place: ``bufs[r]`` = op over ranks (one remote buffer per rank, same size)."""
        if len(bufs) != self.nranks:
            raise InvalidMessage(f"all_reduce takes one buffer per rank ({self.nranks})",
                                 field="bufs")
        per_rank = []
        for d, b in zip(self.devices, bufs, strict=True):
            h = d._arg(b)
            ref = b.result() if isinstance(b, RemoteFuture) else b
            from ..dtypes import dtype_name

            per_rank.append([("all_reduce", h, h, ref.size, dtype_name(ref.dtype),
                              {"op": op})])
        return self._run(per_rank)

    def broadcast(self, bufs: Sequence[Any], root: int = 0) -> Future:
        """In place: ``bufs[r]`` = ``bufs[root]``."""
        from ..dtypes import dtype_name

        per_rank = []
        for d, b in zip(self.devices, bufs, strict=True):
            h = d._arg(b)
            ref = b.result() if isinstance(b, RemoteFuture) else b
            per_rank.append([("broadcast", h, h, ref.size, dtype_name(ref.dtype),
                              {"root": root})])
        return self._run(per_rank)


class RemoteDeviceGroup:
    """Device actors opened together (rank i = ``group[i]``)."""

    def __init__(self, devices: Sequence[RemoteDevice]) -> None:
        self.devices = list(devices)

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, i: int) -> RemoteDevice:
        return self.devices[i]

    def __iter__(self) -> Iterator[RemoteDevice]:
        return iter(self.devices)

    def stats(self, timeout: float = 60.0) -> list[Any]:
        """Every member's DeviceLoad, in rank order."""
        return [f.result(timeout) for f in [d.stats() for d in self.devices]]

    def least_loaded(self, timeout: float = 10.0) -> RemoteDevice:
        """The member with the fewest queued plus in-flight operations, then the most free
        memory (from each actor's Stats); members that do not answer are passed over."""
        best, key = None, None
        for d, f in [(d, d.stats()) for d in self.devices if not d._closed]:
            try:
                s = f.result(timeout)
            except Exception:  # noqa: BLE001 - a dead or restarting member
                continue
            k = (s.queue_depth + s.ops_in_flight, -s.free_bytes)
            if key is None or k < key:
                best, key = d, k
        if best is None:
            raise GpuError("no member of the group is serving")
        return best

    def nccl(self, timeout: float = 60.0) -> RemoteCommunicator:
        """A communicator over every member (unique id through Ray)."""
        return RemoteCommunicator(self.devices, timeout)

    def close(self) -> None:
        """Close every device and end the actors."""
        for d in self.devices:
            d.close()
        for d in self.devices:
            try:
                ray.kill(d.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    def __enter__(self) -> RemoteDeviceGroup:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _not_started(backend: str, num_gpus: int, timeout: float) -> GpuError:
    """The error of device actors that did not answer within ``timeout`` seconds, naming
    what Ray has and the usual causes."""
    total, free = ray.cluster_resources(), ray.available_resources()
    gpus = f"the cluster has {total.get('GPU', 0):g} GPU(s), {free.get('GPU', 0):g} free"
    each = "one GPU each" if backend == "cuda" else "no GPU"
    return WorkerDied(
        f"{num_gpus} device actor(s) ({backend}, {each}) did not start within {timeout} s "
        f"({gpus}). Either Ray cannot place them (no free "
        "GPU: ray.init(num_gpus=...) or CUDA_VISIBLE_DEVICES), or their worker processes "
        "cannot start: they must import Ray and gpumsg (a runtime_env PYTHONPATH replaces the "
        "driver's; keep the driver's entries in it)")


def open_devices(num_gpus: int = 1, backend: str = "auto", max_restarts: int = 0,
                 timeout: float = 120.0, **options: Any) -> RemoteDeviceGroup:
    """Start ``num_gpus`` Ray actors, each owning one gpumsg device, wherever Ray places them
    (on a local or existing cluster: call ``ray.init`` first).

    ``backend``: ``"cuda"`` (each actor asks Ray for one GPU and opens its ordinal 0, the GPU
    Ray assigned), ``"sim"`` (no GPU; CPU-only clusters and CI) or ``"auto"`` (cuda when the
    cluster has ``num_gpus`` GPUs). ``max_restarts``: how often Ray restarts a dead actor; each
    restart is a new gpumsg generation (old remote buffers are stale). ``options`` go to
    ``gpumsg.open_device`` in the actor (``allow_fault_injection``, ``memory``, ...)."""
    if not ray.is_initialized():
        raise GpuError("gpumsg.ray.open_devices needs a Ray cluster: call ray.init() first")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
        raise InvalidMessage(f"num_gpus must be a positive int, got {num_gpus!r}",
                             field="num_gpus")
    if backend == "auto":
        backend = "cuda" if ray.cluster_resources().get("GPU", 0) >= num_gpus else "sim"
    if backend not in ("cuda", "sim"):
        raise InvalidMessage(f"backend must be 'auto', 'cuda' or 'sim', got {backend!r}",
                             field="backend")
    cls = ray.remote(DeviceActor).options(
        num_gpus=1 if backend == "cuda" else 0, num_cpus=0, max_restarts=max_restarts,
        max_task_retries=0, max_concurrency=THREADS)
    actors = [cls.remote(0, backend, options) for _ in range(num_gpus)]
    try:
        devices = [RemoteDevice(a, i, timeout) for i, a in enumerate(actors)]
    except ray.exceptions.GetTimeoutError as exc:
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - never started
                pass
        raise _not_started(backend, num_gpus, timeout) from exc
    except ray.exceptions.RayActorError as exc:  # the actor's constructor raised
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - never started
                pass
        raise _translate(exc, "opening the device in its actor") from exc
    except BaseException:
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - never started
                pass
        raise
    return RemoteDeviceGroup(devices)
