"""cuBLASLt on the simulator: the matmul with every epilogue and fp8 scales in NumPy, and the
same plan-cache bookkeeping as on a GPU (so CI tests hits and misses)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

from ...backends.sim._device import SimBackend
from ...backends.sim._views import matrix, vector
from ...dtypes import dtype_of
from ...service._plans import PlanCache
from .._workspace import optional_workspace, release_workspace
from ..cublas._bindings import WORKSPACE_BYTES
from ..cublas._sim import gemm, op, tf32

__all__ = ["SimLt", "lt_matmul"]


_SQRT_2_PI = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (what cuBLASLt computes)."""
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_PI * (x + 0.044715 * x ** 3)))


def gelu_grad(x: np.ndarray) -> np.ndarray:
    u = _SQRT_2_PI * (x + 0.044715 * x ** 3)
    th = np.tanh(u)
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * _SQRT_2_PI * (1.0 + 3 * 0.044715 * x * x)


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Convert fp32 results to a storage type (fp8 saturates to its largest finite value)."""
    t = dtype_of(dtype)
    if dtype in ("e4m3", "e5m2"):
        big = float(ml_dtypes.finfo(t).max)
        values = np.clip(values, -big, big)
    return values.astype(t)


def lt_matmul(sim: SimBackend, call: Any) -> None:
    """cuBLASLt matmul with epilogues and fp8 scales (see :mod:`gpumsg.messages.cublaslt`)."""
    f32 = np.float32
    m, n, k, ep = call.m, call.n, call.k, call.epilogue

    def scalar(ptr: int) -> float:
        return float(sim.view(ptr, 4).view(f32)[0]) if ptr else 1.0

    sa, sb, sc, sd = (scalar(p) for p in call.scales)
    a_shape = (m, k) if call.transa == "N" else (k, m)
    b_shape = (k, n) if call.transb == "N" else (n, k)
    am = op(matrix(sim, call.a, *a_shape, call.lda, dtype_of(call.a_type)).astype(f32),
            call.transa)
    bm = op(matrix(sim, call.b, *b_shape, call.ldb, dtype_of(call.b_type)).astype(f32),
            call.transb)
    if call.compute == "tf32":
        am, bm = tf32(am), tf32(bm)
    x = (call.alpha * sa * sb) * (am @ bm) if k else np.zeros((m, n), f32)
    if call.c and call.beta != 0:
        x = x + (call.beta * sc) * matrix(sim, call.c, m, n, call.ldc,
                                          dtype_of(call.c_type)).astype(f32)
    if ep in ("bias", "relu_bias", "gelu_bias", "relu_aux_bias", "gelu_aux_bias"):
        x = x + vector(sim, call.bias, m, 1, dtype_of(call.bias_type)).astype(f32)[:, None]
    d = x
    if ep in ("relu", "relu_bias", "relu_aux", "relu_aux_bias"):
        d = np.maximum(x, 0)
    elif ep in ("gelu", "gelu_bias", "gelu_aux", "gelu_aux_bias"):
        d = gelu(x)
    if ep in ("relu_aux", "relu_aux_bias"):
        bits = np.zeros((call.aux_ld, n), bool)
        bits[:m] = x > 0
        packed = np.packbits(bits.T.reshape(-1), bitorder="little")
        sim.view(call.aux, packed.nbytes)[...] = packed
    elif ep in ("gelu_aux", "gelu_aux_bias"):
        matrix(sim, call.aux, m, n, call.aux_ld, dtype_of(call.d_type))[...] = \
            to_storage(x, call.d_type)
    elif ep in ("drelu", "drelu_bgrad"):
        raw = sim.view(call.aux, call.aux_ld // 8 * n)
        bits = np.unpackbits(raw, bitorder="little").reshape(n, call.aux_ld).T[:m]
        d = x * bits
    elif ep in ("dgelu", "dgelu_bgrad"):
        pre = matrix(sim, call.aux, m, n, call.aux_ld, dtype_of(call.d_type)).astype(f32)
        d = x * gelu_grad(pre)
    if ep in ("drelu_bgrad", "dgelu_bgrad"):
        grad = d.sum(axis=1)
    elif ep == "bgrada":
        grad = am.sum(axis=1)
    elif ep == "bgradb":
        grad = bm.sum(axis=0)
    else:
        grad = None
    if grad is not None:
        vector(sim, call.bias, grad.size, 1, dtype_of(call.bias_type))[...] = \
            to_storage(grad, call.bias_type)
    if call.d_type in ("e4m3", "e5m2"):
        d = d * sd
    matrix(sim, call.d, m, n, call.ldd, dtype_of(call.d_type))[...] = to_storage(d, call.d_type)


class SimLt:
    """The simulator's cuBLASLt handle, with the same plan cache bookkeeping as on a GPU."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.cache = PlanCache(256)
        # the CUDA handle's workspace, degraded the same way (budgets and Stats match)
        self._ctx = ctx
        self._ws, self._ws_bytes = optional_workspace(ctx, "cublaslt", WORKSPACE_BYTES)

    def _plan(self, key: Any) -> None:
        if self.cache.get(key) is None:
            self.cache.put(key, True)

    def matmul(self, stream: Any, call: Any) -> None:
        self._plan(call.plan_key())
        stream.put(lambda: lt_matmul(self.sim, call))

    def gemm(self, stream: Any, dtype: str, compute: str, transa: str, transb: str, m: int,
             n: int, k: int, alpha: Any, a: int, lda: int, b: int, ldb: int, beta: Any, c: int,
             ldc: int) -> None:
        if m and n:
            self._plan((dtype, compute, transa, transb, m, n, k, lda, ldb, ldc))
        stream.put(lambda: gemm(self.sim, dtype, compute, transa, transb, m, n, k, alpha, a, lda,
                                b, ldb, beta, c, ldc))

    def gemm_bound(self, stream: Any, *args: Any) -> Callable[[Any], None]:
        """``launch(stream)``: :meth:`gemm` with these arguments, as the CUDA handle's."""
        def launch(on: Any) -> None:
            self.gemm(on, *args)

        return launch

    def cache_info(self) -> dict[str, int]:
        return self.cache.info()

    def replay_info(self) -> dict[str, Any]:
        """The simulator issues every call as it comes: no CUDA graphs to replay."""
        return {"enabled": False}

    def close(self) -> None:
        release_workspace(self._ctx, "cublaslt", self._ws, self._ws_bytes)
        self._ws = self._ws_bytes = 0
