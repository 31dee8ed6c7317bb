"""cuDNN recurrent networks (RNN-tanh, RNN-relu, LSTM, GRU) as messages, through cuDNN's v8 RNN
API (``cudnnRNNForward``, ``cudnnRNNBackwardData_v8``, ``cudnnRNNBackwardWeights_v8``).

A network is an :class:`RnnSpec`: plain data (cell, sizes, layers, direction, dtype, bias,
math, algorithm, LSTM projection size, inter-layer dropout), the key of the device's descriptor
cache. Its parameters live in one
*weight space*, a 1-D buffer of the spec's dtype whose size and internal layout cuDNN decides
(:class:`RnnWeightInfo` answers both); ``dev.cudnn.rnn(...)`` (libs/cudnn/rnn/client.py) gives
torch-named, torch-shaped access to it.

Tensors are row-major (``order="C"``) device buffers of the spec's dtype:

==============  ==============================================  ==============================
buffer          shape (``batch_first=False``: sequence-major)   ``batch_first=True``
==============  ==============================================  ==============================
x, dx           (T, B, input_size)                              (B, T, input_size)
y, dy           (T, B, D * P)                                   (B, T, D * P)
hx, hy          (num_layers * D, B, P)                          the same
cx, cy          (num_layers * D, B, hidden_size)                the same
==============  ==============================================  ==============================

D is 2 for bidirectional networks (y holds the forward direction's P values, then the reverse
direction's, as torch does), else 1. P is ``proj_size`` for an LSTM with a projection, else
``hidden_size`` (:attr:`RnnSpec.out_size`). Hidden/cell states are indexed
``layer * D + direction``.
``seq_lengths`` (optional, B ints in 1..T) makes a padded batch: sequence b uses steps
``0 .. seq_lengths[b] - 1``; its outputs beyond are zero, its final states are those of its last
valid step, and the reverse direction starts there (torch's packed-sequence semantics). Omitted
hx/cx are zeros; omitted hy/cy are not written. ``cx``/``cy``/``dcx``/``dcy`` are LSTM's only.

Cells (torch's gate order and semantics, which are cuDNN's; W: input weights, R: recurrent):

* ``rnn_tanh`` / ``rnn_relu``: h' = act(W x + b_W + R h + b_R)
* ``lstm`` (gates i, f, g, o): i, f, o = sigmoid(...), g = tanh(...); c' = f c + i g;
  h' = o tanh(c'); with ``proj_size`` P (torch's ``nn.LSTM(proj_size=P)``, cuDNN's
  ``projSize``): h' = W_hr (o tanh(c')), W_hr (P, H) without bias, so h, the recurrent
  weights' columns (R: (4H, P)) and each direction's output are P wide; c stays H wide
* ``gru`` (gates r, z, n; linear-before-reset): r, z = sigmoid(W x + b_W + R h + b_R);
  n = tanh(W_n x + b_Wn + r * (R_n h + b_Rn)); h' = (1 - z) n + z h

Precisions: f32 (``math="default"``: strict FP32 FMA; ``math="tf32"``: TF32 tensor cores), f16
and bf16 (tensor cores; cuDNN's math precision is f32 for them, as torch sets it).

Training: :class:`RnnForward` with a ``reserve`` buffer (u8, :class:`RnnSpaceInfo`'s
``reserve_bytes``) keeps what the backward passes need. :class:`RnnBackwardData` must come
next (it reads and updates the reserve), then :class:`RnnBackwardWeights` (cuDNN's order).

Inter-layer dropout (``RnnSpec.dropout`` p, torch's ``dropout=p``): in a *training* forward of a
network of two layers or more, each layer's output except the last's is multiplied by a random
mask (each element kept with probability 1 - p and then scaled by 1/(1 - p), else 0) before the
layer above reads it; y, hy and cy are not masked; inference ignores p. The mask goes into the
reserve, so the backward passes apply the mask of the forward that wrote it. The random numbers
come from a *dropout-states* buffer (u8, ``dropout_states_bytes`` of :class:`RnnSpaceInfo`),
seeded by :class:`RnnDropoutInit` and advanced by every training forward that reads it (cuDNN's
random-number generator states; on the simulator a seed and a call counter). Reproducible: the
masks of a training forward are a function of the states buffer's contents and of the problem
(spec, T, B, layout, sequence lengths) on one kind of device; so the same seed followed by the
same sequence of training forwards on that states buffer gives the same masks, outputs and
gradients again, whatever else the device runs in between. The simulator's masks are its own
(NumPy Philox), not cuDNN's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._base import (
    INT32_MAX,
    BufRef,
    Message,
    _bool,
    _choice,
    _dense_rows,
    _fail,
    _int,
    _opt_ref,
    _real,
    _ref,
    _require_dtype,
    _set,
    fast_init,
    message,
)

__all__ = ["RnnSpec", "RnnForward", "RnnBackwardData", "RnnBackwardWeights", "RnnWeightInfo",
           "RnnSpaceInfo", "RnnCacheInfo", "RnnDropoutInit", "SEED_MAX", "RNN_CELLS",
           "RNN_DTYPES", "RNN_GATES",
           "param_names", "data_shapes", "RNN_ALGOS", "auto_algo"]

RNN_CELLS = ("rnn_tanh", "rnn_relu", "lstm", "gru")
RNN_ALGOS = ("auto", "standard", "persist_static")
RNN_DTYPES = ("f32", "f16", "bf16")
#: gates per cell (torch's gate order: LSTM i, f, g, o; GRU r, z, n)
RNN_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}
#: the largest dropout seed (cuDNN's is an unsigned long long)
SEED_MAX = 2**64 - 1


@fast_init
@dataclasses.dataclass(frozen=True, slots=True)
class RnnSpec:
    """One recurrent network as plain data (hashable: the device's descriptor cache key).

    ``algo``: ``"auto"`` (default: persistent where :func:`auto_algo` says it pays, standard
    otherwise or where cuDNN refuses the persistent one at planning), ``"standard"`` (cuDNN's
    cuBLASLt-based algorithm) or ``"persist_static"`` (cuDNN's persistent kernels: the
    recurrent weights stay on chip for the whole sequence). The weight space is the same for
    all (checked on the device when a persistent plan is made). On the H100 the f16 LSTM of
    T512 B64 1024/1024 ran at 0.97x torch with "auto" (persistent) and 0.37x with "standard".

    ``proj_size`` (LSTM only, 0 < P < hidden_size; 0: none): torch's ``proj_size``, cuDNN's
    ``projSize`` (see the module docstring for the shapes it changes). ``dropout`` (p in
    [0, 1)): torch's inter-layer ``dropout``, applied in training forwards only, between layers
    (a one-layer network has nothing to apply it to, as in torch). Bad values raise
    InvalidMessage naming the field."""

    cell: str
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    dtype: str = "f32"
    bias: bool = True
    math: str = "default"
    algo: str = "auto"
    proj_size: int = 0
    dropout: float = 0.0

    def __post_init__(self) -> None:
        _choice(self, "cell", self.cell, RNN_CELLS)
        _int(self, "input_size", self.input_size, 1, INT32_MAX)
        _int(self, "hidden_size", self.hidden_size, 1, INT32_MAX)
        _int(self, "num_layers", self.num_layers, 1, 1024)
        _bool(self, "bidirectional", self.bidirectional)
        _choice(self, "dtype", self.dtype, RNN_DTYPES)
        _bool(self, "bias", self.bias)
        _choice(self, "math", self.math, ("default", "tf32"))
        if self.math == "tf32" and self.dtype != "f32":
            raise _fail(self, "math", "'tf32' applies to f32 networks")
        _choice(self, "algo", self.algo, RNN_ALGOS)
        proj = _int(self, "proj_size", self.proj_size, 0, INT32_MAX)
        if proj:
            if self.cell != "lstm":
                raise _fail(self, "proj_size", f"only LSTM networks have a projection; this is "
                            f"{self.cell!r}")
            if proj >= self.hidden_size:
                raise _fail(self, "proj_size", f"must be smaller than hidden_size "
                            f"({self.hidden_size}), got {proj}")
        p = _real(self, "dropout", self.dropout)
        if not 0.0 <= p < 1.0:
            raise _fail(self, "dropout", f"must be in [0, 1), got {p}")
        _set(self, "dropout", p)

    @property
    def out_size(self) -> int:
        """Width of h and of each direction's output: proj_size if set, else hidden_size."""
        return self.proj_size or self.hidden_size

    @property
    def applies_dropout(self) -> bool:
        """Whether a training forward masks anything (p > 0 and two layers or more)."""
        return self.dropout > 0.0 and self.num_layers > 1

    @property
    def gates(self) -> int:
        return RNN_GATES[self.cell]

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def layer_input(self, layer: int) -> int:
        """Input width of ``layer`` (the network's input, or the layer below's output)."""
        return self.input_size if layer == 0 else self.directions * self.out_size


def auto_algo(spec: RnnSpec, padded: bool, batch: int) -> str:
    """The algorithm ``algo="auto"`` asks cuDNN for first: persistent kernels for a half-precision
    single-layer, unidirectional network without padding whose recurrent weights fit on chip
    (hidden size at most 1024, sizes multiples of 128) and a batch of 8 to 128 in steps of 8 —
    the regime where torch's own heuristics take them (on the H100 torch's f16 LSTM of
    T512 B64 1024/1024 ran 2.5x faster than gpumsg's standard-algorithm one, while f32, where
    both run the standard algorithm, was at parity); standard otherwise."""
    if spec.algo != "auto":
        return spec.algo
    if (spec.dtype == "f16" and spec.num_layers == 1 and not spec.proj_size
            and not spec.bidirectional and not padded
            and spec.hidden_size <= 1024 and spec.hidden_size % 128 == 0
            and spec.input_size % 128 == 0 and batch % 8 == 0 and batch <= 128):
        return "persist_static"
    return "standard"


def param_names(spec: RnnSpec) -> list[tuple[str, int, int, str]]:
    """torch's parameter names of ``spec``, in torch's order, each with (layer, direction,
    kind): kind is "w_ih", "w_hh", "b_ih", "b_hh" or (with a projection) "w_hr". Shapes:
    w_ih (G*H, in), w_hh (G*H, P), biases (G*H,), w_hr (P, H) (P: :attr:`RnnSpec.out_size`)."""
    out = []
    for layer in range(spec.num_layers):
        for d in range(spec.directions):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            kinds = ("w_ih", "w_hh") + (("b_ih", "b_hh") if spec.bias else ()) + \
                (("w_hr",) if spec.proj_size else ())
            for kind in kinds:
                name = ("weight_" if kind[0] == "w" else "bias_") + kind[2:] + sfx
                out.append((name, layer, d, kind))
    return out


def data_shapes(spec: RnnSpec, batch_first: bool, seq_len: int, batch: int
                ) -> dict[str, tuple[int, ...]]:
    """The shapes of x, y, the hidden states ("h") and the cell states ("c") of one call (see
    the module docstring)."""
    d, p = spec.directions, spec.out_size

    def seq(width: int) -> tuple[int, ...]:
        return (batch, seq_len, width) if batch_first else (seq_len, batch, width)

    return {"x": seq(spec.input_size), "y": seq(d * p), "h": (spec.num_layers * d, batch, p),
            "c": (spec.num_layers * d, batch, spec.hidden_size)}


def _spec(msg: Any) -> RnnSpec:
    if not isinstance(msg.spec, RnnSpec):
        raise _fail(msg, "spec", f"expected an RnnSpec, got {type(msg.spec).__name__}")
    return msg.spec


def _seq_tensor(msg: Any, field: str, ref: BufRef, spec: RnnSpec) -> None:
    _require_dtype(msg, field, ref, (spec.dtype,))
    if len(ref.shape) != 3:
        raise _fail(msg, field, f"{ref.describe()} must have 3 dimensions "
                    f"({'B, T' if msg.batch_first else 'T, B'}, features)")
    _dense_rows(msg, field, ref)


def _geometry(msg: Any, x_field: str, x: BufRef) -> tuple[RnnSpec, int, int]:
    """Check the spec, the layout flag and the sequence buffer ``x``; (spec, T, B)."""
    spec = _spec(msg)
    _bool(msg, "batch_first", msg.batch_first)
    _seq_tensor(msg, x_field, x, spec)
    b, t = (x.shape[0], x.shape[1]) if msg.batch_first else (x.shape[1], x.shape[0])
    lengths = msg.seq_lengths
    if lengths is not None:
        if not isinstance(lengths, (tuple, list)):
            raise _fail(msg, "seq_lengths", f"expected a tuple of {b} ints, got "
                        f"{type(lengths).__name__}")
        if len(lengths) != b:
            raise _fail(msg, "seq_lengths", f"needs one length per sequence ({b}), got "
                        f"{len(lengths)}")
        lengths = tuple(_int(msg, "seq_lengths", v, 1, t) for v in lengths)
        if all(v == t for v in lengths):
            lengths = None  # no padding: the same problem as without lengths
        _set(msg, "seq_lengths", lengths)
    return spec, t, b


def _matches(msg: Any, field: str, ref: BufRef | None, shape: tuple[int, ...],
             dtype: str) -> None:
    if ref is None:
        return
    _require_dtype(msg, field, ref, (dtype,))
    if tuple(ref.shape) != shape:
        raise _fail(msg, field, f"{ref.describe()} must have shape {shape}")
    if ref.order != "C" and sum(s > 1 for s in ref.shape) > 1:
        raise _fail(msg, field, f"{ref.describe()} must be row-major (order 'C')")


def _space(msg: Any, field: str, ref: BufRef | None, dtypes: tuple[str, ...]) -> None:
    if ref is None:
        return
    _require_dtype(msg, field, ref, dtypes)
    if len(ref.shape) != 1:
        raise _fail(msg, field, f"{ref.describe()} must be 1-D (a flat space of bytes or "
                    "elements)")


def _lstm_only(msg: Any, spec: RnnSpec, fields: tuple[str, ...]) -> None:
    if spec.cell != "lstm":
        for f in fields:
            if getattr(msg, f) is not None:
                raise _fail(msg, f, f"only LSTM networks have cell states; this is "
                            f"{spec.cell!r}")


def _distinct(msg: Any, outputs: tuple[str, ...], others: tuple[str, ...]) -> None:
    """Each output buffer is apart from every other named buffer (cuDNN works out of place)."""
    seen: dict[int, str] = {}
    for f in others + outputs:
        ref = getattr(msg, f)
        if ref is None:
            continue
        if ref.id in seen and (f in outputs or seen[ref.id] in outputs):
            raise _fail(msg, f, f"{ref.describe()} is also {seen[ref.id]}: the RNN calls "
                        "need separate buffers")
        seen.setdefault(ref.id, f)


def _refs(msg: Any, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    for f in required:
        _set(msg, f, _ref(msg, f, getattr(msg, f)))
    for f in optional:
        _set(msg, f, _opt_ref(msg, f, getattr(msg, f)))


@message(buffers=("x", "y", "w", "hx", "cx", "hy", "cy", "reserve", "dropout_states"),
         writes=("y", "hy", "cy", "reserve", "dropout_states"))
class RnnForward(Message):
    """y, hy, cy = rnn(x, hx, cx) with the weights in ``w`` (``cudnnRNNForward``). With
    ``reserve`` (u8, at least :class:`RnnSpaceInfo`'s ``reserve_bytes``) it is the training
    forward, keeping in ``reserve`` what the backward passes need; without, inference. ``w`` is
    the weight space (1-D, the spec's dtype, at least ``weight_bytes``). A workspace comes from
    the device pool for the call (stream-ordered).

    ``dropout_states`` (u8, seeded by :class:`RnnDropoutInit`) is required by, and only
    accepted for, a training forward of a spec that applies dropout (``dropout > 0`` and two
    layers or more): the forward draws its masks from it and advances it (see the module
    docstring for what is reproducible)."""

    spec: RnnSpec
    x: BufRef
    y: BufRef
    w: BufRef
    hx: BufRef | None = None
    cx: BufRef | None = None
    hy: BufRef | None = None
    cy: BufRef | None = None
    reserve: BufRef | None = None
    seq_lengths: tuple[int, ...] | None = None
    batch_first: bool = False
    dropout_states: BufRef | None = None

    def __post_init__(self) -> None:
        _refs(self, ("x", "y", "w"), ("hx", "cx", "hy", "cy", "reserve", "dropout_states"))
        spec, t, b = _geometry(self, "x", self.x)
        if self.x.shape[2] != spec.input_size:
            raise _fail(self, "x", f"{self.x.describe()} has {self.x.shape[2]} features; the "
                        f"network's input_size is {spec.input_size}")
        shapes = data_shapes(spec, self.batch_first, t, b)
        _matches(self, "y", self.y, shapes["y"], spec.dtype)
        for f in ("hx", "hy"):
            _matches(self, f, getattr(self, f), shapes["h"], spec.dtype)
        _lstm_only(self, spec, ("cx", "cy"))
        for f in ("cx", "cy"):
            _matches(self, f, getattr(self, f), shapes["c"], spec.dtype)
        _space(self, "w", self.w, (spec.dtype,))
        _space(self, "reserve", self.reserve, ("u8",))
        _space(self, "dropout_states", self.dropout_states, ("u8",))
        uses = self.reserve is not None and spec.applies_dropout
        if uses and self.dropout_states is None:
            raise _fail(self, "dropout_states", f"a training forward with dropout "
                        f"{spec.dropout} between layers needs a dropout-states buffer "
                        "(seeded by RnnDropoutInit)")
        if not uses and self.dropout_states is not None:
            why = "an inference forward" if self.reserve is None else \
                "a network that applies no dropout (dropout 0 or one layer)"
            raise _fail(self, "dropout_states", f"{why} draws no random numbers; only a "
                        "training forward with dropout between layers takes dropout states")
        _distinct(self, ("y", "hy", "cy", "reserve", "dropout_states"), ("x", "w", "hx", "cx"))

    @property
    def training(self) -> bool:
        return self.reserve is not None


@message(buffers=("y", "dy", "dx", "w", "reserve", "hx", "cx", "dhy", "dcy", "dhx", "dcx"),
         writes=("dx", "dhx", "dcx", "reserve"))
class RnnBackwardData(Message):
    """dx, dhx, dcx from dy, dhy, dcy (``cudnnRNNBackwardData_v8``), after the training
    :class:`RnnForward` that produced ``y`` and ``reserve`` from the same x, hx, cx and ``w``.
    Updates ``reserve`` for :class:`RnnBackwardWeights`, which must follow. Omitted dhy/dcy are
    zeros; omitted dhx/dcx are not written."""

    spec: RnnSpec
    y: BufRef
    dy: BufRef
    dx: BufRef
    w: BufRef
    reserve: BufRef
    hx: BufRef | None = None
    cx: BufRef | None = None
    dhy: BufRef | None = None
    dcy: BufRef | None = None
    dhx: BufRef | None = None
    dcx: BufRef | None = None
    seq_lengths: tuple[int, ...] | None = None
    batch_first: bool = False

    def __post_init__(self) -> None:
        _refs(self, ("y", "dy", "dx", "w", "reserve"), ("hx", "cx", "dhy", "dcy", "dhx", "dcx"))
        spec, t, b = _geometry(self, "dx", self.dx)
        shapes = data_shapes(spec, self.batch_first, t, b)
        if self.dx.shape[2] != spec.input_size:
            raise _fail(self, "dx", f"{self.dx.describe()} has {self.dx.shape[2]} features; "
                        f"the network's input_size is {spec.input_size}")
        for f in ("y", "dy"):
            _matches(self, f, getattr(self, f), shapes["y"], spec.dtype)
        for f in ("hx", "dhy", "dhx"):
            _matches(self, f, getattr(self, f), shapes["h"], spec.dtype)
        _lstm_only(self, spec, ("cx", "dcy", "dcx"))
        for f in ("cx", "dcy", "dcx"):
            _matches(self, f, getattr(self, f), shapes["c"], spec.dtype)
        _space(self, "w", self.w, (spec.dtype,))
        _space(self, "reserve", self.reserve, ("u8",))
        _distinct(self, ("dx", "dhx", "dcx", "reserve"), ("y", "dy", "w", "hx", "cx", "dhy",
                                                           "dcy"))


@message(buffers=("x", "y", "dw", "reserve", "hx"), writes=("dw",))
class RnnBackwardWeights(Message):
    """The weight gradients (``cudnnRNNBackwardWeights_v8``) into ``dw``, a weight space like
    ``w``, after :class:`RnnBackwardData` on the same ``reserve``. cuDNN only *adds* to the
    gradient space (``CUDNN_WGRAD_MODE_ADD``): with ``accumulate=False`` (default) ``dw`` is
    zeroed first on the same stream, so it receives the gradient; with ``accumulate=True`` the
    gradient is added to what ``dw`` holds (torch's ``.grad`` accumulation)."""

    spec: RnnSpec
    x: BufRef
    y: BufRef
    dw: BufRef
    reserve: BufRef
    hx: BufRef | None = None
    seq_lengths: tuple[int, ...] | None = None
    batch_first: bool = False
    accumulate: bool = False

    def __post_init__(self) -> None:
        _refs(self, ("x", "y", "dw", "reserve"), ("hx",))
        spec, t, b = _geometry(self, "x", self.x)
        if self.x.shape[2] != spec.input_size:
            raise _fail(self, "x", f"{self.x.describe()} has {self.x.shape[2]} features; the "
                        f"network's input_size is {spec.input_size}")
        shapes = data_shapes(spec, self.batch_first, t, b)
        _matches(self, "y", self.y, shapes["y"], spec.dtype)
        _matches(self, "hx", self.hx, shapes["h"], spec.dtype)
        _space(self, "dw", self.dw, (spec.dtype,))
        _space(self, "reserve", self.reserve, ("u8",))
        _bool(self, "accumulate", self.accumulate)
        _distinct(self, ("dw",), ("x", "y", "reserve", "hx"))


@message(buffers=("states",), writes=("states",))
class RnnDropoutInit(Message):
    """Seed a dropout-states buffer (u8, 1-D, at least :class:`RnnSpaceInfo`'s
    ``dropout_states_bytes``) for the training forwards of networks with dropout
    (``cudnnSetDropoutDescriptor``, whose kernel initializes cuDNN's random-number states on
    the compute stream; the simulator writes the seed and a zero call counter). Any network's
    forward may read the buffer (the states do not depend on the spec); each advances it.
    ``seed``: 0 .. 2**64 - 1."""

    states: BufRef
    seed: int = 0

    def __post_init__(self) -> None:
        _refs(self, ("states",), ())
        _space(self, "states", self.states, ("u8",))
        _set(self, "seed", _int(self, "seed", self.seed, 0, SEED_MAX))


@message()
class RnnWeightInfo(Message):
    """Answered at once: ``{"weight_bytes": n, "dropout_states_bytes": m, "params": {name:
    {"shape": (rows, cols) or (rows,), "offsets": [element offset of each gate's block]}}}`` —
    torch's parameter names (``weight_ih_l0``, ``bias_hh_l1_reverse``, ``weight_hr_l0``, ...)
    with torch's shapes; gate g of a gate weight is rows ``g*H .. (g+1)*H`` of torch's matrix,
    a row-major (H, cols) block at its offset in the weight space
    (``cudnnGetRNNWeightParams``); a projection ``weight_hr`` is one (P, H) block (cuDNN's
    linear layer 8). ``dropout_states_bytes`` is the size of a dropout-states buffer
    (``cudnnDropoutGetStatesSize``)."""

    spec: RnnSpec

    def __post_init__(self) -> None:
        _spec(self)


@message()
class RnnSpaceInfo(Message):
    """Answered at once: ``{"workspace_bytes", "reserve_bytes", "inference_workspace_bytes",
    "algo", "dropout_states_bytes"}`` of a training call on (``seq_len``, ``batch``,
    ``seq_lengths``) (``cudnnGetRNNTempSpaceSizes``, ``cudnnDropoutGetStatesSize``)."""

    spec: RnnSpec
    seq_len: int
    batch: int
    seq_lengths: tuple[int, ...] | None = None
    batch_first: bool = False

    def __post_init__(self) -> None:
        _spec(self)
        t = _int(self, "seq_len", self.seq_len, 1, INT32_MAX)
        b = _int(self, "batch", self.batch, 1, INT32_MAX)
        _bool(self, "batch_first", self.batch_first)
        lengths = self.seq_lengths
        if lengths is not None:
            if not isinstance(lengths, (tuple, list)) or len(lengths) != b:
                raise _fail(self, "seq_lengths", f"needs one length per sequence ({b})")
            lengths = tuple(_int(self, "seq_lengths", v, 1, t) for v in lengths)
            _set(self, "seq_lengths", None if all(v == t for v in lengths) else lengths)


@message()
class RnnCacheInfo(Message):
    """Answered at once: the RNN descriptor caches' counters (``{"specs": ..., "data": ...}``,
    each hits, misses, size, capacity, evictions)."""
