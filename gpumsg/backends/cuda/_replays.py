"""Library calls replayed as CUDA graphs (device thread).

A cuBLAS GEMM or a cuDNN execute costs 10-25 us of host time per call on the H100 VMs (the
library's own argument checks, heuristics and launch bookkeeping), where the GPU work of a small
problem takes a few. A call that is repeated with the same arguments issues the same kernels with
the same parameters every time, so after it has run once as usual it is captured once
(``cuStreamBeginCapture``, thread-local mode: other threads' CUDA calls are unaffected) and from
then on replayed with one ``cuGraphLaunch`` (a few us; cuda-bindings releases the GIL around it).

What a key must hold is the caller's business: everything the call reads besides the memory
behind its pointers (the function, its plain arguments, its pointers, its workspace, the stream).
A replay reads and writes the same addresses with the same kernels as the call would, so the
results are the same whatever the memory holds by then.

``GPUMSG_<NAME>_REPLAY=0`` in the environment turns a library's replays off (:func:`enabled`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ...config import setting

__all__ = ["GraphReplays", "MEMORY_NODE_TYPES", "device_replays", "direct", "direct_bound",
           "enabled", "node_types"]

_OFF = ("0", "no", "off", "false")
#: a GraphReplays' capacity grows up to this many times its initial one (see _recaptured),
#: and by growing to no more than MAX_GRAPHS graphs (a few KiB of device memory each)
MAX_GROWTH = 16
MAX_GRAPHS = 1024

#: graph nodes that allocate or free device memory on every launch: a library that makes its own
#: workspace under capture puts them around its kernels (cuBLAS did while gpumsg's workspace
#: was reset by cublasSetStream), and each launch then pays for them on the GPU
MEMORY_NODE_TYPES = frozenset(("CU_GRAPH_NODE_TYPE_MEM_ALLOC", "CU_GRAPH_NODE_TYPE_MEM_FREE"))


def node_types(driver: Any, graph: Any) -> list[str]:
    """The type names (``CUgraphNodeType`` members) of ``graph``'s nodes, in the driver's order;
    ``driver`` is ``cuda.bindings.driver``. An error of the driver leaves the list short."""
    err, _, count = driver.cuGraphGetNodes(graph, 0)
    if err or not count:
        return []
    err, nodes, _ = driver.cuGraphGetNodes(graph, count)
    if err:
        return []
    names = []
    for node in nodes:
        err, kind = driver.cuGraphNodeGetType(node)
        if not err:
            names.append(kind.name)
    return names


def enabled(variable: str) -> bool:
    """Whether the replays named by option ``variable`` (gpumsg.config) are on (the
    default)."""
    return (setting(variable) or "1").strip().lower() not in _OFF


def device_replays(ctx: Any, capacity: int) -> GraphReplays:
    """The replays of a library handle of ``ctx``'s device (a service DeviceContext on CUDA):
    launched through ctypes (:func:`~gpumsg.backends.cuda._driver.raw_graph_launch`, holding
    the GIL while the compute stream's work in flight is under its bound), and bypassed while
    the device records a ``dev.graph`` (``ctx.capture``)."""
    from ._driver import _driver, raw_graph_launch

    return GraphReplays(_driver(), capacity, lambda: ctx.capture is not None,
                        raw_graph_launch(ctx.compute.in_flight))


def direct(tag: str, fn: Callable[..., Any], stream: Any, *args: Any) -> None:
    """:meth:`GraphReplays.call` where replays are off: ``fn(stream, *args)``."""
    fn(stream, *args)


def direct_bound(tag: str, fn: Callable[..., Any], stream: Any,
                 *args: Any) -> Callable[[Any], None]:
    """:meth:`GraphReplays.bound` where replays are off: ``launch(on)`` calls ``fn(on, *args)``."""
    def launch(on: Any) -> None:
        fn(on, *args)

    return launch


class GraphReplays:
    """CUDA graphs of repeated library calls, by key (device thread only).

    :meth:`issue` runs a key's call as usual the first time (a call made once costs no capture,
    and a call that fails is never captured); the second time it captures the call on the stream,
    instantiates and launches the graph; from then on it launches the graph alone. If a capture
    fails (a call that cannot be captured) nothing of it was issued: the call runs as usual, and
    this object stops capturing (``reason`` says why). ``capacity`` bounds the graphs kept, the
    least recently launched destroyed first; it doubles (up to ``max_capacity``) each time a
    key whose graph it evicted is captured again, since then more distinct calls recur than it
    holds, and capturing stops past that; :meth:`close` destroys the rest (before the library
    that owns their kernels and workspaces goes away).

    ``driver`` is ``cuda.bindings.driver`` (tests pass a stand-in). ``recording`` answers
    whether the device is recording a ``dev.graph`` (stream capture of its own): :meth:`call`
    then issues as usual, so the call itself is what gets recorded. ``raw_launch``, where
    given, launches instead of ``driver.cuGraphLaunch``: ``raw_launch(int(exec), int(stream))``
    answers the CUresult as an int (:func:`~gpumsg.backends.cuda._driver.raw_graph_launch`).
    """

    __slots__ = ("driver", "capacity", "max_capacity", "recording", "raw_launch", "execs",
                 "seen", "evicted", "reason", "launches", "captures", "with_memory_nodes")

    def __init__(self, driver: Any, capacity: int = 8,
                 recording: Callable[[], bool] | None = None,
                 raw_launch: Callable[[int, int], int] | None = None,
                 max_capacity: int | None = None) -> None:
        self.driver = driver
        self.raw_launch = raw_launch
        self.capacity = capacity
        #: what ``capacity`` may grow to when graphs are evicted before their keys come again
        #: (:meth:`_recaptured`): by default 16 times the initial one, at most MAX_GRAPHS
        self.max_capacity = max(capacity, max_capacity if max_capacity is not None
                                else min(MAX_GROWTH * capacity, MAX_GRAPHS))
        self.recording = recording
        self.execs: OrderedDict[tuple, Any] = OrderedDict()
        self.seen: OrderedDict[tuple, None] = OrderedDict()
        #: keys whose graph the capacity evicted, the latest few, with the capacity then: one
        #: captured again at that capacity means that more distinct calls recur than it holds
        self.evicted: OrderedDict[tuple, int] = OrderedDict()
        #: why nothing more is captured ("" while captures go on)
        self.reason = ""
        self.launches = self.captures = 0
        #: graphs captured with nodes that allocate or free memory (:data:`MEMORY_NODE_TYPES`)
        self.with_memory_nodes = 0

    def call(self, tag: str, fn: Callable[..., Any], stream: Any, *args: Any) -> None:
        """``fn(stream, *args)``, replayed by the key ``(tag, stream, *args)``: ``args`` must be
        plain hashable values (ints, floats, strings) that say everything ``fn`` issues."""
        self.call_keyed((tag, id(stream), *args), fn, stream, args)

    def bound(self, tag: str, fn: Callable[..., Any], stream: Any,
              *args: Any) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`call` of ``fn`` with ``args`` on ``stream``, its key built
        once. A handler that keeps it for a repeated message (service/derived.py) then passes
        neither the arguments nor the key again. ``launch`` must be given ``stream``."""
        key = (tag, id(stream), *args)
        call_keyed = self.call_keyed

        def launch(on: Any) -> None:
            call_keyed(key, fn, on, args)

        return launch

    def call_keyed(self, key: tuple, fn: Callable[..., Any], stream: Any, args: tuple) -> None:
        """:meth:`call` with its key ``(tag, id(stream), *args)`` already built."""
        recording = self.recording
        if recording is not None and recording():
            fn(stream, *args)
            return
        exec_ = self.execs.get(key)
        if exec_ is None:
            self._not_captured(key, stream, fn, (stream, *args))
        else:  # the common case, with one call less
            self._launch(key, exec_, stream)

    def issue(self, key: tuple, stream: Any, call: Callable[..., Any], *args: Any) -> None:
        """Issue ``call(*args)`` on ``stream`` (the stream it issues on), through the graph of
        ``key`` where there is one. Raises what the call raises, or CudaError from a launch."""
        exec_ = self.execs.get(key)
        if exec_ is None:
            self._not_captured(key, stream, call, args)
        else:
            self._launch(key, exec_, stream)

    def _launch(self, key: tuple, exec_: Any, stream: Any) -> None:
        self.execs.move_to_end(key)
        raw = self.raw_launch
        if raw is not None:
            err = raw(int(exec_), int(stream))
        else:
            err = self.driver.cuGraphLaunch(exec_, stream)[0]
        if err:
            from ._driver import _fail

            raise _fail(int(err), "cuGraphLaunch")
        self.launches += 1

    def _not_captured(self, key: tuple, stream: Any, call: Callable[..., Any],
                      args: tuple) -> None:
        """A key without a graph: capture it if it ran once before, else run it as usual."""
        seen = self.seen
        if key in seen and not self.reason:
            del seen[key]
            exec_ = self._capture(key, stream, call, args)
            if exec_ is not None:
                self._launch(key, exec_, stream)
                return
        call(*args)
        seen[key] = None  # only a call that succeeded is captured the next time
        if len(seen) > 4 * self.capacity:
            seen.popitem(last=False)

    def _capture(self, key: tuple, stream: Any, call: Callable[..., Any], args: tuple) -> Any:
        """Capture ``call(*args)`` as the graph of ``key`` (nothing is issued) and keep it: its
        executable graph, or None (and :attr:`reason` set) when the capture fails."""
        cu = self.driver
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        err = cu.cuStreamBeginCapture(stream, mode)[0]
        if err:
            self.reason = f"cuStreamBeginCapture: error {int(err)}"
            return None
        failure = ""
        try:
            call(*args)
        except Exception as exc:  # noqa: BLE001 - the capture is ended below, then we fall back
            failure = f"{type(exc).__name__}: {exc}"
        err, graph = cu.cuStreamEndCapture(stream)
        if err and not failure:
            failure = f"cuStreamEndCapture: error {int(err)}"
        exec_ = None
        if graph is not None and int(graph):
            if not failure:
                if MEMORY_NODE_TYPES.intersection(node_types(cu, graph)):
                    self.with_memory_nodes += 1
                err, exec_ = cu.cuGraphInstantiate(graph, 0)
                if err:
                    failure, exec_ = f"cuGraphInstantiate: error {int(err)}", None
            cu.cuGraphDestroy(graph)  # the instantiated graph keeps what it needs
        elif not failure:
            failure = "the capture recorded no graph"
        if failure:
            self.reason = failure[:300]
            return None
        self.execs[key] = exec_
        self.captures += 1
        if self.evicted.pop(key, None) == self.capacity:  # not one evicted at a smaller one
            self._recaptured()
        evicted = self.evicted
        while len(self.execs) > self.capacity:
            gone, old = self.execs.popitem(last=False)
            cu.cuGraphExecDestroy(old)  # one still running is freed when it completes
            evicted[gone] = self.capacity
            if len(evicted) > 4 * self.capacity:
                evicted.popitem(last=False)
        return exec_

    def _recaptured(self) -> None:
        """A key whose graph was evicted came again and was captured again: more distinct
        calls recur than ``capacity`` graphs hold, and at that rate every other call of each
        would be a capture (it runs as usual when its graph is gone, is captured the time
        after, and evicted before it comes again). Double the capacity, up to
        ``max_capacity``; past that, stop capturing (``reason``): the calls run as usual, as
        without replays, rather than pay a capture every other time."""
        if self.capacity < self.max_capacity:
            self.capacity = min(2 * self.capacity, self.max_capacity)
        else:
            self.reason = (f"more distinct calls recur than {self.max_capacity} graphs hold: "
                           "each would be captured again before it is launched")

    def info(self) -> dict[str, Any]:
        """Graphs held, captures and launches so far, why capturing stopped (""), and how many
        captures held memory nodes (each launch of those allocates and frees device memory)."""
        return {"graphs": len(self.execs), "captures": self.captures,
                "launches": self.launches, "refused": self.reason,
                "with_memory_nodes": self.with_memory_nodes}

    def close(self) -> None:
        """Destroy the graphs (errors ignored: the context may be failing). The object stays
        usable: later calls run and are captured again."""
        self.forget(lambda key: True)

    def forget(self, gone: Callable[[tuple], bool]) -> None:
        """Destroy the graphs of the keys for which ``gone(key)`` is true and forget that those
        keys ran (what they launch is going away: a plan, a matrix's workspace). A graph still
        running on the GPU is freed by the driver once it completes."""
        for key in [k for k in self.execs if gone(k)]:
            exec_ = self.execs.pop(key)
            try:
                self.driver.cuGraphExecDestroy(exec_)
            except Exception:  # noqa: BLE001, S110 - the context may be failing
                pass
        for key in [k for k in self.seen if gone(k)]:
            del self.seen[key]
