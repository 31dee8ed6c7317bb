"""``dev.nn``'s convolutions and pooling, with torch.nn.functional's signatures: cuDNN's
convolution forward (``conv1d/2d/3d``), its backward-data pass (``conv_transpose1d/2d/3d``,
the bias added by a generated kernel), cuDNN pooling (``max_pool1d/2d/3d``,
``avg_pool1d/2d/3d``; the 1-D ones as 2-D pooling of a unit-height view) and generated kernels
for adaptive pooling and what cuDNN's pooling lacks."""

from __future__ import annotations

import math
from concurrent.futures import Future
from typing import Any

from ....errors import InvalidMessage
from ....messages._base import checked_flag
from ....messages.cudnn import ConvBackwardData, ConvForward, Pool, conv_output_shape
from ..._answers import tuple_after
from ._base import NnBase, int_tuple, view_as

__all__ = ["ConvPool"]

_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


class ConvPool(NnBase):
    """Convolutions and pooling of ``dev.nn`` (mixed into :class:`~.Nn`)."""

    def _batched(self, value: Any, nd: int, field: str = "input") -> tuple[Any, bool]:
        """(the (N, C, *spatial) reference of ``value``, whether it came unbatched
        (C, *spatial): torch's two accepted ranks)."""
        ref = self._tensor(value, field, (nd + 1, nd + 2),
                           f"(N, C, {_SPATIAL[nd]}) or (C, {_SPATIAL[nd]}): {nd + 2} or {nd + 1}")
        if len(ref.shape) == nd + 1:
            return view_as(ref, (1, *ref.shape)), True
        return ref, False

    # -- convolutions -------------------------------------------------------------------------
    def _conv(self, nd: int, input: Any, weight: Any, bias: Any, stride: Any, padding: Any,
              dilation: Any, groups: Any, out: Any) -> Future:
        x, unbatched = self._batched(input, nd)
        w = self._tensor(weight, "weight", (nd + 2,), f"(C_out, C_in / groups, "
                         f"{_SPATIAL[nd]}): {nd + 2}")
        stride_t = int_tuple(stride, nd, "stride", 1)
        dil = int_tuple(dilation, nd, "dilation", 1)
        kernel = tuple(w.shape[2:])
        extra = None
        if isinstance(padding, str):
            if padding == "valid":
                pad = (0,) * nd
            elif padding == "same":
                if any(s != 1 for s in stride_t):
                    raise InvalidMessage("padding: 'same' needs stride 1 (as torch)",
                                         field="padding")
                total = [d * (k - 1) for d, k in zip(dil, kernel)]
                pad = tuple(t // 2 for t in total)
                extra = tuple(t - 2 * (t // 2) for t in total)  # 1 where torch pads one more
                if not any(extra):
                    extra = None
            else:
                raise InvalidMessage(f"padding: expected an int, {nd} ints, 'valid' or "
                                     f"'same', got {padding!r}", field="padding")
        else:
            pad = int_tuple(padding, nd, "padding", 0)
        held = []
        if extra is not None:  # the odd part of 'same' on the right, as torch pads it
            xp = self._pad_nd(x, tuple(v for e in reversed(extra) for v in (0, e)), 0, 0.0)
            held.append(xp)
            x = xp.ref
        try:
            shape = conv_output_shape(tuple(x.shape), tuple(w.shape), "NCHW", stride_t, pad,
                                      dil)
        except (TypeError, ValueError, ArithmeticError, IndexError):
            shape = tuple(x.shape)
        if any(s <= 0 for s in shape) or len(shape) != len(x.shape):
            shape = tuple(x.shape)  # refused by the message, which names the field
        final = shape[1:] if unbatched else shape
        y = self._out_ref(final, x.dtype, out)
        if out is not None and not held and not unbatched:
            # a repeated call into the same buffers posts the message it checked the first
            # time (validating one costs about 14 µs of the caller's time)
            geometry = (stride_t, pad, dil, groups)
            entry = self._memo.entry(
                "conv", (input, weight, out, bias), geometry,
                lambda r: ConvForward(r[0], r[1], r[2], *geometry, "NCHW", "default",
                                      "heuristic", None, r[3]), ("x", "w", "y", "bias"))
            return self._dev.port.send_memo(entry, out)
        msg = ConvForward(x, w, view_as(y, shape), stride_t, pad, dil, groups, "NCHW",
                          "default", "heuristic", None, bias)
        done = self._send(msg, y, out)
        self._free(*held)
        return done

    def conv1d(self, input: Any, weight: Any, bias: Any = None, stride: Any = 1,
               padding: Any = 0, dilation: Any = 1, groups: int = 1, *, out: Any = None
               ) -> Future:
        """torch's ``conv1d``: input (N, C_in, L) or (C_in, L), weight (C_out, C_in / groups,
        k), bias (C_out) of the input's dtype; ``padding`` an int, a 1-tuple, 'valid' or
        'same'. A future of the new output (or ``out``)."""
        return self._conv(1, input, weight, bias, stride, padding, dilation, groups, out)

    def conv2d(self, input: Any, weight: Any, bias: Any = None, stride: Any = 1,
               padding: Any = 0, dilation: Any = 1, groups: int = 1, *, out: Any = None
               ) -> Future:
        """torch's ``conv2d``: input (N, C_in, H, W) or (C_in, H, W), weight (C_out,
        C_in / groups, kH, kW); see :meth:`conv1d`."""
        return self._conv(2, input, weight, bias, stride, padding, dilation, groups, out)

    def conv3d(self, input: Any, weight: Any, bias: Any = None, stride: Any = 1,
               padding: Any = 0, dilation: Any = 1, groups: int = 1, *, out: Any = None
               ) -> Future:
        """torch's ``conv3d``: input (N, C_in, D, H, W) or (C_in, D, H, W); see
        :meth:`conv1d`."""
        return self._conv(3, input, weight, bias, stride, padding, dilation, groups, out)

    def _conv_transpose(self, nd: int, input: Any, weight: Any, bias: Any, stride: Any,
                        padding: Any, output_padding: Any, groups: Any, dilation: Any,
                        out: Any) -> Future:
        x, unbatched = self._batched(input, nd)
        w = self._tensor(weight, "weight", (nd + 2,), f"(C_in, C_out / groups, "
                         f"{_SPATIAL[nd]}): {nd + 2}")
        stride_t = int_tuple(stride, nd, "stride", 1)
        pad = int_tuple(padding, nd, "padding", 0)
        opad = int_tuple(output_padding, nd, "output_padding", 0)
        dil = int_tuple(dilation, nd, "dilation", 1)
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise InvalidMessage(f"groups: expected a positive int, got {groups!r}",
                                 field="groups")
        for o, s, d in zip(opad, stride_t, dil):
            if o >= max(s, d):
                raise InvalidMessage(f"output_padding: {list(opad)} must be smaller than "
                                     f"the stride or the dilation ({list(stride_t)}, "
                                     f"{list(dil)}), as torch's", field="output_padding")
        if x.shape[1] != w.shape[0]:
            raise InvalidMessage(f"weight: {w.describe()} must have C_in = {x.shape[1]} "
                                 "(the input's channels) first", field="weight")
        spatial = tuple((i - 1) * s - 2 * p + d * (k - 1) + o + 1 for i, s, p, d, k, o in
                        zip(x.shape[2:], stride_t, pad, dil, w.shape[2:], opad))
        if any(s <= 0 for s in spatial):
            raise InvalidMessage(f"input: the output size comes out as {list(spatial)} (<= 0)",
                                 field="input")
        shape = (x.shape[0], w.shape[1] * groups, *spatial)
        b = None
        if bias is not None:
            b = self._tensor(bias, "bias")
            if b.dtype != x.dtype or b.size != shape[1]:
                raise InvalidMessage(f"bias: {b.describe()} must hold {shape[1]} {x.dtype} "
                                     "values (one per output channel)", field="bias")
        final = shape[1:] if unbatched else shape
        y = self._out_ref(final, x.dtype, out)
        msg = ConvBackwardData(x, w, view_as(y, shape), stride_t, pad, dil, groups, "NCHW")
        done = self._send(msg, y, out)
        if b is None:
            return done
        n = y.size
        inner = n // (shape[0] * shape[1])
        ran = self._launch("bias", x.dtype, n, (y, b, n, shape[1], inner), (y, b), (y,))
        return self._dev.buffer_after(ran, done)

    def conv_transpose1d(self, input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                         padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                         dilation: Any = 1, *, out: Any = None) -> Future:
        """torch's ``conv_transpose1d``: input (N, C_in, L) or (C_in, L), weight (C_in,
        C_out / groups, k); the output length is (L - 1) stride - 2 padding + dilation (k - 1)
        + output_padding + 1. cuDNN's backward-data convolution, the bias added after it."""
        return self._conv_transpose(1, input, weight, bias, stride, padding, output_padding,
                                    groups, dilation, out)

    def conv_transpose2d(self, input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                         padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                         dilation: Any = 1, *, out: Any = None) -> Future:
        """torch's ``conv_transpose2d``; see :meth:`conv_transpose1d`."""
        return self._conv_transpose(2, input, weight, bias, stride, padding, output_padding,
                                    groups, dilation, out)

    def conv_transpose3d(self, input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                         padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                         dilation: Any = 1, *, out: Any = None) -> Future:
        """torch's ``conv_transpose3d``; see :meth:`conv_transpose1d`."""
        return self._conv_transpose(3, input, weight, bias, stride, padding, output_padding,
                                    groups, dilation, out)

    # -- pooling ------------------------------------------------------------------------------
    def _pool(self, nd: int, mode: str, input: Any, kernel_size: Any, stride: Any,
              padding: Any, out: Any, dilation: Any = 1, ceil_mode: bool = False,
              return_indices: bool = False, divisor_override: Any = None) -> Future:
        """torch's pooling: cuDNN's where it has the options (no dilation, floor mode, no
        indices, no divisor override), else the generated kernel, which has them all."""
        x, unbatched = self._batched(input, nd)
        window = int_tuple(kernel_size, nd, "kernel_size", 1)
        # torch's default stride (the window) for None or an empty sequence; compared by type
        # first: an array's == is element-wise
        strides = window if stride is None or (type(stride) in (tuple, list) and not stride) \
            else int_tuple(stride, nd, "stride", 1)
        pad = int_tuple(padding, nd, "padding", 0)
        dil = int_tuple(dilation, nd, "dilation", 1)
        checked_flag(ceil_mode, "ceil_mode")
        checked_flag(return_indices, "return_indices")
        if divisor_override is not None and (isinstance(divisor_override, bool) or not
                                             isinstance(divisor_override, int)
                                             or divisor_override < 1):
            raise InvalidMessage(f"divisor_override: expected a positive int, got "
                                 f"{divisor_override!r}", field="divisor_override")
        for p, k, d in zip(pad, window, dil):
            if 2 * p > (k - 1) * d + 1:
                raise InvalidMessage(f"padding: {list(pad)} must be at most half the "
                                     f"effective kernel size (as torch's)", field="padding")
        spatial = tuple(_pooled(i, k, s, p, d, ceil_mode) for i, k, s, p, d in
                        zip(x.shape[2:], window, strides, pad, dil))
        if any(s <= 0 for s in spatial):
            raise InvalidMessage(f"input: the output size comes out as {list(spatial)} (<= 0)",
                                 field="input")
        shape = (*x.shape[:2], *spatial)
        final = shape[1:] if unbatched else shape
        plain = all(d == 1 for d in dil) and not ceil_mode and not return_indices \
            and divisor_override is None
        if not plain or x.dtype == "f64":
            return self._pool_kernel(x, final, window, strides, pad, dil, mode,
                                     divisor_override, return_indices, out)
        y = self._out_ref(final, x.dtype, out)
        if nd == 1:  # a unit-height 2-D pooling
            xv, yv = view_as(x, (*x.shape[:2], 1, x.shape[2])), view_as(y, (*shape[:2], 1,
                                                                            spatial[0]))
            msg = Pool(xv, yv, (1, *window), (1, *strides), (0, *pad), mode, "NCHW")
        else:
            msg = Pool(x, view_as(y, shape), window, strides, pad, mode, "NCHW")
        return self._send(msg, y, out)

    def _pool_kernel(self, x: Any, final: tuple, window: tuple, strides: tuple, pad: tuple,
                     dil: tuple, mode: str, divisor: Any, return_indices: bool, out: Any
                     ) -> Future:
        dtype = self._float(x, "input")
        y = self._alloc_out(final, dtype, out)
        idx = self._temp(final, "i64")
        nd = len(window)
        n = math.prod(final)
        lead = (1,) * (3 - nd)
        ins = lead + tuple(x.shape[2:])
        outs = lead + tuple(final[len(final) - nd:])
        code = {"max": 0, "avg_include_pad": 1, "avg": 2}[mode]
        args = (x, y, idx, n, *ins, *outs, *(lead + window), *(lead + strides),
                *((0,) * (3 - nd) + pad), *(lead + dil), code, divisor or 0)
        done = self._launch("pool", dtype, n, args, (x,), (y, idx))
        if return_indices:
            return tuple_after(done, None, y, idx)
        self._free(idx)
        return self._dev.buffer_after(done, y)

    def max_pool1d(self, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False,
                   *, out: Any = None) -> Future:
        """torch's ``max_pool1d`` of (N, C, L) or (C, L): cuDNN (a unit-height 2-D pooling)
        for the plain case, a generated kernel with ``dilation``, ``ceil_mode`` or
        ``return_indices`` (then one future of (output, indices), i64 positions along L)."""
        return self._pool(1, "max", input, kernel_size, stride, padding, out, dilation,
                          ceil_mode, return_indices)

    def max_pool2d(self, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False,
                   *, out: Any = None) -> Future:
        """torch's ``max_pool2d`` of (N, C, H, W) or (C, H, W); see :meth:`max_pool1d` (the
        indices are flat positions h W + w in each plane, as torch's)."""
        return self._pool(2, "max", input, kernel_size, stride, padding, out, dilation,
                          ceil_mode, return_indices)

    def max_pool3d(self, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False,
                   *, out: Any = None) -> Future:
        """torch's ``max_pool3d`` of (N, C, D, H, W) or (C, D, H, W); see
        :meth:`max_pool2d`."""
        return self._pool(3, "max", input, kernel_size, stride, padding, out, dilation,
                          ceil_mode, return_indices)

    def avg_pool1d(self, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True, *,
                   out: Any = None) -> Future:
        """torch's ``avg_pool1d`` of (N, C, L) or (C, L): ``count_include_pad`` as torch's
        (padding counted in the divisor or not); cuDNN, or with ``ceil_mode`` a generated
        kernel."""
        return self._pool(1, _avg_mode(count_include_pad), input, kernel_size, stride,
                          padding, out, 1, ceil_mode)

    def avg_pool2d(self, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None, *, out: Any = None) -> Future:
        """torch's ``avg_pool2d``; see :meth:`avg_pool1d` (``divisor_override``: a generated
        kernel)."""
        return self._pool(2, _avg_mode(count_include_pad), input, kernel_size, stride,
                          padding, out, 1, ceil_mode, False, divisor_override)

    def avg_pool3d(self, input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None, *, out: Any = None) -> Future:
        """torch's ``avg_pool3d``; see :meth:`avg_pool2d`."""
        return self._pool(3, _avg_mode(count_include_pad), input, kernel_size, stride,
                          padding, out, 1, ceil_mode, False, divisor_override)

    # -- adaptive pooling (generated kernels) -------------------------------------------------
    def _adaptive(self, nd: int, is_max: bool, input: Any, output_size: Any,
                  return_indices: bool, out: Any) -> Future:
        x, unbatched = self._batched(input, nd)
        dtype = self._float(x, "input")
        sizes = list(output_size) if isinstance(output_size, (tuple, list)) else \
            [output_size] * nd
        if len(sizes) != nd:
            raise InvalidMessage(f"output_size: expected an int or {nd} sizes, got "
                                 f"{output_size!r}", field="output_size")
        sizes = [x.shape[2 + i] if s is None else s for i, s in enumerate(sizes)]
        osz = int_tuple(tuple(sizes), nd, "output_size", 1)
        checked_flag(return_indices, "return_indices")
        shape = (*x.shape[:2], *osz)
        final = shape[1:] if unbatched else shape
        y = self._alloc_out(final, dtype, out)
        idx = self._temp(final, "i64")
        ih, iw = (1, x.shape[2]) if nd == 1 else x.shape[2:]
        oh, ow = (1, osz[0]) if nd == 1 else osz
        n = math.prod(final)
        done = self._launch("adapool", dtype, n, (x, y, idx, n, ih, iw, oh, ow, int(is_max)),
                            (x,), (y, idx))
        if return_indices:
            return tuple_after(done, None, y, idx)
        self._free(idx)
        return self._dev.buffer_after(done, y)

    def adaptive_avg_pool1d(self, input: Any, output_size: Any, *, out: Any = None
                            ) -> Future:
        """torch's ``adaptive_avg_pool1d`` of (N, C, L) or (C, L): output i averages
        input[floor(i L / O) : ceil((i + 1) L / O)]."""
        return self._adaptive(1, False, input, output_size, False, out)

    def adaptive_avg_pool2d(self, input: Any, output_size: Any, *, out: Any = None
                            ) -> Future:
        """torch's ``adaptive_avg_pool2d`` of (N, C, H, W) or (C, H, W); ``output_size`` an
        int or (H_out, W_out), None keeping that size."""
        return self._adaptive(2, False, input, output_size, False, out)

    def adaptive_max_pool1d(self, input: Any, output_size: Any, return_indices: bool = False,
                            *, out: Any = None) -> Future:
        """torch's ``adaptive_max_pool1d``: the windows of :meth:`adaptive_avg_pool1d`, their
        maxima (NaN wins, as torch's); ``return_indices`` gives one future of (output,
        indices), i64 positions along L."""
        return self._adaptive(1, True, input, output_size, return_indices, out)

    def adaptive_max_pool2d(self, input: Any, output_size: Any, return_indices: bool = False,
                            *, out: Any = None) -> Future:
        """torch's ``adaptive_max_pool2d``; the indices (with ``return_indices``) are flat
        positions h W + w in each input plane, as torch's."""
        return self._adaptive(2, True, input, output_size, return_indices, out)


def _pooled(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """torch's pooled length: floor or ceil of (size + 2 p - d (k - 1) - 1) / s, plus one; in
    ceil mode the last window must start inside the input or its left padding."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _avg_mode(count_include_pad: Any) -> str:
    return "avg_include_pad" if checked_flag(count_include_pad, "count_include_pad") else "avg"
