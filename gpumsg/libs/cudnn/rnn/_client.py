"""``dev.cudnn.rnn`` / ``lstm`` / ``gru``: recurrent networks with torch-like parameters (caller's
thread). Joins the ``dev.cudnn`` namespace (registered as the library "cudnn_rnn", which shares
the device's cuDNN handle).

::

    lstm = dev.cudnn.lstm(input_size=256, hidden_size=512, num_layers=2, bidirectional=True,
                        dtype="f16")
    lstm.set_weights(torch_module.state_dict())      # torch names and shapes, any subset
    y, hy, cy, _ = lstm(x).result()                  # inference: one future of RnnOutputs
    fwd = lstm(x, hx, cx, train=True)                # a training step, sent whole:
    grads = lstm.backward(fwd, dy, dhy=dhy, dcy=dcy) # the backward takes the forward's future
    dx, dhx, dcx, dw = grads.result()
    named = lstm.get_weights(dw)                     # torch-named gradients (NumPy)

    # torch's nn.LSTM(..., proj_size=64, dropout=0.2); masks seeded by 7
    lstm = dev.cudnn.lstm(256, 512, 2, proj_size=64, dropout=0.2, seed=7)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ....dtypes import as_dtype
from ....errors import InvalidMessage
from ....messages._base import as_ref, checked_flag
from ....messages.cudnn_rnn import (
    SEED_MAX,
    RnnBackwardData,
    RnnBackwardWeights,
    RnnCacheInfo,
    RnnDropoutInit,
    RnnForward,
    RnnSpaceInfo,
    RnnSpec,
    RnnWeightInfo,
    data_shapes,
)
from ..._answers import tuple_after

if TYPE_CHECKING:
    from ....client._device import Device

__all__ = ["DnnRnn", "Rnn", "RnnDataGrads", "RnnForwardFuture", "RnnGrads", "RnnOutputs"]


class RnnOutputs(NamedTuple):
    """A forward's buffers: y, hy, cy (None unless LSTM), reserve (None unless training)."""

    y: Any
    hy: Any
    cy: Any
    reserve: Any


class RnnGrads(NamedTuple):
    """A backward's buffers: dx, dhx, dcx (None unless LSTM), dw (None when the weight
    gradients were not asked for)."""

    dx: Any
    dhx: Any
    dcx: Any
    dw: Any


class RnnDataGrads(NamedTuple):
    """The data gradients of a backward: dx, dhx, dcx (None unless LSTM)."""

    dx: Any
    dhx: Any
    dcx: Any


def _lengths(value: Any) -> Any:
    """A list or array of lengths as a tuple of ints; anything else as given (the message
    names what is wrong with it)."""
    if isinstance(value, (list, np.ndarray)) and np.ndim(value) == 1:
        return tuple(int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                     else v for v in value)
    return value


def _all(futures: list[Future]) -> Future:
    """A future that resolves to None once every one of ``futures`` has (or fails with the
    first error)."""
    out: Future = Future()
    if not futures:
        out.set_result(None)
        return out
    left = [len(futures)]
    lock = threading.Lock()

    def done(f: Future) -> None:
        exc = f.exception()
        with lock:
            left[0] -= 1
            last = left[0] == 0
            if out.done():
                return
            if exc is not None:
                out.set_exception(exc)
            elif last:
                out.set_result(None)

    for f in futures:
        f.add_done_callback(done)
    return out


class Rnn:
    """One recurrent network on a device: its :class:`~gpumsg.messages.cudnn_rnn.RnnSpec`, its
    weight space (``weights``, a 1-D buffer of the spec's dtype, uninitialized until
    :meth:`set_weights` or :meth:`reset_parameters`) and torch-named access to it. Build it with
    ``dev.cudnn.rnn(...)``, ``dev.cudnn.lstm(...)`` or ``dev.cudnn.gru(...)``.

    Dropout between layers (``spec.dropout`` > 0, two layers or more): the network owns a
    dropout-states buffer (``dropout_states``), seeded with ``seed`` before its first training
    forward (or by :meth:`seed_dropout`) and advanced by each training forward, so successive
    training steps draw new masks (as torch's do). Reproducible: the same seed and then the same
    sequence of training forwards (the same shapes, in the same order) on this network give the
    same masks, so the same outputs and gradients, on the same kind of device; other networks
    and other work on the device do not change them. Inference never draws."""

    def __init__(self, dev: Device, spec: RnnSpec, batch_first: bool, info: dict[str, Any],
                 seed: int = 0) -> None:
        self._dev = dev
        self.spec = spec
        self.batch_first = batch_first
        self.weight_bytes: int = info["weight_bytes"]
        #: torch name -> {"shape": torch's shape, "offsets": element offset of each gate block}
        self.params: dict[str, dict[str, Any]] = info["params"]
        self.dtype = as_dtype(spec.dtype)
        self.weight_elems = max(self.weight_bytes // self.dtype.itemsize, 1)
        self.weights = dev.alloc((self.weight_elems,), spec.dtype, order="C")
        self._reserve: dict[tuple, int] = {}
        #: the seed the dropout states were last seeded with (see :meth:`seed_dropout`)
        self.seed = seed
        #: bytes of a dropout-states buffer on this device
        self.dropout_states_bytes: int = int(info.get("dropout_states_bytes", 0))
        #: the dropout-states buffer (u8), made at the first training forward that needs it
        self.dropout_states: Any = None

    # -- parameters ---------------------------------------------------------------------------
    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """torch's parameter names and shapes, in torch's order."""
        return {name: tuple(e["shape"]) for name, e in self.params.items()}

    def _checked(self, name: Any, value: Any) -> np.ndarray:
        entry = self.params.get(name) if isinstance(name, str) else None
        if entry is None:
            raise InvalidMessage(f"{name!r} is not a parameter of this network; it has "
                                 f"{', '.join(self.params)}", field=str(name))
        arr = np.asarray(value)
        if tuple(arr.shape) != tuple(entry["shape"]):
            raise InvalidMessage(f"{name}: expected shape {tuple(entry['shape'])} (torch's), "
                                 f"got {tuple(arr.shape)}", field=name)
        if arr.dtype == self.dtype:
            return arr
        if arr.dtype.kind not in "fiuV":  # V: ml_dtypes' bfloat16 and kin
            raise InvalidMessage(f"{name}: expected real numbers, got {arr.dtype}", field=name)
        try:
            return arr.astype(np.float64).astype(self.dtype)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"{name}: cannot convert {arr.dtype} to {self.spec.dtype}: "
                                 f"{exc}", field=name) from None

    def pack(self, params: Mapping[str, Any]) -> np.ndarray:
        """The weight space image (1-D, the spec's dtype) holding ``params`` (every parameter,
        torch-named and shaped); padding cuDNN leaves between blocks is zero."""
        missing = [n for n in self.params if n not in params]
        if missing:
            raise InvalidMessage(f"pack needs every parameter; missing {', '.join(missing)}",
                                 field=missing[0])
        image = np.zeros(self.weight_elems, self.dtype)
        for name, value in params.items():
            arr = self._checked(name, value)
            for off, block in zip(self.params[name]["offsets"],
                                  arr.reshape(len(self.params[name]["offsets"]), -1)):
                image[off:off + block.size] = block
        return image

    def unpack(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """torch-named, torch-shaped parameters (copies) from a weight space image (a host copy
        of ``weights`` or of a gradient space)."""
        flat = np.asarray(image).reshape(-1)
        out = {}
        for name, entry in self.params.items():
            shape = tuple(entry["shape"])
            block = int(np.prod(shape)) // len(entry["offsets"])
            out[name] = np.concatenate([flat[o:o + block] for o in entry["offsets"]]
                                       ).reshape(shape)
        return out

    def set_weights(self, params: Mapping[str, Any], weights: Any = None) -> Future:
        """Write torch-named parameters (``weight_ih_l0``, ``bias_hh_l1_reverse``, ... any
        subset; a torch ``state_dict()`` converted to NumPy fits) into ``weights`` (default: this
        network's). Every parameter given: one upload of the packed image; a subset: one upload
        per gate block. Resolves to None once written. Unknown names and wrong shapes raise
        InvalidMessage naming the parameter."""
        dst = self.weights if weights is None else weights
        if not isinstance(params, Mapping):
            raise InvalidMessage(f"params: expected a mapping of torch names to arrays, got "
                                 f"{type(params).__name__}", field="params")
        arrays = {name: self._checked(name, v) for name, v in params.items()}
        if all(n in arrays for n in self.params):
            return self._dev.copy_from_host(dst, self.pack(arrays))
        futures = []
        for name, arr in arrays.items():
            offsets = self.params[name]["offsets"]
            for off, block in zip(offsets, arr.reshape(len(offsets), -1)):
                futures.append(self._dev.copy_from_host(dst, np.ascontiguousarray(block), off))
        return _all(futures)

    def get_weights(self, weights: Any = None) -> dict[str, np.ndarray]:
        """torch-named parameters read back from ``weights`` (default: this network's; pass a
        gradient space to read gradients). Waits for the copy."""
        src = self.weights if weights is None else weights
        return self.unpack(self._dev.copy_to_host(src).result())

    def reset_parameters(self, seed: int | None = None) -> Future:
        """torch's initialization: every parameter uniform on [-1/sqrt(H), 1/sqrt(H)]."""
        rng = np.random.default_rng(seed)
        k = 1.0 / np.sqrt(self.spec.hidden_size)
        return self.set_weights({n: rng.uniform(-k, k, tuple(e["shape"]))
                                 for n, e in self.params.items()})

    # -- spaces -------------------------------------------------------------------------------
    def reserve_bytes(self, seq_len: int, batch: int, seq_lengths: Any = None) -> int:
        """Bytes of the reserve space of a training call (asked of the device once per shape,
        then remembered; the first ask waits for the answer)."""
        msg = RnnSpaceInfo(self.spec, seq_len, batch, _lengths(seq_lengths), self.batch_first)
        key = (msg.seq_len, msg.batch, msg.seq_lengths)
        n = self._reserve.get(key)
        if n is None:
            n = self._reserve[key] = int(self._dev.send(msg).result()["reserve_bytes"])
        return n

    def _seq_dims(self, x: Any, field: str) -> tuple[int, int]:
        shape = tuple(as_ref(x, field).shape)
        if len(shape) != 3:
            raise InvalidMessage(f"{field}: expected a 3-D sequence buffer, got shape {shape}",
                                 field=field)
        return (shape[1], shape[0]) if self.batch_first else (shape[0], shape[1])

    def _check_w(self, w: Any, field: str) -> Any:
        if w is None:
            return self.weights
        ref = as_ref(w, field)
        if ref.nbytes < self.weight_bytes:
            raise InvalidMessage(f"{field}: {ref.describe()} holds {ref.nbytes} bytes; this "
                                 f"network's weight space needs {self.weight_bytes}",
                                 field=field)
        return w

    def _new_states(self, b: int, cell: bool = False) -> Any:
        """A new (layers * D, b, P) buffer of h-like states, or (layers * D, b, H) with
        ``cell``."""
        spec = self.spec
        width = spec.hidden_size if cell else spec.out_size
        return self._dev.alloc((spec.num_layers * spec.directions, b, width), spec.dtype,
                               order="C")

    def seed_dropout(self, seed: int | None = None) -> Future:
        """(Re)seed this network's dropout states with ``seed`` (default: :attr:`seed`), making
        the buffer first if needed; the next training forward draws the masks that follow that
        seed. Resolves to None once seeded (stream-ordered before later calls: no need to
        wait). InvalidMessage (field "seed") outside 0 .. 2**64 - 1."""
        seed = self.seed if seed is None else seed
        if self.dropout_states is None:
            self._dev.port.check_open()
            self.dropout_states = self._dev.alloc((max(self.dropout_states_bytes, 1),), "u8",
                                                  order="C")
        done = self._dev.send(RnnDropoutInit(self.dropout_states, seed))
        self.seed = seed
        return done

    # -- the passes ---------------------------------------------------------------------------
    def forward(self, x: Any, hx: Any = None, cx: Any = None, seq_lengths: Any = None,
                train: bool = False, w: Any = None) -> RnnForwardFuture:
        """One future of :class:`RnnOutputs` (y, hy, cy, reserve) of rnn(x, hx, cx) (see
        :class:`~gpumsg.messages.cudnn_rnn.RnnForward` for layouts and padding): new buffers,
        row-major, the spec's dtype. ``train=True`` also makes the reserve space (u8) the
        backward needs and, with dropout between layers, draws the masks from (and advances)
        :attr:`dropout_states`, seeding them first if this is the network's first training
        forward. Omitted hx/cx are zeros.

        The future's :attr:`~RnnForwardFuture.pending` holds the four buffers' futures at once,
        and :meth:`backward` takes the future itself (it remembers x, hx, cx, the lengths and
        the weights): a training step is sent whole without waiting in between."""
        dev = self._dev
        dev.port.check_open()
        checked_flag(train, "train")
        seq_lengths = _lengths(seq_lengths)
        t, b = self._seq_dims(x, "x")
        w = self._check_w(w, "w")
        spec = self.spec
        shapes = data_shapes(spec, self.batch_first, t, b)
        y = dev.alloc(shapes["y"], spec.dtype, order="C")
        hy = self._new_states(b)
        cy = self._new_states(b, cell=True) if spec.cell == "lstm" else None
        reserve = states = None
        if train:
            reserve = dev.alloc((max(self.reserve_bytes(t, b, seq_lengths), 1),), "u8",
                                order="C")
            if spec.applies_dropout:
                if self.dropout_states is None:
                    self.seed_dropout()
                states = self.dropout_states
        done = dev.send(RnnForward(spec, x, y, w, hx, cx, hy, cy, reserve, seq_lengths,
                                   self.batch_first, states))
        pending = RnnOutputs(y, hy, cy, reserve)
        return RnnForwardFuture(done, self, pending, _ForwardInputs(x, hx, cx, seq_lengths, w))

    __call__ = forward

    def _forward_of(self, forward: Any) -> tuple[RnnOutputs, _ForwardInputs]:
        """The pending outputs and the inputs of ``forward`` (this network's training
        forward's future); InvalidMessage naming ``forward`` otherwise."""
        if not isinstance(forward, RnnForwardFuture):
            raise InvalidMessage(f"forward: expected the future a training forward of this "
                                 f"network returned, got {type(forward).__name__}",
                                 field="forward")
        if forward.network is not self:
            raise InvalidMessage("forward: that forward ran on another network",
                                 field="forward")
        if forward.pending.reserve is None:
            raise InvalidMessage("forward: an inference forward (train=False) keeps no "
                                 "reserve space; run it with train=True", field="forward")
        return forward.pending, forward.inputs

    def backward_data(self, forward: Any, dy: Any, dhy: Any = None, dcy: Any = None
                      ) -> Future:
        """One future of :class:`RnnDataGrads` (dx, dhx, dcx; dcx None unless LSTM) of the
        training forward ``forward`` (its future, resolved or not) given dy, the gradient of
        its y, and dhy/dcy (omitted: zeros), through ``cudnnRNNBackwardData_v8``. It updates
        the forward's reserve space for :meth:`backward_weights`."""
        dev = self._dev
        dev.port.check_open()
        out, inp = self._forward_of(forward)
        t, b = self._seq_dims(out.y, "y")
        spec = self.spec
        dx = dev.alloc(data_shapes(spec, self.batch_first, t, b)["x"], spec.dtype, order="C")
        dhx = self._new_states(b)
        dcx = self._new_states(b, cell=True) if spec.cell == "lstm" else None
        done = dev.send(RnnBackwardData(spec, out.y, dy, dx, inp.w, out.reserve, inp.hx,
                                        inp.cx, dhy, dcy, dhx, dcx, inp.seq_lengths,
                                        self.batch_first))
        return tuple_after(done, RnnDataGrads, dx, dhx, dcx)

    def backward_weights(self, forward: Any, dw: Any = None, accumulate: bool = False
                         ) -> Future:
        """One future of the weight-gradient space (a new one, or ``dw``) of the training
        forward ``forward``, sent after its :meth:`backward_data` (which prepares the reserve
        space; ``cudnnRNNBackwardWeights_v8``). ``accumulate=False`` overwrites dw with the
        gradient; ``True`` adds to it (cuDNN's only mode). Read it torch-named with
        :meth:`get_weights`."""
        dev = self._dev
        dev.port.check_open()
        checked_flag(accumulate, "accumulate")
        out, inp = self._forward_of(forward)
        given = dw is not None
        if given:
            self._check_w(dw, "dw")
        else:
            dw = dev.alloc((self.weight_elems,), self.spec.dtype, order="C")
        done = dev.send(RnnBackwardWeights(self.spec, inp.x, out.y, dw, out.reserve, inp.hx,
                                           inp.seq_lengths, self.batch_first, accumulate))
        return dev.buffer_after(done, dw)

    def backward(self, forward: Any, dy: Any, dhy: Any = None, dcy: Any = None,
                 dw: Any = None, accumulate: bool = False, weights: bool = True) -> Future:
        """One future of :class:`RnnGrads` (dx, dhx, dcx, dw) of the training forward
        ``forward`` (the future it returned, resolved or not: no wait is needed between the
        two), given dy and dhy/dcy (omitted: zeros): :meth:`backward_data`, then with
        ``weights=True`` :meth:`backward_weights` (dw: a new gradient space, or ``dw``,
        overwritten or, with ``accumulate``, added to). ``weights=False``: dw is None."""
        checked_flag(accumulate, "accumulate")
        checked_flag(weights, "weights")
        data = self.backward_data(forward, dy, dhy, dcy)
        if not weights:
            return _grads_after(data, None)
        return _grads_after(data, self.backward_weights(forward, dw, accumulate))


class _ForwardInputs(NamedTuple):
    """What a backward needs of its forward besides the outputs."""

    x: Any
    hx: Any
    cx: Any
    seq_lengths: Any
    w: Any


class RnnForwardFuture(Future):
    """The future of a forward (:meth:`Rnn.forward`): resolves to :class:`RnnOutputs` of
    GpuBuffers once the forward has run, or fails with its error. Before that,
    :attr:`pending` holds the outputs' futures (pass them to later calls) and
    :meth:`Rnn.backward` accepts this future itself."""

    def __init__(self, done: Future, network: Rnn, pending: RnnOutputs,
                 inputs: _ForwardInputs) -> None:
        super().__init__()
        #: the network that ran it
        self.network = network
        #: RnnOutputs of the new buffers' futures, known at once
        self.pending = pending
        #: the forward's inputs, kept for the backward
        self.inputs = inputs

        def relay(f: Future) -> None:
            exc = f.exception()
            if exc is not None:
                self.set_exception(exc)
            else:
                self.set_result(RnnOutputs(*(getattr(b, "buffer", b) for b in pending)))

        done.add_done_callback(relay)


def _grads_after(data: Future, weights: Future | None) -> Future:
    """One future of RnnGrads once the data pass (and the weight pass) have resolved."""
    out: Future = Future()
    parts = [data] if weights is None else [data, weights]
    left = [len(parts)]
    lock = threading.Lock()

    def one_done(_f: Future) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        for f in parts:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
                return
        dx, dhx, dcx = data.result()
        out.set_result(RnnGrads(dx, dhx, dcx, None if weights is None else weights.result()))

    for f in parts:
        f.add_done_callback(one_done)
    return out


class DnnRnn:
    """The RNN part of ``dev.cudnn`` (mixed into the cuDNN namespace class)."""

    _dev: Device

    def __init__(self, device: Device) -> None:  # not run when combined with dev.cudnn's class
        self._dev = device

    def rnn_weight_info(self, spec: RnnSpec) -> dict[str, Any]:
        """The weight space size and parameter table of ``spec`` (see
        :class:`~gpumsg.messages.cudnn_rnn.RnnWeightInfo`); asked of the device once per spec,
        then remembered (the first ask waits)."""
        if type(spec) is not RnnSpec:  # the cache's key must hash (and be a spec)
            raise InvalidMessage(f"spec: expected an RnnSpec, got {type(spec).__name__}",
                                 field="spec")
        cache = self.__dict__.setdefault("_rnn_info", {})
        info = cache.get(spec)
        if info is None:
            info = cache[spec] = self._dev.send(RnnWeightInfo(spec)).result()
        return info

    def rnn(self, cell: str, input_size: int, hidden_size: int, num_layers: int = 1,
            bidirectional: bool = False, dtype: str = "f32", bias: bool = True,
            batch_first: bool = False, math: str = "default", algo: str = "auto",
            proj_size: int = 0, dropout: float = 0.0, seed: int | None = None) -> Rnn:
        """A recurrent network (``cell``: "rnn_tanh", "rnn_relu", "lstm" or "gru") with its
        weight space allocated (uninitialized): see :class:`Rnn`. ``batch_first``,
        ``proj_size`` (LSTM only, below ``hidden_size``) and ``dropout`` (between layers, in
        training forwards) as in torch; ``seed`` seeds the dropout masks (default: one drawn
        at random, kept in ``Rnn.seed``). Bad arguments raise InvalidMessage naming the field.
        Waits for the weight table the first time a spec is used."""
        self._dev.port.check_open()
        spec = RnnSpec(cell, input_size, hidden_size, num_layers, bidirectional, dtype, bias,
                       math, algo, proj_size, dropout)
        checked_flag(batch_first, "batch_first")
        if seed is None:
            seed = int(np.random.default_rng().integers(0, SEED_MAX, endpoint=True,
                                                        dtype=np.uint64))
        elif (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
              or not 0 <= int(seed) <= SEED_MAX):
            raise InvalidMessage(f"seed: expected an int in 0 .. 2**64 - 1, got {seed!r}",
                                 field="seed")
        return Rnn(self._dev, spec, batch_first, self.rnn_weight_info(spec), int(seed))

    def lstm(self, input_size: int, hidden_size: int, num_layers: int = 1, **kw: Any) -> Rnn:
        """:meth:`rnn` with LSTM cells (torch.nn.LSTM's gates and parameters)."""
        return self.rnn("lstm", input_size, hidden_size, num_layers, **kw)

    def gru(self, input_size: int, hidden_size: int, num_layers: int = 1, **kw: Any) -> Rnn:
        """:meth:`rnn` with GRU cells (torch.nn.GRU's gates and parameters)."""
        return self.rnn("gru", input_size, hidden_size, num_layers, **kw)

    def rnn_cache_info(self) -> Future:
        """Resolves to the RNN descriptor caches' counters."""
        return self._dev.send(RnnCacheInfo())
