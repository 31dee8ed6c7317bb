"""Scaled dot-product (flash) attention on the GPU through cuDNN's graph API, built with the
cuDNN frontend's Python package (``nvidia-cudnn-frontend``, imported ``cudnn``).

Why the frontend: it installs from the package index (a pure manylinux wheel with no CUDA
runtime of its own; the optional extra ``gpumsg[dnn]``), and its SDPA node is the one
cuDNN maintains for flash attention (its engine choice, masks and padding rules); building the
same operation graph from backend descriptors through ctypes would repeat several hundred lines
of attribute plumbing for one operation. The import is lazy: gpumsg imports and serves every
other message without it, and an attention message on the cuda backend fails with
:class:`FrontendMissing` when it is absent.

Same library, same handle, same stream: the frontend is pointed at the ``libcudnn.so.9`` gpumsg
loaded (through cuda-pathfinder, :mod:`gpumsg.libs._loader`), and its graphs build and run on
the device's own cuDNN handle (:class:`~gpumsg.libs.cudnn._handle.DnnHandle`), bound to the
compute stream before each execution, so attention is stream-ordered with everything else.
Buffers are handed over as raw device addresses (the frontend's variant pack takes ints).

Each problem (pass, dtype, B, H, H_kv, S_q, S_kv, D, causal, padding, scale, stats) is one
built graph in a :class:`~gpumsg.service._plans.PlanCache`; its workspace comes from the
device's pool on the compute stream and is freed right after the launch (stream-ordered).
Nothing here waits on the GPU: graph building is host work (cuDNN's heuristics, kernel
compilation on the first build of a problem).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ....errors import LibraryError
from ....service._plans import PlanCache
from .._graph import frontend as graph_frontend
from .._graph import frontend_reason

__all__ = ["AttentionCall", "AttentionHandle", "FrontendMissing", "frontend"]


class FrontendMissing(LibraryError):
    """The cuDNN frontend's Python package (``nvidia-cudnn-frontend``) is not importable, so
    attention cannot run on a GPU: ``pip install 'gpumsg[dnn]'``."""

    def __init__(self, why: str) -> None:
        super().__init__("cudnn_frontend", -1, "CUDNN_FRONTEND_NOT_INSTALLED",
                         f"import cudnn ({why}); install nvidia-cudnn-frontend "
                         "(pip install 'gpumsg[dnn]')")


@dataclasses.dataclass(frozen=True, slots=True)
class AttentionCall:
    """One attention pass as the handles see it: ``kind`` "fwd" or "bwd"; geometry (B, H,
    H_kv, S_q, S_kv, D); ``stats`` whether the forward saves them; ``padding`` whether the
    seq-len pointers are given; the rest are device addresses (0: absent)."""

    kind: str
    dtype: str
    b: int
    h: int
    hk: int
    sq: int
    skv: int
    d: int
    causal: bool | str  # False, "top_left" or "bottom_right"
    padding: bool
    scale: float
    stats: bool
    q: int
    k: int
    v: int
    o: int
    lse: int = 0
    do: int = 0
    dq: int = 0
    dk: int = 0
    dv: int = 0
    seq_q: int = 0
    seq_kv: int = 0
    dropout: float = 0.0  # the probability (part of the graph)
    seed: int = 0  # the mask's seed and offset (values, set on the device per call)
    offset: int = 0

    def plan_key(self) -> tuple:
        return (self.kind, self.dtype, self.b, self.h, self.hk, self.sq, self.skv, self.d,
                self.causal, self.padding, self.scale, self.stats, self.dropout)


def frontend(lib: Any = None) -> Any:
    """The ``cudnn`` frontend module, bound to gpumsg's libcudnn (``lib``, its LoadedLibrary;
    the one loader is :func:`gpumsg.libs.cudnn._graph.frontend`, shared with convolutions).
    Raises :class:`FrontendMissing`, with the reason, when it cannot be used."""
    module = graph_frontend(lib)
    if module is None:
        raise FrontendMissing(frontend_reason())
    return module


def _strides(shape: tuple[int, ...]) -> list[int]:
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * shape[i + 1]
    return out


class _Graph:
    """One built SDPA graph: the frontend graph, its tensors by role, its workspace bytes."""

    __slots__ = ("graph", "tensors", "workspace")

    def __init__(self, graph: Any, tensors: dict[str, Any], workspace: int) -> None:
        self.graph = graph
        self.tensors = tensors
        self.workspace = workspace


class AttentionHandle:
    """Attention graphs of one device (device thread), built on the device's cuDNN handle."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._dnn = ctx.library("cudnn")  # loads libcudnn.so.9, creates the handle
        self.cudnn = frontend(self._dnn.lib)
        self.raw_handle: int = self._dnn.raw_handle
        ordinal = getattr(ctx.backend, "ordinal", 0)
        # the frontend's wrapper of a foreign cudnnHandle_t; gpumsg owns (and destroys) it
        self.handle = self.cudnn.Handle(self.raw_handle, ordinal, None)
        self.cache = PlanCache(64)
        self.version = int(self.cudnn.backend_version())
        self._rng = 0  # 16 bytes of device memory: the dropout seed and offset (int64 each)

    # -- building ------------------------------------------------------------------------------
    def _error(self, exc: BaseException, what: str) -> LibraryError:
        text = str(exc).strip().splitlines()
        detail = text[0] if text else type(exc).__name__
        name = ("CUDNN_STATUS_NOT_SUPPORTED" if "NotSupported" in type(exc).__name__
                else type(exc).__name__)
        err = LibraryError("cudnn", 9 if name == "CUDNN_STATUS_NOT_SUPPORTED" else -1, name,
                           f"{what}: {detail[:400]}")
        return err

    def _build(self, call: AttentionCall) -> _Graph:
        cudnn = self.cudnn
        dt = cudnn.data_type.BFLOAT16 if call.dtype == "bf16" else cudnn.data_type.HALF
        f32 = cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=dt, intermediate_data_type=f32, compute_data_type=f32,
                          handle=self.handle)
        qs = (call.b, call.h, call.sq, call.d)
        ks = (call.b, call.hk, call.skv, call.d)
        ls = (call.b, call.h, call.sq, 1)
        t: dict[str, Any] = {}

        def tensor(name: str, shape: tuple[int, ...], dtype: Any = dt) -> Any:
            t[name] = g.tensor(name=name, dim=list(shape), stride=_strides(shape),
                               data_type=dtype)
            return t[name]

        q, k, v = tensor("q", qs), tensor("k", ks), tensor("v", ks)
        kw: dict[str, Any] = {"attn_scale": call.scale}
        if call.padding:
            one = (call.b, 1, 1, 1)
            kw.update(use_padding_mask=True, seq_len_q=tensor("seq_q", one, cudnn.data_type.INT32),
                      seq_len_kv=tensor("seq_kv", one, cudnn.data_type.INT32))
        if call.causal:  # row i sees columns j <= i (top-left) or j <= i + S_kv - S_q
            align = cudnn.diagonal_alignment.BOTTOM_RIGHT if call.causal == "bottom_right" \
                else cudnn.diagonal_alignment.TOP_LEFT
            kw.update(diagonal_alignment=align, diagonal_band_right_bound=0)
        if call.dropout:  # seed and offset: int64 device scalars (see _rng_slot)
            one = (1, 1, 1, 1)
            kw["dropout"] = (call.dropout, tensor("seed", one, cudnn.data_type.INT64),
                             tensor("offset", one, cudnn.data_type.INT64))
        if call.kind == "fwd":
            o, lse = g.sdpa(q, k, v, name="sdpa", generate_stats=call.stats, **kw)
            o.set_output(True).set_dim(list(qs)).set_stride(_strides(qs)).set_data_type(dt)
            t["o"] = o
            if call.stats:
                lse.set_output(True).set_dim(list(ls)).set_stride(_strides(ls)) \
                    .set_data_type(f32)
                t["lse"] = lse
        else:
            o, do, lse = tensor("o", qs), tensor("do", qs), tensor("lse", ls, f32)
            dq, dk, dv = g.sdpa_backward(q, k, v, o, do, lse, name="sdpa_backward", **kw)
            for name, tt, shape in (("dq", dq, qs), ("dk", dk, ks), ("dv", dv, ks)):
                tt.set_output(True).set_dim(list(shape)).set_stride(_strides(shape)) \
                    .set_data_type(dt)
                t[name] = tt
        step = "validate"
        try:
            g.validate()
            step = "build_operation_graph"
            g.build_operation_graph()
            step = "create_execution_plans"
            g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            self._prefer_backend(g)
            step = "check_support"
            g.check_support()
            step = "build_plans"
            g.build_plans()
            step = "get_workspace_size"
            ws = int(g.get_workspace_size())
        except Exception as exc:
            raise self._error(exc, f"cudnn frontend {step} (sdpa {call.kind} {call.dtype} "
                              f"B={call.b} H={call.h}/{call.hk} S={call.sq}/{call.skv} "
                              f"D={call.d})") from exc
        return _Graph(g, t, ws)

    @staticmethod
    def _prefer_backend(g: Any) -> None:
        """Leave only cuDNN's own engines in the plan walk when it has any: the frontend may
        rank engines of its own first (CuTe-DSL kernels, JIT-compiled for seconds on first use
        and present only when ``nvidia-cutlass-dsl`` is installed); the backend's run on the
        handle's stream with no compilation beyond cuDNN's."""
        try:
            from cudnn.engines.engine_ids import is_python_engine  # type: ignore
        except ImportError:
            return
        plans = g.plans
        python = [i for i, cfg in enumerate(plans) if is_python_engine(cfg.engine_id)]
        if python and len(python) < len(plans):
            g.deselect_engines([g.get_plan_name_at_index(i).split("[")[0] for i in python])

    def graph(self, call: AttentionCall) -> _Graph:
        key = call.plan_key()
        plan = self.cache.get(key)
        if plan is None:
            plan = self._build(call)
            self.cache.put(key, plan)
        return plan

    # -- running -------------------------------------------------------------------------------
    def run(self, stream: Any, call: AttentionCall) -> None:
        """Issue one attention pass on ``stream`` (the compute stream): build or reuse its
        graph, take its workspace from the pool, launch, free the workspace stream-ordered."""
        plan = self.graph(call)
        t = plan.tensors
        pack: dict[Any, int] = {t["q"]: call.q, t["k"]: call.k, t["v"]: call.v}
        if call.padding:
            pack[t["seq_q"]], pack[t["seq_kv"]] = call.seq_q, call.seq_kv
        if call.dropout:
            pack[t["seed"]], pack[t["offset"]] = self._rng_slot(stream, call.seed, call.offset)
        if call.kind == "fwd":
            pack[t["o"]] = call.o
            if call.stats:
                pack[t["lse"]] = call.lse
        else:
            for name in ("o", "do", "lse", "dq", "dk", "dv"):
                pack[t[name]] = getattr(call, name)
        self._dnn._bind(stream)  # cudnnSetStream on the shared handle (when it changed)
        self.handle.stream = int(stream)
        memory = self._ctx.memory
        nbytes = plan.workspace
        ws = memory.allocate(nbytes, stream) if nbytes else 0
        try:
            plan.graph.execute(pack, ws if nbytes else None, handle=self.handle)
        except Exception as exc:
            if isinstance(exc, LibraryError):
                raise
            raise self._error(exc, f"cudnn frontend execute (sdpa {call.kind})") from exc
        finally:
            if nbytes:
                memory.deallocate(ws, nbytes, stream)  # stream-ordered: reused after the work

    def _rng_slot(self, stream: Any, seed: int, offset: int) -> tuple[int, int]:
        """Device addresses of the int64 seed and offset, set to these values in stream order
        (four 32-bit memsets: their values are taken when they are enqueued, so pipelined
        calls with other values cannot overwrite this call's before it runs)."""
        backend = self._ctx.backend
        if not self._rng:
            self._rng = self._ctx.memory.allocate(16, stream)
        for i, value in enumerate((seed, offset)):
            for half in range(2):
                backend.memset(stream, self._rng + 8 * i + 4 * half,
                               (value >> (32 * half)) & 0xFFFFFFFF, 1, 4)
        return self._rng, self._rng + 8

    def cache_info(self) -> dict[str, int]:
        return self.cache.info()

    def close(self) -> None:
        self.cache.clear()
        if self._rng:
            self._ctx.memory.deallocate(self._rng, 16, self._ctx.compute.obj)
            self._rng = 0
        self.handle.backend_handle = None  # the cuDNN handle is the DnnHandle's to destroy
