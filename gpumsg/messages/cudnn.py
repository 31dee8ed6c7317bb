"""cuDNN: convolutions (1-D, 2-D, 3-D; forward, backward data, backward filter) as messages.

Tensors are row-major (``order="C"``) device buffers:

==========  =======================================  =======================================
layout      activations (x, y, dx, dy)               filters (w, dw)
==========  =======================================  =======================================
``NCHW``    (N, C, *spatial)  channels first         (K, C/groups, *kernel)
``NHWC``    (N, *spatial, C)  channels last          (K, *kernel, C/groups)
==========  =======================================  =======================================

``spatial`` has 1, 2 or 3 dimensions (the layout names stand for their 1-D and 3-D kin: NCW,
NWC, NCDHW, NDHWC). ``stride``, ``padding`` and ``dilation`` are an int or one int per spatial
dimension; the output size of each is ``(in + 2 pad - dilation (kernel - 1) - 1) // stride + 1``.
All convolutions are cross-correlations (what deep-learning frameworks call convolution).

Precisions: f32 (``math="default"``: strict FP32 FMA arithmetic; ``math="tf32"``: TF32 tensor
cores), f16 and bf16 (tensor cores, f32 accumulation).

``ConvForward`` optionally adds a per-output-channel ``bias`` (K elements, x's dtype) and applies
an ``activation`` (relu, sigmoid, tanh, elu, clipped_relu, swish; ``act_coef`` is ELU's alpha,
the clipped ReLU's ceiling or swish's beta).
"""

from __future__ import annotations

import math
from typing import Any

from ._base import (
    INT32_MAX,
    BufRef,
    Message,
    _choice,
    _dense_rows,
    _fail,
    _int,
    _real,
    _ref,
    _require_dtype,
    _set,
    message,
)

__all__ = ["ConvForward", "ConvBackwardData", "ConvBackwardFilter", "DnnCacheInfo",
           "Activation", "ActivationBackward", "Softmax", "SoftmaxBackward", "Pool",
           "PoolBackward", "pool_output_shape", "POOL_MODES", "ACTIVATIONS", "OWN_ACTIVATIONS",
           "LAYOUTS", "CONV_DTYPES", "conv_output_shape", "filter_shape", "BatchNormTrain",
           "BatchNormInference", "BatchNormBackward", "Dropout", "DropoutBackward",
           "DropoutReserveSize", "LayerNorm", "LayerNormBackward", "GroupNorm",
           "GroupNormBackward", "layer_norm_dims", "group_norm_dims", "IndexCheck"]

LAYOUTS = ("NCHW", "NHWC")
CONV_DTYPES = ("f32", "f16", "bf16")
#: how a convolution plan is chosen: cuDNN's heuristics, or every candidate timed once ("find")
CONV_ALGOS = ("heuristic", "find")
#: activation name -> cudnnActivationMode_t
ACTIVATIONS = {"none": None, "sigmoid": 0, "relu": 1, "tanh": 2, "clipped_relu": 3, "elu": 4,
               "swish": 6}
#: activations of gpumsg's own kernels (libs/cudnn/kernels/gelu.py; cuDNN's legacy API has no GELU):
#: Activation/ActivationBackward take them, the fused convolution does not
OWN_ACTIVATIONS = ("gelu", "gelu_tanh")
#: the default ``act_coef`` of each activation that takes one
ACT_COEF = {"clipped_relu": 6.0, "elu": 1.0, "swish": 1.0}


def _spatial_tuple(msg: object, field: str, value: Any, nd: int, lo: int) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        if len(value) != nd:
            raise _fail(msg, field, f"needs {nd} values (one per spatial dimension), got "
                        f"{len(value)}")
        return tuple(_int(msg, field, v, lo, INT32_MAX) for v in value)
    v = _int(msg, field, value, lo, INT32_MAX)
    return (v,) * nd


def _split(layout: str, shape: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
    """(batch or K, channels, spatial) of an activation or filter shape in ``layout``."""
    if layout == "NCHW":
        return shape[0], shape[1], tuple(shape[2:])
    return shape[0], shape[-1], tuple(shape[1:-1])


def _join(layout: str, n: int, c: int, spatial: tuple[int, ...]) -> tuple[int, ...]:
    return (n, c, *spatial) if layout == "NCHW" else (n, *spatial, c)


def conv_output_shape(x_shape: tuple[int, ...], w_shape: tuple[int, ...], layout: str,
                      stride: tuple[int, ...], padding: tuple[int, ...],
                      dilation: tuple[int, ...]) -> tuple[int, ...]:
    """The output shape (in ``layout``) of convolving ``x_shape`` with ``w_shape``; sizes may
    come out <= 0 (callers check)."""
    n, _, sp = _split(layout, x_shape)
    k, _, ks = _split(layout, w_shape)
    out = tuple((i + 2 * p - d * (r - 1) - 1) // s + 1
                for i, r, s, p, d in zip(sp, ks, stride, padding, dilation))
    return _join(layout, n, k, out)


def filter_shape(layout: str, k: int, c_per_group: int, kernel: tuple[int, ...]
                 ) -> tuple[int, ...]:
    """The filter shape of ``k`` output channels in ``layout``."""
    return _join(layout, k, c_per_group, kernel)


def _tensor(msg: object, field: str, ref: BufRef, dtype: str | None = None) -> None:
    _require_dtype(msg, field, ref, (dtype,) if dtype else CONV_DTYPES)
    if len(ref.shape) not in (3, 4, 5):
        raise _fail(msg, field, f"{ref.describe()} must have 3, 4 or 5 dimensions (batch, "
                    "channels and 1 to 3 spatial ones)")
    _dense_rows(msg, field, ref)


class _Conv(Message):
    """Fields and checks shared by the three convolution messages (not a message itself)."""

    __slots__ = ()

    def _geometry(self, x_field: str, x: BufRef, w_field: str, w: BufRef, y_field: str,
                  y: BufRef) -> None:
        """Check x, w and y (given as the message's fields) against each other and normalize
        stride/padding/dilation to tuples."""
        msg: Any = self
        _choice(self, "layout", msg.layout, LAYOUTS)
        _choice(self, "math", msg.math, ("default", "tf32"))
        _choice(self, "algo", msg.algo, CONV_ALGOS)
        if msg.workspace_limit is not None:
            _int(self, "workspace_limit", msg.workspace_limit, 0)
        _tensor(self, x_field, x)
        _tensor(self, w_field, w, x.dtype)
        _tensor(self, y_field, y, x.dtype)
        if msg.math == "tf32" and x.dtype != "f32":
            raise _fail(self, "math", "'tf32' applies to f32 tensors")
        nd = len(x.shape) - 2
        if len(w.shape) != nd + 2:
            raise _fail(self, w_field, f"{w.describe()} must have {nd + 2} dimensions like "
                        f"{x_field}")
        if len(y.shape) != nd + 2:
            raise _fail(self, y_field, f"{y.describe()} must have {nd + 2} dimensions like "
                        f"{x_field}")
        stride = _spatial_tuple(self, "stride", msg.stride, nd, 1)
        padding = _spatial_tuple(self, "padding", msg.padding, nd, 0)
        dilation = _spatial_tuple(self, "dilation", msg.dilation, nd, 1)
        _set(self, "stride", stride)
        _set(self, "padding", padding)
        _set(self, "dilation", dilation)
        groups = _int(self, "groups", msg.groups, 1, INT32_MAX)
        layout = msg.layout
        _, c, _ = _split(layout, x.shape)
        k, cg, _ = _split(layout, w.shape)
        if c % groups:
            raise _fail(self, "groups", f"{x_field} has {c} channels, not divisible into "
                        f"{groups} groups")
        if k % groups:
            raise _fail(self, "groups", f"{w_field} has {k} output channels, not divisible into "
                        f"{groups} groups")
        if cg * groups != c:
            raise _fail(self, w_field, f"channel mismatch: {w.describe()} takes {cg} channels "
                        f"per group x {groups} groups, {x_field} has {c} ({layout})")
        out = conv_output_shape(x.shape, w.shape, layout, stride, padding, dilation)
        if any(s <= 0 for s in out):
            raise _fail(self, y_field, f"the output size comes out as {list(out)} (<= 0): the "
                        f"dilated kernel is larger than the padded input")
        if tuple(y.shape) != out:
            raise _fail(self, y_field, f"{y.describe()} must have shape {list(out)} "
                        f"({layout}, from {x_field} {list(x.shape)} and {w_field} "
                        f"{list(w.shape)})")
        for a, b in ((x, y), (w, y), (x, w)):
            if a.id == b.id and a.owner == b.owner:
                raise _fail(self, y_field, "the operands must not alias each other")


_CONV_FIELDS = ("stride", "padding", "dilation", "groups", "layout", "math", "algo",
                "workspace_limit")


@message(buffers=("x", "w", "y", "bias"), writes=("y",))
class ConvForward(_Conv):
    """y = act(conv(x, w) + bias): ``cudnnConvolutionForward``, then ``cudnnAddTensor`` and
    ``cudnnActivationForward`` in place on y when asked (see the module docstring for layouts).
    The plan (a cuDNN frontend graph where the ``nvidia-cudnn-frontend`` package is installed,
    else a legacy algorithm) is chosen once per problem and cached (``dev.cudnn.cache_info``):
    ``algo="heuristic"`` takes cuDNN's heuristic choice, ``algo="find"`` runs every candidate
    once and keeps the fastest; either the fastest whose workspace fits ``workspace_limit``
    bytes (None: any) and the pool."""

    x: BufRef
    w: BufRef
    y: BufRef
    stride: Any = 1
    padding: Any = 0
    dilation: Any = 1
    groups: int = 1
    layout: str = "NCHW"
    math: str = "default"
    algo: str = "heuristic"
    workspace_limit: int | None = None
    bias: BufRef | None = None
    activation: str = "none"
    act_coef: float | None = None

    def __post_init__(self) -> None:
        x, w, y = (_ref(self, n, getattr(self, n)) for n in ("x", "w", "y"))
        _set(self, "x", x)
        _set(self, "w", w)
        _set(self, "y", y)
        self._geometry("x", x, "w", w, "y", y)
        _choice(self, "activation", self.activation, tuple(ACTIVATIONS))
        if self.act_coef is None:
            _set(self, "act_coef", ACT_COEF.get(self.activation, 0.0))
        else:
            if self.activation not in ACT_COEF:
                raise _fail(self, "act_coef", f"activation {self.activation!r} takes no "
                            "coefficient")
            coef = _real(self, "act_coef", self.act_coef)
            if not math.isfinite(coef):
                raise _fail(self, "act_coef", "must be finite")
            _set(self, "act_coef", coef)
        if self.bias is not None:
            bias = _ref(self, "bias", self.bias)
            _set(self, "bias", bias)
            _require_dtype(self, "bias", bias, (x.dtype,))
            k = _split(self.layout, w.shape)[0]
            if bias.size != k:
                raise _fail(self, "bias", f"{bias.describe()} must hold {k} elements (one per "
                            "output channel)")
            if bias.id == y.id and bias.owner == y.owner:
                raise _fail(self, "y", "y must not alias bias")


@message(buffers=("dy", "w", "dx"), writes=("dx",))
class ConvBackwardData(_Conv):
    """dx = the gradient of conv(x, w) with respect to x, given dy
    (``cudnnConvolutionBackwardData``). dx's shape is x's; dy must have conv's output shape."""

    dy: BufRef
    w: BufRef
    dx: BufRef
    stride: Any = 1
    padding: Any = 0
    dilation: Any = 1
    groups: int = 1
    layout: str = "NCHW"
    math: str = "default"
    algo: str = "heuristic"
    workspace_limit: int | None = None

    def __post_init__(self) -> None:
        dy, w, dx = (_ref(self, n, getattr(self, n)) for n in ("dy", "w", "dx"))
        _set(self, "dy", dy)
        _set(self, "w", w)
        _set(self, "dx", dx)
        self._geometry("dx", dx, "w", w, "dy", dy)


@message(buffers=("x", "dy", "dw"), writes=("dw",))
class ConvBackwardFilter(_Conv):
    """dw = the gradient of conv(x, w) with respect to w, given dy
    (``cudnnConvolutionBackwardFilter``). dw's shape is w's."""

    x: BufRef
    dy: BufRef
    dw: BufRef
    stride: Any = 1
    padding: Any = 0
    dilation: Any = 1
    groups: int = 1
    layout: str = "NCHW"
    math: str = "default"
    algo: str = "heuristic"
    workspace_limit: int | None = None

    def __post_init__(self) -> None:
        x, dy, dw = (_ref(self, n, getattr(self, n)) for n in ("x", "dy", "dw"))
        _set(self, "x", x)
        _set(self, "dy", dy)
        _set(self, "dw", dw)
        self._geometry("x", x, "dw", dw, "dy", dy)


@message()
class DnnCacheInfo(Message):
    """Reply with the cuDNN algorithm cache's ``{"hits", "misses", "size", "capacity", ...}``."""


# -- activations, softmax, pooling ----------------------------------------------------------------
#: pooling mode -> cudnnPoolingMode_t ("avg": padding excluded from the average;
#: "avg_include_pad": padding counts as zeros; "max": the deterministic max)
POOL_MODES = {"max": 3, "avg_include_pad": 1, "avg": 2}
_POINTWISE_DTYPES = ("f32", "f16", "bf16")


def _same(msg: object, field: str, ref: BufRef, like: BufRef, like_field: str) -> None:
    if ref.dtype != like.dtype or tuple(ref.shape) != tuple(like.shape):
        raise _fail(msg, field, f"{ref.describe()} must have {like_field}'s dtype and shape "
                    f"({like.describe()})")


def _elementwise(msg: object, field: str, ref: BufRef) -> None:
    _require_dtype(msg, field, ref, _POINTWISE_DTYPES)
    if ref.size == 0 or ref.size > INT32_MAX:
        raise _fail(msg, field, f"{ref.describe()} must hold 1 to 2**31 - 1 elements")


def _activation_fields(msg: Any) -> None:
    _choice(msg, "activation", msg.activation,
            tuple(a for a in ACTIVATIONS if a != "none") + OWN_ACTIVATIONS)
    if msg.act_coef is None:
        _set(msg, "act_coef", ACT_COEF.get(msg.activation, 0.0))
    else:
        if msg.activation not in ACT_COEF:
            raise _fail(msg, "act_coef", f"activation {msg.activation!r} takes no coefficient")
        coef = _real(msg, "act_coef", msg.act_coef)
        if not math.isfinite(coef):
            raise _fail(msg, "act_coef", "must be finite")
        _set(msg, "act_coef", coef)


@message(buffers=("x", "y"), writes=("y",))
class Activation(Message):
    """y = act(x) elementwise (``cudnnActivationForward``); y may be x (in place). Any shape.
    ``"gelu"`` (exact, erf) and ``"gelu_tanh"`` (tanh approximation) run as gpumsg's own
    kernels (cuDNN's legacy activation API has none)."""

    x: BufRef
    y: BufRef
    activation: str = "relu"
    act_coef: float | None = None

    def __post_init__(self) -> None:
        x, y = _ref(self, "x", self.x), _ref(self, "y", self.y)
        _set(self, "x", x)
        _set(self, "y", y)
        _elementwise(self, "x", x)
        _same(self, "y", y, x, "x")
        _activation_fields(self)


@message(buffers=("x", "y", "dy", "dx"), writes=("dx",))
class ActivationBackward(Message):
    """dx = act'(x) * dy (``cudnnActivationBackward``), given x and y = act(x)."""

    x: BufRef
    y: BufRef
    dy: BufRef
    dx: BufRef
    activation: str = "relu"
    act_coef: float | None = None

    def __post_init__(self) -> None:
        refs = {n: _ref(self, n, getattr(self, n)) for n in ("x", "y", "dy", "dx")}
        for n, r in refs.items():
            _set(self, n, r)
        _elementwise(self, "x", refs["x"])
        for n in ("y", "dy", "dx"):
            _same(self, n, refs[n], refs["x"], "x")
        _activation_fields(self)


def _nc_tensor(msg: object, field: str, ref: BufRef, lo: int = 2) -> None:
    _require_dtype(msg, field, ref, _POINTWISE_DTYPES)
    if not lo <= len(ref.shape) <= 5:
        raise _fail(msg, field, f"{ref.describe()} must have {lo} to 5 dimensions (batch, "
                    "channels, spatial)")
    if ref.order != "C" and sum(s > 1 for s in ref.shape) > 1:
        raise _fail(msg, field, f"{ref.describe()} must be row-major (order 'C')")
    if ref.size == 0 or ref.size > INT32_MAX:
        raise _fail(msg, field, f"{ref.describe()} must hold 1 to 2**31 - 1 elements")


def _softmax_fields(msg: Any) -> None:
    _choice(msg, "mode", msg.mode, ("channel", "instance"))
    _choice(msg, "layout", msg.layout, LAYOUTS)
    if not isinstance(msg.log, bool):
        raise _fail(msg, "log", f"expected True or False, got {msg.log!r}")


@message(buffers=("x", "y"), writes=("y",))
class Softmax(Message):
    """y = softmax(x) (or log-softmax with ``log=True``), ``cudnnSoftmaxForward`` with the
    accurate (max-subtracting) algorithm. x is (N, C, *spatial) in ``layout`` (2 to 5
    dimensions); ``mode="channel"`` normalizes over C at every (n, spatial) position,
    ``"instance"`` over all of C and spatial for each n. y may be x."""

    x: BufRef
    y: BufRef
    mode: str = "channel"
    log: bool = False
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        x, y = _ref(self, "x", self.x), _ref(self, "y", self.y)
        _set(self, "x", x)
        _set(self, "y", y)
        _nc_tensor(self, "x", x)
        _same(self, "y", y, x, "x")
        _softmax_fields(self)


@message(buffers=("y", "dy", "dx"), writes=("dx",))
class SoftmaxBackward(Message):
    """dx, the gradient of :class:`Softmax` given its output y and dy
    (``cudnnSoftmaxBackward``; with ``log=True`` y is the log-softmax output)."""

    y: BufRef
    dy: BufRef
    dx: BufRef
    mode: str = "channel"
    log: bool = False
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        refs = {n: _ref(self, n, getattr(self, n)) for n in ("y", "dy", "dx")}
        for n, r in refs.items():
            _set(self, n, r)
        _nc_tensor(self, "y", refs["y"])
        _same(self, "dy", refs["dy"], refs["y"], "y")
        _same(self, "dx", refs["dx"], refs["y"], "y")
        _softmax_fields(self)


def pool_output_shape(x_shape: tuple[int, ...], layout: str, window: tuple[int, ...],
                      stride: tuple[int, ...], padding: tuple[int, ...]) -> tuple[int, ...]:
    """The output shape of pooling ``x_shape`` (sizes may come out <= 0; callers check)."""
    n, c, sp = _split(layout, x_shape)
    out = tuple((i + 2 * p - r) // s + 1 for i, r, s, p in zip(sp, window, stride, padding))
    return _join(layout, n, c, out)


def _pool_fields(msg: Any, x_field: str, x: BufRef, y_field: str, y: BufRef) -> None:
    _choice(msg, "mode", msg.mode, tuple(POOL_MODES))
    _choice(msg, "layout", msg.layout, LAYOUTS)
    _nc_tensor(msg, x_field, x, 4)
    nd = len(x.shape) - 2
    window = _spatial_tuple(msg, "window", msg.window, nd, 1)
    stride = _spatial_tuple(msg, "stride", window if msg.stride is None else msg.stride, nd, 1)
    padding = _spatial_tuple(msg, "padding", msg.padding, nd, 0)
    _set(msg, "window", window)
    _set(msg, "stride", stride)
    _set(msg, "padding", padding)
    for p, r in zip(padding, window):
        if p >= r:
            raise _fail(msg, "padding", f"padding {list(padding)} must be smaller than the "
                        f"window {list(window)}")
    out = pool_output_shape(x.shape, msg.layout, window, stride, padding)
    if any(s <= 0 for s in out):
        raise _fail(msg, y_field, f"the output size comes out as {list(out)} (<= 0)")
    if y.dtype != x.dtype or tuple(y.shape) != out:
        raise _fail(msg, y_field, f"{y.describe()} must be {x.dtype}{list(out)} ({msg.layout})")


@message(buffers=("x", "y"), writes=("y",))
class Pool(Message):
    """Pooling (``cudnnPoolingForward``): x (N, C, *spatial) in ``layout``, 2-D or 3-D;
    ``window``, ``stride`` (default: the window) and ``padding`` per spatial dimension."""

    x: BufRef
    y: BufRef
    window: Any = 2
    stride: Any = None
    padding: Any = 0
    mode: str = "max"
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        x, y = _ref(self, "x", self.x), _ref(self, "y", self.y)
        _set(self, "x", x)
        _set(self, "y", y)
        _pool_fields(self, "x", x, "y", y)


@message(buffers=("x", "y", "dy", "dx"), writes=("dx",))
class PoolBackward(Message):
    """dx, the gradient of :class:`Pool` given x, its output y and dy
    (``cudnnPoolingBackward``; max pooling sends each gradient to its window's maximum)."""

    x: BufRef
    y: BufRef
    dy: BufRef
    dx: BufRef
    window: Any = 2
    stride: Any = None
    padding: Any = 0
    mode: str = "max"
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        refs = {n: _ref(self, n, getattr(self, n)) for n in ("x", "y", "dy", "dx")}
        for n, r in refs.items():
            _set(self, n, r)
        _pool_fields(self, "x", refs["x"], "y", refs["y"])
        _same(self, "dy", refs["dy"], refs["y"], "y")
        _same(self, "dx", refs["dx"], refs["x"], "x")


# -- batch normalization --------------------------------------------------------------------------
def _channels(layout: str, shape: tuple[int, ...]) -> int:
    return shape[1] if layout == "NCHW" else shape[-1]


def _stat(msg: object, field: str, ref: BufRef, c: int, what: str = "channel") -> None:
    """A per-channel f32 vector of ``c`` elements (statistics, scale, shift)."""
    if type(ref) is not BufRef:  # None or anything else where a vector is required
        raise _fail(msg, field, f"expected a GpuBuffer of {c} f32 elements (one per {what}), "
                    f"got {type(ref).__name__}")
    if ref.dtype != "f32":
        raise _fail(msg, field, f"{ref.describe()} must be f32 (statistics and parameters are "
                    "f32 for every input precision)")
    if ref.size != c:
        raise _fail(msg, field, f"{ref.describe()} must hold {c} elements (one per {what})")


def _distinct(msg: object, refs: dict[str, BufRef | None]) -> None:
    """The buffers a message writes must not alias each other or its inputs: the first field
    (in ``refs``'s order) that repeats an earlier one is named."""
    seen: dict[tuple[int, Any], str] = {}
    for name, ref in refs.items():
        if ref is None:
            continue
        key = (ref.id, ref.owner)
        if key in seen:
            raise _fail(msg, name, f"must not alias {seen[key]}")
        seen[key] = name


def _eps(msg: Any) -> None:
    eps = _real(msg, "eps", msg.eps)
    if not (math.isfinite(eps) and eps >= 0):
        raise _fail(msg, "eps", f"must be finite and >= 0, got {eps}")
    _set(msg, "eps", eps)


def _refs(msg: Any, names: tuple[str, ...]) -> dict[str, BufRef | None]:
    out: dict[str, BufRef | None] = {}
    for n in names:
        value = getattr(msg, n)
        out[n] = None if value is None else _ref(msg, n, value)
        _set(msg, n, out[n])
    return out


def _bn_input(msg: Any, x: BufRef | None) -> tuple[BufRef, int]:
    """A batch norm's x (required) in its ``layout``, and its channel count."""
    if x is None:
        raise _fail(msg, "x", "expected a GpuBuffer, its future or a BufRef, got None")
    _choice(msg, "layout", msg.layout, LAYOUTS)
    _nc_tensor(msg, "x", x)
    return x, _channels(msg.layout, x.shape)


@message(buffers=("x", "gamma", "beta", "y", "save_mean", "save_invstd", "running_mean",
                  "running_var"),
         writes=("y", "save_mean", "save_invstd", "running_mean", "running_var"))
class BatchNormTrain(Message):
    """Batch normalization in training mode, spatial (per-channel) statistics
    (``cudnnBatchNormalizationForwardTraining``; NHWC through the ``Ex`` variant in cuDNN's
    persistent mode, as torch does for channels-last tensors).

    x (N, C, *spatial) in ``layout`` (2 to 5 dimensions), f32/f16/bf16; y like x. Per channel c,
    over the M = N * prod(spatial) values: mean, biased variance var, ``save_mean`` = mean,
    ``save_invstd`` = 1 / sqrt(var + eps), y = gamma (x - mean) save_invstd + beta. ``gamma``,
    ``beta``, the saved and running statistics are f32 vectors of C. When given (both or
    neither), running_mean <- (1 - factor) running_mean + factor mean and running_var <-
    (1 - factor) running_var + factor var M / (M - 1) (the unbiased variance), in place.
    M must be at least 2."""

    x: BufRef
    gamma: BufRef
    beta: BufRef
    y: BufRef
    save_mean: BufRef
    save_invstd: BufRef
    running_mean: BufRef | None = None
    running_var: BufRef | None = None
    factor: float = 0.1
    eps: float = 1e-5
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        r = _refs(self, ("x", "gamma", "beta", "y", "save_mean", "save_invstd", "running_mean",
                         "running_var"))
        x, c = _bn_input(self, r["x"])
        if x.size // c < 2:
            raise _fail(self, "x", f"{x.describe()} has one value per channel; training "
                        "statistics need at least 2")
        _same(self, "y", r["y"], x, "x")  # type: ignore[arg-type]
        for n in ("gamma", "beta", "save_mean", "save_invstd", "running_mean", "running_var"):
            if r[n] is not None:
                _stat(self, n, r[n], c)  # type: ignore[arg-type]
        if (r["running_mean"] is None) != (r["running_var"] is None):
            raise _fail(self, "running_var" if r["running_var"] is None else "running_mean",
                        "running_mean and running_var go together (both or neither)")
        factor = _real(self, "factor", self.factor)
        if not 0.0 <= factor <= 1.0:
            raise _fail(self, "factor", f"must be in [0, 1], got {factor}")
        _set(self, "factor", factor)
        _eps(self)
        _distinct(self, r)


@message(buffers=("x", "gamma", "beta", "mean", "var", "y"), writes=("y",))
class BatchNormInference(Message):
    """Batch normalization with given statistics (``cudnnBatchNormalizationForwardInference``):
    y = gamma (x - mean) / sqrt(var + eps) + beta per channel; x and y as in
    :class:`BatchNormTrain`, the four vectors f32 of C."""

    x: BufRef
    gamma: BufRef
    beta: BufRef
    mean: BufRef
    var: BufRef
    y: BufRef
    eps: float = 1e-5
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        r = _refs(self, ("x", "gamma", "beta", "mean", "var", "y"))
        x, c = _bn_input(self, r["x"])
        _same(self, "y", r["y"], x, "x")  # type: ignore[arg-type]
        for n in ("gamma", "beta", "mean", "var"):
            _stat(self, n, r[n], c)  # type: ignore[arg-type]
        _eps(self)
        _distinct(self, {"x": x, "y": r["y"]})


@message(buffers=("x", "dy", "gamma", "save_mean", "save_invstd", "dx", "dgamma", "dbeta"),
         writes=("dx", "dgamma", "dbeta"))
class BatchNormBackward(Message):
    """The gradients of :class:`BatchNormTrain` (``cudnnBatchNormalizationBackward``): given x,
    dy, gamma and the forward's saved statistics, dx (like x), dgamma and dbeta (f32 of C):
    dbeta = sum dy, dgamma = sum dy x_hat, dx = gamma invstd (dy - (dbeta + x_hat dgamma) / M)
    with x_hat = (x - mean) invstd, sums over each channel's M values. ``eps`` must be the
    forward's."""

    x: BufRef
    dy: BufRef
    gamma: BufRef
    save_mean: BufRef
    save_invstd: BufRef
    dx: BufRef
    dgamma: BufRef
    dbeta: BufRef
    eps: float = 1e-5
    layout: str = "NCHW"

    def __post_init__(self) -> None:
        r = _refs(self, ("x", "dy", "gamma", "save_mean", "save_invstd", "dx", "dgamma",
                         "dbeta"))
        x, c = _bn_input(self, r["x"])
        _same(self, "dy", r["dy"], x, "x")  # type: ignore[arg-type]
        _same(self, "dx", r["dx"], x, "x")  # type: ignore[arg-type]
        for n in ("gamma", "save_mean", "save_invstd", "dgamma", "dbeta"):
            _stat(self, n, r[n], c)  # type: ignore[arg-type]
        _eps(self)
        _distinct(self, r)


# -- dropout --------------------------------------------------------------------------------------
_SEED_MAX = 2**64 - 1


def _dropout_fields(msg: Any) -> None:
    p = _real(msg, "p", msg.p)
    if not 0.0 <= p < 1.0:
        raise _fail(msg, "p", f"must be in [0, 1), got {p}")
    _set(msg, "p", p)
    _set(msg, "seed", _int(msg, "seed", msg.seed, 0, _SEED_MAX))


#: cuDNN 9's dropout answers CUDNN_STATUS_NOT_SUPPORTED for bf16 (seen on an H100, cuDNN 9 of
#: CUDA 13), so bf16 is refused here
DROPOUT_DTYPES = ("f32", "f16")


def _dropout_tensor(msg: object, field: str, ref: BufRef) -> None:
    _require_dtype(msg, field, ref, DROPOUT_DTYPES)
    _elementwise(msg, field, ref)


def _reserve(msg: object, field: str, ref: BufRef) -> None:
    if ref.dtype != "u8" or len(ref.shape) != 1:
        raise _fail(msg, field, f"{ref.describe()} must be a 1-D u8 buffer (from "
                    "dev.nn.dropout)")


@message(buffers=("x",))
class DropoutReserveSize(Message):
    """Reply with the bytes of reserve space a dropout of x (its dtype and element count)
    needs (``cudnnDropoutGetReserveSpaceSize``)."""

    x: BufRef

    def __post_init__(self) -> None:
        x = _ref(self, "x", self.x)
        _set(self, "x", x)
        _dropout_tensor(self, "x", x)


@message(buffers=("x", "y", "reserve"), writes=("y", "reserve"))
class Dropout(Message):
    """y = x * mask / (1 - p), each element kept with probability 1 - p
    (``cudnnDropoutForward``); ``reserve`` (u8, the bytes :class:`DropoutReserveSize` gives)
    receives the mask for :class:`DropoutBackward`. The mask is a function of (``seed``, ``p``,
    x's element count) only: the same call gives the same mask, on every call and every device
    of the same kind. The random-number states of each (seed, p) live on the device, set up
    once (a kernel) and restored from a pristine copy before each call. Any shape, f32 or f16
    (cuDNN's dropout refuses bf16); y may be x."""

    x: BufRef
    y: BufRef
    reserve: BufRef
    p: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        _dropout_checks(self, "x", "y")


def _dropout_checks(msg: Any, src: str, dst: str) -> None:
    """Dropout's fields: ``src`` an f32/f16 tensor, ``dst`` of its shape (it may be ``src``),
    ``reserve`` a mask buffer apart from both, ``p`` and ``seed``."""
    a, r, b = (_ref(msg, n, getattr(msg, n)) for n in (src, "reserve", dst))
    for n, v in ((src, a), ("reserve", r), (dst, b)):
        _set(msg, n, v)
    _dropout_tensor(msg, src, a)
    _same(msg, dst, b, a, src)
    _reserve(msg, "reserve", r)
    _dropout_fields(msg)
    _distinct(msg, {src: a, "reserve": r})
    _distinct(msg, {dst: b, "reserve": r})


@message(buffers=("dy", "reserve", "dx"), writes=("dx",))
class DropoutBackward(Message):
    """dx = dy * mask / (1 - p) with the mask :class:`Dropout` left in ``reserve``
    (``cudnnDropoutBackward``); ``p`` and ``seed`` are the forward's. dx may be dy."""

    dy: BufRef
    reserve: BufRef
    dx: BufRef
    p: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        _dropout_checks(self, "dy", "dx")


# -- layer, group and instance normalization -------------------------------------------------------
def _row_norm(msg: Any, rows: int, per_row: int, k: int, what: str, forward: bool) -> None:
    """Checks shared by the layer and group norms: per-row statistics (f32 of ``rows``), the
    optional affine vectors (f32 of ``k``, gamma and beta together), the buffers distinct."""
    x = msg.x
    if per_row < 2:
        raise _fail(msg, "x", f"{x.describe()} normalizes groups of {per_row} value; "
                    "statistics need at least 2")
    for n in ("mean", "invstd"):
        _stat(msg, n, getattr(msg, n), rows, what)
    pair = ("gamma", "beta") if forward else ("gamma", "dgamma", "dbeta")
    given = [getattr(msg, n) is not None for n in pair]
    if any(given) and not all(given):
        missing = pair[given.index(False)]
        raise _fail(msg, missing, f"{', '.join(pair)} go together (all or none)")
    for n in pair:
        if getattr(msg, n) is not None:
            _stat(msg, n, getattr(msg, n), k, "normalized feature" if what == "row"
                  else "channel")
    _eps(msg)


_LN_FWD = ("x", "y", "mean", "invstd", "gamma", "beta")
_LN_BWD = ("x", "dy", "mean", "invstd", "dx", "gamma", "dgamma", "dbeta")


def layer_norm_dims(shape: tuple[int, ...], normalized_ndim: int) -> tuple[int, int]:
    """(rows M, features D) of a layer norm over the last ``normalized_ndim`` dimensions."""
    return (math.prod(shape[:len(shape) - normalized_ndim]),
            math.prod(shape[len(shape) - normalized_ndim:]))


def _layer_norm_fields(msg: Any, names: tuple[str, ...], forward: bool) -> None:
    r = _refs(msg, names)
    x = r["x"]
    if x is None:
        raise _fail(msg, "x", "expected a GpuBuffer, its future or a BufRef, got None")
    _elementwise(msg, "x", x)
    k = _int(msg, "normalized_ndim", msg.normalized_ndim, 1, 8)
    if k > len(x.shape):
        raise _fail(msg, "normalized_ndim", f"{x.describe()} has {len(x.shape)} dimensions; "
                    f"cannot normalize over the last {k}")
    if x.order != "C" and sum(s > 1 for s in x.shape) > 1:
        raise _fail(msg, "x", f"{x.describe()} must be row-major (order 'C')")
    for n in ("y", "dy", "dx"):
        if n in r and r[n] is None:
            raise _fail(msg, n, "expected a GpuBuffer, its future or a BufRef, got None")
        if n in r:
            _same(msg, n, r[n], x, "x")  # type: ignore[arg-type]
    rows, d = layer_norm_dims(tuple(x.shape), k)
    _row_norm(msg, rows, d, d, "row", forward)
    _distinct(msg, r)


@message(buffers=_LN_FWD, writes=("y", "mean", "invstd"))
class LayerNorm(Message):
    """Layer normalization of x over its last ``normalized_ndim`` dimensions: with M rows of
    D values each, ``mean`` and ``invstd`` = 1 / sqrt(biased var + eps) per row (f32 of M),
    y = (x - mean) invstd gamma + beta (gamma, beta: f32 of D, optional, together). x: f32,
    f16 or bf16, row-major; y like x.

    cuDNN's legacy API has no layer norm (``cudnnNormalizationForward*`` offers per-channel and
    per-activation modes, both batch statistics), so it runs as two batch normalizations: the
    statistics by ``cudnnBatchNormalizationForwardTraining`` on x viewed as (1, M, D) (M
    channels of D values: per-row statistics; unit scale, zero shift), writing x_hat to a
    temporary; then gamma and beta by ``cudnnBatchNormalizationForwardInference`` on x_hat
    viewed as (M, D) (D channels) with mean 0, variance 1 and eps 0. Where NVRTC is available
    gpumsg's own kernels (libs/cudnn/kernels/layer_norm.py) run instead; this route is the
    fallback."""

    x: BufRef
    y: BufRef
    mean: BufRef
    invstd: BufRef
    gamma: BufRef | None = None
    beta: BufRef | None = None
    normalized_ndim: int = 1
    eps: float = 1e-5

    def __post_init__(self) -> None:
        _layer_norm_fields(self, _LN_FWD, True)


@message(buffers=_LN_BWD, writes=("dx", "dgamma", "dbeta"))
class LayerNormBackward(Message):
    """The gradients of :class:`LayerNorm` given x, dy and its saved ``mean``/``invstd``: dx,
    and with gamma also dgamma = sum over rows of dy x_hat and dbeta = sum over rows of dy.
    Runs as batch normalizations on the views :class:`LayerNorm` names (x_hat recomputed,
    dgamma/dbeta by a backward pass on the (M, D) view, dx by one on the (1, M, D) view of
    dy gamma)."""

    x: BufRef
    dy: BufRef
    mean: BufRef
    invstd: BufRef
    dx: BufRef
    gamma: BufRef | None = None
    dgamma: BufRef | None = None
    dbeta: BufRef | None = None
    normalized_ndim: int = 1
    eps: float = 1e-5

    def __post_init__(self) -> None:
        _layer_norm_fields(self, _LN_BWD, False)


def group_norm_dims(shape: tuple[int, ...], groups: int) -> tuple[int, int, tuple[int, ...]]:
    """(rows N*groups, values per row, the affine view (N, C, prod(spatial))) of a group
    norm of x (N, C, *spatial)."""
    n, c = shape[0], shape[1]
    s = math.prod(shape[2:])
    return n * groups, c // groups * s, (n, c, s)


def _group_norm_fields(msg: Any, names: tuple[str, ...], forward: bool) -> None:
    r = _refs(msg, names)
    for n in ("x", "y", "dy", "dx"):
        if n in r and r[n] is None:
            raise _fail(msg, n, "expected a GpuBuffer, its future or a BufRef, got None")
    x = r["x"]
    assert x is not None
    _nc_tensor(msg, "x", x)
    for n in ("y", "dy", "dx"):
        if n in r:
            _same(msg, n, r[n], x, "x")  # type: ignore[arg-type]
    c = x.shape[1]
    groups = _int(msg, "groups", msg.groups, 1, INT32_MAX)
    if c % groups:
        raise _fail(msg, "groups", f"{x.describe()} has {c} channels, not divisible into "
                    f"{groups} groups")
    rows, per_row, _ = group_norm_dims(tuple(x.shape), groups)
    _row_norm(msg, rows, per_row, c, "group of each sample", forward)
    _distinct(msg, r)


_GN_FWD = ("x", "y", "mean", "invstd", "gamma", "beta")
_GN_BWD = ("x", "dy", "mean", "invstd", "dx", "gamma", "dgamma", "dbeta")


@message(buffers=_GN_FWD, writes=("y", "mean", "invstd"))
class GroupNorm(Message):
    """Group normalization of x (N, C, *spatial), channels first (NCHW): the C channels in
    ``groups`` consecutive groups; per sample and group, ``mean`` and ``invstd`` (f32 of
    N * groups, sample-major) over its C/groups * prod(spatial) values; y = (x - mean) invstd
    gamma[c] + beta[c] (f32 of C, optional, together). ``groups = C`` is instance norm,
    ``groups = 1`` a layer norm over (C, *spatial) with per-channel affine. Runs as
    :class:`LayerNorm` does: statistics on x viewed as (1, N*groups, rest), the affine part on
    the (N, C, prod(spatial)) view."""

    x: BufRef
    y: BufRef
    mean: BufRef
    invstd: BufRef
    groups: int = 1
    gamma: BufRef | None = None
    beta: BufRef | None = None
    eps: float = 1e-5

    def __post_init__(self) -> None:
        _group_norm_fields(self, _GN_FWD, True)


@message(buffers=_GN_BWD, writes=("dx", "dgamma", "dbeta"))
class GroupNormBackward(Message):
    """The gradients of :class:`GroupNorm` (dx; with gamma also dgamma and dbeta, f32 of C:
    sums over samples and spatial positions of dy x_hat and dy)."""

    x: BufRef
    dy: BufRef
    mean: BufRef
    invstd: BufRef
    dx: BufRef
    groups: int = 1
    gamma: BufRef | None = None
    dgamma: BufRef | None = None
    dbeta: BufRef | None = None
    eps: float = 1e-5

    def __post_init__(self) -> None:
        _group_norm_fields(self, _GN_BWD, False)


# -- checks at completion ---------------------------------------------------------------------
@message(buffers=("flag", "y"), writes=("y",))
class IndexCheck(Message):
    """The verdict on ``y``, written by a generated kernel that sets the i32 ``flag`` (its
    first element) where an index lies outside its range (dev.nn's embedding and cross
    entropy, the arrays' indexing): the flag is read back at completion, and when set the
    reply fails with InvalidMessage(``text``, field=``field``) and ``y`` carries the failure
    to every reader, pipelined before the failure was seen or sent after (DependencyFailed).
    ``y`` itself is not modified. With ``token`` (1 to 2**31 - 1) the flag is set when it
    holds that token, which the kernel stores there (a flag kept from one check to the next,
    never zeroed); with 0, when it is not zero."""

    flag: BufRef
    y: BufRef
    field: str = "input"
    text: str = "an index lies outside its range"
    token: int = 0

    def __post_init__(self) -> None:
        flag, y = _ref(self, "flag", self.flag), _ref(self, "y", self.y)
        _set(self, "flag", flag)
        _set(self, "y", y)
        _require_dtype(self, "flag", flag, ("i32",))
        if flag.size < 1:
            raise _fail(self, "flag", f"{flag.describe()} holds no element")
        if flag.id == y.id and flag.owner == y.owner:
            raise _fail(self, "y", "y must not be the flag")
        for name in ("field", "text"):
            if not isinstance(getattr(self, name), str):
                raise _fail(self, name, f"expected a string, got {getattr(self, name)!r}")
        if not 0 <= self.token < 2 ** 31:
            raise _fail(self, "token", f"expected 0 to 2**31 - 1, got {self.token}")
