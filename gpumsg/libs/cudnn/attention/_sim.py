"""Attention on the simulator: the semantics of :mod:`gpumsg.messages.cudnn_attention` in NumPy
float64 (read from the simulated memory in the buffers' dtype, rounded to it when stored),
with the same graph-cache bookkeeping as on a GPU. Padding rows and columns are written as
zeros (on a GPU they are unspecified)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....backends.sim._device import SimBackend
from ....dtypes import dtype_of
from ....service._plans import PlanCache
from ._handle import AttentionCall

__all__ = ["SimAttention", "sdpa_forward", "sdpa_backward", "attention_mask"]


def attention_mask(b: int, sq: int, skv: int, causal: bool | str, len_q: np.ndarray | None,
                   len_kv: np.ndarray | None) -> np.ndarray:
    """(B, 1, S_q, S_kv) booleans: True where query row i may see key column j (``causal``:
    False, "top_left" (or True) or "bottom_right", see gpumsg.messages.cudnn_attention)."""
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    ok = np.ones((b, 1, sq, skv), bool)
    if causal == "bottom_right":  # the diagonal ends at the last (valid) key
        shift = np.full((b, 1, 1, 1), skv - sq) if len_q is None or len_kv is None else \
            (len_kv.astype(np.int64) - len_q.astype(np.int64)).reshape(b, 1, 1, 1)
        ok &= j[None, None] <= i[None, None] + shift
    elif causal:
        ok &= (j <= i)[None, None]
    if len_q is not None and len_kv is not None:
        ok &= (i[None, None] < len_q.reshape(b, 1, 1, 1)) & \
            (j[None, None] < len_kv.reshape(b, 1, 1, 1))
    return ok


def _expand(a: np.ndarray, h: int) -> np.ndarray:
    """Key/value heads repeated to the query heads they serve (GQA/MQA)."""
    return np.repeat(a, h // a.shape[1], axis=1)


def _group_sum(a: np.ndarray, hk: int) -> np.ndarray:
    b, h, s, d = a.shape
    return a.reshape(b, hk, h // hk, s, d).sum(axis=2)


def dropout_keep(shape: tuple[int, ...], p: float, seed: int, offset: int) -> np.ndarray:
    """The simulator's dropout: the factor of each probability, 1/(1 - p) where kept (chance
    1 - p), 0 where dropped; a function of (seed, offset) through NumPy's Philox."""
    draw = np.random.Generator(np.random.Philox(key=seed, counter=offset)).random(shape)
    return np.where(draw >= p, 1.0 / (1.0 - p), 0.0)


def sdpa_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask: np.ndarray,
                 keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(o, lse) in float64: o = (softmax(scale q kᵀ, masked) * keep) v, ``keep`` the dropout
    factors (None: no dropout); lse (B, H, S_q, 1) the natural-log logsumexp of each row's
    visible scores (before dropout). Rows that see nothing get o = 0 and lse = 0."""
    s = scale * np.einsum("bhid,bhjd->bhij", q, _expand(k, q.shape[1]))
    s = np.where(mask, s, -np.inf)
    live = mask.any(axis=-1, keepdims=True)
    m = np.where(live, s.max(axis=-1, keepdims=True), 0.0)
    e = np.where(mask, np.exp(s - m), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    lse = np.where(live, m + np.log(np.where(live, total, 1.0)), 0.0)
    p = e / np.where(live, total, 1.0)
    if keep is not None:
        p = p * keep
    o = np.einsum("bhij,bhjd->bhid", p, _expand(v, q.shape[1]))
    return o, lse


def sdpa_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                  do: np.ndarray, lse: np.ndarray, scale: float, mask: np.ndarray,
                  keep: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) in float64, with the probabilities recomputed from the saved ``lse`` and
    the row terms from the given ``o`` (as the flash-attention backward does); ``keep``: the
    forward's dropout factors."""
    h, hk = q.shape[1], k.shape[1]
    ke, ve = _expand(k, h), _expand(v, h)
    s = scale * np.einsum("bhid,bhjd->bhij", q, ke)
    p = np.where(mask, np.exp(np.where(mask, s, 0.0) - lse), 0.0)
    pk = p if keep is None else p * keep
    dv = np.einsum("bhij,bhid->bhjd", pk, do)
    dp = np.einsum("bhid,bhjd->bhij", do, ve)
    if keep is not None:
        dp = dp * keep
    delta = (do * o).sum(axis=-1, keepdims=True)
    ds = p * (dp - delta)
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, ke)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q)
    return dq, _group_sum(dk, hk), _group_sum(dv, hk)


class SimAttention:
    """The simulator's attention "handle": NumPy semantics on the simulated stream."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.cache = PlanCache(64)

    def _view(self, ptr: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        t = dtype_of(dtype)
        return self.sim.view(ptr, int(np.prod(shape)) * t.itemsize).view(t).reshape(shape)

    def run(self, stream: Any, call: AttentionCall) -> None:
        """Enqueue one attention pass on the simulated ``stream``."""
        key = call.plan_key()
        if self.cache.get(key) is None:
            self.cache.put(key, True)
        c = call
        qs, ks, ls = (c.b, c.h, c.sq, c.d), (c.b, c.hk, c.skv, c.d), (c.b, c.h, c.sq, 1)

        def load(ptr: int, shape: tuple[int, ...], dtype: str = c.dtype) -> np.ndarray:
            return self._view(ptr, shape, dtype).astype(np.float64)

        def store(ptr: int, value: np.ndarray, dtype: str = c.dtype) -> None:
            self._view(ptr, value.shape, dtype)[...] = value.astype(dtype_of(dtype))

        def work() -> None:
            lq = lkv = None
            if c.padding:
                lq = self._view(c.seq_q, (c.b,), "i32").astype(np.int64)
                lkv = self._view(c.seq_kv, (c.b,), "i32").astype(np.int64)
            mask = attention_mask(c.b, c.sq, c.skv, c.causal, lq, lkv)
            keep = dropout_keep((c.b, c.h, c.sq, c.skv), c.dropout, c.seed, c.offset) \
                if c.dropout else None
            q, k, v = load(c.q, qs), load(c.k, ks), load(c.v, ks)
            if c.kind == "fwd":
                o, lse = sdpa_forward(q, k, v, c.scale, mask, keep)
                store(c.o, o)
                if c.stats:
                    store(c.lse, lse, "f32")
                return
            o, do = load(c.o, qs), load(c.do, qs)
            lse = load(c.lse, ls, "f32")
            dq, dk, dv = sdpa_backward(q, k, v, o, do, lse, c.scale, mask, keep)
            store(c.dq, dq)
            store(c.dk, dk)
            store(c.dv, dv)

        stream.put(work)

    def cache_info(self) -> dict[str, int]:
        return self.cache.info()

    def close(self) -> None:
        pass
