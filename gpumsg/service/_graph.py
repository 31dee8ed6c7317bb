"""Graphs of messages on the device thread: capture, replay, update, keep-alive.

Capture (:class:`CaptureGraph`): the handlers of the recorded messages run as usual, but with
``ctx.capture`` set, so the envelope (:meth:`DeviceContext.run`) hands each enqueue to
:meth:`Capture.issue` instead of issuing and tracking it. On CUDA the compute stream is in stream
capture meanwhile (``cuStreamBeginCapture``, thread-local mode), so the library calls become graph
nodes; the graph is instantiated once. On the simulator the calls themselves are kept, in order,
and replayed on the simulated compute stream. Every call must be on the compute stream and need
nothing back on the host: anything else is refused naming the message.

Replay (:class:`LaunchGraph`) is one envelope call on the compute stream that reads and writes
the graph's buffers, so cross-stream ordering and stream-ordered frees hold as for any message.
The graph pins every buffer it touches: a ``Free`` of a pinned buffer takes it out of the
device's table (the user can no longer name it) but the memory is released only when the last
graph pinning it is destroyed or updated away (:func:`keeps_alive`, :func:`_unpin`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import CudaError, GraphCaptureError, InvalidMessage
from ..messages._base import BufRef
from ..messages.graph import CAPTURABLE, CaptureGraph, DestroyGraph, LaunchGraph, UpdateGraph
from ._executor import runs_inline
from ._registry import COMPUTE, HANDLERS, handles

__all__ = ["Capture", "GraphTable", "keeps_alive"]

def _cu() -> Any:
    from ..backends.cuda._driver import _driver

    return _driver()


def _check(err: Any, function: str) -> None:
    if err:
        from ..backends.cuda._driver import _fail

        raise _fail(int(err), function)


class Capture:
    """What the envelope does while a graph is being recorded (``ctx.capture``)."""

    __slots__ = ("calls", "reads", "writes", "simulate")

    def __init__(self, simulate: bool) -> None:
        self.calls: list[tuple[Any, tuple]] = []  # simulator: the calls to replay
        self.reads: dict[int, Any] = {}
        self.writes: dict[int, Any] = {}
        self.simulate = simulate

    def issue(self, ctx: Any, stream: int, reads: tuple, writes: tuple, fn: Any, args: tuple,
              finish: Any) -> None:
        name = type(ctx.current).__name__
        if stream != COMPUTE:
            raise GraphCaptureError(f"{name} cannot be recorded in a graph: it runs on the "
                                    f"{ctx.streams[stream].name} stream, and a graph captures "
                                    "the compute stream only", name)
        if finish is not None:
            raise GraphCaptureError(f"{name} cannot be recorded in a graph: it reads a result "
                                    "back to the host", name)
        for a in reads:
            self.reads[a.ref.id] = a
        for a in writes:
            self.writes[a.ref.id] = a
        if self.simulate:
            self.calls.append((fn, args))
        else:
            fn(ctx.compute.obj, *args)


@dataclasses.dataclass
class GraphState:
    messages: tuple
    allocs: dict[int, Any]
    reads: tuple
    writes: tuple
    calls: list
    graph: Any = None
    exec: Any = None
    #: the compute stream it was recorded on (its nodes use that stream's library handles and
    #: workspaces, so it is launched there); None: the first compute stream
    slot: Any = None


class GraphTable:
    """The device's graphs, and how many graphs pin each buffer."""

    def __init__(self) -> None:
        self.graphs: dict[int, GraphState] = {}
        self.pins: dict[int, int] = {}
        self.orphans: dict[int, Any] = {}  # freed by their owner, still pinned by a graph


def _table(ctx: Any) -> GraphTable:
    t = ctx.__dict__.get("graph_table")
    if t is None:
        t = ctx.graph_table = GraphTable()
    return t


def keeps_alive(ctx: Any, alloc: Any) -> bool:
    """Called by ``Free``: True when a graph still pins ``alloc`` (its memory is released when
    the last such graph goes)."""
    t = ctx.__dict__.get("graph_table")
    if t is None or not t.pins.get(alloc.ref.id):
        return False
    t.orphans[alloc.ref.id] = alloc
    return True


def _pin(t: GraphTable, allocs: dict[int, Any]) -> None:
    for i in allocs:
        t.pins[i] = t.pins.get(i, 0) + 1


def _unpin(ctx: Any, t: GraphTable, allocs: dict[int, Any]) -> None:
    for i in allocs:
        n = t.pins.get(i, 0) - 1
        if n > 0:
            t.pins[i] = n
            continue
        t.pins.pop(i, None)
        a = t.orphans.pop(i, None)
        if a is not None and a.ptr:
            ctx.order_after_uses(COMPUTE, a)
            if a.external:  # adopted (DLPack): back to its producer, see service/interop
                a.release(ctx)
            else:
                ctx.memory.deallocate(a.ptr, a.ref.nbytes, ctx.compute.obj)


def _record(ctx: Any, messages: tuple) -> GraphState:
    """Run the handlers of ``messages`` under capture; the graph (CUDA) or call list (sim)."""
    simulate = ctx.backend.kind != "cuda"
    handlers = []
    for m in messages:
        libs = CAPTURABLE.get(type(m))
        if libs is None:
            raise GraphCaptureError(f"{type(m).__name__} cannot be recorded in a graph",
                                    type(m).__name__)
        for lib in libs:
            ctx.library(lib)  # handles (and their workspaces) exist before the capture begins
        handlers.append(HANDLERS[type(m)])
    cap = Capture(simulate)
    stream = ctx.compute.obj
    cu = None
    if not simulate:
        cu = _cu()
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        _check(cu.cuStreamBeginCapture(stream, mode)[0], "cuStreamBeginCapture")
    error: BaseException | None = None
    current = ctx.current
    ctx.capture = cap
    try:
        for m, handler in zip(messages, handlers):
            ctx.current = m
            handler(ctx, m, None)
    except BaseException as exc:  # noqa: BLE001 - re-raised below, after the capture has ended
        error = exc
    finally:
        ctx.capture = None
        failed = ctx.current
        ctx.current = current
    graph = None
    if cu is not None:
        err, graph = cu.cuStreamEndCapture(stream)
        if err and error is None:
            from ..backends.cuda._driver import _fail

            error = _fail(int(err), "cuStreamEndCapture")
        if error is not None and graph is not None and not err:
            cu.cuGraphDestroy(graph)
    if error is not None:
        if isinstance(error, CudaError) and error.sticky:
            raise error
        name = type(failed).__name__
        if isinstance(error, GraphCaptureError):
            raise error
        raise GraphCaptureError(f"{name} could not be recorded in a graph: "
                                f"{type(error).__name__}: {error}", name) from error
    allocs = {**cap.reads, **cap.writes}
    return GraphState(messages, allocs, tuple(cap.reads.values()), tuple(cap.writes.values()),
                      cap.calls, graph)


def _record_somewhere(ctx: Any, messages: tuple) -> GraphState:
    """Record on the first compute stream; where what the recording needs is missing there
    (a plan an eager run made on another compute stream of the pool, with its handles), on
    the pool's other streams in turn. The graph keeps the stream it was recorded on."""
    try:
        return _record(ctx, messages)
    except GraphCaptureError as first:
        placement = ctx.placement
        if placement is None or not placement.auto:
            raise
        for slot in placement.pool[1:]:
            if not slot.libraries:
                continue  # nothing ran there: it cannot hold what was missing
            ctx.enter(slot)
            try:
                state = _record(ctx, messages)
            except GraphCaptureError:
                continue
            state.slot = slot
            return state
        raise first


def _enter_graph_stream(ctx: Any, state: GraphState) -> None:
    if state.slot is not None:
        ctx.enter(state.slot)


def _destroy_exec(state: GraphState) -> None:
    if state.exec is not None or state.graph is not None:
        cu = _cu()
        if state.exec is not None:
            cu.cuGraphExecDestroy(state.exec)
        if state.graph is not None:
            cu.cuGraphDestroy(state.graph)
        state.exec = state.graph = None


@handles(CaptureGraph)
def _capture_graph(ctx: Any, msg: CaptureGraph, reply: Any) -> None:
    t = _table(ctx)
    if msg.graph in t.graphs:
        raise InvalidMessage(f"graph: graph {msg.graph} already exists", field="graph")
    state = _record_somewhere(ctx, msg.messages)
    if state.graph is not None:
        err, state.exec = _cu().cuGraphInstantiate(state.graph, 0)
        if err:
            _destroy_exec(state)
            _check(err, "cuGraphInstantiate")
    t.graphs[msg.graph] = state
    _pin(t, state.allocs)
    ctx.reply_now(reply, len(msg.messages))


def _get(ctx: Any, graph: int) -> GraphState:
    t = _table(ctx)
    state = t.graphs.get(graph)
    if state is None:
        raise InvalidMessage(f"graph: no graph {graph} on this device (destroyed, or its "
                             "capture failed)", field="graph")
    return state


def _replay_sim(stream: Any, calls: list) -> None:
    for fn, args in calls:
        fn(stream, *args)


def _replay_cuda(stream: Any, exec_: Any) -> None:
    _check(_cu().cuGraphLaunch(exec_, stream)[0], "cuGraphLaunch")


@handles(LaunchGraph)
def _launch_graph(ctx: Any, msg: LaunchGraph, reply: Any) -> None:
    state = _get(ctx, msg.graph)
    _enter_graph_stream(ctx, state)
    if state.exec is not None:
        ctx.run(reply, COMPUTE, state.reads, state.writes, _replay_cuda, state.exec)
    else:
        ctx.run(reply, COMPUTE, state.reads, state.writes, _replay_sim, state.calls)


def _swapped(old: BufRef, new: BufRef) -> BufRef:
    """``new`` in ``old``'s place, under ``old``'s shape where ``old`` was a reshaped view of
    its buffer (dev.nn passes cuDNN such views: the same allocation under cuDNN's shape)."""
    if tuple(old.shape) != tuple(new.shape) and old.size == new.size and new.order == "C":
        return dataclasses.replace(new, shape=tuple(old.shape), order=old.order)
    return new


def _replace(msg: Any, mapping: dict[int, BufRef]) -> Any:
    changes = {}
    for f in dataclasses.fields(msg):
        v = getattr(msg, f.name)
        if type(v) is BufRef and v.id in mapping:
            changes[f.name] = _swapped(v, mapping[v.id])
        elif isinstance(v, tuple) and any(type(x) is BufRef and x.id in mapping for x in v):
            changes[f.name] = tuple(_swapped(x, mapping[x.id]) if type(x) is BufRef
                                    and x.id in mapping else x for x in v)
    return dataclasses.replace(msg, **changes) if changes else msg


@handles(UpdateGraph)
def _update_graph(ctx: Any, msg: UpdateGraph, reply: Any) -> None:
    t = _table(ctx)
    state = _get(ctx, msg.graph)
    mapping: dict[int, BufRef] = {}
    for old, new in msg.pairs:
        if old.id not in state.allocs:
            raise InvalidMessage(f"pairs: {old.describe()} is not used by graph {msg.graph}",
                                 field="pairs")
        ctx.resolve_out(new, "pairs")
        mapping[old.id] = new
    messages = tuple(_replace(m, mapping) for m in state.messages)
    _enter_graph_stream(ctx, state)
    new_state = _record(ctx, messages)
    new_state.slot = state.slot
    if new_state.graph is not None:
        cu = _cu()
        err = cu.cuGraphExecUpdate(state.exec, new_state.graph)[0]
        if err:  # topology changed (another algorithm, say): instantiate afresh
            err, exec_ = cu.cuGraphInstantiate(new_state.graph, 0)
            if err:
                _destroy_exec(new_state)
                _check(err, "cuGraphInstantiate")
            cu.cuGraphExecDestroy(state.exec)
            new_state.exec = exec_
        else:
            new_state.exec = state.exec
        cu.cuGraphDestroy(state.graph)
    t.graphs[msg.graph] = new_state
    _pin(t, new_state.allocs)
    _unpin(ctx, t, state.allocs)
    ctx.reply_now(reply, None)


@handles(DestroyGraph)
def _destroy_graph(ctx: Any, msg: DestroyGraph, reply: Any) -> None:
    t = _table(ctx)
    state = t.graphs.pop(msg.graph, None)
    if state is not None:
        # a replay still in flight finishes first: the driver frees an executable graph that is
        # running once it completes; the buffers go back stream-ordered behind it
        _destroy_exec(state)
        _unpin(ctx, t, state.allocs)
    ctx.reply_now(reply, None)


runs_inline(LaunchGraph)  # one graph launch through the envelope: a caller's thread may run it
