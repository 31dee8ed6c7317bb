"""``dev.nn``'s losses with torch.nn.functional's signatures and reductions ("mean", "sum",
"none"): ``cross_entropy`` (cuDNN's log-softmax, then generated kernels), ``nll_loss`` and
``mse_loss`` (generated kernels). Sums accumulate in f64 whatever the element type. And
``linear``, the layer in front of them (cuBLAS)."""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import Any

import numpy as np

from ....errors import InvalidMessage
from ....messages._base import BufRef
from ....messages.cudnn import Softmax
from ._base import NnBase, checked_real, view_as

__all__ = ["Losses"]

_REDUCTIONS = ("mean", "sum", "none")


def _reduction(reduction: Any, size_average: Any, reduce: Any) -> str:
    if size_average is not None or reduce is not None:
        raise InvalidMessage("size_average: the deprecated size_average/reduce arguments are "
                             "not offered; use reduction", field="size_average")
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise InvalidMessage(f"reduction: expected 'mean', 'sum' or 'none', got "
                             f"{reduction!r}", field="reduction")
    return reduction


class Losses(NnBase):
    """The losses of ``dev.nn``, and ``linear``."""

    def linear(self, input: Any, weight: Any, bias: Any = None, *, out: Any = None) -> Future:
        """torch's ``linear``: input (*, in_features) @ weight.T + bias, weight (out_features,
        in_features), bias (out_features) of the input's dtype; a future of (*, out_features).
        cuBLAS's GEMM on the buffers in their C order (f32, f64, f16, bf16), the bias added by
        a generated kernel."""
        x = self._tensor(input, "input")
        if not x.shape:
            raise InvalidMessage("input: expected (*, in_features), got a scalar",
                                 field="input")
        w = self._tensor(weight, "weight", (2,), "(out_features, in_features): 2")
        k = x.shape[-1]
        if w.shape[1] != k or w.dtype != x.dtype:
            raise InvalidMessage(f"weight: {w.describe()} must be {x.dtype}[out_features, {k}] "
                                 f"for the input {x.describe()}", field="weight")
        b = None
        if bias is not None:
            b = self._tensor(bias, "bias")
            if b.dtype != x.dtype or b.size != w.shape[0]:
                raise InvalidMessage(f"bias: {b.describe()} must hold {w.shape[0]} {x.dtype} "
                                     "values", field="bias")
        rows = math.prod(x.shape[:-1])
        shape = (*x.shape[:-1], w.shape[0])
        y = self._alloc_out(shape, x.dtype, out)
        yref = y.ref if hasattr(y, "ref") else y
        done = self._dev.cublas.gemm(view_as(x, (rows, k)), w, view_as(yref, (rows, w.shape[0])),
                                     transb="T")
        if b is not None:
            n = math.prod(shape)
            done = self._launch("bias", x.dtype, n, (y, b, n, w.shape[0], 1), (y, b), (y,))
        return self._dev.buffer_after(done, y)

    def _classes(self, input: Any) -> tuple[BufRef, tuple[int, ...], int, int]:
        """(input as (N, C, inner), the shape of its positions (N, *d) or () unbatched, C,
        inner) for torch's (C,), (N, C) and (N, C, d1, ...) inputs."""
        x = self._tensor(input, "input")
        if len(x.shape) == 0:
            raise InvalidMessage("input: expected (C,), (N, C) or (N, C, d1, ...), got a "
                                 "scalar", field="input")
        if len(x.shape) == 1:
            return view_as(x, (1, x.shape[0], 1)), (), x.shape[0], 1
        inner = math.prod(x.shape[2:])
        positions = (x.shape[0], *x.shape[2:])
        return view_as(x, (x.shape[0], x.shape[1], inner)), positions, x.shape[1], inner

    def _class_weight(self, weight: Any, c: int, dtype: str) -> Any:
        if weight is None:
            return None
        w = self._tensor(weight, "weight")
        if w.dtype != dtype or w.size != c:
            raise InvalidMessage(f"weight: {w.describe()} must hold {c} {dtype} values (one "
                                 "per class)", field="weight")
        return w

    def _nll(self, logp: BufRef, positions: tuple[int, ...], c: int, inner: int,
             target: Any, weight: Any, ignore_index: Any, reduction: str, eps: float,
             held: list, out: Any, soft_shape: tuple[int, ...] | None = None) -> Future:
        """The loss of log-probabilities ``logp`` (N, C, inner) against ``target``: class
        indices, or probabilities of ``soft_shape`` (the input's) where that is given."""
        dtype = logp.dtype
        t = self._tensor(target, "target")
        w = self._class_weight(weight, c, dtype)
        n = math.prod(positions)
        loss, den = self._temp((max(n, 1),), "f64"), self._temp((max(n, 1),), "f64")
        held += [loss, den]
        dummy = w if w is not None else logp
        flag = None
        soft = soft_shape is not None and t.dtype == dtype and tuple(t.shape) == soft_shape
        if soft:
            done = self._launch("soft_ce", dtype, n, (logp, t, dummy, loss, den, n, c, inner,
                                                       int(w is not None), eps),
                                (logp, t, dummy), (loss, den))
        else:
            if t.dtype not in ("i64", "i32") or tuple(t.shape) != tuple(positions):
                raise InvalidMessage(f"target: {t.describe()} must be class indices (i64 or "
                                     f"i32) of shape {tuple(positions)}, or probabilities "
                                     f"with the input's dtype and shape", field="target")
            if isinstance(ignore_index, bool) or not isinstance(ignore_index,
                                                                (int, np.integer)):
                raise InvalidMessage(f"ignore_index: expected an int, got {ignore_index!r}",
                                     field="ignore_index")
            flag = self._zero_flag()
            done = self._launch("ce", dtype, n, (logp, t, dummy, loss, den, n, c, inner,
                                                  int(w is not None), int(ignore_index), eps,
                                                  flag),
                                (logp, t, dummy), (loss, den, flag), index=t.dtype)
        if reduction == "none":
            y = self._alloc_out(tuple(positions), dtype, out)
            done = self._launch("from_f64", dtype, n, (loss, y, n), (loss,), (y,))
        else:
            y = self._alloc_out((), dtype, out)
            done = self._launch_block("ratio", dtype, (loss, den, y, n,
                                                       int(reduction == "mean")),
                                      (loss, den), (y,))
        self._free(*held)
        if flag is None:
            return self._dev.buffer_after(done, y)
        return self._flagged(done, y, flag, f"target: a class index lies outside [0, {c}) "
                             "(its loss is NaN)", "target")

    def cross_entropy(self, input: Any, target: Any, weight: Any = None,
                      size_average: Any = None, ignore_index: int = -100, reduce: Any = None,
                      reduction: str = "mean", label_smoothing: float = 0.0, *,
                      out: Any = None) -> Future:
        """torch's ``cross_entropy`` of logits (C,), (N, C) or (N, C, d1, ...) (f32, f16,
        bf16: cuDNN's log-softmax over C) against class indices (i64 or i32, shape (N,
        d1, ...); ``ignore_index`` skipped) or class probabilities (the input's shape and
        dtype); ``weight`` per class; ``label_smoothing`` as torch's. "mean" divides by the
        summed weights of the targets counted (probabilities: by the positions); a future of
        the scalar (shape ()) or, with "none", of the per-position losses. A class index
        outside [0, C) fails the future with InvalidMessage (field "target") and every reader
        of the loss."""
        red = _reduction(reduction, size_average, reduce)
        eps = checked_real(label_smoothing, "label_smoothing")
        if not 0.0 <= eps <= 1.0:
            raise InvalidMessage(f"label_smoothing: must be in [0, 1], got {label_smoothing}",
                                 field="label_smoothing")
        x, positions, c, inner = self._classes(input)
        logp = self._temp(tuple(x.shape), x.dtype)
        self._dev.port.send_writing(Softmax(x, logp, "channel", True, "NCHW"), logp)
        return self._nll(logp.ref, positions, c, inner, target, weight, ignore_index, red,
                         eps, [logp], out, tuple(self._tensor(input, "input").shape))

    def nll_loss(self, input: Any, target: Any, weight: Any = None, size_average: Any = None,
                 ignore_index: int = -100, reduce: Any = None, reduction: str = "mean", *,
                 out: Any = None) -> Future:
        """torch's ``nll_loss`` of log-probabilities (C,), (N, C) or (N, C, d1, ...) against
        class indices (see :meth:`cross_entropy`, without its log-softmax); f32, f64, f16,
        bf16."""
        red = _reduction(reduction, size_average, reduce)
        x, positions, c, inner = self._classes(input)
        self._float(x, "input")
        t = self._tensor(target, "target")
        if t.dtype not in ("i64", "i32"):
            raise InvalidMessage(f"target: {t.describe()} must hold i64 or i32 class indices",
                                 field="target")
        return self._nll(x, positions, c, inner, target, weight, ignore_index, red, 0.0, [],
                         out)

    def mse_loss(self, input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean", *, out: Any = None) -> Future:
        """torch's ``mse_loss``: (input - target)^2, averaged ("mean"), summed ("sum") or
        element-wise ("none"); target of the input's shape and dtype (f32, f64, f16,
        bf16)."""
        red = _reduction(reduction, size_average, reduce)
        x = self._tensor(input, "input")
        dtype = self._float(x, "input")
        t = self._tensor(target, "target")
        self._like(t, "target", x, "input")
        n = x.size
        if red == "none":
            y = self._alloc_out(tuple(x.shape), dtype, out)
            done = self._launch("sqdiff", dtype, n, (x, t, y, n), (x, t), (y,))
        else:
            y = self._alloc_out((), dtype, out)
            div = float(n) if red == "mean" else 1.0
            done = self._launch_block("sqdiff_sum", dtype, (x, t, y, n, div), (x, t), (y,))
        return self._dev.buffer_after(done, y)
