"""``dev.cudnn``'s attention methods (caller's thread): scaled dot-product attention forward
and backward, returning futures. Mixed into ``dev.cudnn`` by the library registry (the
"cudnn_attention" library shares cuDNN's namespace)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import InvalidMessage
from ....messages._base import BufRef, as_ref
from ....messages.cudnn_attention import AttentionBackward, AttentionCacheInfo, AttentionForward
from ..._answers import AttentionGrads, AttentionOutputs, tuple_after

if TYPE_CHECKING:
    from ....client._device import Device

__all__ = ["DnnAttention"]


def _is_buffer(value: Any) -> bool:
    return type(value) is BufRef or type(getattr(value, "ref", None)) is BufRef


class DnnAttention:
    """Scaled dot-product (flash) attention through cuDNN's graph API; see
    :mod:`gpumsg.messages.cudnn_attention` for layouts, masks and precisions."""

    _dev: Device

    def _lengths(self, value: Any, field: str, batch: int, full: int) -> Any:
        """A device i32 vector of per-batch lengths: ``value`` itself when it is a buffer,
        else the host sequence checked (B values in 1..S) and uploaded."""
        if value is None or _is_buffer(value):
            return value
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError):
            arr = np.asarray(None)
        if arr.dtype.kind not in "iu" or arr.shape != (batch,):
            raise InvalidMessage(f"{field}: expected a device buffer or {batch} integer "
                                 f"lengths (one per batch item), got {value!r}", field=field)
        if batch and (arr.min() < 1 or arr.max() > full):
            raise InvalidMessage(f"{field}: every length must lie in 1..{full}, got "
                                 f"{arr.tolist()}", field=field)
        return self._dev.to_device(arr.astype(np.int32))

    def _masks(self, q: Any, k: Any, seq_len_q: Any, seq_len_kv: Any) -> tuple[Any, Any]:
        """Both length vectors (a missing one means the full length), or (None, None)."""
        if seq_len_q is None and seq_len_kv is None:
            return None, None
        qs, ks = tuple(as_ref(q, "q").shape), tuple(as_ref(k, "k").shape)
        if len(qs) != 4 or len(ks) != 4:
            return seq_len_q, seq_len_kv  # the message names the bad field
        b = qs[0]
        lq = self._lengths(seq_len_q if seq_len_q is not None else [qs[2]] * b, "seq_len_q", b,
                           qs[2])
        lkv = self._lengths(seq_len_kv if seq_len_kv is not None else [ks[2]] * b,
                            "seq_len_kv", b, ks[2])
        return lq, lkv

    def _alloc(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self._dev.alloc(shape if all(s > 0 for s in shape) else (1,), dtype, order="C")

    def scaled_dot_product_attention(self, q: Any, k: Any, v: Any, causal: bool | str = False,
                                     scale: float | None = None, seq_len_q: Any = None,
                                     seq_len_kv: Any = None, training: bool = False,
                                     out: Any = None, stats: Any = None,
                                     dropout: float = 0.0, seed: int = 0, offset: int = 0
                                     ) -> Future:
        """o = softmax(scale q kᵀ + masks) v for q (B, H, S_q, D), k and v (B, H_kv, S_kv, D),
        f16 or bf16 (row-major). ``scale`` defaults to 1/sqrt(D); ``causal``: False, True (or
        "top_left": row i sees keys j <= i) or "bottom_right" (j <= i + S_kv - S_q, for
        queries that are the last S_q positions, as with a key/value cache);
        ``seq_len_q``/``seq_len_kv`` (device i32 (B,) buffers or host sequences of B lengths
        in 1..S; one alone means the other side is full) mask padding. Returns the
        future of o (new, or ``out``); with ``training`` a future of (o, stats), stats the f32
        (B, H, S_q, 1) logsumexp the backward needs (new, or ``stats``). ``dropout`` (training
        only): the probability of dropping each attention weight, the mask drawn from
        (``seed``, ``offset``); give the backward the same three; for a fresh mask change the
        seed or advance the offset by at least B * H * S_q * S_kv. Work runs on the compute
        stream; bad arguments raise InvalidMessage naming the field here."""
        dev = self._dev
        dev.port.check_open()
        if not isinstance(training, (bool, np.bool_)):
            raise InvalidMessage(f"training: expected a bool, got {type(training).__name__}",
                                 field="training")
        qr = as_ref(q, "q")
        lq, lkv = self._masks(q, k, seq_len_q, seq_len_kv)
        o = out if out is not None else self._alloc(tuple(qr.shape), qr.dtype)
        st = stats
        if training and st is None:
            shape = (*qr.shape[:3], 1) if len(qr.shape) == 4 else (1,)
            st = self._alloc(tuple(shape), "f32")
        done = dev.send(AttentionForward(q, k, v, o, st if training else None, lq, lkv, causal,
                                         scale, dropout, seed, offset))
        if not training:
            return done if out is not None else dev.buffer_after(done, o)
        return tuple_after(done, AttentionOutputs, o, st)

    def scaled_dot_product_attention_backward(self, q: Any, k: Any, v: Any, o: Any, do: Any,
                                              stats: Any, causal: bool | str = False,
                                              scale: float | None = None,
                                              seq_len_q: Any = None, seq_len_kv: Any = None,
                                              dropout: float = 0.0, seed: int = 0,
                                              offset: int = 0
                                              ) -> Future:
        """A future of (dq, dk, dv) (new buffers shaped like q, k, v) of
        :meth:`scaled_dot_product_attention` given its inputs, its output ``o``, the output's
        gradient ``do`` and the ``stats`` of its training pass, with the same masks, scale and
        dropout (probability, seed and offset: the forward's mask is replayed)."""
        dev = self._dev
        dev.port.check_open()
        qr, kr = as_ref(q, "q"), as_ref(k, "k")
        lq, lkv = self._masks(q, k, seq_len_q, seq_len_kv)
        dq = self._alloc(tuple(qr.shape), qr.dtype)
        dk = self._alloc(tuple(kr.shape), kr.dtype)
        dv = self._alloc(tuple(kr.shape), kr.dtype)
        done = dev.send(AttentionBackward(q, k, v, o, do, stats, dq, dk, dv, lq, lkv, causal,
                                          scale, dropout, seed, offset))
        return tuple_after(done, AttentionGrads, dq, dk, dv)

    def attention_cache_info(self) -> Future:
        """Resolves to the attention graph cache's counters: hits, misses, size, capacity,
        evictions."""
        return self._dev.send(AttentionCacheInfo())
