"""``dev.nn``'s activations, softmaxes, normalizations, dropout and attention, with
torch.nn.functional's signatures, each one cuDNN message (or gpumsg's own kernel behind it)
on a view of the input, plus the generated ``leaky_relu``."""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import Any

import numpy as np

from ....dtypes import dtype_name
from ....errors import InvalidMessage
from ....messages._base import checked_flag
from ....messages.cudnn import (
    Activation,
    BatchNormInference,
    BatchNormTrain,
    Dropout,
    GroupNorm,
    LayerNorm,
    Softmax,
    group_norm_dims,
    layer_norm_dims,
)
from ....messages.cudnn_attention import AttentionForward
from ._base import NnBase, checked_real, view_as

__all__ = ["Activations"]


def _axis(dim: Any, ndim: int, field: str = "dim") -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise InvalidMessage(f"{field}: expected an int, got {dim!r}", field=field)
    d = int(dim)
    size = max(ndim, 1)
    if not -size <= d < size:
        raise InvalidMessage(f"{field}: {d} is out of range for {ndim} dimensions",
                             field=field)
    return d % size


class Activations(NnBase):
    """Activations, softmaxes, normalizations, dropout and attention of ``dev.nn``."""

    # -- activations --------------------------------------------------------------------------
    def _act(self, input: Any, activation: str, coef: float | None, inplace: bool,
             out: Any) -> Future:
        x = self._tensor(input, "input")
        if checked_flag(inplace, "inplace"):
            if out is not None:
                raise InvalidMessage("out: not with inplace=True", field="out")
            return self._dev.port.send_writing(Activation(x, x, activation, coef), input)
        y = self._out_ref(tuple(x.shape), x.dtype, out)
        return self._send(Activation(x, y, activation, coef), y, out)

    def relu(self, input: Any, inplace: bool = False, *, out: Any = None) -> Future:
        """torch's ``relu``: max(x, 0) element-wise (cuDNN; f32, f16, bf16)."""
        return self._act(input, "relu", None, inplace, out)

    def relu6(self, input: Any, inplace: bool = False, *, out: Any = None) -> Future:
        """torch's ``relu6``: min(max(x, 0), 6) (cuDNN's clipped relu)."""
        return self._act(input, "clipped_relu", 6.0, inplace, out)

    def elu(self, input: Any, alpha: float = 1.0, inplace: bool = False, *,
            out: Any = None) -> Future:
        """torch's ``elu``: x where x > 0, else alpha (exp(x) - 1)."""
        return self._act(input, "elu", checked_real(alpha, "alpha"), inplace, out)

    def sigmoid(self, input: Any, *, out: Any = None) -> Future:
        """torch's ``sigmoid``: 1 / (1 + exp(-x))."""
        return self._act(input, "sigmoid", None, False, out)

    def tanh(self, input: Any, *, out: Any = None) -> Future:
        """torch's ``tanh``."""
        return self._act(input, "tanh", None, False, out)

    def silu(self, input: Any, inplace: bool = False, *, out: Any = None) -> Future:
        """torch's ``silu``: x sigmoid(x) (cuDNN's swish)."""
        return self._act(input, "swish", 1.0, inplace, out)

    def gelu(self, input: Any, approximate: str = "none", *, out: Any = None) -> Future:
        """torch's ``gelu``: exact (erf, ``approximate="none"``) or its tanh approximation
        (``"tanh"``), gpumsg's own kernel."""
        modes = {"none": "gelu", "tanh": "gelu_tanh"}
        if not isinstance(approximate, str) or approximate not in modes:
            raise InvalidMessage(f"approximate: expected 'none' or 'tanh', got {approximate!r}",
                                 field="approximate")
        return self._act(input, modes[approximate], None, False, out)

    def leaky_relu(self, input: Any, negative_slope: float = 0.01, inplace: bool = False, *,
                   out: Any = None) -> Future:
        """torch's ``leaky_relu``: x where x > 0, else negative_slope x (a generated kernel;
        f32, f64, f16, bf16)."""
        x = self._tensor(input, "input")
        dtype = self._float(x, "input")
        slope = checked_real(negative_slope, "negative_slope")
        if checked_flag(inplace, "inplace"):
            if out is not None:
                raise InvalidMessage("out: not with inplace=True", field="out")
            y = input
        else:
            y = self._alloc_out(tuple(x.shape), dtype, out)
        done = self._launch("leaky_relu", dtype, x.size, (x, y, x.size, slope), (x,), (y,))
        return self._dev.buffer_after(done, y)

    # -- softmax ------------------------------------------------------------------------------
    def _softmax(self, input: Any, dim: Any, dtype: Any, log: bool, out: Any) -> Future:
        x = self._tensor(input, "input")
        if dim is None:
            raise InvalidMessage("dim: pass the axis to normalize over (torch's implicit "
                                 "choice is deprecated)", field="dim")
        d = _axis(dim, len(x.shape))
        if dtype is not None and _dtype_name(dtype) != x.dtype:
            raise InvalidMessage(f"dtype: the softmax is computed in the input's dtype "
                                 f"({x.dtype}); cast the input first", field="dtype")
        shape = tuple(x.shape) or (1,)
        n = shape[d]
        outer, inner = math.prod(shape[:d]), math.prod(shape[d + 1:])
        y = self._out_ref(tuple(x.shape), x.dtype, out)
        view = (outer, n, inner)
        return self._send(Softmax(view_as(x, view), view_as(y, view), "channel", log, "NCHW"),
                          y, out)

    def softmax(self, input: Any, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None, *, out: Any = None) -> Future:
        """torch's ``softmax`` over axis ``dim`` (required) of a tensor of any rank: cuDNN's
        channel softmax of the (before, dim, after) view."""
        return self._softmax(input, dim, dtype, False, out)

    def log_softmax(self, input: Any, dim: int | None = None, _stacklevel: int = 3,
                    dtype: Any = None, *, out: Any = None) -> Future:
        """torch's ``log_softmax`` over axis ``dim``; see :meth:`softmax`."""
        return self._softmax(input, dim, dtype, True, out)

    # -- normalizations -----------------------------------------------------------------------
    def _f32_vector(self, value: Any, field: str, size: int, fill: float | None = None
                    ) -> tuple[Any, Any]:
        """(an f32 vector of ``size`` for cuDNN's affine parameters, the temporary made for
        it or None): ``value`` itself when f32, else converted by a generated kernel; None
        gives ``fill`` everywhere (or None without ``fill``)."""
        if value is None:
            if fill is None:
                return None, None
            # the fill's float32 bits as a 4-byte memset: nothing made on the host or copied
            tmp = self._dev.alloc((size,), "f32")
            self._dev.memset(tmp, int(np.array(fill, np.float32).view(np.uint32)), width=4)
            return tmp, tmp
        ref = self._tensor(value, field)
        if ref.size != size:
            raise InvalidMessage(f"{field}: {ref.describe()} must hold {size} values",
                                 field=field)
        if ref.dtype == "f32":
            return value, None
        self._float(ref, field)
        tmp = self._temp((size,), "f32")
        self._launch("to_f32", ref.dtype, size, (ref, tmp, size), (ref,), (tmp,))
        return tmp, tmp

    def _affine(self, weight: Any, bias: Any, size: int) -> tuple[Any, Any, list]:
        """cuDNN's (gamma, beta) from torch's optional weight and bias: both or neither,
        f32; a missing one is ones or zeros."""
        if weight is None and bias is None:
            return None, None, []
        g, tg = self._f32_vector(weight, "weight", size, 1.0)
        b, tb = self._f32_vector(bias, "bias", size, 0.0)
        return g, b, [t for t in (tg, tb) if t is not None]

    def layer_norm(self, input: Any, normalized_shape: Any, weight: Any = None,
                   bias: Any = None, eps: float = 1e-5, *, out: Any = None) -> Future:
        """torch's ``layer_norm``: over the last ``len(normalized_shape)`` axes, which must
        be ``normalized_shape``; ``weight``/``bias`` of that shape (any float dtype; cuDNN
        takes them as f32). A future of y alone (``dev.cudnn.layer_norm`` keeps the
        statistics)."""
        x = self._tensor(input, "input")
        ns = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else \
            tuple(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else None
        if ns is not None and not all(isinstance(v, (int, np.integer)) and
                                      not isinstance(v, bool) for v in ns):
            ns = None  # a size that is not an int (a nested tuple, a float): refused below
        k = len(ns) if ns is not None else 0
        if ns is None or not k or k > len(x.shape) or tuple(x.shape[-k:]) != tuple(
                int(v) for v in ns):
            raise InvalidMessage(f"normalized_shape: {normalized_shape!r} must be the last "
                                 f"axes of the input's shape {tuple(x.shape)}",
                                 field="normalized_shape")
        rows, per_row = layer_norm_dims(tuple(x.shape), k)
        g, b, temps = self._affine(weight, bias, per_row)
        mean, inv = self._temp((max(rows, 1),), "f32"), self._temp((max(rows, 1),), "f32")
        y = self._out_ref(tuple(x.shape), x.dtype, out)
        done = self._send(LayerNorm(x, y, mean, inv, g, b, k, eps), y, out)
        self._free(mean, inv, *temps)
        return done

    def group_norm(self, input: Any, num_groups: int, weight: Any = None, bias: Any = None,
                   eps: float = 1e-5, *, out: Any = None) -> Future:
        """torch's ``group_norm`` of (N, C, ...): the C channels in ``num_groups`` groups;
        ``weight``/``bias`` of C."""
        x = self._tensor(input, "input")
        if len(x.shape) < 2:
            raise InvalidMessage(f"input: expected (N, C, ...), got shape {tuple(x.shape)}",
                                 field="input")
        try:
            rows = group_norm_dims(tuple(x.shape), int(num_groups))[0]
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            rows = 1  # the message names what is wrong
        g, b, temps = self._affine(weight, bias, x.shape[1])
        mean, inv = self._temp((max(rows, 1),), "f32"), self._temp((max(rows, 1),), "f32")
        y = self._out_ref(tuple(x.shape), x.dtype, out)
        done = self._send(GroupNorm(x, y, mean, inv, num_groups, g, b, eps), y, out)
        self._free(mean, inv, *temps)
        return done

    def instance_norm(self, input: Any, running_mean: Any = None, running_var: Any = None,
                      weight: Any = None, bias: Any = None, use_input_stats: bool = True,
                      momentum: float = 0.1, eps: float = 1e-5, *, out: Any = None) -> Future:
        """torch's ``instance_norm`` of (N, C, ...): each (n, c) plane normalized by its own
        statistics (``use_input_stats=True``, running statistics not given) or by the
        running ones (``use_input_stats=False``). Updating running statistics from the
        input's is refused (not offered)."""
        x = self._tensor(input, "input")
        if checked_flag(use_input_stats, "use_input_stats"):
            if running_mean is not None or running_var is not None:
                raise InvalidMessage("running_mean: updating running statistics from "
                                     "instance statistics is not offered; pass None, or "
                                     "use_input_stats=False to normalize by them",
                                     field="running_mean")
            if len(x.shape) < 2:
                raise InvalidMessage(f"input: expected (N, C, ...), got shape "
                                     f"{tuple(x.shape)}", field="input")
            return self.group_norm(input, x.shape[1], weight, bias, eps, out=out)
        return self.batch_norm(input, running_mean, running_var, weight, bias, False,
                               momentum, eps, out=out)

    def batch_norm(self, input: Any, running_mean: Any, running_var: Any, weight: Any = None,
                   bias: Any = None, training: bool = False, momentum: float = 0.1,
                   eps: float = 1e-5, *, out: Any = None) -> Future:
        """torch's ``batch_norm`` of (N, C, ...) per channel: with ``training`` by the
        batch's statistics, updating the running ones (f32 of C, when given) in place with
        ``momentum`` (the unbiased variance, as torch); else by the running statistics."""
        x = self._tensor(input, "input")
        if len(x.shape) < 2:
            raise InvalidMessage(f"input: expected (N, C, ...), got shape {tuple(x.shape)}",
                                 field="input")
        c = x.shape[1]
        g, tg = self._f32_vector(weight, "weight", c, 1.0)
        b, tb = self._f32_vector(bias, "bias", c, 0.0)
        xv = view_as(x, (*x.shape[:2], math.prod(x.shape[2:]), 1)) if len(x.shape) < 4 else x
        y = self._out_ref(tuple(x.shape), x.dtype, out)
        yv = view_as(y, tuple(xv.shape))
        if checked_flag(training, "training"):
            if momentum is None:
                raise InvalidMessage("momentum: the cumulative average (None) is not offered",
                                     field="momentum")
            mean, inv = self._temp((c,), "f32"), self._temp((c,), "f32")
            msg = BatchNormTrain(xv, g, b, yv, mean, inv, running_mean, running_var,
                                 checked_real(momentum, "momentum"), eps, "NCHW")
            done = self._send(msg, y, out)
            self._free(mean, inv)
        else:
            if running_mean is None or running_var is None:
                raise InvalidMessage("running_mean: inference needs running_mean and "
                                     "running_var", field="running_mean")
            done = self._send(BatchNormInference(xv, g, b, running_mean, running_var, yv, eps,
                                                 "NCHW"), y, out)
        self._free(tg, tb)
        return done

    # -- dropout ------------------------------------------------------------------------------
    def dropout(self, input: Any, p: float = 0.5, training: bool = True,
                inplace: bool = False, *, seed: int | None = None, out: Any = None) -> Future:
        """torch's ``dropout``: with ``training``, each element zeroed with probability p and
        the rest scaled by 1 / (1 - p) (cuDNN; f32 and f16), a fresh mask each call unless
        ``seed`` is given; p = 1 gives zeros. Without ``training``: the input itself."""
        x = self._tensor(input, "input")
        rate = checked_real(p, "p")
        if not 0.0 <= rate <= 1.0:
            raise InvalidMessage(f"p: must be in [0, 1], got {p}", field="p")
        inplace = checked_flag(inplace, "inplace")
        if not checked_flag(training, "training"):
            done: Future = Future()
            done.set_result(None)
            return self._dev.buffer_after(done, input)
        if inplace and out is not None:
            raise InvalidMessage("out: not with inplace=True", field="out")
        target = input if inplace else out
        if rate == 1.0:
            y = target if target is not None else self._alloc_out(tuple(x.shape), x.dtype,
                                                                 None)
            return self._dev.buffer_after(self._dev.memset(y, 0), y)
        y = self._out_ref(tuple(x.shape), x.dtype, target)
        reserve = self._temp((max(self._dev.cudnn.dropout_reserve_bytes(x), 1),), "u8")
        done = self._send(Dropout(x, y, reserve, rate, self._seed(seed)), y, target)
        self._free(reserve)
        return done

    # -- attention ----------------------------------------------------------------------------
    def scaled_dot_product_attention(self, query: Any, key: Any, value: Any,
                                     attn_mask: Any = None, dropout_p: float = 0.0,
                                     is_causal: bool = False, scale: float | None = None,
                                     enable_gqa: bool = False, *, seed: int | None = None,
                                     out: Any = None) -> Future:
        """torch's ``scaled_dot_product_attention`` through cuDNN's flash attention: query
        (B, H, L, E) (or (B, L, E)), key and value (B, H_kv, S, E) in f16 or bf16;
        ``is_causal`` masks key j > query i (top left, as torch); ``scale`` defaults to
        1/sqrt(E); ``dropout_p`` drops attention weights (a fresh mask each call unless
        ``seed``); H_kv < H needs ``enable_gqa=True``. ``attn_mask`` (an arbitrary mask) is
        refused: cuDNN's graph here takes causal and length masks (``dev.cudnn``'s
        ``seq_len_q``/``seq_len_kv``)."""
        if attn_mask is not None:
            raise InvalidMessage("attn_mask: arbitrary masks are not offered; use is_causal, "
                                 "or dev.cudnn.scaled_dot_product_attention's seq_len_q / "
                                 "seq_len_kv for padding", field="attn_mask")
        refs = [self._tensor(t, f, (3, 4), "(B, H, L, E) or (B, L, E): 4 or 3")
                for t, f in ((query, "query"), (key, "key"), (value, "value"))]
        if len({len(r.shape) for r in refs}) != 1:
            raise InvalidMessage("key: query, key and value must have the same rank",
                                 field="key")
        q, k, v = (view_as(r, (r.shape[0], 1, *r.shape[1:])) if len(r.shape) == 3 else r
                   for r in refs)
        if k.shape[1] != q.shape[1] and not checked_flag(enable_gqa, "enable_gqa"):
            raise InvalidMessage(f"key: {k.shape[1]} heads against the query's {q.shape[1]} "
                                 "needs enable_gqa=True (as torch)", field="key")
        rate = checked_real(dropout_p, "dropout_p")
        y = self._out_ref(tuple(refs[0].shape), refs[0].dtype, out)
        stats = None
        if rate > 0.0:
            stats = self._temp((*q.shape[:3], 1), "f32")
        msg = AttentionForward(q, k, v, view_as(y, tuple(q.shape)), stats, None, None,
                               checked_flag(is_causal, "is_causal"), scale, rate,
                               self._seed(seed) if rate > 0.0 else 0, 0)
        done = self._send(msg, y, out)
        self._free(stats)
        return done


def _dtype_name(dtype: Any) -> str | None:
    try:
        return dtype_name(dtype)
    except (TypeError, ValueError, InvalidMessage):
        return None
