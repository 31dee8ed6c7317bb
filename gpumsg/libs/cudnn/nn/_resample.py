"""``dev.nn``'s ``pad``, ``interpolate`` and ``embedding``, with torch.nn.functional's
signatures, as generated kernels (cuDNN has no operation for them)."""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import Any

import numpy as np

from ....errors import InvalidMessage
from ....messages._base import BufRef, checked_flag
from ._base import NnBase, checked_real

__all__ = ["Resample"]

_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}
#: interpolate's modes -> (kernel mode, spatial axes it takes (None: any))
_INTERP = {"nearest": (0, None), "nearest-exact": (1, None), "linear": (2, 1),
           "bilinear": (2, 2), "trilinear": (2, 3), "area": (None, None)}


def _three(values: tuple, fill: Any) -> tuple:
    """``values`` (the last 1 to 3 axes) as three, leading ones filled."""
    return (fill,) * (3 - len(values)) + tuple(values)


class Resample(NnBase):
    """Padding, resampling and embedding lookups of ``dev.nn``."""

    def _pad_nd(self, x: BufRef, pad: tuple[int, ...], mode: int, value: float,
                out: Any = None) -> Any:
        """The padded copy of ``x`` (its future): ``pad`` torch's (left, right) pairs from
        the last axis back."""
        k = len(pad) // 2
        lo = [pad[2 * (k - 1 - i)] for i in range(k)]  # per axis, first to last
        hi = [pad[2 * (k - 1 - i) + 1] for i in range(k)]
        ins = tuple(x.shape[len(x.shape) - k:])
        outs = tuple(i + a + b for i, a, b in zip(ins, lo, hi))
        shape = (*x.shape[:len(x.shape) - k], *outs)
        y = self._alloc_out(shape, x.dtype, out)
        n = math.prod(shape)
        i0, i1, i2 = _three(ins, 1)
        o0, o1, o2 = _three(outs, 1)
        l0, l1, l2 = _three(tuple(lo), 0)
        done = self._launch("pad", x.dtype, n, (x, y, n, i0, i1, i2, o0, o1, o2, l0, l1, l2,
                                                 mode, value), (x,), (y,))
        return self._dev.buffer_after(done, y)

    def pad(self, input: Any, pad: Any, mode: str = "constant", value: float | None = None,
            *, out: Any = None) -> Future:
        """torch's ``pad``: ``pad`` = (left, right) sizes for the last axis, then the one
        before, ... (up to 3 axes); ``mode`` "constant" (``value``, default 0; negative sizes
        crop), "reflect" (sizes below the axis' length), "replicate" or "circular" (at most
        the axis' length). A generated kernel; f32, f64, f16, bf16."""
        x = self._tensor(input, "input")
        self._float(x, "input")
        if not isinstance(mode, str) or mode not in _PAD_MODES:
            raise InvalidMessage(f"mode: expected one of {', '.join(_PAD_MODES)}, got "
                                 f"{mode!r}", field="mode")
        sizes = list(pad) if isinstance(pad, (tuple, list)) else None
        if (sizes is None or not sizes or len(sizes) % 2 or len(sizes) // 2 > 3
                or not all(isinstance(p, (int, np.integer)) and not isinstance(p, bool)
                           for p in sizes)):
            raise InvalidMessage(f"pad: expected 2, 4 or 6 ints (left, right per axis from "
                                 f"the last), got {pad!r}", field="pad")
        sizes = [int(p) for p in sizes]
        k = len(sizes) // 2
        if k > len(x.shape):
            raise InvalidMessage(f"pad: {k} axes padded of a {len(x.shape)}-D input",
                                 field="pad")
        code = _PAD_MODES[mode]
        for i in range(k):
            size = x.shape[len(x.shape) - 1 - i]
            lo, hi = sizes[2 * i], sizes[2 * i + 1]
            if size + lo + hi <= 0:
                raise InvalidMessage(f"pad: axis {len(x.shape) - 1 - i} of length {size} "
                                     f"padded by ({lo}, {hi}) leaves nothing", field="pad")
            if code and min(lo, hi) < 0:
                raise InvalidMessage("pad: negative sizes only crop in mode 'constant'",
                                     field="pad")
            if code == 1 and max(lo, hi) >= size:
                raise InvalidMessage(f"pad: reflect sizes ({lo}, {hi}) must be smaller than "
                                     f"the axis' length {size}", field="pad")
            if code == 3 and max(lo, hi) > size:
                raise InvalidMessage(f"pad: circular sizes ({lo}, {hi}) must not exceed the "
                                     f"axis' length {size}", field="pad")
        if value is not None and code:
            raise InvalidMessage("value: only mode 'constant' takes a value", field="value")
        fill = 0.0 if value is None else checked_real(value, "value")
        return self._pad_nd(x, tuple(sizes), code, fill, out)

    def interpolate(self, input: Any, size: Any = None, scale_factor: Any = None,
                    mode: str = "nearest", align_corners: bool | None = None,
                    recompute_scale_factor: bool | None = None, antialias: bool = False, *,
                    out: Any = None) -> Future:
        """torch's ``interpolate`` of (N, C, *spatial), 1 to 3 spatial axes, to ``size`` or by
        ``scale_factor`` (output size floor(input size x factor)): "nearest" (source
        floor(i in / out), as torch's legacy mode), "nearest-exact", "linear" / "bilinear" /
        "trilinear" (``align_corners`` as torch's) and "area" (adaptive average pooling, 1 or
        2 axes). The scale a factor gives is 1 / factor unless ``recompute_scale_factor``;
        ``antialias`` is refused. Generated kernels; f32, f64, f16, bf16."""
        x = self._tensor(input, "input", (3, 4, 5), "(N, C, *spatial) with 1 to 3 spatial "
                         "axes: 3, 4 or 5")
        dtype = self._float(x, "input")
        if not isinstance(mode, str) or mode not in _INTERP:
            raise InvalidMessage(f"mode: expected one of {', '.join(_INTERP)} (bicubic is not "
                                 f"offered), got {mode!r}", field="mode")
        code, axes = _INTERP[mode]
        nd = len(x.shape) - 2
        if axes is not None and axes != nd:
            raise InvalidMessage(f"mode: {mode!r} takes {axes + 2}-D input, got "
                                 f"{len(x.shape)}-D", field="mode")
        linear = code == 2
        if align_corners is not None:
            checked_flag(align_corners, "align_corners")
            if not linear:
                raise InvalidMessage("align_corners: only the linear modes take it (as torch)",
                                     field="align_corners")
        align = bool(align_corners) if linear else False
        if recompute_scale_factor is not None:
            checked_flag(recompute_scale_factor, "recompute_scale_factor")
        if checked_flag(antialias, "antialias"):
            raise InvalidMessage("antialias: not offered", field="antialias")
        ins = tuple(x.shape[2:])
        if (size is None) == (scale_factor is None):
            raise InvalidMessage("size: give exactly one of size and scale_factor",
                                 field="size")
        factors: tuple[float, ...] | None = None
        if size is not None:
            outs = _sizes(size, nd)
        else:
            items = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else \
                [scale_factor] * nd
            if len(items) != nd:
                raise InvalidMessage(f"scale_factor: expected a number or {nd} numbers, got "
                                     f"{scale_factor!r}", field="scale_factor")
            factors = tuple(checked_real(f, "scale_factor") for f in items)
            if any(f <= 0 for f in factors):
                raise InvalidMessage(f"scale_factor: must be positive, got {scale_factor!r}",
                                     field="scale_factor")
            outs = tuple(int(math.floor(i * f)) for i, f in zip(ins, factors))
            if recompute_scale_factor:
                factors = None
        if any(o <= 0 for o in outs):
            raise InvalidMessage(f"size: the output size comes out as {list(outs)}",
                                 field="size")
        if code is None:  # area: adaptive average pooling
            if nd == 3:
                raise InvalidMessage("mode: 'area' takes 1 or 2 spatial axes here",
                                     field="mode")
            pool = self.adaptive_avg_pool1d if nd == 1 else self.adaptive_avg_pool2d
            return pool(input, outs if nd > 1 else outs[0], out=out)
        scales = []
        for i, (n_in, n_out) in enumerate(zip(ins, outs)):
            if linear and align:
                scales.append((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
            elif factors is not None:
                scales.append(1.0 / factors[i])
            else:
                scales.append(n_in / n_out)
        shape = (*x.shape[:2], *outs)
        y = self._alloc_out(shape, dtype, out)
        n = math.prod(shape)
        i0, i1, i2 = _three(ins, 1)
        o0, o1, o2 = _three(outs, 1)
        s0, s1, s2 = _three(tuple(scales), 1.0)
        done = self._launch("interp", dtype, n, (x, y, n, i0, i1, i2, o0, o1, o2, s0, s1, s2,
                                                 code, int(align)), (x,), (y,))
        return self._dev.buffer_after(done, y)

    def embedding(self, input: Any, weight: Any, padding_idx: int | None = None,
                  max_norm: float | None = None, norm_type: float = 2.0,
                  scale_grad_by_freq: bool = False, sparse: bool = False, *,
                  out: Any = None) -> Future:
        """torch's ``embedding``: rows of ``weight`` (V, D) picked by the integer (i64 or i32)
        ``input`` of any shape; a future of input.shape + (D,). An index outside [0, V)
        fails the future with InvalidMessage (field "input") and every reader of the output,
        pipelined or not, with DependencyFailed (a check at completion). A generated
        kernel. ``padding_idx``, ``scale_grad_by_freq`` and ``sparse`` concern gradients only
        (checked, no effect here); ``max_norm`` (which rewrites ``weight``) is refused."""
        checked_flag(scale_grad_by_freq, "scale_grad_by_freq")
        checked_flag(sparse, "sparse")
        idx = self._tensor(input, "input")
        if idx.dtype not in ("i64", "i32"):
            raise InvalidMessage(f"input: {idx.describe()} must hold i64 or i32 indices",
                                 field="input")
        w = self._tensor(weight, "weight", (2,), "(num_embeddings, embedding_dim): 2")
        dtype = self._float(w, "weight")
        v, d = w.shape
        if padding_idx is not None and (isinstance(padding_idx, bool) or not isinstance(
                padding_idx, (int, np.integer)) or not -v <= int(padding_idx) < v):
            raise InvalidMessage(f"padding_idx: must be an index of the {v} rows, got "
                                 f"{padding_idx!r}", field="padding_idx")
        if max_norm is not None:
            raise InvalidMessage("max_norm: renormalizing the weight in place is not offered",
                                 field="max_norm")
        shape = (*idx.shape, d)
        y = self._alloc_out(shape, dtype, out)
        n = math.prod(shape)
        flag = self._zero_flag()
        done = self._launch("embed", dtype, n, (idx, w, y, n, d, v, flag), (idx, w),
                            (y, flag), index=idx.dtype)
        return self._flagged(done, y, flag, f"input: an index lies outside [0, {v}) (its "
                             "output row holds NaN)", "input")


def _sizes(size: Any, nd: int) -> tuple[int, ...]:
    items = list(size) if isinstance(size, (tuple, list)) else [size] * nd
    if len(items) != nd or not all(isinstance(s, (int, np.integer)) and not isinstance(
            s, bool) for s in items):
        raise InvalidMessage(f"size: expected an int or {nd} ints, got {size!r}", field="size")
    return tuple(int(s) for s in items)
