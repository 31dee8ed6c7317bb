"""Scaled dot-product attention through cuDNN's graph API (``dev.cudnn``): forward (inference
and training, with the saved logsumexp) and backward against a float64 NumPy softmax(QKᵀ·scale)V
computed head by head, with causal (top-left and bottom-right) and padding masks, S_q != S_kv,
grouped and multi-query heads, head dimensions up to 256, f16 and bf16; the graph cache; bad
arguments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import InvalidMessage
from tests.libs.harness import BadArg, assert_close, check_bad_args, random_array, wide


# -- the float64 reference, one (batch, head) at a time ------------------------------------------
def ref_attention(q, k, v, scale, causal, lq, lkv, do=None):
    """(o, lse) and, given do, (dq, dk, dv): valid rows/columns only (the rest stay zero)."""
    q, k, v = wide(q), wide(k), wide(v)
    b_, h_, sq, d = q.shape
    g = h_ // k.shape[1]
    o, lse = np.zeros_like(q), np.zeros((b_, h_, sq, 1))
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(b_):
        nq, nk = lq[b], lkv[b]
        for h in range(h_):
            kk, vv = k[b, h // g, :nk], v[b, h // g, :nk]
            s = scale * q[b, h, :nq] @ kk.T
            if causal == "bottom_right":  # j <= i + (nk - nq): the diagonal ends at key nk-1
                s[np.triu_indices(nq, 1 + nk - nq, nk)] = -np.inf
            elif causal:
                s[np.triu_indices(nq, 1, nk)] = -np.inf
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            p = e / e.sum(axis=1, keepdims=True)
            o[b, h, :nq] = p @ vv
            lse[b, h, :nq] = m + np.log(e.sum(axis=1, keepdims=True))
            if do is not None:
                g_o = wide(do)[b, h, :nq]
                dp = g_o @ vv.T
                ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
                dq[b, h, :nq] = scale * ds @ kk
                dk[b, h // g, :nk] += scale * ds.T @ q[b, h, :nq]
                dv[b, h // g, :nk] += p.T @ g_o
    return (o, lse) if do is None else (dq, dk, dv)


def valid(a, lengths):
    """``a`` (B, H, S, ...) with rows past each batch item's length zeroed (those are
    unspecified on a GPU)."""
    a = np.array(wide(a))
    for b, n in enumerate(lengths):
        a[b, :, n:] = 0.0
    return a


@dataclasses.dataclass(frozen=True)
class Case:
    dtype: str
    causal: bool | str
    padded: bool
    h: int = 4
    hk: int = 4
    sq: int = 48
    skv: int = 48
    d: int = 64
    scale: float | None = None

    def __str__(self) -> str:
        causal = {True: "causal", False: "full"}.get(self.causal, self.causal)
        return (f"{self.dtype}-{causal}-"
                f"{'pad' if self.padded else 'dense'}-h{self.h}/{self.hk}-s{self.sq}/{self.skv}"
                f"-d{self.d}{'' if self.scale is None else '-scaled'}")


CASES = [
    Case("bf16", True, False),
    Case("f16", True, True, hk=2, sq=40, skv=72),            # GQA, S_q != S_kv
    Case("bf16", False, True, hk=1, sq=64, skv=40, d=128),   # MQA
    Case("f16", False, False, sq=24, skv=56, d=32, scale=0.3),
    Case("bf16", True, True, h=8, hk=2, sq=72, skv=40, d=96),
    Case("bf16", "bottom_right", False, sq=24, skv=56),      # queries at the end of the keys
    Case("f16", "bottom_right", True, hk=2, sq=40, skv=72),  # ... of each item's valid keys
    Case("bf16", "bottom_right", False, sq=48, skv=48),      # S_q == S_kv: as top-left
    Case("bf16", True, False, h=2, hk=2, sq=64, skv=64, d=256),  # the largest head
    Case("f16", False, True, h=2, hk=1, sq=40, skv=56, d=192),
]


def _lengths(rng, batch, full, padded):
    if not padded:
        return [full] * batch
    return [int(x) for x in rng.integers(max(1, full // 3), full + 1, size=batch)]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_attention_forward_backward(dev, rng, case: Case) -> None:
    bsz = 2
    q = random_array(rng, (bsz, case.h, case.sq, case.d), case.dtype)
    k = random_array(rng, (bsz, case.hk, case.skv, case.d), case.dtype)
    v = random_array(rng, (bsz, case.hk, case.skv, case.d), case.dtype)
    do = random_array(rng, q.shape, case.dtype)
    lq, lkv = _lengths(rng, bsz, case.sq, case.padded), _lengths(rng, bsz, case.skv, case.padded)
    if case.causal == "bottom_right":  # every query row must see a key: len_q <= len_kv
        lq = [min(a, b) for a, b in zip(lq, lkv)]
    scale = 1.0 / np.sqrt(case.d) if case.scale is None else case.scale
    masks = dict(seq_len_q=lq, seq_len_kv=lkv) if case.padded else {}
    qd, kd, vd = dev.to_device(q), dev.to_device(k), dev.to_device(v)

    o_ref, lse_ref = ref_attention(q, k, v, scale, case.causal, lq, lkv)
    o, stats = dev.cudnn.scaled_dot_product_attention(qd, kd, vd, causal=case.causal,
                                                   scale=case.scale, training=True,
                                                   **masks).result(60)
    o_host = dev.copy_to_host(o).result()
    assert o_host.dtype == gpumsg.as_dtype(case.dtype)
    assert_close(valid(o_host, lq), o_ref, case.dtype)
    lse = dev.copy_to_host(stats).result()
    assert lse.shape == (bsz, case.h, case.sq, 1) and lse.dtype == np.float32
    assert_close(valid(lse, lq), lse_ref, "f16")  # f32 statistics of half-precision scores

    # inference: no statistics, the same output
    o_inf = dev.cudnn.scaled_dot_product_attention(qd, kd, vd, causal=case.causal,
                                                scale=case.scale, **masks)
    assert_close(valid(dev.copy_to_host(o_inf).result(), lq), o_ref, case.dtype)

    # backward from the forward's own o and stats
    grads = dev.cudnn.scaled_dot_product_attention_backward(
        qd, kd, vd, o, dev.to_device(do), stats, causal=case.causal, scale=case.scale,
        **masks).result(60)
    refs = ref_attention(q, k, v, scale, case.causal, lq, lkv, do)
    for name, got, ref, n in zip(("dq", "dk", "dv"), grads, refs, (lq, lkv, lkv)):
        out = dev.copy_to_host(got).result()
        assert out.shape == ref.shape, name
        assert_close(valid(out, n), ref, case.dtype, 2.0)


def _dropout_ref(q, k, v, scale, keep, do):
    """(o, dq, dk, dv) in float64 for o = (softmax(scale q kᵀ) * keep) v, ``keep`` the dropout
    factors (0 or 1/(1-p)) read off the device's own mask."""
    q, k, v, do = wide(q), wide(k), wide(v), wide(do)
    s = scale * np.einsum("bhid,bhjd->bhij", q, k)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p * keep, v)
    dv = np.einsum("bhij,bhid->bhjd", p * keep, do)
    dp = np.einsum("bhid,bhjd->bhij", do, v) * keep
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, k)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q)
    return o, dq, dk, dv, p


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_attention_dropout_mask_scaling_and_replay(dev, rng, dtype: str) -> None:
    """Dropout p: with v the identity, o is the dropped and rescaled probabilities themselves,
    so the device's mask can be read off o: about 1 - p of them kept, each scaled by
    1/(1 - p); the same (seed, offset) gives the same mask, another offset another; the
    forward with real v and the backward (given the same three) match a float64 reference
    that uses that mask."""
    p, seed, offset = 0.3, 7, 3
    b, h, sq, skv = 2, 2, 16, 32
    d, scale = skv, 0.125
    half = gpumsg.as_dtype(dtype)
    q = (rng.standard_normal((b, h, sq, d)) * 0.3).astype(half)  # probabilities near 1/S_kv
    k = (rng.standard_normal((b, h, skv, d)) * 0.3).astype(half)
    eye = np.ascontiguousarray(np.broadcast_to(np.eye(skv, d), (b, h, skv, d))).astype(half)
    qd, kd, ed = dev.to_device(q), dev.to_device(k), dev.to_device(eye)
    kw = dict(scale=scale, training=True, dropout=p, seed=seed)

    o_eye, _ = dev.cudnn.scaled_dot_product_attention(qd, kd, ed, offset=offset, **kw).result(60)
    got = wide(dev.copy_to_host(o_eye).result())
    probs = _dropout_ref(q, k, eye, scale, np.ones((b, h, sq, skv)), q)[4]
    kept = got != 0.0
    assert abs(kept.mean() - (1 - p)) < 0.06, kept.mean()  # 2048 draws: 6 standard deviations
    assert_close(got[kept], probs[kept] / (1 - p), dtype)  # kept ones scaled by 1/(1-p)
    again, _ = dev.cudnn.scaled_dot_product_attention(qd, kd, ed, offset=offset, **kw).result(60)
    assert np.array_equal(wide(dev.copy_to_host(again).result()), got)  # replayed
    # a fresh mask: another seed, or the offset advanced by the elements drawn per call
    # (nearby offsets draw overlapping Philox streams: on the H100 offset + 1 changed 10%)
    for change in (dict(seed=seed + 1, offset=offset),
                   dict(seed=seed, offset=offset + b * h * sq * skv)):
        other, _ = dev.cudnn.scaled_dot_product_attention(qd, kd, ed, **{**kw, **change}).result(60)
        differ = ((wide(dev.copy_to_host(other).result()) != 0.0) != kept).mean()
        assert 0.3 < differ < 0.55, (change, differ)  # independent masks: 2 p (1 - p) = 0.42

    keep = kept / (1 - p)
    v = random_array(rng, (b, h, skv, d), dtype)
    do = random_array(rng, (b, h, sq, d), dtype)
    vd = dev.to_device(v)
    o, stats = dev.cudnn.scaled_dot_product_attention(qd, kd, vd, offset=offset, **kw).result(60)
    o_ref, dq_ref, dk_ref, dv_ref, _ = _dropout_ref(q, k, v, scale, keep, do)
    assert_close(dev.copy_to_host(o).result(), o_ref, dtype)
    grads = dev.cudnn.scaled_dot_product_attention_backward(
        qd, kd, vd, o, dev.to_device(do), stats, scale=scale, dropout=p, seed=seed,
        offset=offset).result(60)
    for fut, ref in zip(grads, (dq_ref, dk_ref, dv_ref)):
        assert_close(dev.copy_to_host(fut).result(), ref, dtype, 2.0)


def test_attention_device_lengths_and_cache(dev, rng) -> None:
    """Lengths given as device buffers; one side alone means the other is full; the second
    identical call reuses the built graph."""
    q = random_array(rng, (3, 2, 32, 16), "bf16")
    k = random_array(rng, (3, 2, 32, 16), "bf16")
    v = random_array(rng, (3, 2, 32, 16), "bf16")
    lkv = [int(x) for x in rng.integers(1, 33, size=3)]
    qd, kd, vd = dev.to_device(q), dev.to_device(k), dev.to_device(v)
    ref, _ = ref_attention(q, k, v, 0.25, True, [32] * 3, lkv)
    before = dev.cudnn.attention_cache_info().result()
    lens = dev.to_device(np.array(lkv, np.int32))
    o1 = dev.cudnn.scaled_dot_product_attention(qd, kd, vd, causal=True, seq_len_kv=lens)
    o2 = dev.cudnn.scaled_dot_product_attention(qd, kd, vd, causal=True, seq_len_kv=lkv)
    for o in (o1, o2):
        assert_close(dev.copy_to_host(o).result(), ref, "bf16")
    after = dev.cudnn.attention_cache_info().result()
    assert after["misses"] - before["misses"] == 1
    assert after["hits"] - before["hits"] == 1


def test_attention_out_buffers(dev, rng) -> None:
    """``out`` and ``stats`` given: written in place, the futures answer the writes."""
    q = random_array(rng, (1, 2, 16, 8), "f16")
    qd = dev.to_device(q)
    out, st = dev.alloc(q.shape, "f16", order="C"), dev.alloc((1, 2, 16, 1), "f32", order="C")
    done = dev.cudnn.scaled_dot_product_attention(qd, qd, qd, training=True, out=out, stats=st)
    done.result(timeout=60)
    o_ref, lse_ref = ref_attention(q, q, q, 1 / np.sqrt(8), False, [16], [16])
    assert_close(dev.copy_to_host(out).result(), o_ref, "f16")
    assert_close(dev.copy_to_host(st).result(), lse_ref, "f16")


def _t(dev, shape=(2, 4, 16, 32), dtype="bf16"):
    return dev.to_device(np.full(shape, 1.5).astype(gpumsg.as_dtype(dtype)))


def _sdpa(d, q=None, k=None, v=None, **kw):
    # ``is None``, not ``or``: a buffer's truth is its one element's, as an array's
    q, k, v = (_t(d) if t is None else t for t in (q, k, v))
    return d.cudnn.scaled_dot_product_attention(q, k, v, **kw)


def _bwd(d, **over):
    args = dict(q=_t(d), k=_t(d), v=_t(d), o=_t(d), do=_t(d),
                stats=d.to_device(np.zeros((2, 4, 16, 1), np.float32)))
    args.update({n: f(d) for n, f in over.items()})
    return d.cudnn.scaled_dot_product_attention_backward(**args)


BAD = [
    BadArg("k batch mismatch", lambda d: _sdpa(d, k=_t(d, (3, 4, 16, 32))), field="k"),
    BadArg("k head dim mismatch", lambda d: _sdpa(d, k=_t(d, (2, 4, 16, 16))), field="k"),
    BadArg("heads do not divide", lambda d: _sdpa(d, k=_t(d, (2, 3, 16, 32)),
                                                  v=_t(d, (2, 3, 16, 32))), field="k"),
    BadArg("v shape", lambda d: _sdpa(d, v=_t(d, (2, 4, 12, 32))), field="v"),
    BadArg("D not a multiple of 8", lambda d: _sdpa(d, *(_t(d, (2, 4, 16, 20)),) * 3),
           field="q", match="head dimension"),
    BadArg("D above 256", lambda d: _sdpa(d, *(_t(d, (1, 1, 8, 264)),) * 3), field="q",
           match="head dimension"),
    BadArg("f32 refused", lambda d: _sdpa(d, *(_t(d, dtype="f32"),) * 3), field="q"),
    BadArg("dtype mix", lambda d: _sdpa(d, k=_t(d, dtype="f16")), field="k"),
    BadArg("3-D q", lambda d: _sdpa(d, q=_t(d, (4, 16, 32))), field="q"),
    BadArg("column-major q",
           lambda d: _sdpa(d, q=d.alloc((2, 4, 16, 32), "bf16", order="F")), field="q"),
    BadArg("causal not a bool", lambda d: _sdpa(d, causal=1), field="causal"),
    BadArg("causal alignment unknown", lambda d: _sdpa(d, causal="lower"), field="causal"),
    BadArg("causal an array", lambda d: _sdpa(d, causal=np.array([True, False])),
           field="causal"),
    BadArg("bottom-right with S_q > S_kv", lambda d: _sdpa(
        d, k=_t(d, (2, 4, 8, 32)), v=_t(d, (2, 4, 8, 32)), causal="bottom_right"),
        field="causal", match="S_q <= S_kv"),
    BadArg("scale zero", lambda d: _sdpa(d, scale=0.0), field="scale"),
    BadArg("dropout of 1", lambda d: _sdpa(d, training=True, dropout=1.0), field="dropout"),
    BadArg("dropout negative", lambda d: _sdpa(d, training=True, dropout=-0.1),
           field="dropout"),
    BadArg("dropout at inference", lambda d: _sdpa(d, dropout=0.1), field="dropout",
           match="training"),
    BadArg("seed negative", lambda d: _sdpa(d, training=True, dropout=0.1, seed=-1),
           field="seed"),
    BadArg("offset not an int", lambda d: _sdpa(d, training=True, dropout=0.1, offset=1.5),
           field="offset"),
    BadArg("scale NaN", lambda d: _sdpa(d, scale=float("nan")), field="scale"),
    BadArg("lengths count", lambda d: _sdpa(d, seq_len_q=[16, 16, 16]), field="seq_len_q"),
    BadArg("length past S", lambda d: _sdpa(d, seq_len_kv=[16, 17]), field="seq_len_kv"),
    BadArg("length zero", lambda d: _sdpa(d, seq_len_q=[0, 4]), field="seq_len_q"),
    BadArg("lengths dtype", lambda d: _sdpa(d, seq_len_q=d.to_device(np.ones(2, np.int64)),
                                            seq_len_kv=[3, 4]), field="seq_len_q"),
    BadArg("out shape", lambda d: _sdpa(d, out=_t(d, (2, 4, 16, 16))), field="o"),
    BadArg("out is q (in place)", lambda d: (lambda q: _sdpa(d, q=q, out=q))(_t(d)),
           field="o"),
    BadArg("stats dtype", lambda d: _sdpa(d, training=True, stats=_t(d, (2, 4, 16, 1))),
           field="stats"),
    BadArg("stats shape", lambda d: _sdpa(d, training=True, stats=d.to_device(
        np.zeros((2, 4, 16), np.float32))), field="stats"),
    BadArg("backward do shape", lambda d: _bwd(d, do=lambda d: _t(d, (2, 4, 8, 32))),
           field="do"),
    BadArg("backward o dtype", lambda d: _bwd(d, o=lambda d: _t(d, dtype="f16")), field="o"),
    BadArg("backward stats shape", lambda d: _bwd(d, stats=lambda d: d.to_device(
        np.zeros((2, 4, 8, 1), np.float32))), field="stats"),
    BadArg("backward D", lambda d: _bwd(d, **{n: (lambda d: _t(d, (2, 4, 16, 12)))
                                              for n in ("q", "k", "v", "o", "do")}),
           field="q"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_attention_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


def test_attention_messages_refuse_one_sided_lengths(dev) -> None:
    """The message itself takes both length vectors or neither."""
    from gpumsg.messages import AttentionForward

    q = _t(dev)
    with pytest.raises(InvalidMessage) as info:
        AttentionForward(q, q, q, _t(dev), seq_len_q=dev.to_device(np.ones(2, np.int32)))
    assert info.value.field == "seq_len_kv"


def test_frontend_missing_is_a_typed_error(monkeypatch) -> None:
    """Without the cuDNN frontend package the GPU side fails with FrontendMissing (a
    LibraryError naming the package), not an ImportError; gpumsg itself imports without it."""
    import sys

    from gpumsg.libs.cudnn import _graph as graph
    from gpumsg.libs.cudnn.attention import _handle as attention

    monkeypatch.setattr(graph, "_STATE", {})  # not imported yet in this process
    monkeypatch.setitem(sys.modules, "cudnn", None)  # "import cudnn" raises ImportError
    with pytest.raises(attention.FrontendMissing, match="nvidia-cudnn-frontend") as info:
        attention.frontend()
    assert isinstance(info.value, gpumsg.LibraryError)
    assert info.value.lib == "cudnn_frontend"


@pytest.mark.gpu
def test_frontend_shares_gpumsgs_cudnn(rng) -> None:
    """On a GPU the frontend runs on the libcudnn gpumsg loaded, interleaved on one handle and
    one stream with gpumsg's own cuDNN calls (a convolution before and after)."""
    from tests.conftest import need_backend

    need_backend("cuda")
    with gpumsg.open_device(0, backend="cuda") as dev:
        x = random_array(rng, (1, 2, 16, 8), "bf16")
        w = random_array(rng, (2, 2, 1, 1), "bf16")
        xd, wd = dev.to_device(x), dev.to_device(w)
        c1 = dev.cudnn.conv2d(xd, wd)
        o = dev.cudnn.scaled_dot_product_attention(xd, xd, xd, causal=True)
        c2 = dev.cudnn.conv2d(o, wd)
        ref, _ = ref_attention(x, x, x, 1 / np.sqrt(8), True, [16], [16])
        assert_close(dev.copy_to_host(o).result(), ref, "bf16")
        conv = lambda a: np.einsum("nchw,kc->nkhw", wide(a), wide(w)[:, :, 0, 0])  # noqa: E731
        assert_close(dev.copy_to_host(c1).result(), conv(x), "bf16")
        assert_close(dev.copy_to_host(c2).result(), conv(dev.copy_to_host(o).result()), "bf16")
    from gpumsg.libs._loader import load
    from gpumsg.libs.cudnn.attention._handle import frontend

    assert frontend().backend_version() == load("cudnn").cudnnGetVersion()
