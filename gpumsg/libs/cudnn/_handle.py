"""The cuDNN handle of one device (device thread): convolution plans, the algorithm each
problem uses, and workspaces from the device's memory pool.

Each convolution problem (direction, dtype, layout, shapes, stride, padding, dilation, groups,
math mode, workspace limit, bias/activation, ``algo``) is planned once and kept in an LRU
:class:`~gpumsg.service._plans.PlanCache`. Where the ``nvidia-cudnn-frontend`` package is
installed the plan is a cuDNN graph (:mod:`gpumsg.libs.cudnn._graph`: ``conv_fprop`` with bias
and activation fused where cuDNN builds it, ``conv_dgrad``, ``conv_wgrad``), which reaches the
engines torch uses; otherwise, or where the graph API declines a problem, it is the legacy
descriptors and cuDNN's ranking of algorithms (``cudnnGet*Algorithm_v7``). ``cache_info``
counts the plans of each path and keeps the last reasons for a fallback. Either way the plan
uses the first ranked candidate whose workspace fits the limit (``algo="find"``: the fastest
of the timed candidates); when the pool cannot give that workspace, the plan moves down the
ranking to one that needs less (the cache keeps the new choice), so a full pool degrades speed
rather than failing. The handle keeps one convolution workspace (the largest asked for) per
stream, as cuBLAS's handle does.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from typing import Any

from ...backends.cuda._driver import _driver, raw_graph_launch
from ...backends.cuda._replays import GraphReplays, enabled
from ...dtypes import dtype_of
from ...errors import CudaError, GraphCaptureError, LibraryError
from ...messages.cudnn import ACTIVATIONS, POOL_MODES
from ...service._plans import PlanCache
from .._loader import LoadedLibrary, c_int, c_size_t, c_void_p, load
from ._bindings import (
    BN_OPS_BN,
    BN_SPATIAL,
    BN_SPATIAL_PERSISTENT,
    CROSS_CORRELATION,
    DATA_TYPE,
    FILTER_FORMAT,
    MATH_DEFAULT,
    MATH_FMA,
    MATH_TENSOR_OP,
    NOT_PROPAGATE_NAN,
    SOFTMAX_ACCURATE,
    SOFTMAX_LOG,
    SOFTMAX_MODE,
    AlgoPerf,
)
from ._graph import (
    GraphPlan,
    GraphUnsupported,
    build_graph,
    frontend,
    frontend_reason,
    time_plan,
)
from .kernels._bn_infer import BnInferenceKernels
from .kernels._gelu import GELU_MODES, GeluKernels
from .kernels._layer_norm import LayerNormKernels
from .kernels._softmax import SoftmaxKernels

__all__ = ["DnnHandle", "ConvCall", "NoAlgorithm", "status_error", "cudnn_dims"]

_ALGO_COUNT = 16  # more than any direction has (fwd 8, bwd data 6, bwd filter 7)
_ONE = ctypes.c_float(1.0)
_ZERO = ctypes.c_float(0.0)


def status_error(lib: LoadedLibrary, status: int, function: str) -> LibraryError:
    """A cuDNN status as a LibraryError carrying cuDNN's own error string."""
    text = lib.cudnnGetErrorString(status)
    return LibraryError("cudnn", status, text.decode() if text else str(status), function)


class NoAlgorithm(LibraryError):
    """No convolution algorithm fits this problem within the workspace that can be had."""

    def __init__(self, detail: str) -> None:
        super().__init__("cudnn", 9, "CUDNN_STATUS_NOT_SUPPORTED", detail)


@dataclasses.dataclass(frozen=True, slots=True)
class ConvCall:
    """One convolution as the handles see it. ``direction`` is "fwd", "bwd_data" or
    "bwd_filter"; shapes are the buffers' (in ``layout``); ``x``, ``w``, ``y`` are the device
    pointers of the activations, filters and outputs of the forward problem (for bwd_data x is
    dx and y is dy; for bwd_filter w is dw)."""

    direction: str
    dtype: str
    layout: str
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    math: str
    workspace_limit: int | None
    x: int
    w: int
    y: int
    bias: int = 0
    activation: str = "none"
    act_coef: float = 0.0
    algo: str = "heuristic"
    #: plan_key(), made once: a repeated convolution reuses its ConvCall (handlers._call)
    _key: tuple = dataclasses.field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_key", (
            self.direction, self.dtype, self.layout, self.x_shape, self.w_shape, self.y_shape,
            self.stride, self.padding, self.dilation, self.groups, self.math,
            self.workspace_limit, self.bias != 0, self.activation, self.act_coef, self.algo))

    def plan_key(self) -> tuple:
        """Everything that chooses the plan (not the pointers)."""
        return self._key


def cudnn_dims(layout: str, shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """(dims in N, C, spatial order; element strides) of a row-major buffer in ``layout``.
    1-D problems get a unit height (cuDNN's convolutions take 2-D and 3-D problems)."""
    if layout == "NCHW":
        n, c, sp = shape[0], shape[1], list(shape[2:])
    else:
        n, c, sp = shape[0], shape[-1], list(shape[1:-1])
    if len(sp) == 1:
        sp = [1, sp[0]]
    dims = [n, c, *sp]
    # memory order of the logical dims: NCHW -> n, c, sp...; NHWC -> n, sp..., c
    order = [0, 1, *range(2, len(dims))] if layout == "NCHW" else [0, *range(2, len(dims)), 1]
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis]
    return dims, strides


def _arr(values: list[int] | tuple[int, ...]) -> Any:
    return (c_int * len(values))(*values)


class _Plan:
    """A legacy-API convolution plan: descriptors and cuDNN's ranked algorithms."""

    __slots__ = ("descs", "perfs", "choice", "bias_desc", "act_desc", "captured")
    path = "legacy"

    def __init__(self) -> None:
        self.descs: dict[str, int] = {}
        self.perfs: list[AlgoPerf] = []
        self.choice = 0
        self.bias_desc = 0
        self.act_desc = 0
        #: recorded into a dev.graph: kept (not destroyed) until the handle closes
        self.captured = False


class _GraphRunFailed(Exception):
    """cuDNN refused to execute a built graph (the problem moves to the legacy path)."""


class _GraphConv:
    """A graph-API convolution plan: the built frontend graph and, where bias and activation
    could not be fused into it, the legacy descriptors of the separate passes (``epilogue``)."""

    __slots__ = ("graph", "epilogue", "descs", "captured")
    path = "graph"

    def __init__(self, graph: GraphPlan, epilogue: _Plan | None) -> None:
        self.graph = graph
        self.epilogue = epilogue
        self.descs = epilogue.descs if epilogue is not None else {}
        #: recorded into a dev.graph: kept (not destroyed) until the handle closes
        self.captured = False


#: activation -> how the graph applies it (None: not fusable, the legacy pass runs)
def _graph_activation(g: Any, t: Any, activation: str, coef: float) -> Any:
    if activation == "relu":
        return g.relu(t)
    if activation == "clipped_relu":
        return g.relu(t, lower_clip=0.0, upper_clip=coef)
    if activation == "sigmoid":
        return g.sigmoid(t)
    if activation == "tanh":
        return g.tanh(t)
    if activation == "swish":
        return g.swish(t, swish_beta=coef)
    if activation == "elu" and coef == 1.0:
        return g.elu(t)
    raise GraphUnsupported(f"activation {activation!r} (coef {coef}) has no graph form")


def _geometry(call: ConvCall) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """stride, padding, dilation with the unit height of 1-D problems."""
    stride, padding, dilation = call.stride, call.padding, call.dilation
    if len(stride) == 1:
        stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
    return stride, padding, dilation


class _BnPlan:
    """Descriptors of one normalization problem: x's and the derived per-channel one; the
    workspace bytes of the persistent ``Ex`` calls (-1: not asked yet; None: not used)."""

    __slots__ = ("descs", "persistent", "fwd_ws", "bwd_ws")

    def __init__(self, persistent: bool) -> None:
        self.descs: dict[str, int] = {}
        self.persistent = persistent
        self.fwd_ws: int | None = -1
        self.bwd_ws: int | None = -1


def _scale_view(affine: tuple[int, int, int]) -> tuple[str, tuple[int, ...]]:
    """(layout, shape) of the per-channel scaling pass over the affine view (A, K, B). With
    B == 1 (layer norm: rows x features) the view is described channels-last, (A, 1, K) NHWC:
    the same memory, but cuDNN's NCHW inference kernel over planes of one element took 40 ms
    for 8192 x 8192 on an H100 (0.004x torch), where its NHWC kernel streams over C."""
    a, k, b = affine
    return ("NHWC", (a, 1, k)) if b == 1 else ("NCHW", affine)


class _DropoutState:
    """A dropout descriptor with its device-held random-number states and their pristine
    copy (two buffers of ``nbytes`` from the pool)."""

    __slots__ = ("nbytes", "desc", "states", "pristine")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.desc = 0
        self.states = 0
        self.pristine = 0


class DnnHandle:
    """One cuDNN handle of one device with its algorithm cache (device thread)."""

    def __init__(self, ctx: Any) -> None:
        self.lib = load("cudnn")
        self._ctx = ctx
        h = c_void_p()
        self._check(self.lib.cudnnCreate(ctypes.byref(h)), "cudnnCreate")
        self.raw_handle: int = h.value or 0
        self._stream: Any = None
        #: layer norm's own kernels (kernels/layer_norm.py), compiled on first use
        self.layer_norm = LayerNormKernels(ctx)
        #: GELU and row-softmax kernels of gpumsg's own (kernels/gelu.py, kernels/softmax.py)
        self.gelu = GeluKernels(ctx)
        #: gpumsg's own batch-norm inference (kernels/bn_infer.py), cuDNN's where NVRTC is missing
        self.bn_infer = BnInferenceKernels(ctx)
        self.softmax_rows = SoftmaxKernels(ctx)
        self.cache = PlanCache(256, self._retire)
        #: plans and workspaces a dev.graph recorded: its nodes use them until the device
        #: closes (a graph cannot say when it is the last one to need them)
        self._kept_plans: list[_Plan | _GraphConv] = []
        self._kept_ws: list[tuple[int, int, Any]] = []
        self._ws_captured = False
        #: (seed, p) -> _DropoutState; each holds two copies of cuDNN's states (a few MB)
        self.dropouts = PlanCache(8, self._free_dropout)
        self._const_n = 0
        self._zeros = self._ones = 0
        self._reserve_sizes: dict[tuple[str, int], int] = {}
        #: (pointer, bytes, stream) of the convolution workspace the handle keeps
        self._conv_ws: tuple[int, int, Any] | None = None
        #: convolution plans made per path ("graph": the frontend, "legacy": descriptors)
        self.paths = {"graph": 0, "legacy": 0}
        #: why the last few problems could not take the graph path
        self.graph_declines: list[str] = []
        #: graph-path executes are replayed as CUDA graphs (graph.GraphReplays)
        self.replay = enabled("GPUMSG_CUDNN_REPLAY")

    # -- plumbing ----------------------------------------------------------------------------------
    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(self.lib, status, function)

    def _bind(self, stream: Any) -> None:
        if stream is not self._stream:
            self._check(self.lib.cudnnSetStream(self.raw_handle, int(stream)), "cudnnSetStream")
            self._stream = stream

    def _new(self, kind: str) -> int:
        out = c_void_p()
        self._check(getattr(self.lib, f"cudnnCreate{kind}Descriptor")(ctypes.byref(out)),
                    f"cudnnCreate{kind}Descriptor")
        return out.value  # type: ignore[return-value]

    def _tensor(self, plan: _Plan, name: str, dtype: str, dims: list[int],
                strides: list[int]) -> int:
        d = plan.descs[name] = self._new("Tensor")
        self._check(self.lib.cudnnSetTensorNdDescriptor(d, DATA_TYPE[dtype], len(dims),
                                                        _arr(dims), _arr(strides)),
                    "cudnnSetTensorNdDescriptor")
        return d

    def _retire(self, plan: _Plan | _GraphConv) -> None:
        """A plan leaves the cache: destroyed, unless a dev.graph recorded it (kept). The
        cache also holds the plans of other operations (batch norm, pooling), never recorded."""
        if getattr(plan, "captured", False):
            self._kept_plans.append(plan)
        else:
            self._destroy(plan)

    def _destroy(self, plan: _Plan | _GraphConv) -> None:
        if isinstance(plan, _GraphConv):
            plan.graph.close()
        lib = self.lib
        for name, d in plan.descs.items():
            if name == "w":
                lib.cudnnDestroyFilterDescriptor(d)
            elif name == "conv":
                lib.cudnnDestroyConvolutionDescriptor(d)
            elif name == "act":
                lib.cudnnDestroyActivationDescriptor(d)
            else:
                lib.cudnnDestroyTensorDescriptor(d)
        plan.descs.clear()

    # -- planning ----------------------------------------------------------------------------------
    def _plan(self, call: ConvCall) -> _Plan:
        lib = self.lib
        plan = _Plan()
        try:
            self._describe(plan, call)
            perfs = (AlgoPerf * _ALGO_COUNT)()
            count = c_int(0)
            d = plan.descs
            if call.direction == "fwd":
                fn, name = (lib.cudnnGetConvolutionForwardAlgorithm_v7,
                            "cudnnGetConvolutionForwardAlgorithm_v7")
                args = (d["x"], d["w"], d["conv"], d["y"])
            elif call.direction == "bwd_data":
                fn, name = (lib.cudnnGetConvolutionBackwardDataAlgorithm_v7,
                            "cudnnGetConvolutionBackwardDataAlgorithm_v7")
                args = (d["w"], d["y"], d["conv"], d["x"])
            else:
                fn, name = (lib.cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                            "cudnnGetConvolutionBackwardFilterAlgorithm_v7")
                args = (d["x"], d["y"], d["conv"], d["w"])
            self._check(fn(self.raw_handle, *args, _ALGO_COUNT, ctypes.byref(count), perfs), name)
            limit = call.workspace_limit
            plan.perfs = [p for p in perfs[:count.value]  # in cuDNN's ranking, fastest first
                          if p.status == 0 and (limit is None or p.memory <= limit)]
            if not plan.perfs:
                raise NoAlgorithm(f"{name}: no algorithm for {call.direction} {call.dtype} "
                                  f"{call.layout} x{list(call.x_shape)} w{list(call.w_shape)} "
                                  f"within a workspace of {limit} bytes")
            return plan
        except BaseException:
            self._destroy(plan)
            raise

    def _describe(self, plan: _Plan, call: ConvCall) -> None:
        lib = self.lib
        dtype, layout = call.dtype, call.layout
        self._tensor(plan, "x", dtype, *cudnn_dims(layout, call.x_shape))
        self._tensor(plan, "y", dtype, *cudnn_dims(layout, call.y_shape))
        w_dims, _ = cudnn_dims(layout, call.w_shape)
        w = plan.descs["w"] = self._new("Filter")
        self._check(lib.cudnnSetFilterNdDescriptor(w, DATA_TYPE[dtype], FILTER_FORMAT[layout],
                                                   len(w_dims), _arr(w_dims)),
                    "cudnnSetFilterNdDescriptor")
        stride, padding, dilation = call.stride, call.padding, call.dilation
        if len(stride) == 1:  # the unit height of 1-D problems
            stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
        conv = plan.descs["conv"] = self._new("Convolution")
        # f16/bf16 accumulate in f32 (cuDNN's "pseudo-half" configuration)
        self._check(lib.cudnnSetConvolutionNdDescriptor(conv, len(stride), _arr(padding),
                                                        _arr(stride), _arr(dilation),
                                                        CROSS_CORRELATION, DATA_TYPE["f32"]),
                    "cudnnSetConvolutionNdDescriptor")
        self._check(lib.cudnnSetConvolutionGroupCount(conv, call.groups),
                    "cudnnSetConvolutionGroupCount")
        if dtype == "f32":
            math = MATH_TENSOR_OP if call.math == "tf32" else MATH_FMA
        else:
            math = MATH_TENSOR_OP if dtype in ("f16", "bf16") else MATH_DEFAULT
        self._check(lib.cudnnSetConvolutionMathType(conv, math), "cudnnSetConvolutionMathType")
        if call.bias:
            k = w_dims[0]
            ones = [1] * (len(w_dims) - 2)
            dims = [1, k, *ones]
            self._tensor(plan, "bias", dtype, dims, [k, 1, *ones])
        mode = ACTIVATIONS[call.activation]
        if mode is not None:
            act = plan.descs["act"] = self._new("Activation")
            self._check(lib.cudnnSetActivationDescriptor(act, mode, NOT_PROPAGATE_NAN,
                                                         call.act_coef),
                        "cudnnSetActivationDescriptor")
            if call.activation == "swish":
                self._check(lib.cudnnSetActivationDescriptorSwishBeta(act, call.act_coef),
                            "cudnnSetActivationDescriptorSwishBeta")

    # -- the convolution -------------------------------------------------------------------------
    def conv(self, stream: Any, call: ConvCall) -> None:
        """Issue one convolution (and its bias and activation) on ``stream``: through a cuDNN
        frontend graph where the frontend is installed and builds one for the problem, else
        through the legacy descriptor API (the path each plan took: :meth:`cache_info`).

        Inside a ``dev.graph`` recording (stream capture) only a problem that has run before
        can be recorded: planning (heuristics, a timed search, a workspace from the pool)
        cannot happen under capture; GraphCaptureError says so. A recorded plan and the
        workspace its nodes use are kept until the device closes."""
        self._bind(stream)
        key = call.plan_key()
        plan = self.cache.get(key)
        if self._ctx.capture is not None:
            self._capture_conv(stream, plan, call)
            return
        if plan is None:
            plan = self._graph_conv(stream, call)
            if plan is None:
                plan = self._plan(call)
                if call.algo == "find":
                    self._find_legacy(stream, plan, call)
            self.paths[plan.path] += 1
            self.cache.put(key, plan)
        if isinstance(plan, _GraphConv):
            try:
                self._run_graph(stream, plan, call)
                return
            except _GraphRunFailed as exc:
                # cuDNN refused to run the built graph: the legacy path serves this problem
                self._decline(call, str(exc))
                self._destroy(plan)
                plan = self._plan(call)
                self.paths["graph"] -= 1
                self.paths["legacy"] += 1
                self.cache.put(key, plan)
        while True:
            perf = plan.perfs[plan.choice]
            nbytes = perf.memory
            try:
                ws = self._workspace(stream, nbytes)
                break
            except MemoryError:
                # the pool cannot give this workspace: take the next algorithm that needs less
                smaller = [i for i in range(plan.choice + 1, len(plan.perfs))
                           if plan.perfs[i].memory < nbytes]
                if not smaller:
                    raise
                plan.choice = smaller[0]
        self._issue(plan, call, perf.algo, ws, nbytes)

    def _capture_conv(self, stream: Any, plan: _Plan | _GraphConv | None,
                      call: ConvCall) -> None:
        """Record one convolution into the graph being captured (see :meth:`conv`). The
        handler has refused a problem not planned yet (``handlers._conv``: one rule for both
        backends), so ``plan`` is the cached one."""
        assert plan is not None, "handlers._conv refuses unplanned convolutions under capture"
        name = type(self._ctx.current).__name__
        nbytes = plan.graph.workspace if isinstance(plan, _GraphConv) else \
            plan.perfs[plan.choice].memory
        ws = self._workspace(stream, nbytes)  # the kept one, or GraphCaptureError
        plan.captured = True
        if isinstance(plan, _GraphConv):
            # executed directly: the plan's own replays would start a capture inside this one
            try:
                plan.graph.run(self.raw_handle, self._pointers(call), ws)
            except CudaError:
                raise
            except Exception as exc:  # noqa: BLE001 - said as a capture failure
                raise GraphCaptureError(f"{name} could not be recorded: {type(exc).__name__}: "
                                        f"{exc}", name) from None
            if plan.epilogue is not None:
                self._epilogue(plan.epilogue, call)
            return
        self._issue(plan, call, plan.perfs[plan.choice].algo, ws, nbytes)

    def _workspace(self, stream: Any, nbytes: int) -> int:
        """A workspace of ``nbytes`` on ``stream`` (convolutions, channels-last max-pooling
        backward): the handle keeps the largest one asked for (from the device pool) and reuses
        it for every call on the same stream (the stream orders them), as cuBLAS's handle keeps
        its workspace; another stream or a larger size returns it to the pool (stream-ordered)
        and takes a new one. Raises MemoryError when the pool cannot give it. Inside a
        ``dev.graph`` recording the kept workspace is used (and kept until the device closes:
        the graph's nodes use it) or GraphCaptureError says that one must be made first."""
        if not nbytes:
            return 0
        cached = self._conv_ws
        if cached is not None and cached[2] is stream and cached[1] >= nbytes:
            if self._ctx.capture is not None:
                self._ws_captured = True
            return cached[0]
        self._no_capture("a larger workspace than the device holds now")
        self._drop_workspace()
        ptr = self._ctx.memory.allocate(nbytes, stream)
        self._conv_ws = (ptr, nbytes, stream)
        return ptr

    def _drop_workspace(self) -> None:
        cached = self._conv_ws
        if cached is not None:
            self._conv_ws = None
            if self._ws_captured:  # a dev.graph's nodes use it: kept until the device closes
                self._ws_captured = False
                self._kept_ws.append(cached)
                return
            self._ctx.memory.deallocate(cached[0], cached[1], cached[2])  # stream-ordered

    def _find_legacy(self, stream: Any, plan: _Plan, call: ConvCall) -> None:
        """algo="find" on the legacy path: run each ranked algorithm (synchronizing the stream,
        once per problem) and reorder them fastest first; the ones that fail are dropped."""
        memory, backend = self._ctx.memory, self._ctx.backend
        timed = []
        for perf in plan.perfs:
            nbytes = perf.memory
            try:
                ws = memory.allocate(nbytes, stream) if nbytes else 0
            except MemoryError:
                continue
            try:
                seconds = time_plan(lambda: backend.stream_synchronize(stream),
                                    lambda p=perf, w=ws, n=nbytes: self._issue(plan, call, p.algo,
                                                                               w, n))
                timed.append((seconds, perf))
            except LibraryError:
                pass
            finally:
                if nbytes:
                    memory.deallocate(ws, nbytes, stream)
        if timed:
            timed.sort(key=lambda t: t[0])
            plan.perfs = [p for _, p in timed]

    def _pointers(self, call: ConvCall) -> dict[str, int]:
        if call.direction == "fwd":
            ptrs = {"x": call.x, "w": call.w, "y": call.y}
            if call.bias:
                ptrs["b"] = call.bias
            return ptrs
        if call.direction == "bwd_data":
            return {"dy": call.y, "w": call.w, "dx": call.x}
        return {"x": call.x, "dy": call.y, "dw": call.w}

    def _graph_conv(self, stream: Any, call: ConvCall,
                    workspace_limit: int | None = -1) -> _GraphConv | None:
        """The graph-API plan of ``call`` or None (no frontend, or no graph for it: the reason
        is kept in :attr:`graph_declines`). Forward bias and activation are fused into the
        graph where cuDNN builds it, else run as legacy passes after a convolution-only graph."""
        fe = frontend(self.lib)
        if fe is None:
            return None
        limit = call.workspace_limit if workspace_limit == -1 else workspace_limit
        fuse = call.direction == "fwd" and (call.bias != 0 or call.activation != "none")
        attempts = [True, False] if fuse else [False]
        reason = ""
        for fused in attempts:
            try:
                graph = self._build_conv_graph(fe, stream, call, fused, limit)
            except GraphUnsupported as exc:
                reason = str(exc)
                continue
            epilogue = None
            if fuse and not fused:
                epilogue = _Plan()
                try:
                    self._describe(epilogue, call)
                except BaseException:
                    self._destroy(epilogue)
                    raise
            if self.replay:
                graph.replays = GraphReplays(_driver(), raw_launch=raw_graph_launch(
                    self._ctx.compute.in_flight))
            return _GraphConv(graph, epilogue)
        self._decline(call, reason)
        return None

    def _decline(self, call: ConvCall, reason: str) -> None:
        self.graph_declines.append(f"{call.direction} {call.dtype} {call.layout} "
                                   f"x{list(call.x_shape)} w{list(call.w_shape)} "
                                   f"groups={call.groups}: {reason}"[:400])
        del self.graph_declines[:-8]

    def _build_conv_graph(self, fe: Any, stream: Any, call: ConvCall, fused: bool,
                          limit: int | None) -> GraphPlan:
        io = getattr(fe.data_type, {"f32": "FLOAT", "f16": "HALF", "bf16": "BFLOAT16"}[call.dtype])
        f32 = fe.data_type.FLOAT
        stride, padding, dilation = _geometry(call)
        geo = dict(padding=list(padding), stride=list(stride), dilation=list(dilation),
                   compute_data_type=f32)

        def tensor(g: Any, name: str, shape: tuple[int, ...]) -> Any:
            dims, strides = cudnn_dims(call.layout, shape)
            return g._make_tensor(dim=dims, stride=strides, data_type=io, name=name)

        def output(t: Any, shape: tuple[int, ...]) -> Any:
            dims, strides = cudnn_dims(call.layout, shape)
            t.set_output(True)
            t.set_dim(dims)
            t.set_stride(strides)
            t._set_data_type(io)
            return t

        def describe(g: Any, _fe: Any) -> dict[str, Any]:
            if call.direction == "fwd":
                x, w = tensor(g, "x", call.x_shape), tensor(g, "w", call.w_shape)
                out = g.conv_fprop(x, w, name="conv", **geo)
                named = {"x": x, "w": w}
                if fused:
                    if call.bias:
                        k = call.w_shape[0]
                        ones = [1] * (len(cudnn_dims(call.layout, call.w_shape)[0]) - 2)
                        b = g._make_tensor(dim=[1, k, *ones], stride=[k, 1, *([k] * len(ones))],
                                           data_type=io, name="b")
                        named["b"] = b
                        out = g.add(out, b, compute_data_type=f32, name="bias")
                    if call.activation != "none":
                        out = _graph_activation(g, out, call.activation, call.act_coef)
                named["y"] = output(out, call.y_shape)
                return named
            if call.direction == "bwd_data":
                dy, w = tensor(g, "dy", call.y_shape), tensor(g, "w", call.w_shape)
                dx = g.conv_dgrad(dy, w, name="dgrad", **geo)
                return {"dy": dy, "w": w, "dx": output(dx, call.x_shape)}
            x, dy = tensor(g, "x", call.x_shape), tensor(g, "dy", call.y_shape)
            dw = g.conv_wgrad(x, dy, name="wgrad", **geo)
            return {"x": x, "dy": dy, "dw": output(dw, call.w_shape)}

        timer = None
        if call.algo == "find":
            memory, backend, h = self._ctx.memory, self._ctx.backend, self.raw_handle
            ptrs = self._pointers(call)

            def timer(gp: GraphPlan, index: int, nbytes: int) -> float:
                ws = memory.allocate(nbytes, stream) if nbytes else 0
                try:
                    return time_plan(lambda: backend.stream_synchronize(stream),
                                     lambda: gp.run(h, ptrs, ws, index))
                finally:
                    if nbytes:
                        memory.deallocate(ws, nbytes, stream)

        return build_graph(fe, self.raw_handle, call.dtype, describe,
                           name=f"gpumsg_conv_{call.direction}",
                           strict_f32=call.dtype == "f32" and call.math != "tf32",
                           workspace_limit=limit, algo=call.algo, timer=timer)

    def _run_graph(self, stream: Any, plan: _GraphConv, call: ConvCall) -> None:
        while True:
            graph = plan.graph
            nbytes = graph.workspace
            try:
                ws = self._workspace(stream, nbytes)
                break
            except MemoryError:
                # the pool cannot give this workspace: the first ranked plan that needs less
                # (the cached plan keeps the new choice)
                if not graph.next_plan(0, below=nbytes):
                    raise
        try:
            graph.run(self.raw_handle, self._pointers(call), ws, stream=stream)
        except CudaError:  # the context failed (a replay's launch): not cuDNN declining
            raise
        except Exception as exc:  # noqa: BLE001 - the caller falls back to the legacy path
            raise _GraphRunFailed(f"{graph.name} plan {graph.index}: "
                                  f"{type(exc).__name__}: {exc}") from None
        epilogue = plan.epilogue
        if epilogue is not None:
            self._epilogue(epilogue, call)

    def _epilogue(self, plan: _Plan, call: ConvCall) -> None:
        """Bias and activation in place on y, as separate legacy passes."""
        lib, h, d = self.lib, self.raw_handle, plan.descs
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        if call.bias:
            self._check(lib.cudnnAddTensor(h, one, d["bias"], call.bias, one, d["y"], call.y),
                        "cudnnAddTensor")
        if "act" in d:
            self._check(lib.cudnnActivationForward(h, d["act"], one, d["y"], call.y, zero,
                                                   d["y"], call.y), "cudnnActivationForward")

    def _issue(self, plan: _Plan, call: ConvCall, algo: int, ws: int, nbytes: int) -> None:
        lib, h, d = self.lib, self.raw_handle, plan.descs
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        if call.direction == "fwd":
            self._check(lib.cudnnConvolutionForward(h, one, d["x"], call.x, d["w"], call.w,
                                                    d["conv"], algo, ws, nbytes, zero, d["y"],
                                                    call.y), "cudnnConvolutionForward")
            self._epilogue(plan, call)
        elif call.direction == "bwd_data":
            self._check(lib.cudnnConvolutionBackwardData(h, one, d["w"], call.w, d["y"], call.y,
                                                         d["conv"], algo, ws, nbytes, zero,
                                                         d["x"], call.x),
                        "cudnnConvolutionBackwardData")
        else:
            self._check(lib.cudnnConvolutionBackwardFilter(h, one, d["x"], call.x, d["y"],
                                                           call.y, d["conv"], algo, ws, nbytes,
                                                           zero, d["w"], call.w),
                        "cudnnConvolutionBackwardFilter")

    # -- activations, softmax, pooling (descriptors live for one call) -----------------------------
    def _flat(self, descs: list, dtype: str, size: int) -> int:
        d = self._new("Tensor")
        descs.append(("Tensor", d))
        self._check(self.lib.cudnnSetTensorNdDescriptor(d, DATA_TYPE[dtype], 4,
                                                        _arr([1, 1, 1, size]),
                                                        _arr([size, size, size, 1])),
                    "cudnnSetTensorNdDescriptor")
        return d

    def _nc(self, descs: list, dtype: str, layout: str, shape: tuple[int, ...]) -> int:
        dims, strides = cudnn_dims(layout, shape)
        while len(dims) < 4:  # (N, C) and (N, C, L): trailing unit dimensions
            dims.append(1)
            strides.append(1)
        d = self._new("Tensor")
        descs.append(("Tensor", d))
        self._check(self.lib.cudnnSetTensorNdDescriptor(d, DATA_TYPE[dtype], len(dims),
                                                        _arr(dims), _arr(strides)),
                    "cudnnSetTensorNdDescriptor")
        return d

    def _act(self, descs: list, activation: str, coef: float) -> int:
        d = self._new("Activation")
        descs.append(("Activation", d))
        self._check(self.lib.cudnnSetActivationDescriptor(d, ACTIVATIONS[activation],
                                                          NOT_PROPAGATE_NAN, coef),
                    "cudnnSetActivationDescriptor")
        if activation == "swish":
            self._check(self.lib.cudnnSetActivationDescriptorSwishBeta(d, coef),
                        "cudnnSetActivationDescriptorSwishBeta")
        return d

    def _pool(self, descs: list, mode: str, window: tuple[int, ...], stride: tuple[int, ...],
              padding: tuple[int, ...]) -> int:
        d = self._new("Pooling")
        descs.append(("Pooling", d))
        self._check(self.lib.cudnnSetPoolingNdDescriptor(d, POOL_MODES[mode], NOT_PROPAGATE_NAN,
                                                         len(window), _arr(window),
                                                         _arr(padding), _arr(stride)),
                    "cudnnSetPoolingNdDescriptor")
        return d

    def _release(self, descs: list) -> None:
        for kind, d in descs:
            getattr(self.lib, f"cudnnDestroy{kind}Descriptor")(d)

    def activation(self, stream: Any, dtype: str, size: int, activation: str, coef: float,
                   x: int, y: int, dy: int = 0, dx: int = 0) -> None:
        """y = act(x) (``dy == 0``) or dx = act'(x) dy, over ``size`` packed elements. GELU
        runs as gpumsg's own kernel (kernels/gelu.py); LibraryError where it cannot be compiled."""
        if activation in GELU_MODES:
            if not self.gelu.run(stream, dtype, size, activation, x, y, dy, dx):
                raise LibraryError("cudnn", 9, "CUDNN_STATUS_NOT_SUPPORTED",
                                   f"{activation}: gpumsg's kernel is unavailable "
                                   f"({self.gelu.status})")
            return
        self._bind(stream)
        descs: list = []
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        try:
            t = self._flat(descs, dtype, size)
            a = self._act(descs, activation, coef)
            if not dy:
                self._check(self.lib.cudnnActivationForward(self.raw_handle, a, one, t, x, zero,
                                                            t, y), "cudnnActivationForward")
            else:
                self._check(self.lib.cudnnActivationBackward(self.raw_handle, a, one, t, y, t,
                                                             dy, t, x, zero, t, dx),
                            "cudnnActivationBackward")
        finally:
            self._release(descs)

    def softmax(self, stream: Any, dtype: str, layout: str, shape: tuple[int, ...], mode: str,
                log: bool, x: int, y: int, dy: int = 0, dx: int = 0) -> None:
        """y = softmax(x) (``dy == 0``) or dx from y and dy. Softmaxes over contiguous rows run
        as gpumsg's own kernel (kernels/softmax.py) where it applies, the rest through cuDNN."""
        if self.softmax_rows.run(stream, dtype, layout, shape, mode, log, x, y, dy, dx):
            return
        self._bind(stream)
        descs: list = []
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        algo = SOFTMAX_LOG if log else SOFTMAX_ACCURATE
        try:
            t = self._nc(descs, dtype, layout, shape)
            if not dy:
                self._check(self.lib.cudnnSoftmaxForward(self.raw_handle, algo,
                                                         SOFTMAX_MODE[mode], one, t, x, zero, t,
                                                         y), "cudnnSoftmaxForward")
            else:
                self._check(self.lib.cudnnSoftmaxBackward(self.raw_handle, algo,
                                                          SOFTMAX_MODE[mode], one, t, y, t, dy,
                                                          zero, t, dx), "cudnnSoftmaxBackward")
        finally:
            self._release(descs)

    def pool(self, stream: Any, dtype: str, layout: str, x_shape: tuple[int, ...],
             y_shape: tuple[int, ...], mode: str, window: tuple[int, ...],
             stride: tuple[int, ...], padding: tuple[int, ...], x: int, y: int, dy: int = 0,
             dx: int = 0) -> None:
        """y = pool(x) (``dy == 0``) or dx from x, y and dy."""
        self._bind(stream)
        descs: list = []
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        try:
            tx = self._nc(descs, dtype, layout, x_shape)
            ty = self._nc(descs, dtype, layout, y_shape)
            p = self._pool(descs, mode, window, stride, padding)
            if not dy:
                self._check(self.lib.cudnnPoolingForward(self.raw_handle, p, one, tx, x, zero,
                                                         ty, y), "cudnnPoolingForward")
            elif mode == "max" and layout == "NHWC":
                self._max_pool_backward_nhwc(stream, descs, p, dtype, x_shape, y_shape, tx, ty,
                                             x, y, dy, dx)
            else:
                self._check(self.lib.cudnnPoolingBackward(self.raw_handle, p, one, ty, y, ty, dy,
                                                          tx, x, zero, tx, dx),
                            "cudnnPoolingBackward")
        finally:
            self._release(descs)

    def _max_pool_backward_nhwc(self, stream: Any, descs: list, p: int, dtype: str,
                                x_shape: tuple[int, ...], y_shape: tuple[int, ...], tx: int,
                                ty: int, x: int, y: int, dy: int, dx: int) -> None:
        """Max-pooling backward of channels-last tensors through channels-first copies in the
        handle's workspace: x, y and dy transposed to NCHW, the NCHW backward, dx transposed
        back. cuDNN 9.19's channels-last max-pooling backward on the H100 did not add up the
        gradients of overlapping windows (3x3 stride 2: wrong where a maximum is shared by two
        windows); its channels-first kernel does."""
        lib, h = self.lib, self.raw_handle
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        nchw_x = tuple(x_shape[:1]) + tuple(x_shape[-1:]) + tuple(x_shape[1:-1])
        nchw_y = tuple(y_shape[:1]) + tuple(y_shape[-1:]) + tuple(y_shape[1:-1])
        cx = self._nc(descs, dtype, "NCHW", nchw_x)
        cy = self._nc(descs, dtype, "NCHW", nchw_y)
        size = dtype_of(dtype).itemsize
        x_bytes = -(-math.prod(x_shape) * size // 256) * 256  # each copy 256-byte aligned
        y_bytes = -(-math.prod(y_shape) * size // 256) * 256
        base = self._workspace(stream, 2 * x_bytes + 2 * y_bytes)
        xc, dxc, yc, dyc = base, base + x_bytes, base + 2 * x_bytes, base + 2 * x_bytes + y_bytes
        for src_desc, src, dst_desc, dst in ((tx, x, cx, xc), (ty, y, cy, yc), (ty, dy, cy, dyc)):
            self._check(lib.cudnnTransformTensor(h, one, src_desc, src, zero, dst_desc, dst),
                        "cudnnTransformTensor")
        self._check(lib.cudnnPoolingBackward(h, p, one, cy, yc, cy, dyc, cx, xc, zero, cx, dxc),
                    "cudnnPoolingBackward")
        self._check(lib.cudnnTransformTensor(h, one, cx, dxc, zero, tx, dx),
                    "cudnnTransformTensor")

    # -- batch normalization ------------------------------------------------------------------
    def _bn_plan(self, dtype: str, layout: str, shape: tuple[int, ...]) -> _BnPlan:
        key = ("bn", dtype, layout, shape)
        plan = self.cache.get(key)
        if plan is None:
            plan = _BnPlan(layout == "NHWC" and len(shape) >= 3)
            try:
                descs: list = []
                plan.descs["x"] = self._nc(descs, dtype, layout, shape)
                d = plan.descs["bn"] = self._new("Tensor")
                self._check(self.lib.cudnnDeriveBNTensorDescriptor(d, plan.descs["x"],
                                                                   BN_SPATIAL),
                            "cudnnDeriveBNTensorDescriptor")
            except BaseException:
                self._destroy(plan)
                raise
            self.cache.put(key, plan)
        return plan

    def _ex_bytes(self, plan: _BnPlan, backward: bool) -> int | None:
        """Workspace bytes of the persistent ``Ex`` call, or None where it does not apply (no
        NHWC, a reserve space would have to outlive the call, or cuDNN refuses)."""
        cached = plan.bwd_ws if backward else plan.fwd_ws
        if cached != -1:
            return cached
        lib, h, x = self.lib, self.raw_handle, plan.descs["x"]
        out: int | None = None
        if plan.persistent:
            size = c_size_t(0)
            status = lib.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                h, BN_SPATIAL_PERSISTENT, BN_OPS_BN, None, x, ctypes.byref(size))
            if status == 0 and size.value == 0:
                if backward:
                    status = lib.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                        h, BN_SPATIAL_PERSISTENT, BN_OPS_BN, x, x, x, None, x, plan.descs["bn"],
                        None, ctypes.byref(size))
                else:
                    status = lib.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                        h, BN_SPATIAL_PERSISTENT, BN_OPS_BN, x, None, x, plan.descs["bn"], None,
                        ctypes.byref(size))
                out = size.value if status == 0 else None
        if backward:
            plan.bwd_ws = out
        else:
            plan.fwd_ws = out
        return out

    def _no_capture(self, what: str, advice: str = "run it once outside the graph first"
                    ) -> None:
        """Raise GraphCaptureError inside a ``dev.graph`` recording: ``what`` would be taken
        from the pool, which a stream capture cannot do."""
        if self._ctx.capture is not None:
            name = type(self._ctx.current).__name__
            raise GraphCaptureError(f"{name} needs {what}, which cannot be allocated under "
                                    f"capture: {advice}", name)

    def _with_workspace(self, stream: Any, nbytes: int, fn: Any) -> int:
        """``fn(ws)`` with ``nbytes`` of workspace from the pool (stream-ordered); its status."""
        memory = self._ctx.memory
        ws = memory.allocate(nbytes, stream) if nbytes else 0
        try:
            return fn(ws)
        finally:
            if nbytes:
                memory.deallocate(ws, nbytes, stream)

    def batch_norm_train(self, stream: Any, dtype: str, layout: str, shape: tuple[int, ...],
                         factor: float, eps: float, x: int, gamma: int, beta: int, y: int,
                         save_mean: int, save_invstd: int, running_mean: int = 0,
                         running_var: int = 0) -> None:
        """Training-mode batch normalization of ``shape`` (in ``layout``); see
        :class:`~gpumsg.messages.cudnn.BatchNormTrain`. Zero running pointers: no update."""
        self._bind(stream)
        plan = self._bn_plan(dtype, layout, shape)
        lib, h, dx, db = self.lib, self.raw_handle, plan.descs["x"], plan.descs["bn"]
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        rm, rv = running_mean or None, running_var or None
        nbytes = self._ex_bytes(plan, False)
        if nbytes is not None:
            status = self._with_workspace(stream, nbytes, lambda ws: (
                lib.cudnnBatchNormalizationForwardTrainingEx(
                    h, BN_SPATIAL_PERSISTENT, BN_OPS_BN, one, zero, dx, x, None, None, dx, y, db,
                    gamma, beta, factor, rm, rv, eps, save_mean, save_invstd, None, ws or None,
                    nbytes, None, 0)))
            if status == 0:
                return
            plan.fwd_ws = None  # refused for this problem: the plain call from now on
        self._check(lib.cudnnBatchNormalizationForwardTraining(
            h, BN_SPATIAL, one, zero, dx, x, dx, y, db, gamma, beta, factor, rm, rv, eps,
            save_mean, save_invstd), "cudnnBatchNormalizationForwardTraining")

    def batch_norm_inference(self, stream: Any, dtype: str, layout: str,
                             shape: tuple[int, ...], eps: float, x: int, gamma: int, beta: int,
                             mean: int, var: int, y: int) -> None:
        """y = gamma (x - mean) / sqrt(var + eps) + beta per channel: gpumsg's own kernel
        (kernels/bn_infer.py says why), cuDNN's where NVRTC is unavailable."""
        if self.bn_infer.run(stream, dtype, layout, shape, eps, x, gamma, beta, mean, var, y):
            return
        self._bind(stream)
        plan = self._bn_plan(dtype, layout, shape)
        d = plan.descs
        self._check(self.lib.cudnnBatchNormalizationForwardInference(
            self.raw_handle, BN_SPATIAL, ctypes.byref(_ONE), ctypes.byref(_ZERO), d["x"], x,
            d["x"], y, d["bn"], gamma, beta, mean, var, eps),
            "cudnnBatchNormalizationForwardInference")

    def batch_norm_backward(self, stream: Any, dtype: str, layout: str,
                            shape: tuple[int, ...], eps: float, x: int, dy: int, gamma: int,
                            save_mean: int, save_invstd: int, dx: int, dgamma: int,
                            dbeta: int) -> None:
        """dx, dgamma, dbeta of training-mode batch normalization."""
        self._bind(stream)
        plan = self._bn_plan(dtype, layout, shape)
        lib, h, t, db = self.lib, self.raw_handle, plan.descs["x"], plan.descs["bn"]
        one, zero = ctypes.byref(_ONE), ctypes.byref(_ZERO)
        nbytes = self._ex_bytes(plan, True)
        if nbytes is not None:
            status = self._with_workspace(stream, nbytes, lambda ws: (
                lib.cudnnBatchNormalizationBackwardEx(
                    h, BN_SPATIAL_PERSISTENT, BN_OPS_BN, one, zero, one, zero, t, x, None, None,
                    t, dy, None, None, t, dx, db, gamma, None, dgamma, dbeta, eps, save_mean,
                    save_invstd, None, ws or None, nbytes, None, 0)))
            if status == 0:
                return
            plan.bwd_ws = None
        self._check(lib.cudnnBatchNormalizationBackward(
            h, BN_SPATIAL, one, zero, one, zero, t, x, t, dy, t, dx, db, gamma, dgamma, dbeta,
            eps, save_mean, save_invstd), "cudnnBatchNormalizationBackward")

    # -- layer, group and instance norms (batch norms on reshaped views) ----------------------
    def _consts(self, stream: Any, n: int) -> tuple[int, int]:
        """(zeros, ones): f32 vectors of at least ``n`` elements the handle keeps."""
        if n > self._const_n:
            memory, backend = self._ctx.memory, self._ctx.backend
            self._free_consts(stream)
            cap = max(n, 1024)
            self._zeros = memory.allocate(4 * cap, stream)
            self._ones = memory.allocate(4 * cap, stream)
            self._const_n = cap
            backend.memset(stream, self._zeros, 0, cap, 4)
            backend.memset(stream, self._ones, 0x3F800000, cap, 4)  # 1.0f
        return self._zeros, self._ones

    def _free_consts(self, stream: Any) -> None:
        if self._const_n:
            for ptr in (self._zeros, self._ones):
                self._ctx.memory.deallocate(ptr, 4 * self._const_n, stream)
            self._const_n = 0

    def norm_forward(self, stream: Any, dtype: str, rows: int, per_row: int,
                     affine: tuple[int, int, int], eps: float, x: int, gamma: int, beta: int,
                     y: int, mean: int, invstd: int) -> None:
        """Per-row normalization of x viewed as ``rows`` x ``per_row`` (statistics to ``mean``
        and ``invstd``), then ``gamma``/``beta`` (0: none) per channel of the ``affine`` view
        (A, K, B): see :class:`~gpumsg.messages.cudnn.LayerNorm`. A layer norm (gamma per
        element of a row) runs as one kernel of gpumsg's own where NVRTC is available."""
        if affine == (rows, per_row, 1) and self.layer_norm.forward(
                stream, dtype, rows, per_row, eps, x, gamma, beta, y, mean, invstd):
            return
        # the batch-norm route takes constants and a temporary from the pool (a group norm
        # always, a layer norm where gpumsg's own kernels cannot run)
        self._no_capture("temporaries of the batch-norm route",
                         f"gpumsg's own layer-norm kernels cannot run here "
                         f"({self.layer_norm.status}); run it outside the graph")
        self._bind(stream)
        zeros, ones = self._consts(stream, max(rows, affine[1]))
        stats = (1, rows, per_row)
        if not gamma:
            self.batch_norm_train(stream, dtype, "NCHW", stats, 0.0, eps, x, ones, zeros, y,
                                  mean, invstd)
            return
        memory = self._ctx.memory
        nbytes = rows * per_row * dtype_of(dtype).itemsize
        tmp = memory.allocate(nbytes, stream)
        try:
            self.batch_norm_train(stream, dtype, "NCHW", stats, 0.0, eps, x, ones, zeros, tmp,
                                  mean, invstd)
            self.batch_norm_inference(stream, dtype, *_scale_view(affine), 0.0, tmp, gamma,
                                      beta, zeros, ones, y)
        finally:
            memory.deallocate(tmp, nbytes, stream)

    def norm_backward(self, stream: Any, dtype: str, rows: int, per_row: int,
                      affine: tuple[int, int, int], eps: float, x: int, dy: int, gamma: int,
                      mean: int, invstd: int, dx: int, dgamma: int, dbeta: int) -> None:
        """The gradients of :meth:`norm_forward` (``gamma`` 0: dx only)."""
        if affine == (rows, per_row, 1) and self.layer_norm.backward(
                stream, dtype, rows, per_row, x, dy, gamma, mean, invstd, dx, dgamma, dbeta):
            return
        self._bind(stream)
        zeros, ones = self._consts(stream, max(rows, affine[1]))
        stats = (1, rows, per_row)
        memory = self._ctx.memory
        nbytes = rows * per_row * dtype_of(dtype).itemsize
        sums = memory.allocate(8 * rows, stream)  # the per-row dscale/dbias nobody reads
        tmp1 = tmp2 = 0
        try:
            g = dy
            if gamma:
                tmp1 = memory.allocate(nbytes, stream)
                tmp2 = memory.allocate(nbytes, stream)
                # x_hat again (the same statistics, recomputed), then dgamma and dbeta from a
                # batch-norm backward on the affine view given mean 0, invstd 1 (its dx unused)
                self.batch_norm_train(stream, dtype, "NCHW", stats, 0.0, eps, x, ones, zeros,
                                      tmp1, 0, 0)
                self.batch_norm_backward(stream, dtype, "NCHW", affine, 0.0, tmp1, dy, gamma,
                                         zeros, ones, tmp2, dgamma, dbeta)
                # dy gamma, per channel of the affine view
                self.batch_norm_inference(stream, dtype, *_scale_view(affine), 0.0, dy, gamma,
                                          zeros, zeros, ones, tmp1)
                g = tmp1
            self.batch_norm_backward(stream, dtype, "NCHW", stats, eps, x, g, ones, mean,
                                     invstd, dx, sums, sums + 4 * rows)
        finally:
            for ptr in (tmp1, tmp2):
                if ptr:
                    memory.deallocate(ptr, nbytes, stream)
            memory.deallocate(sums, 8 * rows, stream)

    # -- dropout ------------------------------------------------------------------------------
    def dropout_reserve_size(self, dtype: str, size: int) -> int:
        """Bytes of reserve space a dropout of ``size`` elements of ``dtype`` needs."""
        known = self._reserve_sizes.get((dtype, size))
        if known is not None:
            return known
        descs: list = []
        try:
            t = self._flat(descs, dtype, size)
            out = c_size_t(0)
            self._check(self.lib.cudnnDropoutGetReserveSpaceSize(t, ctypes.byref(out)),
                        "cudnnDropoutGetReserveSpaceSize")
            if len(self._reserve_sizes) > 1024:
                self._reserve_sizes.clear()
            self._reserve_sizes[(dtype, size)] = out.value
            return out.value
        finally:
            self._release(descs)

    def _dropout_state(self, stream: Any, seed: int, p: float) -> _DropoutState:
        """The descriptor and random-number states of (seed, p), set up on first use: the
        states are initialized by cuDNN's kernel on ``stream``, then copied aside (pristine)."""
        key = (seed, p)
        state = self.dropouts.get(key)
        if state is not None:
            return state
        lib, memory = self.lib, self._ctx.memory
        size = c_size_t(0)
        self._check(lib.cudnnDropoutGetStatesSize(self.raw_handle, ctypes.byref(size)),
                    "cudnnDropoutGetStatesSize")
        state = _DropoutState(size.value)
        try:
            state.desc = self._new("Dropout")
            state.states = memory.allocate(state.nbytes, stream)
            state.pristine = memory.allocate(state.nbytes, stream)
            self._check(lib.cudnnSetDropoutDescriptor(state.desc, self.raw_handle, p,
                                                      state.states, state.nbytes, seed),
                        "cudnnSetDropoutDescriptor")
            self._ctx.backend.copy_dtod(stream, state.pristine, state.states, state.nbytes)
        except BaseException:
            self._free_dropout(state, stream)
            raise
        self.dropouts.put(key, state)
        return state

    def _free_dropout(self, state: _DropoutState, stream: Any = None) -> None:
        stream = stream if stream is not None else self._ctx.compute.obj
        if state.desc:
            self.lib.cudnnDestroyDropoutDescriptor(state.desc)
            state.desc = 0
        for name in ("states", "pristine"):
            ptr = getattr(state, name)
            if ptr:
                self._ctx.memory.deallocate(ptr, state.nbytes, stream)  # stream-ordered
                setattr(state, name, 0)

    def dropout(self, stream: Any, dtype: str, size: int, p: float, seed: int, x: int, y: int,
                reserve: int, reserve_bytes: int, backward: bool = False) -> None:
        """y = dropout(x) writing the mask to ``reserve`` or, with ``backward``, dx (y) from dy
        (x) and the mask. The forward restores (seed, p)'s states from their pristine copy
        first, so the mask depends on (seed, p, size) alone."""
        self._bind(stream)
        state = self._dropout_state(stream, seed, p)
        descs: list = []
        try:
            t = self._flat(descs, dtype, size)
            if not backward:
                self._ctx.backend.copy_dtod(stream, state.states, state.pristine, state.nbytes)
                self._check(self.lib.cudnnDropoutForward(self.raw_handle, state.desc, t, x, t, y,
                                                         reserve, reserve_bytes),
                            "cudnnDropoutForward")
            else:
                self._check(self.lib.cudnnDropoutBackward(self.raw_handle, state.desc, t, x, t,
                                                          y, reserve, reserve_bytes),
                            "cudnnDropoutBackward")
        finally:
            self._release(descs)

    def cache_info(self) -> dict[str, Any]:
        """The plan cache's counters, plus the convolution plans made per path
        (``graph_plans``, ``legacy_plans``), the frontend's state (``frontend``: its version,
        or why it is not used), the last reasons a problem fell back (``graph_declines``) and
        the CUDA-graph replays of graph-path executes (``replay``: whether on, graphs held,
        captures and launches of the plans held now, why plans refused to be captured, and how
        many captures held memory alloc or free nodes)."""
        info: dict[str, Any] = dict(self.cache.info())
        frontend(self.lib)
        info.update(graph_plans=self.paths["graph"], legacy_plans=self.paths["legacy"],
                    frontend=frontend_reason(), graph_declines=list(self.graph_declines))
        replays = [p.graph.replays for p in self.cache.values()
                   if isinstance(p, _GraphConv) and p.graph.replays is not None]
        info["replay"] = {"enabled": self.replay,
                          "graphs": sum(len(r.execs) for r in replays),
                          "captures": sum(r.captures for r in replays),
                          "launches": sum(r.launches for r in replays),
                          "refused": [r.reason for r in replays if r.reason][:4],
                          "with_memory_nodes": sum(r.with_memory_nodes for r in replays)}
        return info

    def close(self) -> None:
        self._ws_captured = False  # the graphs are gone: their workspaces go back too
        self._drop_workspace()
        for ptr, nbytes, stream in self._kept_ws:
            self._ctx.memory.deallocate(ptr, nbytes, stream)
        self._kept_ws.clear()
        self.cache.clear()
        for plan in self._kept_plans:
            self._destroy(plan)
        self._kept_plans.clear()
        self.dropouts.clear()
        self._free_consts(self._ctx.compute.obj)
        if self.raw_handle:
            self.lib.cudnnDestroy(self.raw_handle)
            self.raw_handle = 0
