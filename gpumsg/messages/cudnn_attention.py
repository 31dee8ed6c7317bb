"""Scaled dot-product (flash) attention as messages, run by cuDNN's graph API (SDPA).

Tensors are row-major (``order="C"``) device buffers in the (B, H, S, D) layout:

=========================  ====================  =========================================
buffer                     shape                 dtype
=========================  ====================  =========================================
``q``, ``o``, ``dq``,      (B, H, S_q, D)        f16 or bf16 (all the same)
``do``
``k``, ``v``, ``dk``,      (B, H_kv, S_kv, D)    q's; H_kv divides H (H_kv < H: grouped
``dv``                                           queries, GQA; H_kv = 1: multi-query, MQA)
``stats``                  (B, H, S_q, 1)        f32: per query row the natural-log
                                                 logsumexp of its masked, scaled scores
``seq_len_q``,             (B,)                  i32: the valid length of each batch item
``seq_len_kv``                                   (padding masks; both or neither)
=========================  ====================  =========================================

``o = softmax(scale q kᵀ + mask) v`` per (batch, head); query head h reads key/value head
``h // (H / H_kv)``. ``scale`` defaults to 1/sqrt(D). Masks: ``causal=True`` (or
``"top_left"``) lets query row i see key columns j <= i (top-left aligned, as
``torch.nn.functional.scaled_dot_product_attention`` with ``is_causal``, also when S_q != S_kv);
``causal="bottom_right"`` lets it see j <= i + (S_kv - S_q), the diagonal ending at the last key
(FlashAttention's causal, torch's ``causal_lower_right``: the queries are the last S_q positions
of the S_kv keys, as when decoding with a key/value cache; with padding masks the valid lengths
take the place of S_q and S_kv). It needs S_q <= S_kv (a row that sees no key has no softmax);
with padding masks seq_len_q[b] <= seq_len_kv[b] is the caller's to keep. Padding masks hide key
columns j >= seq_len_kv[b],
and query rows i >= seq_len_q[b] are padding: what o, stats and dq hold there, and what dk/dv
hold at key rows j >= seq_len_kv[b], is unspecified (the simulator writes zeros). Every valid
length must lie in 1..S (the device cannot check: a length outside is the caller's error).

D is a multiple of 8 and at most 256. cuDNN's fused flash-attention kernels take D <= 128 for
both passes on Ampere and later; 128 < D <= 256 runs where the cuDNN version and the GPU have
kernels for it (cuDNN 9 on Hopper does). Where they do not, the message fails with cuDNN's
CUDNN_STATUS_NOT_SUPPORTED as a LibraryError, and the device goes on serving. f32 and f64
inputs are refused (use f16 or bf16: the kernels accumulate in f32).
The backward pass recomputes the probabilities from ``stats`` (saved by the training forward)
and takes the forward's output ``o``.

Dropout (``dropout`` = p > 0, training only): each probability is kept with chance 1 - p and
scaled by 1/(1 - p), dropped otherwise. The mask is a function of (``seed``, ``offset``) and
the element's position (cuDNN's Philox generator; the simulator's NumPy Philox draws another
mask with the same law): the same pair gives the same mask, and the backward, given the
forward's pair, replays it. For a fresh mask change ``seed``, or advance ``offset`` by at
least B * H * S_q * S_kv, the values one call draws (nearby offsets draw overlapping streams:
on an H100 offset + 1 changed 10% of the mask, against 2p(1 - p) for an independent one).
"""

from __future__ import annotations

import math
from typing import Any

from ._base import (
    BufRef,
    Message,
    _dense_rows,
    _fail,
    _int,
    _known,
    _real,
    _ref,
    _require_dtype,
    _set,
    message,
)

__all__ = ["AttentionForward", "AttentionBackward", "AttentionCacheInfo", "ATTENTION_DTYPES",
           "ATTENTION_MAX_D", "attention_dims"]

ATTENTION_DTYPES = ("f16", "bf16")
#: the largest head dimension taken (a multiple of 8 up to this)
ATTENTION_MAX_D = 256
#: the largest dropout seed and offset (int64 on the device)
_RNG_MAX = (1 << 63) - 1
#: ``causal`` values besides False: where the mask's diagonal is anchored
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def attention_dims(q_shape: tuple[int, ...], k_shape: tuple[int, ...]
                   ) -> tuple[int, int, int, int, int, int]:
    """(B, H, H_kv, S_q, S_kv, D) of q (B, H, S_q, D) and k (B, H_kv, S_kv, D)."""
    b, h, sq, d = q_shape
    hk, skv = k_shape[1], k_shape[2]
    return b, h, hk, sq, skv, d


def _bhsd(msg: object, field: str, ref: BufRef, dtype: str | None = None) -> None:
    _require_dtype(msg, field, ref, (dtype,) if dtype else ATTENTION_DTYPES)
    if len(ref.shape) != 4:
        raise _fail(msg, field, f"{ref.describe()} must have 4 dimensions (B, H, S, D)")
    _dense_rows(msg, field, ref)


def _same(msg: object, field: str, ref: BufRef, shape: tuple[int, ...], what: str) -> None:
    if tuple(ref.shape) != tuple(shape):
        raise _fail(msg, field, f"{ref.describe()} must have {what}'s shape {list(shape)}")


def _check(msg: Any, forward: bool) -> None:
    """Validate and normalize the fields shared by both passes."""
    q, k, v = (_ref(msg, n, getattr(msg, n)) for n in ("q", "k", "v"))
    _set(msg, "q", q)
    _set(msg, "k", k)
    _set(msg, "v", v)
    _bhsd(msg, "q", q)
    _bhsd(msg, "k", k, q.dtype)
    _bhsd(msg, "v", v, q.dtype)
    b, h, sq, d = q.shape
    if d % 8 or d > ATTENTION_MAX_D:
        raise _fail(msg, "q", f"head dimension D = {d} is out of range: it must be a multiple "
                    f"of 8 and at most {ATTENTION_MAX_D}")
    if k.shape[0] != b:
        raise _fail(msg, "k", f"{k.describe()} has batch {k.shape[0]}; q has {b}")
    if k.shape[3] != d:
        raise _fail(msg, "k", f"{k.describe()} has head dimension {k.shape[3]}; q has {d}")
    hk = k.shape[1]
    if h % hk:
        raise _fail(msg, "k", f"{k.describe()} has {hk} heads, which does not divide q's {h} "
                    "(grouped-query attention needs H % H_kv == 0)")
    _same(msg, "v", v, k.shape, "k")
    causal = msg.causal
    if causal is True:
        causal = "top_left"
    elif causal is not False and not _known(causal, CAUSAL_ALIGNMENTS):
        raise _fail(msg, "causal", f"expected False, True, 'top_left' or 'bottom_right', got "
                    f"{causal!r}")
    _set(msg, "causal", causal)  # False, "top_left" or "bottom_right"
    if causal == "bottom_right" and sq > k.shape[2]:
        raise _fail(msg, "causal", f"bottom-right causal attention needs S_q <= S_kv (got "
                    f"{sq} > {k.shape[2]}): the first {sq - k.shape[2]} query rows would see no "
                    "key")
    if msg.scale is None:
        _set(msg, "scale", 1.0 / math.sqrt(d))
    else:
        s = _real(msg, "scale", msg.scale)
        if not math.isfinite(s) or s == 0.0:
            raise _fail(msg, "scale", f"must be finite and non-zero, got {s}")
        _set(msg, "scale", s)
    p = _real(msg, "dropout", msg.dropout)
    if not 0.0 <= p < 1.0:
        raise _fail(msg, "dropout", f"must be a probability in [0, 1), got {p}")
    _set(msg, "dropout", p)
    _set(msg, "seed", _int(msg, "seed", msg.seed, hi=_RNG_MAX))
    _set(msg, "offset", _int(msg, "offset", msg.offset, hi=_RNG_MAX))
    if (msg.seq_len_q is None) != (msg.seq_len_kv is None):
        missing = "seq_len_kv" if msg.seq_len_kv is None else "seq_len_q"
        raise _fail(msg, missing, "padding masks take both seq_len_q and seq_len_kv")
    if msg.seq_len_q is not None:
        for n in ("seq_len_q", "seq_len_kv"):
            r = _ref(msg, n, getattr(msg, n))
            _set(msg, n, r)
            _require_dtype(msg, n, r, ("i32",))
            if r.size != b or sum(s > 1 for s in r.shape) > 1:
                raise _fail(msg, n, f"{r.describe()} must hold one length per batch item "
                            f"({b})")
    # outputs: distinct from every input and from each other
    outs = ("o", "stats") if forward else ("dq", "dk", "dv")
    ins = [q, k, v] + ([] if forward else [msg.o, msg.do, msg.stats])
    seen: list[BufRef] = []
    for n in outs:
        value = getattr(msg, n)
        if value is None:
            continue
        r = _ref(msg, n, value)
        _set(msg, n, r)
        if any(r.owner == x.owner and r.id == x.id for x in ins + seen):
            raise _fail(msg, n, f"{r.describe()} is also an input or another output of this "
                        "attention (cuDNN's kernels do not run in place)")
        seen.append(r)


@message(buffers=("q", "k", "v", "o", "stats", "seq_len_q", "seq_len_kv"),
         writes=("o", "stats"))
class AttentionForward(Message):
    """o = softmax(scale q kᵀ + masks) v (see the module's table). With ``stats`` (training)
    the per-row logsumexp is saved for :class:`AttentionBackward`; without it (inference) the
    kernel writes none."""

    q: BufRef
    k: BufRef
    v: BufRef
    o: BufRef
    stats: BufRef | None = None
    seq_len_q: BufRef | None = None
    seq_len_kv: BufRef | None = None
    causal: bool | str = False
    scale: float | None = None
    dropout: float = 0.0
    seed: int = 0
    offset: int = 0

    def __post_init__(self) -> None:
        _check(self, True)
        if self.dropout and self.stats is None:
            raise _fail(self, "dropout", "dropout is a training-time mask: it needs the "
                        "training pass (stats), which the backward replays it from")
        _bhsd(self, "o", self.o, self.q.dtype)
        _same(self, "o", self.o, self.q.shape, "q")
        if self.stats is not None:
            _require_dtype(self, "stats", self.stats, ("f32",))
            b, h, sq, _ = self.q.shape
            if tuple(self.stats.shape) != (b, h, sq, 1):
                raise _fail(self, "stats", f"{self.stats.describe()} must have shape "
                            f"{[b, h, sq, 1]} (B, H, S_q, 1)")


@message(buffers=("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv", "seq_len_q",
                  "seq_len_kv"), writes=("dq", "dk", "dv"))
class AttentionBackward(Message):
    """dq, dk, dv of :class:`AttentionForward` given its inputs, its output ``o``, the output's
    gradient ``do`` and the saved ``stats``, with the forward's masks and scale. With grouped
    queries, dk and dv sum over the query heads that share each key/value head."""

    q: BufRef
    k: BufRef
    v: BufRef
    o: BufRef
    do: BufRef
    stats: BufRef
    dq: BufRef
    dk: BufRef
    dv: BufRef
    seq_len_q: BufRef | None = None
    seq_len_kv: BufRef | None = None
    causal: bool | str = False
    scale: float | None = None
    dropout: float = 0.0
    seed: int = 0
    offset: int = 0

    def __post_init__(self) -> None:
        for n in ("o", "do", "stats"):
            _set(self, n, _ref(self, n, getattr(self, n)))
        _check(self, False)
        q = self.q
        for n in ("o", "do", "dq"):
            r = getattr(self, n)
            _bhsd(self, n, r, q.dtype)
            _same(self, n, r, q.shape, "q")
        for n in ("dk", "dv"):
            r = getattr(self, n)
            _bhsd(self, n, r, q.dtype)
            _same(self, n, r, self.k.shape, "k")
        _require_dtype(self, "stats", self.stats, ("f32",))
        b, h, sq, _ = q.shape
        if tuple(self.stats.shape) != (b, h, sq, 1):
            raise _fail(self, "stats", f"{self.stats.describe()} must have shape "
                        f"{[b, h, sq, 1]} (B, H, S_q, 1)")


@message()
class AttentionCacheInfo(Message):
    """Answers the attention graph cache's counters: hits, misses, size, capacity,
    evictions."""
