"""The simulator: a device made of NumPy arrays and threads, with CUDA's semantics.

* Device memory is NumPy byte arrays at fake, bounds-checked device addresses; a stray access is
  an illegal-address fault (sticky, like on a GPU) naming the message that issued the work.
  Allocations lie ``GUARD`` bytes (256 GiB) apart, so an access that overruns one buffer by
  less than that faults instead of landing in a neighbour. Fresh allocations are filled with
  0xFF bytes (NaN for floats) so that reading unwritten memory shows.
* Each stream is a thread running its operations in order, asynchronously from the caller; events
  mark points in a stream, and ``stream_wait_event`` makes one stream wait for another's point.
  ``jitter`` adds random delays to every operation, to shake out missing cross-stream waits.
* Faults: a sticky error stops all further work and is reported by every event query; injected
  out-of-memory makes the next allocations fail like the driver's.
* The memory pool keeps released blocks as cached bytes (counted as reserved) until trimmed, so
  that trim-and-retry behaves as on a GPU.
"""

from __future__ import annotations

import bisect
import operator
import random
import threading
import time
import weakref
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

import numpy as np

from ...errors import CudaError
from ...memory._pinned import host_view
from .._base import Backend, DeviceProperties

__all__ = ["SimBackend", "SimFault", "PEER_ACCESS", "SIM_DEVICES", "sim_device_count"]

#: whether simulated devices opened from now on can access each other's memory (False: peer
#: copies between them are staged through host memory, as between GPUs without P2P)
PEER_ACCESS = True
#: how many simulated devices there are (ordinals 0 to SIM_DEVICES - 1): what ``devices()`` lists
#: and ``open_devices()`` opens on the simulator, and the ordinals ``open_device`` accepts.
#: The option ``sim_devices`` (gpumsg.config; ``GPUMSG_SIM_DEVICES``) overrides it.
SIM_DEVICES = 4


def sim_device_count() -> int:
    """The number of simulated devices: the option ``sim_devices`` (``GPUMSG_SIM_DEVICES``) if
    set, else :data:`SIM_DEVICES`."""
    from ...config import setting

    raw = setting("GPUMSG_SIM_DEVICES")
    if raw is None or not raw.strip():
        return SIM_DEVICES
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 1:
        from ...errors import InvalidMessage

        raise InvalidMessage(f"GPUMSG_SIM_DEVICES must be a positive integer, got {raw!r}",
                             field="GPUMSG_SIM_DEVICES")
    return n


#: context handle -> live simulated device (what EnablePeerAccess names a peer by)
_SIMS: weakref.WeakValueDictionary[int, SimBackend] = weakref.WeakValueDictionary()

_DEVICE_BASE = 0x7F00_0000_0000
_ALIGN = 512
#: address space left unmapped after each allocation (256 GiB, 64 times the default device:
#: 2**25 allocations of one device still fit below 2**64, as the uint64 pointer arrays of
#: batched calls need)
GUARD = 1 << 38
_ERROR_NAMES = {2: "CUDA_ERROR_OUT_OF_MEMORY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
                719: "CUDA_ERROR_LAUNCH_FAILED", 1: "CUDA_ERROR_INVALID_VALUE"}


class SimFault(Exception):
    """Raised inside a simulated kernel: makes the device's context sticky-broken."""

    def __init__(self, code: int, detail: str = "") -> None:
        super().__init__(detail or _ERROR_NAMES.get(code, str(code)))
        self.code = code


class _Stream:
    """A simulated stream: one thread running its operations in order."""

    def __init__(self, sim: SimBackend, index: int, priority: int = 0) -> None:
        self._sim = sim
        self.priority = priority
        self._queue: SimpleQueue = SimpleQueue()
        self.handle = _DEVICE_BASE - 0x1000 * (index + 1)
        self._thread = threading.Thread(target=self._run, name=f"gpumsg-sim-stream-{index}",
                                        daemon=True)
        self._thread.start()

    def put(self, fn: Callable[[], Any], always: bool = False) -> None:
        """Enqueue ``fn``. Unless ``always``, it is skipped once the context is broken
        (synchronization points always run, so nobody waits forever). The message being
        handled when ``fn`` is enqueued is kept to name it in a fault."""
        self._queue.put((fn, always, self._sim.issuer()))

    def _run(self) -> None:
        sim = self._sim
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, always, issuer = item
            if not always:
                if sim.sticky:
                    continue
                if sim.jitter:
                    time.sleep(random.uniform(0.0, sim.jitter))
            try:
                fn()
            except SimFault as fault:
                sim.break_context(fault.code, f"{fault}{_issued_by(issuer)}")
            except Exception as exc:  # a bug in a simulated kernel: fail loudly, like a GPU would
                sim.break_context(719, f"simulated kernel raised {exc!r}{_issued_by(issuer)}")

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)


def _issued_by(issuer: Any) -> str:
    return "" if issuer is None else f" (work issued by {type(issuer).__name__})"


def _no_issuer() -> Any:
    return None


class _Event:
    __slots__ = ("marker",)

    def __init__(self) -> None:
        self.marker = _DONE


_DONE = threading.Event()
_DONE.set()
#: owner marker of adopted (external) memory
_EXTERNAL = object()


class _Pool:
    __slots__ = ("release_threshold", "cached", "used")

    def __init__(self, release_threshold: int) -> None:
        self.release_threshold = release_threshold
        self.cached = 0
        self.used = 0


class SimBackend(Backend):
    """A NumPy device. ``total_bytes`` bounds its memory; ``jitter`` (seconds) delays every
    stream operation by a random amount up to that value."""

    kind = "sim"

    def __init__(self, ordinal: int = 0, total_bytes: int = 4 << 30, jitter: float = 0.0,
                 name: str = "gpumsg simulator", peer_access: bool | None = None) -> None:
        super().__init__(ordinal)
        self.peer_access = PEER_ACCESS if peer_access is None else peer_access
        #: peers this device enabled access to (by ordinal), as cuCtxEnablePeerAccess would
        self.peers_enabled: set[int] = set()
        #: peers granted access to this device's pools (cuMemPoolSetAccess)
        self.pool_peers: set[int] = set()
        _SIMS[id(self)] = self
        self.total_bytes = total_bytes
        self.jitter = jitter
        self.name = name
        self.sticky = 0
        self.sticky_detail = ""
        self._lock = threading.Lock()
        self._mem: dict[int, np.ndarray] = {}
        self._bases: list[int] = []
        self._owner_pool: dict[int, _Pool | None] = {}
        #: freed in stream order, their memory kept until the stream reaches the free
        self._freeing: set[int] = set()
        self._next = _DEVICE_BASE
        self._direct_used = 0
        self._pools: list[_Pool] = []
        self._host: dict[int, np.ndarray] = {}
        self._streams: list[_Stream] = []
        self._oom_pending = 0
        self._release_hangs = threading.Event()
        #: the message being handled on the device thread (set by the service context), kept
        #: with each stream operation so that a fault names it
        self.issuer: Callable[[], Any] = _no_issuer

    # -- lifecycle ---------------------------------------------------------------------------------
    def open(self) -> DeviceProperties:
        return DeviceProperties(name=self.name, ordinal=self.ordinal, compute_capability=(9, 0),
                                total_bytes=self.total_bytes, multiprocessors=1, driver_version=0)

    def close(self) -> None:
        self._release_hangs.set()
        for s in self._streams:
            s.close()
        self._streams.clear()
        with self._lock:
            self._mem.clear()
            self._bases.clear()
            self._freeing.clear()
            self._host.clear()

    def context_handle(self) -> int:
        return id(self)

    # -- faults ------------------------------------------------------------------------------------
    def break_context(self, code: int, detail: str = "") -> None:
        if not self.sticky:
            self.sticky_detail = detail
            self.sticky = code

    def _check_sticky(self, function: str) -> None:
        if self.sticky:
            raise CudaError(self.sticky, _ERROR_NAMES.get(self.sticky, "CUDA_ERROR_UNKNOWN"),
                            f"{function}; simulator: {self.sticky_detail}")

    def inject_illegal_address(self, stream: _Stream) -> None:
        def kernel() -> None:
            raise SimFault(700, "injected illegal address")
        stream.put(kernel)

    def inject_hang(self, stream: _Stream, seconds: float | None) -> None:
        stream.put(lambda: self._release_hangs.wait(seconds))

    def inject_oom(self, count: int) -> None:
        self._oom_pending += count

    # -- streams and events ------------------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> _Stream:
        self._check_sticky("cuStreamCreate")
        least, greatest = self.stream_priority_range()
        s = _Stream(self, len(self._streams), min(max(int(priority), greatest), least))
        self._streams.append(s)
        return s

    def stream_priority_range(self) -> tuple[int, int]:
        return (0, -5)  # an H100's range; the simulated streams are threads of equal standing

    def stream_destroy(self, stream: _Stream) -> None:
        stream.close()
        if stream in self._streams:
            self._streams.remove(stream)

    def stream_handle(self, stream: _Stream) -> int:
        return stream.handle

    def stream_synchronize(self, stream: _Stream) -> None:
        ev = _Event()
        self.event_record(ev, stream)
        self.event_synchronize(ev)

    def event_create(self) -> _Event:
        return _Event()

    def event_destroy(self, event: _Event) -> None:
        pass

    def event_record(self, event: _Event, stream: _Stream) -> None:
        self._check_sticky("cuEventRecord")
        marker = threading.Event()
        event.marker = marker
        stream.put(marker.set, always=True)

    def event_query(self, event: _Event) -> bool:
        # the marker first: set, the stream has run everything before it, a fault included
        # (which broke the context before the marker ran); read the other way round, a fault
        # between the two reads answered work that never ran as complete
        done = event.marker.is_set()
        self._check_sticky("cuEventQuery")
        return done

    def event_pause(self, event: _Event, timeout: float) -> None:
        # the simulated streams are Python threads: they need the GIL to make progress
        event.marker.wait(timeout)

    def event_synchronize(self, event: _Event) -> None:
        event.marker.wait()
        self._check_sticky("cuEventSynchronize")

    def stream_wait_event(self, stream: _Stream, event: _Event) -> None:
        self._check_sticky("cuStreamWaitEvent")
        stream.put(event.marker.wait, always=True)

    # -- device memory -----------------------------------------------------------------------------
    def _reserved(self) -> int:
        return self._direct_used + sum(p.used + p.cached for p in self._pools)

    def mem_info(self) -> tuple[int, int]:
        with self._lock:
            return self.total_bytes - self._reserved(), self.total_bytes

    def _allocate(self, nbytes: int, pool: _Pool | None, function: str) -> int:
        nbytes = int(nbytes)  # a NumPy integer would make every later address one
        self._check_sticky(function)
        with self._lock:
            if self._oom_pending:
                self._oom_pending -= 1
                raise CudaError(2, _ERROR_NAMES[2], function)
            reuse = pool is not None and pool.cached >= nbytes
            if not reuse and self._reserved() + nbytes > self.total_bytes:
                raise CudaError(2, _ERROR_NAMES[2], function)
            if pool is None:
                self._direct_used += nbytes
            else:
                if reuse:
                    pool.cached -= nbytes
                pool.used += nbytes
            addr = self._next
            self._next += -(-max(nbytes, 1) // _ALIGN) * _ALIGN + GUARD
            arr = np.empty(nbytes, np.uint8)
            arr.fill(0xFF)
            self._mem[addr] = arr
            self._owner_pool[addr] = pool
            bisect.insort(self._bases, addr)
            return addr

    def _release(self, addr: int) -> None:
        with self._lock:
            self._account_release(addr)
            self._drop(addr)

    def _account_release(self, addr: int) -> None:
        """Give ``addr``'s bytes back to its pool's or the direct count (under the lock)."""
        arr = self._mem.get(addr)
        if arr is None or addr in self._freeing:
            raise SimFault(700, f"free of unknown device address {addr:#x}")
        pool = self._owner_pool[addr]
        if pool is None:
            self._direct_used -= arr.nbytes
        else:
            pool.used -= arr.nbytes
            pool.cached += arr.nbytes
            if pool.cached > pool.release_threshold:
                pool.cached = 0  # "released back to the OS"

    def _drop(self, addr: int) -> None:
        """Forget ``addr``'s memory: later accesses fault (under the lock). Nothing to do when
        ``close`` has already forgotten everything."""
        self._freeing.discard(addr)
        if self._mem.pop(addr, None) is not None:
            del self._bases[bisect.bisect_left(self._bases, addr)]
            self._owner_pool.pop(addr)

    def _drop_freed(self, addr: int) -> None:
        with self._lock:
            self._drop(addr)

    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        """The device bytes [ptr, ptr+nbytes) as a writable uint8 array; an out-of-bounds or
        freed range raises :class:`SimFault` (an illegal address)."""
        ptr, nbytes = operator.index(ptr), operator.index(nbytes)
        if nbytes < 0:
            raise SimFault(700, f"access of a negative byte count {nbytes} at {ptr:#x}")
        with self._lock:
            i = bisect.bisect_right(self._bases, ptr) - 1
            if i >= 0:
                base = self._bases[i]
                arr = self._mem[base]
                off = ptr - base
                if off + nbytes <= arr.nbytes:
                    return arr[off:off + nbytes]
        if nbytes == 0:
            return np.empty(0, np.uint8)
        raise SimFault(700, f"illegal access of {nbytes} bytes at {ptr:#x}")

    def adopt_external(self, host_ptr: int, nbytes: int) -> int:
        """Map ``nbytes`` of host memory at ``host_ptr`` that another library owns (a DLPack
        import) at a new simulated device address. It counts against no pool; the owner must
        keep it alive until :meth:`forget_external`."""
        self._check_sticky("adopt")
        with self._lock:
            addr = self._next
            self._next += -(-max(nbytes, 1) // _ALIGN) * _ALIGN + GUARD
            self._mem[addr] = host_view(host_ptr, nbytes) if nbytes else np.empty(0, np.uint8)
            self._owner_pool[addr] = _EXTERNAL  # type: ignore[assignment]
            bisect.insort(self._bases, addr)
            return addr

    def forget_external(self, stream: _Stream | None, addr: int) -> None:
        """Unmap adopted memory, stream-ordered on ``stream`` (None: now)."""
        def forget() -> None:
            with self._lock:
                if self._mem.pop(addr, None) is not None:
                    del self._bases[bisect.bisect_left(self._bases, addr)]
                    self._owner_pool.pop(addr, None)
        if stream is None:
            forget()
        else:
            stream.put(forget, always=True)

    def pool_create(self, release_threshold: int) -> _Pool:
        pool = _Pool(release_threshold)
        self._pools.append(pool)
        return pool

    def pool_destroy(self, pool: _Pool) -> None:
        if pool in self._pools:
            self._pools.remove(pool)

    def pool_handle(self, pool: _Pool) -> int:
        return id(pool)

    def pool_alloc(self, pool: _Pool, nbytes: int, stream: _Stream) -> int:
        return self._allocate(nbytes, pool, "cuMemAllocFromPoolAsync")

    def pool_trim(self, pool: _Pool, keep: int) -> None:
        with self._lock:
            pool.cached = min(pool.cached, keep)

    def pool_usage(self, pool: _Pool) -> tuple[int, int]:
        with self._lock:
            return pool.used + pool.cached, pool.used

    def free_async(self, ptr: int, stream: _Stream) -> None:
        """A stream-ordered free. Its bytes count as free at once: an allocation ordered after
        it may reuse them, as ``cuMemAllocFromPoolAsync`` on the same stream may (the service
        allocates and frees on its compute stream). The memory itself goes when the stream
        reaches the free, so work queued before it still reads and writes it."""
        self._check_sticky("cuMemFreeAsync")
        with self._lock:
            known = ptr in self._mem and ptr not in self._freeing
            if known:
                self._account_release(ptr)
                self._freeing.add(ptr)
        if known:
            stream.put(lambda: self._drop_freed(ptr), always=True)
        else:  # an unknown or double free faults when the stream reaches it, as on a GPU
            stream.put(lambda: self._release(ptr), always=True)

    def mem_alloc(self, nbytes: int) -> int:
        return self._allocate(nbytes, None, "cuMemAlloc")

    def mem_free(self, ptr: int) -> None:
        self._release(ptr)

    # -- host memory -------------------------------------------------------------------------------
    def host_alloc(self, nbytes: int) -> int:
        arr = np.empty(nbytes + 4096, np.uint8)
        ptr = (arr.ctypes.data + 4095) & ~4095
        self._host[ptr] = arr
        return ptr

    def host_free(self, ptr: int) -> None:
        self._host.pop(ptr, None)

    def host_register(self, ptr: int, nbytes: int) -> None:
        pass

    def host_unregister(self, ptr: int) -> None:
        pass

    # -- copies ------------------------------------------------------------------------------------
    def copy_htod(self, stream: _Stream, dst: int, src_host: int, nbytes: int) -> None:
        self._check_sticky("cuMemcpyHtoDAsync")
        if nbytes:
            stream.put(lambda: np.copyto(self.view(dst, nbytes), host_view(src_host, nbytes)))

    def copy_dtoh(self, stream: _Stream, dst_host: int, src: int, nbytes: int) -> None:
        self._check_sticky("cuMemcpyDtoHAsync")
        if nbytes:
            stream.put(lambda: np.copyto(host_view(dst_host, nbytes), self.view(src, nbytes)))

    def copy_dtod(self, stream: _Stream, dst: int, src: int, nbytes: int) -> None:
        self._check_sticky("cuMemcpyDtoDAsync")
        if nbytes:
            stream.put(lambda: np.copyto(self.view(dst, nbytes), self.view(src, nbytes)))

    def memset(self, stream: _Stream, dst: int, value: int, count: int, width: int) -> None:
        self._check_sticky("cuMemsetD8Async")
        dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[width]
        if count:
            stream.put(lambda: self.view(dst, count * width).view(dtype).fill(value))

    # -- peers (gpumsg/multi/_peer.py) -------------------------------------------------------------
    def peer_query(self, peer_ordinal: int) -> dict[str, Any]:
        can = self.peer_access and peer_ordinal != self.ordinal
        return {"can_access": can, "perf_rank": 0 if can else -1, "native_atomics": can}

    def peer_handle(self) -> SimBackend:
        return self

    def enable_peer_access(self, peer: Any) -> bool:
        if isinstance(peer, int):
            peer = _SIMS.get(peer)
        if not (self.peer_access and isinstance(peer, SimBackend) and peer.peer_access):
            return False
        self.peers_enabled.add(peer.ordinal)
        return True

    def pool_grant_access(self, pool: _Pool, peer_ordinal: int) -> None:
        self.pool_peers.add(peer_ordinal)

    def copy_peer(self, stream: _Stream, peer: SimBackend, dst: int, src: int,
                  nbytes: int) -> None:
        """Copy from this device's ``src`` to ``dst`` on the simulated device ``peer``."""
        self._check_sticky("cuMemcpyPeerAsync")
        if not isinstance(peer, SimBackend):
            raise CudaError(1, _ERROR_NAMES[1], "cuMemcpyPeerAsync: the peer is not simulated")
        if nbytes:
            stream.put(lambda: np.copyto(peer.view(dst, nbytes), self.view(src, nbytes)))
