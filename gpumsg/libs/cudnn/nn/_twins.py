"""The NumPy twins of ``dev.nn``'s generated kernels (:mod:`.kernels`): what the simulator
runs for each, registered under every instance's name with
:func:`~gpumsg.libs.nvrtc.sim_kernel`. Each takes flat views of whole buffers (only the
elements the kernel names are set) and computes as the kernel does: f64 in f64, the other
types in f32, losses summed in f64."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ...nvrtc._sim import sim_kernel
from ._kernels import _INDEX, _TYPES, kernel_name

__all__: list[str] = []


# -- the simulator's twins (flat views of whole buffers; only the elements named are set) ----
def _wide(a: np.ndarray) -> np.ndarray:
    """float64 values of a float view (f16, bf16, f32 or f64)."""
    return a.astype(np.float64)


def _compute(dtype: np.dtype) -> Any:
    """The precision a kernel computes in for its element type (f64 for f64, else f32)."""
    return np.float64 if dtype == np.float64 else np.float32


def _twin(op: str, index: bool = False) -> Any:
    def wrap(fn: Any) -> Any:
        for s in _TYPES:
            if index:
                for i in _INDEX:
                    sim_kernel(kernel_name(op, s, i))(fn)
            else:
                sim_kernel(kernel_name(op, s))(fn)
        return fn

    return wrap


@_twin("leaky_relu")
def _leaky_relu(launch: Any, x: np.ndarray, y: np.ndarray, n: Any, slope: Any) -> None:
    m, c = int(n), _compute(x.dtype)
    v = x[:m].astype(c)
    with np.errstate(invalid="ignore", over="ignore"):
        y[:m] = np.where(v > 0, v, v * c(slope)).astype(y.dtype)


@_twin("bias")
def _bias(launch: Any, y: np.ndarray, b: np.ndarray, n: Any, c: Any, inner: Any) -> None:
    m, t = int(n), _compute(y.dtype)
    ch = (np.arange(m) // int(inner)) % int(c)
    with np.errstate(over="ignore", invalid="ignore"):
        y[:m] = (y[:m].astype(t) + b[ch].astype(t)).astype(y.dtype)


@_twin("to_f32")
def _to_f32(launch: Any, x: np.ndarray, y: np.ndarray, n: Any) -> None:
    m = int(n)
    y[:m] = x[:m].astype(np.float32)


def _pad_src(o: np.ndarray, lo: int, size: int, mode: int) -> np.ndarray:
    s = o - lo
    inside = (s >= 0) & (s < size)
    if mode == 0:
        return np.where(inside, s, -1)
    if mode == 1:
        return np.where(inside, s, np.where(s < 0, -s, 2 * (size - 1) - s))
    if mode == 2:
        return np.clip(s, 0, size - 1)
    return np.mod(s, size)


@_twin("pad")
def _pad(launch: Any, x: np.ndarray, y: np.ndarray, n: Any, i0: Any, i1: Any, i2: Any,
         o0: Any, o1: Any, o2: Any, l0: Any, l1: Any, l2: Any, mode: Any, value: Any) -> None:
    m = int(n)
    ins, outs = (int(i0), int(i1), int(i2)), (int(o0), int(o1), int(o2))
    outer = m // math.prod(outs) if m else 0
    src = x[:outer * math.prod(ins)].reshape(outer, *ins)
    idx = [_pad_src(np.arange(o), int(lo), size, int(mode))
           for o, lo, size in zip(outs, (l0, l1, l2), ins)]
    d, h, w = np.ix_(*idx)
    inside = (d >= 0) & (h >= 0) & (w >= 0)
    got = src[:, np.maximum(d, 0), np.maximum(h, 0), np.maximum(w, 0)]
    c = _compute(y.dtype)
    out = np.where(inside[None], got.astype(c), c(value))
    y[:m] = out.reshape(-1).astype(y.dtype)


def _interp_src(outs: int, size: int, scale: float, mode: int, align: int, c: Any
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    o = np.arange(outs)
    if mode in (0, 1):
        f = np.float32(scale)
        pos = o.astype(np.float32) if mode == 0 else o.astype(np.float32) + np.float32(0.5)
        s = np.floor(pos * f).astype(np.int64)
        i0 = np.minimum(s, size - 1)
        return i0, i0, np.zeros(outs, c)
    sc = c(scale)
    src = o.astype(c) * sc if align else (o.astype(c) + c(0.5)) * sc - c(0.5)
    src = np.maximum(src, c(0))
    s = np.minimum(src.astype(np.int64), size - 1)
    return s, np.minimum(s + 1, size - 1), (src - s.astype(c)).astype(c)


@_twin("interp")
def _interp(launch: Any, x: np.ndarray, y: np.ndarray, n: Any, i0: Any, i1: Any, i2: Any,
            o0: Any, o1: Any, o2: Any, s0: Any, s1: Any, s2: Any, mode: Any, align: Any
            ) -> None:
    m = int(n)
    ins, outs = (int(i0), int(i1), int(i2)), (int(o0), int(o1), int(o2))
    outer = m // math.prod(outs) if m else 0
    c = _compute(y.dtype)
    src = x[:outer * math.prod(ins)].reshape(outer, *ins).astype(c)
    axes = [_interp_src(o, size, float(s), int(mode), int(align), c)
            for o, size, s in zip(outs, ins, (s0, s1, s2))]
    out = np.zeros((outer, *outs), c)
    for k in range(8):
        pick = [(ax[1] if k & bit else ax[0], ax[2] if k & bit else c(1) - ax[2])
                for ax, bit in zip(axes, (4, 2, 1))]
        d, h, w = np.ix_(pick[0][0], pick[1][0], pick[2][0])
        f = (pick[0][1][:, None, None] * pick[1][1][None, :, None]
             * pick[2][1][None, None, :])
        out += f[None] * src[:, d, h, w]
    y[:m] = out.reshape(-1).astype(y.dtype)


@_twin("adapool")
def _adapool(launch: Any, x: np.ndarray, y: np.ndarray, idx: np.ndarray, n: Any, ih: Any,
             iw: Any, oh: Any, ow: Any, is_max: Any) -> None:
    m, ih, iw, oh, ow = int(n), int(ih), int(iw), int(oh), int(ow)
    planes = m // (oh * ow) if m else 0
    c = _compute(y.dtype)
    src = x[:planes * ih * iw].reshape(planes, ih, iw).astype(c)
    out = np.empty((planes, oh, ow), c)
    at = np.empty((planes, oh, ow), np.int64)
    for r in range(oh):
        hs, he = (r * ih) // oh, -(-((r + 1) * ih) // oh)
        for q in range(ow):
            ws, we = (q * iw) // ow, -(-((q + 1) * iw) // ow)
            win = src[:, hs:he, ws:we].reshape(planes, -1)
            if int(is_max):
                nan = np.isnan(win)
                # the last NaN of the window, else the first maximum
                last_nan = win.shape[1] - 1 - np.argmax(nan[:, ::-1], axis=1)
                k = np.where(nan.any(axis=1), last_nan, np.argmax(win, axis=1))
                out[:, r, q] = win[np.arange(planes), k]
                at[:, r, q] = (hs + k // (we - ws)) * iw + ws + k % (we - ws)
            else:
                out[:, r, q] = win.sum(axis=1, dtype=c) / c(win.shape[1])
                at[:, r, q] = hs * iw + ws
    y[:m] = out.reshape(-1).astype(y.dtype)
    idx[:m] = at.reshape(-1)


@_twin("pool")
def _pool(launch: Any, x: np.ndarray, y: np.ndarray, idx: np.ndarray, n: Any, i0: Any,
          i1: Any, i2: Any, o0: Any, o1: Any, o2: Any, k0: Any, k1: Any, k2: Any, s0: Any,
          s1: Any, s2: Any, p0: Any, p1: Any, p2: Any, d0: Any, d1: Any, d2: Any, mode: Any,
          divisor: Any) -> None:
    m = int(n)
    ins = tuple(int(v) for v in (i0, i1, i2))
    outs = tuple(int(v) for v in (o0, o1, o2))
    k, s, p, d = ((int(a), int(b), int(c)) for a, b, c in
                  ((k0, k1, k2), (s0, s1, s2), (p0, p1, p2), (d0, d1, d2)))
    mode, divisor = int(mode), int(divisor)
    outer = m // math.prod(outs) if m else 0
    c = _compute(y.dtype)
    src = x[:outer * math.prod(ins)].reshape(outer, -1).astype(c)
    out = np.empty((outer, *outs), c)
    at = np.full((outer, *outs), -1, np.int64)
    for o in itertools.product(*(range(v) for v in outs)):
        start = [o[a] * s[a] - p[a] for a in range(3)]
        if mode == 0:
            taps = [[start[a] + j * d[a] for j in range(k[a])
                     if 0 <= start[a] + j * d[a] < ins[a]] for a in range(3)]
        else:
            end = [min(start[a] + k[a], ins[a] + p[a]) for a in range(3)]
            pool = math.prod(end[a] - start[a] for a in range(3))
            taps = [list(range(max(start[a], 0), min(end[a], ins[a]))) for a in range(3)]
        flat = [(q0 * ins[1] + q1) * ins[2] + q2 for q0 in taps[0] for q1 in taps[1]
                for q2 in taps[2]]
        win = src[:, flat]
        if mode == 0:
            nan = np.isnan(win)
            last_nan = win.shape[1] - 1 - np.argmax(nan[:, ::-1], axis=1)
            j = np.where(nan.any(axis=1), last_nan, np.argmax(win, axis=1))
            out[(slice(None), *o)] = win[np.arange(outer), j]
            at[(slice(None), *o)] = np.asarray(flat)[j]
        else:
            div = divisor if divisor > 0 else (pool if mode == 1 else len(flat))
            out[(slice(None), *o)] = win.sum(axis=1, dtype=c) / c(div)
    y[:m] = out.reshape(-1).astype(y.dtype)
    idx[:m] = at.reshape(-1)


@_twin("sqdiff_sum")
def _sqdiff_sum(launch: Any, x: np.ndarray, t: np.ndarray, out: np.ndarray, n: Any,
                div: Any) -> None:
    m = int(n)
    e = _wide(x[:m]) - _wide(t[:m])
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        out[0] = np.asarray(float(np.sum(e * e)) / float(div)).astype(out.dtype)


@_twin("sqdiff")
def _sqdiff(launch: Any, x: np.ndarray, t: np.ndarray, y: np.ndarray, n: Any) -> None:
    m, c = int(n), _compute(y.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        e = x[:m].astype(c) - t[:m].astype(c)
        y[:m] = (e * e).astype(y.dtype)


@_twin("ratio")
def _ratio(launch: Any, a: np.ndarray, d: np.ndarray, out: np.ndarray, n: Any,
           mean: Any) -> None:
    m = int(n)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        sa, sd = float(np.sum(a[:m])), float(np.sum(d[:m]))
        out[0] = np.asarray(np.float64(sa) / np.float64(sd) if int(mean) else sa
                            ).astype(out.dtype)


@_twin("from_f64")
def _from_f64(launch: Any, a: np.ndarray, y: np.ndarray, n: Any) -> None:
    m = int(n)
    with np.errstate(over="ignore"):
        y[:m] = a[:m].astype(_compute(y.dtype)).astype(y.dtype)


@_twin("soft_ce")
def _soft_ce(launch: Any, logp: np.ndarray, tgt: np.ndarray, w: np.ndarray, loss: np.ndarray,
             den: np.ndarray, n: Any, c: Any, inner: Any, has_w: Any, eps: Any) -> None:
    m, c, inner = int(n), int(c), int(inner)
    batch = m // inner if inner else 0
    lp = _wide(logp[:batch * c * inner]).reshape(batch, c, inner)
    t = (1.0 - float(eps)) * _wide(tgt[:batch * c * inner]).reshape(batch, c, inner) \
        + float(eps) / c
    wk = _wide(w[:c]) if int(has_w) else np.ones(c)
    with np.errstate(invalid="ignore", over="ignore"):
        loss[:m] = -(wk[None, :, None] * t * lp).sum(axis=1).reshape(-1)
    den[:m] = 1.0


@_twin("embed", index=True)
def _embed(launch: Any, idx: np.ndarray, w: np.ndarray, y: np.ndarray, n: Any, d: Any,
           v: Any, bad: np.ndarray) -> None:
    m, d, v = int(n), int(d), int(v)
    rows = idx[:m // d if d else 0].astype(np.int64)
    ok = (rows >= 0) & (rows < v)
    table = w[:v * d].reshape(v, d)
    out = np.where(ok[:, None], table[np.where(ok, rows, 0)].astype(np.float64), np.nan)
    y[:m] = out.reshape(-1).astype(y.dtype)
    if not ok.all():
        bad[0] = 1


@_twin("ce", index=True)
def _ce(launch: Any, logp: np.ndarray, tgt: np.ndarray, w: np.ndarray, loss: np.ndarray,
        den: np.ndarray, n: Any, c: Any, inner: Any, has_w: Any, ignore: Any, eps: Any,
        bad: np.ndarray) -> None:
    m, c, inner, eps = int(n), int(c), int(inner), float(eps)
    batch = m // inner if inner else 0
    lp = _wide(logp[:batch * c * inner]).reshape(batch, c, inner)
    t = tgt[:m].astype(np.int64).reshape(batch, inner)
    wk = _wide(w[:c]) if int(has_w) else np.ones(c)
    ignored = t == int(ignore)
    bad_t = ~ignored & ((t < 0) | (t >= c))
    safe = np.where(ignored | bad_t, 0, t)
    picked = np.take_along_axis(lp, safe[:, None, :], axis=1)[:, 0, :]
    wt = wk[safe]
    with np.errstate(invalid="ignore", over="ignore"):
        nll = -wt * picked
        smooth = -(wk[None, :, None] * lp).sum(axis=1) if eps != 0.0 else 0.0
        value = (1.0 - eps) * nll + eps / c * smooth
    value = np.where(ignored, 0.0, np.where(bad_t, np.nan, value))
    weight = np.where(ignored, 0.0, np.where(bad_t, np.nan, wt))
    loss[:m] = value.reshape(-1)
    den[:m] = weight.reshape(-1)
    if bad_t.any():
        bad[0] = 1
