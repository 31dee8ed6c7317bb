"""Executing cuDNN frontend graphs on the device thread.

cuDNN 9's graph API reaches engines the legacy ``cudnnConvolution*`` calls cannot (the Hopper
implicit-GEMM kernels torch uses); NVIDIA's frontend package ``nvidia-cudnn-frontend`` (``import
cudnn``, the optional extra ``gpumsg[dnn]``) builds those graphs. This module is the small piece
of it gpumsg needs, used by the device's :class:`~gpumsg.libs.cudnn._handle.DnnHandle`:

- :func:`frontend` imports the package lazily, once per process, and points it at the very
  ``libcudnn`` gpumsg loaded (a handle of one copy is meaningless to another). Without the
  package (or with ``GPUMSG_CUDNN_FRONTEND=0`` in the environment) it returns None and says why;
  callers then take the legacy path.
- :func:`build_graph` turns a description (a callback adding tensors and operations to the
  frontend's C++ ``backend_graph``) into a :class:`GraphPlan`: built on gpumsg's own cuDNN handle
  (already bound to the device's stream), heuristics mode A then the fallback list, numeric-note
  and workspace filters applied, the heuristic choice built (``algo="heuristic"``) or every
  candidate built and timed once (``algo="find"``).
- :meth:`GraphPlan.run` runs it with raw device pointers (a variant pack of ints, no
  framework tensors) and a workspace from the device pool, stream-ordered like every other call.
- A plan's executes are replayed as CUDA graphs (``GraphPlan.replays``, a
  :class:`~gpumsg.backends.cuda._replays.GraphReplays`): the second time the same plan runs with
  the same pointers, workspace and stream, the execute is captured once and from then on
  replayed with one ``cuGraphLaunch``. The frontend's
  execute costs 15-22 us of C++ per call with the GIL held (it builds a variant pack and calls
  ``cudnnBackendExecute``); a launch costs a few, without the GIL. ``GPUMSG_CUDNN_REPLAY=0`` in
  the environment turns it off.

Nothing here waits on the GPU except the one-time timing of ``algo="find"`` (it synchronizes
the stream around each candidate, once per problem, as ``cudnnFind*`` does).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...config import setting

if TYPE_CHECKING:
    from ...backends.cuda._replays import GraphReplays

__all__ = ["frontend", "frontend_reason", "GraphPlan", "GraphUnsupported",
           "build_graph", "DATA_TYPES"]

#: gpumsg dtype names -> the frontend's data_type member names
DATA_TYPES = {"f32": "FLOAT", "f16": "HALF", "bf16": "BFLOAT16"}

_STATE: dict[str, Any] = {}
#: algo="find" times at most this many candidate plans (the top of cuDNN's ranking) ...
FIND_LIMIT = 8
#: ... and starts no new one after this many seconds of building and timing
FIND_BUDGET_S = 3.0


class GraphUnsupported(Exception):
    """The frontend (or cuDNN behind it) cannot build this graph; the caller falls back."""


def frontend(lib: Any) -> Any:
    """The ``cudnn`` frontend module bound to ``lib`` (gpumsg's LoadedLibrary of libcudnn), or
    None when it cannot be used (:func:`frontend_reason` says why). Imported once per process."""
    if "module" in _STATE:
        return _STATE["module"]
    module, reason = None, ""
    if (setting("GPUMSG_CUDNN_FRONTEND") or "1").strip().lower() in ("0", "no", "off",
                                                                     "false"):
        reason = "disabled by GPUMSG_CUDNN_FRONTEND=0"
    else:
        try:
            import cudnn as fe  # the optional nvidia-cudnn-frontend package

            native = fe._pybind_module
            for name in ("backend_graph", "_set_dlhandle_cudnn"):
                if not hasattr(native, name):
                    raise ImportError(f"cudnn frontend {getattr(fe, '__version__', '?')} "
                                      f"lacks {name}")
            cdll = getattr(lib, "cdll", None)
            if cdll is not None:  # the frontend calls into gpumsg's libcudnn, not its own copy
                native._set_dlhandle_cudnn(ctypes.cast(cdll._handle, ctypes.c_void_p).value)
            module = fe
            reason = f"cudnn-frontend {getattr(fe, '__version__', '?')}"
        except Exception as exc:  # noqa: BLE001 - any failure means: use the legacy path
            reason = f"cudnn frontend unavailable: {type(exc).__name__}: {exc}"
    _STATE["module"], _STATE["reason"] = module, reason
    return module


def frontend_reason() -> str:
    """Why :func:`frontend` returned what it did ("" before the first call)."""
    return _STATE.get("reason", "")


class GraphPlan:
    """One frontend graph: its tensors' uids by name, the plans built so far, the one that runs
    (``index`` in cuDNN's ranking) and its workspace bytes; ``replays`` (None: off) holds the
    CUDA graphs of its executes."""

    __slots__ = ("graph", "uids", "index", "workspace", "name", "count", "built", "_order",
                 "_ptrs", "timings", "replays")

    def __init__(self, graph: Any, uids: dict[str, int], index: int, workspace: int,
                 name: str, count: int) -> None:
        self.graph = graph
        #: how many plans cuDNN's heuristics listed; plan index -> workspace of the built ones
        self.count = count
        self.built: dict[int, int] = {}
        self.uids = uids
        self.index = index
        self.workspace = workspace
        self.name = name
        #: (plan index, seconds) of each candidate timed by algo="find"
        self.timings: list[tuple[int, float]] = []
        self._order: list[str] | None = None
        self._ptrs: Any = None
        self.replays: GraphReplays | None = None

    def build_at(self, index: int) -> int | None:
        """Build plan ``index`` (once); its workspace bytes, or None where it cannot be built
        (filtered out by the notes or the workspace limit, or refused by cuDNN)."""
        if index in self.built:
            return self.built[index]
        try:
            self.graph.build_plan_at_index(index)
            ws = int(self.graph.get_workspace_size_plan_at_index(index))
        except Exception:  # noqa: BLE001 - a decline: the next plan
            return None
        self.built[index] = ws
        if self._order is None and self._ptrs is None:
            self._prepare()
        return ws

    def next_plan(self, start: int, below: int | None = None) -> bool:
        """Select the first plan from ``start`` on that builds (and needs fewer than ``below``
        workspace bytes, where given); False if there is none."""
        for i in range(start, self.count):
            ws = self.build_at(i)
            if ws is not None and (below is None or ws < below):
                self.index, self.workspace = i, ws
                return True
        return False

    def _prepare(self) -> None:
        graph, uids = self.graph, self.uids
        self._ptrs = ()  # tried
        try:  # the raw-pointer entry point: pointers in ascending uid order, no dict per call
            graph._prepare_variant_pack_template()
            order = list(graph._get_variant_pack_uids_sorted())
            by_uid = {u: n for n, u in uids.items()}
            if order and all(u in by_uid for u in order):
                self._order = [by_uid[u] for u in order]
                self._ptrs = (ctypes.c_void_p * len(order))()
        except Exception:  # noqa: BLE001 - the mapping entry point is used instead
            self._order = None

    def run(self, handle: int, pointers: dict[str, int], ws: int, index: int | None = None,
            stream: Any = None) -> None:
        """Issue the graph on ``handle``'s stream: ``pointers`` maps tensor names to device
        pointers, ``ws`` is a workspace of at least :attr:`workspace` bytes (0 if none).
        With ``stream`` (the stream ``handle`` is bound to) and :attr:`replays` set, the
        selected plan's execute is replayed as a CUDA graph where one was captured for the
        same pointers (see :class:`GraphReplays`); a failing launch raises CudaError."""
        replays = self.replays
        if replays is not None and stream is not None and index is None:
            key = (self.index, ws, int(stream), *pointers.values())
            replays.issue(key, stream, self._execute, handle, pointers, ws, self.index)
            return
        self._execute(handle, pointers, ws, self.index if index is None else index)

    def close(self) -> None:
        """Destroy the CUDA graphs of the executes (the frontend graph goes with the object)."""
        if self.replays is not None:
            self.replays.close()

    def _execute(self, handle: int, pointers: dict[str, int], ws: int, index: int) -> None:
        g = self.graph
        if self._order is not None:
            arr = self._ptrs
            for i, name in enumerate(self._order):
                arr[i] = pointers[name]
            try:
                g._execute_with_raw_ptrs(ctypes.addressof(arr), len(arr), ws, handle, index)
                return
            except (TypeError, AttributeError):  # an entry point of another shape: the map
                self._order = None
        pack = {self.uids[n]: p for n, p in pointers.items() if n in self.uids}
        g._execute_plan_at_index(pack, ws, index, handle)


def _modes(fe: Any, g: Any) -> None:
    """Heuristic mode A, then the fallback list (each asked on its own: one failing leaves the
    other's plans)."""
    ok, failure = False, None
    for mode in (fe.heur_mode.A, fe.heur_mode.FALLBACK):
        try:
            g.create_execution_plans([mode])
            ok = True
        except Exception as exc:  # noqa: BLE001
            failure = exc
    if not ok:
        raise GraphUnsupported(f"no heuristics plan: {failure}")


def build_graph(fe: Any, handle: int, dtype: str, describe: Callable[[Any, Any], dict[str, Any]],
                *, name: str, strict_f32: bool, workspace_limit: int | None,
                algo: str = "heuristic",
                timer: Callable[[GraphPlan, int, int], float] | None = None,
                find_limit: int = FIND_LIMIT, find_budget_s: float = FIND_BUDGET_S,
                ) -> GraphPlan:
    """Build a frontend graph on ``handle``.

    ``describe(g, fe)`` adds the operations to the empty ``backend_graph`` ``g`` and returns its
    user tensors by name (inputs and outputs; uids are set here). ``strict_f32`` drops the
    plans that compute f32 on tensor cores (TF32); f16/bf16 graphs drop the plans that reduce
    in reduced precision. ``workspace_limit`` (bytes, None: any) drops plans that need more.
    ``algo="heuristic"``: the first plan in cuDNN's ranking (mode A, then the fallback list)
    that builds. ``algo="find"``: every candidate is built and timed by
    ``timer(plan, index, workspace_bytes)`` (seconds), the fastest kept; a candidate that fails
    to run (or whose workspace the pool cannot give) is skipped. The search covers the first
    ``find_limit`` plans that build, in cuDNN's ranking, and stops starting new ones after
    ``find_budget_s`` seconds (building a runtime-compiled engine takes up to a second).
    Raises GraphUnsupported when no plan can be built.
    """
    io = getattr(fe.data_type, DATA_TYPES[dtype])
    try:
        g = fe._pybind_module.backend_graph(name=name, io_data_type=io,
                                            intermediate_data_type=fe.data_type.FLOAT,
                                            compute_data_type=fe.data_type.FLOAT,
                                            handle=handle)
        tensors = describe(g, fe)
        uids = {}
        for uid, (tname, t) in enumerate(sorted(tensors.items()), start=1):
            t.set_uid(uid)
            uids[tname] = uid
        g.validate()
        g.build_operation_graph()
        _modes(fe, g)
        notes = fe.numerical_note
        if strict_f32:
            g.deselect_numeric_notes([notes.TENSOR_CORE, notes.DOWN_CONVERT_INPUTS])
        elif dtype != "f32":
            g.deselect_numeric_notes([notes.REDUCED_PRECISION_REDUCTION])
        if workspace_limit is not None:
            g.deselect_workspace_greater_than(int(workspace_limit))
        g.check_support()
        count = int(g.get_execution_plan_count())
    except GraphUnsupported:
        raise
    except Exception as exc:  # noqa: BLE001 - cudnnGraphNotSupportedError, RuntimeError, ...
        raise GraphUnsupported(f"{type(exc).__name__}: {exc}") from None
    plan = GraphPlan(g, uids, -1, 0, name, count)
    if algo != "find" or timer is None:
        if not plan.next_plan(0):
            raise GraphUnsupported(f"none of {count} plans could be built")
        return plan
    deadline = time.perf_counter() + find_budget_s
    candidates: list[tuple[int, int]] = []  # (plan index, workspace bytes)
    for i in range(count):
        if len(candidates) >= find_limit or (candidates and time.perf_counter() > deadline):
            break
        ws = plan.build_at(i)
        if ws is not None:
            candidates.append((i, ws))
    # two rounds over the candidates, the faster of each one's two timings: a GPU whose clocks
    # ramp up while the first candidates run does not favour the last ones
    best_time: dict[int, float] = {}
    for _ in range(2):
        for i, ws in candidates:
            try:
                seconds = timer(plan, i, ws)
            except Exception:  # noqa: BLE001 - fails to run, or no memory for its workspace
                continue
            best_time[i] = min(seconds, best_time.get(i, seconds))
    plan.timings = sorted(best_time.items())
    if not best_time:
        raise GraphUnsupported(f"algo='find': none of {count} candidate plans ran")
    best_i = min(best_time, key=best_time.__getitem__)
    best = (best_time[best_i], best_i, dict(candidates)[best_i])
    plan.index, plan.workspace = best[1], best[2]
    return plan


def time_plan(sync: Callable[[], None], issue: Callable[[], None], reps: int = 5) -> float:
    """Seconds per run of ``issue`` (two warm-up runs, then ``reps`` runs between two
    synchronizations of the stream)."""
    issue()
    issue()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        issue()
    sync()
    return (time.perf_counter() - t0) / reps
