"""float64 references of dev.nn's calls, torch's CPU semantics written out in NumPy."""

from __future__ import annotations

import itertools
import math

import numpy as np

from tests.libs.harness import wide


def ref_conv_transpose(x, w, stride, padding, output_padding, groups, dilation):
    """Each input element scatters w times itself: y[n, g*co + o, i*s + r*d - p] +=
    x[n, g*ci + c, i] w[g*ci + c, o, r], with the output extended by output_padding."""
    x, w = wide(x), wide(w)
    n, cin = x.shape[:2]
    cog = w.shape[1]
    ci = cin // groups
    kernel = w.shape[2:]
    nd = len(kernel)
    out = tuple((x.shape[2 + i] - 1) * stride[i] - 2 * padding[i]
                + dilation[i] * (kernel[i] - 1) + output_padding[i] + 1 for i in range(nd))
    y = np.zeros((n, cog * groups, *out))
    for pos in itertools.product(*(range(s) for s in x.shape[2:])):
        for r in itertools.product(*(range(s) for s in kernel)):
            o = tuple(pos[i] * stride[i] + r[i] * dilation[i] - padding[i] for i in range(nd))
            if not all(0 <= o[i] < out[i] for i in range(nd)):
                continue
            for g in range(groups):
                xs = x[(slice(None), slice(g * ci, (g + 1) * ci)) + pos]  # (n, ci)
                ws = w[(slice(g * ci, (g + 1) * ci), slice(None)) + r]  # (ci, cog)
                y[(slice(None), slice(g * cog, (g + 1) * cog)) + o] += xs @ ws
    return y


def ref_pool(x, kernel, stride, padding, mode):
    """Max or average pooling over the trailing len(kernel) axes; "avg" divides by the
    window's elements inside the input, "avg_include_pad" by the window's size."""
    x = wide(x)
    nd = len(kernel)
    lead = x.shape[:-nd]
    sp = x.shape[-nd:]
    out = tuple((sp[i] + 2 * padding[i] - kernel[i]) // stride[i] + 1 for i in range(nd))
    y = np.empty((*lead, *out))
    for o in itertools.product(*(range(s) for s in out)):
        lo = [o[i] * stride[i] - padding[i] for i in range(nd)]
        sl = tuple(slice(max(lo[i], 0), min(lo[i] + kernel[i], sp[i])) for i in range(nd))
        win = x[(Ellipsis,) + sl].reshape(*lead, -1)
        if mode == "max":
            y[(Ellipsis,) + o] = win.max(-1)
        elif mode == "avg":
            y[(Ellipsis,) + o] = win.mean(-1)
        else:
            y[(Ellipsis,) + o] = win.sum(-1) / math.prod(kernel)
    return y


def ref_adaptive(x, outs, is_max):
    """Adaptive pooling of the trailing len(outs) axes: window [floor(o i / O),
    ceil((o + 1) i / O)); the flat index of the maximum (first of equals) in its plane."""
    x = wide(x)
    nd = len(outs)
    sp = x.shape[-nd:]
    y = np.empty((*x.shape[:-nd], *outs))
    idx = np.empty(y.shape, np.int64)
    for o in itertools.product(*(range(s) for s in outs)):
        bounds = [(o[i] * sp[i] // outs[i], -(-(o[i] + 1) * sp[i] // outs[i]))
                  for i in range(nd)]
        win = x[(Ellipsis,) + tuple(slice(a, b) for a, b in bounds)]
        flat = win.reshape(*x.shape[:-nd], -1)
        if is_max:
            k = flat.argmax(-1)
            y[(Ellipsis,) + o] = flat.max(-1)
            coords = np.unravel_index(k, win.shape[-nd:])
            pos = [c + a for c, (a, _) in zip(coords, bounds)]
            idx[(Ellipsis,) + o] = pos[0] * (sp[1] if nd == 2 else 1) + (pos[1] if nd == 2
                                                                          else 0)
        else:
            y[(Ellipsis,) + o] = flat.mean(-1)
    return y, idx


def ref_pad(x, pad, mode, value=0.0):
    """torch's pad: (left, right) pairs from the last axis back."""
    x = wide(x)
    k = len(pad) // 2
    widths = [(0, 0)] * (x.ndim - k) + [(pad[2 * (k - 1 - i)], pad[2 * (k - 1 - i) + 1])
                                        for i in range(k)]
    crop = tuple(slice(-lo if lo < 0 else 0, x.shape[a] + hi if hi < 0 else None)
                 for a, (lo, hi) in enumerate(widths))
    x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    if mode == "constant":
        return np.pad(x, widths, constant_values=value)
    return np.pad(x, widths, mode={"reflect": "reflect", "replicate": "edge",
                                   "circular": "wrap"}[mode])


def _source(n_out, n_in, mode, align, scale):
    o = np.arange(n_out)
    if mode in ("nearest", "nearest-exact"):
        f = np.float32(scale)
        pos = o.astype(np.float32) + (np.float32(0.5) if mode == "nearest-exact" else 0)
        i0 = np.minimum(np.floor(pos * f).astype(np.int64), n_in - 1)
        return i0, i0, np.zeros(n_out)
    src = o * scale if align else np.maximum((o + 0.5) * scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    return i0, np.minimum(i0 + 1, n_in - 1), src - i0


def ref_interpolate(x, outs, mode, align=False, factors=None):
    """torch's interpolate of (N, C, *spatial), one axis after another (separable)."""
    y = wide(x)
    for a, n_out in enumerate(outs):
        axis = 2 + a
        n_in = y.shape[axis]
        if mode not in ("nearest", "nearest-exact") and align:
            scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        elif factors is not None:
            scale = 1.0 / factors[a]
        else:
            scale = n_in / n_out
        i0, i1, lam = _source(n_out, n_in, mode, align, scale)
        shape = [1] * y.ndim
        shape[axis] = n_out
        lam = lam.reshape(shape)
        y = np.take(y, i0, axis) * (1 - lam) + np.take(y, i1, axis) * lam
    return y


def log_softmax(x, axis):
    x = wide(x)
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def ref_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                      label_smoothing=0.0, soft=False):
    """torch's cross_entropy: class axis 1 (axis 0 for unbatched (C,) logits)."""
    x = wide(logits)
    unbatched = x.ndim == 1
    if unbatched:
        x = x[None]
        target = np.asarray(target)[None]
    c = x.shape[1]
    lp = log_softmax(x, 1)
    w = np.ones(c) if weight is None else wide(weight)
    wshape = (1, c) + (1,) * (x.ndim - 2)
    eps = label_smoothing
    if soft:
        t = wide(target)
        if unbatched:
            t = t.reshape(x.shape)
        t = t * (1 - eps) + eps / c
        per = -(lp * t * w.reshape(wshape)).sum(1)
        if reduction == "none":
            return per[0] if unbatched else per
        return per.sum() / (per.size if reduction == "mean" else 1)
    t = np.asarray(target).astype(np.int64)
    keep = t != ignore_index
    safe = np.where(keep, t, 0)
    picked = np.take_along_axis(lp, safe[:, None], 1)[:, 0]
    wt = np.where(keep, w[safe], 0.0)
    nll = -wt * picked
    smooth = np.where(keep, -(lp * w.reshape(wshape)).sum(1), 0.0)
    per = (1 - eps) * nll + eps / c * smooth
    if reduction == "none":
        return per[0] if unbatched else per
    if reduction == "sum":
        return per.sum()
    return per.sum() / wt.sum()


def ref_pool_torch(x, kernel, stride, padding, dilation, ceil_mode, mode, divisor=None):
    """torch's max/avg pooling of the trailing len(kernel) axes with every option: windows
    start at o s - p; max over the taps start + j d inside the input (first maximum; flat
    index in the plane); average over the window clipped to the input, divided by the window
    clipped to the padded input ("avg_include_pad"), by the taps inside ("avg") or by
    ``divisor``; ceil mode keeps a last window that starts inside the input or its left
    padding."""
    x = wide(x)
    nd = len(kernel)
    sp = x.shape[-nd:]
    lead = x.shape[:-nd]
    outs = []
    for i in range(nd):
        num = sp[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1
        o = (num + (stride[i] - 1 if ceil_mode else 0)) // stride[i] + 1
        if ceil_mode and (o - 1) * stride[i] >= sp[i] + padding[i]:
            o -= 1
        outs.append(o)
    y = np.empty((*lead, *outs))
    idx = np.full(y.shape, -1, np.int64)
    flat_x = x.reshape(*lead, -1)
    for o in itertools.product(*(range(v) for v in outs)):
        start = [o[i] * stride[i] - padding[i] for i in range(nd)]
        if mode == "max":
            taps = [[start[i] + j * dilation[i] for j in range(kernel[i])
                     if 0 <= start[i] + j * dilation[i] < sp[i]] for i in range(nd)]
        else:
            end = [min(start[i] + kernel[i], sp[i] + padding[i]) for i in range(nd)]
            pool = math.prod(end[i] - start[i] for i in range(nd))
            taps = [list(range(max(start[i], 0), min(end[i], sp[i]))) for i in range(nd)]
        flat = [int(np.ravel_multi_index(q, sp)) for q in itertools.product(*taps)]
        win = flat_x[..., flat]
        if mode == "max":
            k = win.argmax(-1)
            y[(Ellipsis,) + o] = win.max(-1)
            idx[(Ellipsis,) + o] = np.asarray(flat)[k]
        else:
            div = divisor or (pool if mode == "avg_include_pad" else len(flat))
            y[(Ellipsis,) + o] = win.sum(-1) / div
    return y, idx
