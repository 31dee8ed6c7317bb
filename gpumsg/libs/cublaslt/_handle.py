"""The cuBLASLt handle of one device (device thread), with its plan cache and workspace.

Every matmul shape is planned once: descriptors, layouts and the heuristic's algorithm are kept
in an LRU :class:`~gpumsg.service._plans.PlanCache` keyed by everything that changes the plan
(dtypes, compute type, transposes, sizes, leading dimensions, epilogue, bias/aux types, which
scales are set). Later calls with that key only set their pointers and call ``cublasLtMatmul``,
which is also why ``Gemm``/``Sgemm`` go through here: a cached plan costs far less host time per
call than ``cublasSgemm``'s own heuristics. The workspace comes from the device's memory pool.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable
from typing import Any

from ...backends.cuda._replays import GraphReplays, device_replays, direct, direct_bound, enabled
from ...dtypes import CUDA_DATA_TYPE
from ...errors import LibraryError
from ...messages.cublaslt import EPILOGUES
from ...service._plans import PlanCache
from .._loader import c_int, c_void_p, load
from .._workspace import optional_workspace, release_workspace
from ..cublas._bindings import COMPUTE_TYPE, OP, WORKSPACE_BYTES, scale_type
from ..cublas._handle import REPLAY_CAPACITY, ScalarCache, status_error
from ._bindings import (
    AUX_LD,
    AUX_POINTER,
    BIAS_DATA_TYPE,
    BIAS_POINTER,
    EPILOGUE,
    PREF_MAX_WORKSPACE,
    SCALE_POINTERS,
    TRANSA,
    TRANSB,
    HeuristicResult,
)

__all__ = ["LtHandle", "LtCall", "NoAlgorithm"]


class NoAlgorithm(LibraryError):
    """cuBLASLt's heuristic offers no algorithm for this problem."""

    def __init__(self, detail: str) -> None:
        super().__init__("cublasLt", 15, "CUBLAS_STATUS_NOT_SUPPORTED",
                         f"cublasLtMatmulAlgoGetHeuristic ({detail})")


@dataclasses.dataclass(frozen=True, slots=True)
class LtCall:
    """One cuBLASLt matmul as the handles see it: types, layout, epilogue, and pointers."""

    a_type: str
    b_type: str
    c_type: str
    d_type: str
    compute: str
    transa: str
    transb: str
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    ldd: int
    epilogue: str
    bias_type: str | None
    aux_ld: int | None
    alpha: float
    beta: float
    a: int
    b: int
    c: int
    d: int
    bias: int = 0
    aux: int = 0
    scales: tuple[int, int, int, int] = (0, 0, 0, 0)

    def plan_key(self) -> tuple:
        return (self.a_type, self.b_type, self.c_type, self.d_type, self.compute, self.transa,
                self.transb, self.m, self.n, self.k, self.lda, self.ldb, self.ldc, self.ldd,
                self.epilogue, self.bias_type, self.aux_ld, tuple(bool(s) for s in self.scales))


class _Plan:
    __slots__ = ("desc", "layouts", "algo", "workspace")

    def __init__(self, desc: int, layouts: tuple[int, int, int, int], algo: Any,
                 workspace: int) -> None:
        self.desc = desc
        self.layouts = layouts
        self.algo = algo
        self.workspace = workspace


class LtHandle:
    """One cuBLASLt handle of one device with its plan cache and workspace (device thread)."""

    def __init__(self, ctx: Any) -> None:
        self.lib = load("cublasLt")
        self._ctx = ctx
        h = c_void_p()
        self._check(self.lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
        self.raw_handle: int = h.value or 0
        self.cache = PlanCache(256, self._destroy)
        self._unplannable: set[tuple] = set()
        self._scalars = ScalarCache()
        # smaller, or none, when the budget or the device cannot give it: the heuristics then
        # pick among the algorithms that fit (see _plan)
        self._ws, self._ws_bytes = optional_workspace(ctx, "cublaslt", WORKSPACE_BYTES)
        self._matmul = self.lib.cublasLtMatmul
        #: matmuls repeated with the same call are replayed as CUDA graphs, as the cuBLAS
        #: handle's GEMMs are (GPUMSG_BLAS_REPLAY=0 turns both off)
        self.replays: GraphReplays | None = None
        self._issue: Any = direct
        self._bound: Any = direct_bound
        if enabled("GPUMSG_BLAS_REPLAY"):
            self.replays = device_replays(ctx, REPLAY_CAPACITY)
            self._issue = self.replays.call
            self._bound = self.replays.bound

    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(load("cublas"), "cublasLt", status, function)

    def _attr(self, desc: int, attr: int, value: Any) -> None:
        self._check(self.lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value),
                                                            ctypes.sizeof(value)),
                    "cublasLtMatmulDescSetAttribute")

    def _layout(self, dtype: str, rows: int, cols: int, ld: int) -> int:
        out = c_void_p()
        self._check(self.lib.cublasLtMatrixLayoutCreate(ctypes.byref(out), CUDA_DATA_TYPE[dtype],
                                                         rows, cols, ld),
                    "cublasLtMatrixLayoutCreate")
        return out.value  # type: ignore[return-value]

    def _plan(self, call: LtCall) -> _Plan:
        lib = self.lib
        desc = c_void_p()
        self._check(lib.cublasLtMatmulDescCreate(
            ctypes.byref(desc), COMPUTE_TYPE[call.a_type, call.compute],
            CUDA_DATA_TYPE[scale_type(call.a_type)]), "cublasLtMatmulDescCreate")
        d = desc.value
        layouts: list[int] = []
        try:
            self._attr(d, TRANSA, ctypes.c_int32(OP[call.transa]))
            self._attr(d, TRANSB, ctypes.c_int32(OP[call.transb]))
            if call.epilogue != "none":
                self._attr(d, EPILOGUE, ctypes.c_uint32(EPILOGUES[call.epilogue]))
            if call.bias_type is not None:
                self._attr(d, BIAS_DATA_TYPE, ctypes.c_int32(CUDA_DATA_TYPE[call.bias_type]))
            if call.aux_ld is not None:
                self._attr(d, AUX_LD, ctypes.c_int64(call.aux_ld))
            self._set_pointers(d, call)  # the heuristic looks at their alignment
            a_rows, a_cols = (call.m, call.k) if call.transa == "N" else (call.k, call.m)
            b_rows, b_cols = (call.k, call.n) if call.transb == "N" else (call.n, call.k)
            layouts = [self._layout(call.a_type, a_rows, a_cols, call.lda),
                       self._layout(call.b_type, b_rows, b_cols, call.ldb),
                       self._layout(call.c_type, call.m, call.n, call.ldc),
                       self._layout(call.d_type, call.m, call.n, call.ldd)]
            pref = c_void_p()
            self._check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)),
                        "cublasLtMatmulPreferenceCreate")
            try:
                ws = ctypes.c_uint64(self._ws_bytes)
                self._check(lib.cublasLtMatmulPreferenceSetAttribute(
                    pref, PREF_MAX_WORKSPACE, ctypes.byref(ws), 8),
                    "cublasLtMatmulPreferenceSetAttribute")
                result = HeuristicResult()
                count = c_int(0)
                status = lib.cublasLtMatmulAlgoGetHeuristic(
                    self.raw_handle, d, *layouts, pref, 1, ctypes.byref(result),
                    ctypes.byref(count))
            finally:
                lib.cublasLtMatmulPreferenceDestroy(pref)
            if status or count.value == 0:
                raise NoAlgorithm(f"{call.a_type} {call.transa}{call.transb} "
                                  f"{call.m}x{call.n}x{call.k} epilogue {call.epilogue}, "
                                  f"status {status}")
            return _Plan(d, tuple(layouts), result, result.workspaceSize)  # type: ignore[arg-type]
        except BaseException:
            for lay in layouts:
                lib.cublasLtMatrixLayoutDestroy(lay)
            lib.cublasLtMatmulDescDestroy(d)
            raise

    def _set_pointers(self, desc: int, call: LtCall) -> None:
        if call.bias:
            self._attr(desc, BIAS_POINTER, c_void_p(call.bias))
        if call.aux:
            self._attr(desc, AUX_POINTER, c_void_p(call.aux))
        for attr, ptr in zip(SCALE_POINTERS, call.scales):
            if ptr:
                self._attr(desc, attr, c_void_p(ptr))

    def _destroy(self, plan: _Plan) -> None:
        for lay in plan.layouts:
            self.lib.cublasLtMatrixLayoutDestroy(lay)
        self.lib.cublasLtMatmulDescDestroy(plan.desc)

    def matmul(self, stream: Any, call: LtCall) -> None:
        """One matmul (with its epilogue) through a cached plan; a repeated call is replayed."""
        self._issue("matmul", self._matmul_now, stream, call)

    def _matmul_now(self, stream: Any, call: LtCall) -> None:
        key = call.plan_key()
        plan = self.cache.get(key)
        if plan is None:
            plan = self._plan(call)
            self.cache.put(key, plan)
        else:
            self._set_pointers(plan.desc, call)
        scale = scale_type(call.a_type)
        A, B, C, D = plan.layouts
        status = self._matmul(self.raw_handle, plan.desc, self._scalars.get(scale, call.alpha),
                              call.a, A, call.b, B, self._scalars.get(scale, call.beta),
                              call.c or call.d, C, call.d, D, ctypes.byref(plan.algo), self._ws,
                              plan.workspace, int(stream))
        if status:
            self._check(status, "cublasLtMatmul")

    def gemm(self, stream: Any, dtype: str, compute: str, transa: str, transb: str, m: int,
             n: int, k: int, alpha: Any, a: int, lda: int, b: int, ldb: int, beta: Any, c: int,
             ldc: int) -> None:
        """A plain GEMM (C = alpha op(A) op(B) + beta C) through a cached plan; through
        ``cublasGemmEx`` when cuBLASLt has no algorithm for the shape. A repeated call is
        replayed."""
        if m == 0 or n == 0 or (dtype, compute, transa, transb, m, n, k, lda, ldb,
                                ldc) in self._unplannable:
            self._ctx.library("cublas").gemm(stream, dtype, compute, transa, transb, m, n, k,
                                             alpha, a, lda, b, ldb, beta, c, ldc)
            return
        self._issue("gemm", self._gemm_now, stream, dtype, compute, transa, transb, m, n, k,
                    alpha, a, lda, b, ldb, beta, c, ldc)

    def gemm_bound(self, stream: Any, dtype: str, compute: str, transa: str, transb: str,
                   m: int, n: int, k: int, alpha: Any, a: int, lda: int, b: int, ldb: int,
                   beta: Any, c: int, ldc: int) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`gemm` with these arguments on ``stream``, its replay key
        built once (a handler keeps the launcher per message, or by value:
        service/derived.py)."""
        if m == 0 or n == 0:
            cublas = self._ctx.library("cublas")
            args = (dtype, compute, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

            def empty(on: Any) -> None:
                cublas.gemm(on, *args)

            return empty
        return self._bound("gemm", self._gemm_now, stream, dtype, compute, transa, transb, m,
                           n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def _gemm_now(self, stream: Any, dtype: str, compute: str, transa: str, transb: str,
                  m: int, n: int, k: int, alpha: Any, a: int, lda: int, b: int, ldb: int,
                  beta: Any, c: int, ldc: int) -> None:
        key = (dtype, compute, transa, transb, m, n, k, lda, ldb, ldc)
        plan = self.cache.get(key)
        if plan is None:
            if key in self._unplannable:  # a bound launcher's call (gemm checks before)
                self._ctx.library("cublas").gemm(stream, dtype, compute, transa, transb, m, n,
                                                 k, alpha, a, lda, b, ldb, beta, c, ldc)
                return
            call = LtCall(dtype, dtype, dtype, dtype, compute, transa, transb, m, n, k, lda, ldb,
                          ldc, ldc, "none", None, None, alpha, beta, a, b, c, c)
            try:
                plan = self._plan(call)
            except NoAlgorithm:
                # found on a call made as usual (a call is replayed only after one succeeded,
                # and a replayed one has been planned): cuBLAS serves this shape from now on
                self._unplannable.add(key)
                self._ctx.library("cublas").gemm(stream, dtype, compute, transa, transb, m, n,
                                                 k, alpha, a, lda, b, ldb, beta, c, ldc)
                return
            self.cache.put(key, plan)
        scalars = self._scalars
        A, B, C, D = plan.layouts
        status = self._matmul(self.raw_handle, plan.desc, scalars.get(dtype, alpha), a, A, b, B,
                              scalars.get(dtype, beta), c, C, c, D, ctypes.byref(plan.algo),
                              self._ws, plan.workspace, int(stream))
        if status:
            self._check(status, "cublasLtMatmul")

    def cache_info(self) -> dict[str, int]:
        return self.cache.info()

    def replay_info(self) -> dict[str, Any]:
        """The matmul replays: on or off, graphs held, captures, launches, why refused."""
        r = self.replays
        return {"enabled": False} if r is None else {"enabled": True, **r.info()}

    def close(self) -> None:
        if self.replays is not None:  # before the workspace their kernels use is freed
            self.replays.close()
        self.cache.clear()
        if self.raw_handle:
            self.lib.cublasLtDestroy(self.raw_handle)
            self.raw_handle = 0
        release_workspace(self._ctx, "cublaslt", self._ws, self._ws_bytes)
        self._ws = self._ws_bytes = 0
