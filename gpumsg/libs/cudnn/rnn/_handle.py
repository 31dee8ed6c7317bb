"""cuDNN's v8 RNN API on one device (device thread): RNN descriptors, data descriptors, the
device copy of the sequence lengths, workspaces from the pool.

Two :class:`~gpumsg.service._plans.PlanCache` s: one of RNN descriptors keyed by
(:class:`~gpumsg.messages.cudnn_rnn.RnnSpec`, padded I/O, algorithm), each with its weight-space
size and torch-named parameter table (``cudnnGetRNNWeightParams``, asked once); one of *data
plans* keyed by (spec, layout, T, B, sequence lengths): the x/y RNN data descriptors, the state
descriptor, the workspace and reserve sizes of both forward modes, the algorithm the problem
runs with (``algo="auto"``: persistent kernels where
:func:`~gpumsg.messages.cudnn_rnn.auto_algo` says so and cuDNN accepts them, else standard) and
the int32 device array of sequence lengths that cuDNN 9 requires (``devSeqLengths``). That
array is packed into a pinned staging block and copied on the compute stream ahead of the call
that reads it (the block goes back when the copy has completed); an evicted plan frees it
stream-ordered. Nothing here waits on the GPU. The cuDNN handle is the device's one
(``ctx.library("cudnn")``), bound to the stream through it.

Layouts: sequence-major without padding is cuDNN's packed layout with padded I/O off (torch's
call); a batch-major or padded batch uses the unpacked layouts with padded I/O on, outputs'
padding filled with zeros.

Projection: ``projSize`` is the spec's ``proj_size`` (``hiddenSize`` when there is none: cuDNN 9
refuses 0); h states and y are then P wide and the cell states keep their own H-wide tensor
descriptor. Dropout: each RNN descriptor holds a dropout descriptor; without dropout it is p = 0
without states (no kernel); with dropout it is the spec's p on states of the plan's own (a
buffer of ``cudnnDropoutGetStatesSize`` bytes, seeded 0 once, never drawn from, freed
stream-ordered with the plan), so that the RNN descriptor and the space sizes (which count the
masks) are asked of a complete descriptor. A training forward that applies dropout points it at
the call's dropout-states buffer (``cudnnRestoreDropoutDescriptor``, host only) and sets the RNN
descriptor again with it (as torch does per call), issues the forward, then points both back at
the plan's states: the states are the caller's buffer; cuDNN draws the masks from it, advances
it and leaves the masks in the reserve for the backward passes.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Any

import numpy as np

from ....dtypes import dtype_of
from ....errors import LibraryError
from ....messages.cudnn_rnn import RnnSpec, auto_algo, param_names
from ....service._plans import PlanCache
from ....service._registry import COMPUTE
from ..._loader import c_int, c_size_t, c_void_p
from .._bindings import (
    DATA_TYPE,
    FWD_MODE_INFERENCE,
    FWD_MODE_TRAINING,
    MATH_DEFAULT,
    MATH_FMA,
    MATH_TENSOR_OP,
    RNN_ALGO,
    RNN_BATCH_MAJOR_UNPACKED,
    RNN_BIDIRECTIONAL,
    RNN_DOUBLE_BIAS,
    RNN_LINEAR_INPUT,
    RNN_MODE,
    RNN_NO_BIAS,
    RNN_PADDED_IO_DISABLED,
    RNN_PADDED_IO_ENABLED,
    RNN_PROJ_LIN_ID,
    RNN_SEQ_MAJOR_PACKED,
    RNN_SEQ_MAJOR_UNPACKED,
    RNN_UNIDIRECTIONAL,
    WGRAD_MODE_ADD,
)
from .._handle import status_error

__all__ = ["RnnHandle", "RnnCall", "weight_table_names"]

#: 8 zero bytes: the padding fill of outputs (read as the data type's value: zero in all)
_ZERO_FILL = ctypes.c_double(0.0)


@dataclasses.dataclass(frozen=True, slots=True)
class RnnCall:
    """One RNN call as the handles see it: the problem and the device pointers (0: absent).
    ``op`` is "fwd", "bwd_data" or "bwd_weights"; ``w``/``w_bytes`` the weight space (dw for
    bwd_weights), ``reserve``/``reserve_bytes`` the reserve space (0: inference),
    ``states``/``states_bytes`` the dropout-states buffer (0: none; a training forward of a
    spec that applies dropout)."""

    op: str
    spec: RnnSpec
    batch_first: bool
    seq_len: int
    batch: int
    seq_lengths: tuple[int, ...] | None
    w: int
    w_bytes: int
    x: int = 0
    y: int = 0
    hx: int = 0
    cx: int = 0
    hy: int = 0
    cy: int = 0
    dx: int = 0
    dy: int = 0
    dhx: int = 0
    dcx: int = 0
    dhy: int = 0
    dcy: int = 0
    reserve: int = 0
    reserve_bytes: int = 0
    accumulate: bool = False
    states: int = 0
    states_bytes: int = 0

    @property
    def padded(self) -> bool:
        return self.batch_first or self.seq_lengths is not None

    def data_key(self) -> tuple:
        return (self.spec, self.batch_first, self.seq_len, self.batch, self.seq_lengths)


def weight_table_names(spec: RnnSpec) -> list[tuple[str, int, int, str]]:
    return param_names(spec)


class _SpecPlan:
    __slots__ = ("desc", "dropout", "states", "states_bytes", "weight_bytes", "params", "spec",
                 "padded", "algo")

    def __init__(self, spec: RnnSpec, padded: bool, algo: str) -> None:
        self.desc = 0
        self.dropout = 0
        self.states = self.states_bytes = 0
        self.weight_bytes = 0
        self.params: dict[str, dict[str, Any]] = {}
        self.spec, self.padded, self.algo = spec, padded, algo


class _DataPlan:
    __slots__ = ("x", "y", "h", "c", "seq_dev", "seq_bytes", "ws_infer", "ws_train", "reserve",
                 "algo")

    def __init__(self) -> None:
        self.algo = "standard"
        self.x = self.y = self.h = self.c = 0
        self.seq_dev = 0
        self.seq_bytes = 0
        self.ws_infer = self.ws_train = self.reserve = 0


def _arr(values: Any) -> Any:
    return (c_int * len(values))(*values)


class RnnHandle:
    """RNN descriptors and data plans of one device, on the device's cuDNN handle."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._dnn = ctx.library("cudnn")
        self.lib = self._dnn.lib
        self.raw_handle: int = self._dnn.raw_handle
        self.specs = PlanCache(32, self._free_spec)
        self.data = PlanCache(64, self._free_data)
        self._states_bytes = 0

    # -- plumbing ------------------------------------------------------------------------------
    def _check(self, status: int, function: str) -> None:
        if status:
            raise status_error(self.lib, status, function)

    def _new(self, kind: str) -> int:
        out = c_void_p()
        self._check(getattr(self.lib, f"cudnnCreate{kind}Descriptor")(ctypes.byref(out)),
                    f"cudnnCreate{kind}Descriptor")
        return out.value  # type: ignore[return-value]

    def _free_spec(self, plan: _SpecPlan) -> None:
        if plan.desc:
            self.lib.cudnnDestroyRNNDescriptor(plan.desc)
            plan.desc = 0
        if plan.dropout:
            self.lib.cudnnDestroyDropoutDescriptor(plan.dropout)
            plan.dropout = 0
        if plan.states:
            self._ctx.memory.deallocate(plan.states, plan.states_bytes,
                                        self._ctx.compute.obj)  # stream-ordered
            plan.states = 0

    def _free_data(self, plan: _DataPlan, stream: Any = None) -> None:
        for name in ("x", "y"):
            d = getattr(plan, name)
            if d:
                self.lib.cudnnDestroyRNNDataDescriptor(d)
                setattr(plan, name, 0)
        for name in ("h", "c"):
            d = getattr(plan, name)
            if d:
                self.lib.cudnnDestroyTensorDescriptor(d)
                setattr(plan, name, 0)
        if plan.seq_dev:
            stream = stream if stream is not None else self._ctx.compute.obj
            self._ctx.memory.deallocate(plan.seq_dev, plan.seq_bytes, stream)  # stream-ordered
            plan.seq_dev = 0

    # -- the RNN descriptor, weight space size and parameter table --------------------------------
    def _spec_plan(self, spec: RnnSpec, padded: bool, algo: str = "standard") -> _SpecPlan:
        key = (spec, padded, algo)
        plan = self.specs.get(key)
        if plan is not None:
            return plan
        lib, h = self.lib, self.raw_handle
        plan = _SpecPlan(spec, padded, algo)
        try:
            plan.dropout = self._new("Dropout")
            if spec.applies_dropout:
                # the spec's p with states of the plan's own (seeded 0, never drawn from), so
                # that the descriptor is complete when the RNN descriptor and the space sizes
                # (which count the masks) are asked; a training forward points it at the
                # call's states and back (_issue)
                plan.states_bytes = self.dropout_states_bytes()
                plan.states = self._ctx.memory.allocate(plan.states_bytes,
                                                        self._ctx.compute.obj)
                self._check(lib.cudnnSetDropoutDescriptor(plan.dropout, h, spec.dropout,
                                                          plan.states, plan.states_bytes, 0),
                            "cudnnSetDropoutDescriptor")
            else:
                # no dropout between layers: p = 0 without states (no kernel runs)
                self._check(lib.cudnnSetDropoutDescriptor(plan.dropout, h, 0.0, None, 0, 0),
                            "cudnnSetDropoutDescriptor")
            plan.desc = self._new("RNN")
            self._set_rnn(plan)
            size = c_size_t(0)
            self._check(lib.cudnnGetRNNWeightSpaceSize(h, plan.desc, ctypes.byref(size)),
                        "cudnnGetRNNWeightSpaceSize")
            plan.weight_bytes = size.value
            plan.params = self._param_table(spec, plan)
            if algo != "standard":
                std = self._spec_plan(spec, padded)
                if (plan.weight_bytes, plan.params) != (std.weight_bytes, std.params):
                    raise LibraryError("cudnn", 0, f"the {algo} algorithm lays the weight "
                                       "space out differently from the standard one",
                                       "cudnnGetRNNWeightParams")
        except BaseException:
            self._free_spec(plan)
            raise
        self.specs.put(key, plan)
        return plan

    def _set_rnn(self, plan: _SpecPlan) -> None:
        """(Re)set ``plan``'s RNN descriptor from its spec with its dropout descriptor."""
        spec = plan.spec
        if spec.dtype == "f32":
            math = MATH_DEFAULT if spec.math == "tf32" else MATH_FMA
        else:
            math = MATH_TENSOR_OP
        # projSize: the projection's size, else hiddenSize (no projection; cuDNN 9 refuses 0)
        self._check(self.lib.cudnnSetRNNDescriptor_v8(
            plan.desc, RNN_ALGO[plan.algo], RNN_MODE[spec.cell],
            RNN_DOUBLE_BIAS if spec.bias else RNN_NO_BIAS,
            RNN_BIDIRECTIONAL if spec.bidirectional else RNN_UNIDIRECTIONAL,
            RNN_LINEAR_INPUT, DATA_TYPE[spec.dtype], DATA_TYPE["f32"], math,
            spec.input_size, spec.hidden_size, spec.out_size, spec.num_layers,
            plan.dropout,
            RNN_PADDED_IO_ENABLED if plan.padded else RNN_PADDED_IO_DISABLED),
            "cudnnSetRNNDescriptor_v8")

    def _param_table(self, spec: RnnSpec, plan: _SpecPlan) -> dict[str, dict[str, Any]]:
        """torch name -> {"shape", "offsets"} from cudnnGetRNNWeightParams. The addresses are
        asked against a weight space taken from the pool (stream-ordered, given back at once:
        only its address is used), so the offsets are those of any weight space."""
        lib, h = self.lib, self.raw_handle
        memory, stream = self._ctx.memory, self._ctx.compute.obj
        itemsize = dtype_of(spec.dtype).itemsize
        g, hid, out = spec.gates, spec.hidden_size, spec.out_size
        base = memory.allocate(max(plan.weight_bytes, 256), stream)
        m_desc = b_desc = 0
        try:
            m_desc, b_desc = self._new("Tensor"), self._new("Tensor")
            table: dict[str, dict[str, Any]] = {}
            for name, layer, d, kind in param_names(spec):
                pseudo = layer * spec.directions + d
                cols = {"w_ih": spec.layer_input(layer), "w_hh": out, "w_hr": hid}.get(kind, 0)
                rows = out if kind == "w_hr" else hid  # of one block
                blocks = 1 if kind == "w_hr" else g
                offsets = []
                for gate in range(blocks):
                    lin = gate + (g if kind in ("w_hh", "b_hh") else 0)
                    if kind == "w_hr":
                        lin = RNN_PROJ_LIN_ID
                    m_addr, b_addr = c_void_p(), c_void_p()
                    self._check(lib.cudnnGetRNNWeightParams(
                        h, plan.desc, pseudo, plan.weight_bytes, base, lin, m_desc,
                        ctypes.byref(m_addr), b_desc, ctypes.byref(b_addr)),
                        "cudnnGetRNNWeightParams")
                    is_w = kind[0] == "w"
                    addr = (m_addr if is_w else b_addr).value
                    want = rows * cols if is_w else hid
                    got = self._numel(m_desc if is_w else b_desc)
                    if not addr or got != want:
                        raise LibraryError("cudnn", 0, f"{name} gate {gate}: cuDNN reports "
                                           f"{got} values at {addr}, expected {want}",
                                           "cudnnGetRNNWeightParams")
                    offset, rem = divmod(addr - base, itemsize)
                    if rem or offset < 0:
                        raise LibraryError("cudnn", 0, f"{name} gate {gate}: address {addr} "
                                           f"is not an element of the weight space at {base}",
                                           "cudnnGetRNNWeightParams")
                    offsets.append(offset)
                shape = (blocks * rows, cols) if kind[0] == "w" else (g * hid,)
                table[name] = {"shape": shape, "offsets": offsets}
            return table
        finally:
            for d in (m_desc, b_desc):
                if d:
                    lib.cudnnDestroyTensorDescriptor(d)
            memory.deallocate(base, max(plan.weight_bytes, 256), stream)

    def _numel(self, desc: int) -> int:
        dtype, nb = c_int(0), c_int(0)
        dims, strides = (c_int * 8)(), (c_int * 8)()
        self._check(self.lib.cudnnGetTensorNdDescriptor(desc, 8, ctypes.byref(dtype),
                                                        ctypes.byref(nb), dims, strides),
                    "cudnnGetTensorNdDescriptor")
        return int(np.prod([dims[i] for i in range(nb.value)])) if nb.value else 0

    def weight_info(self, spec: RnnSpec) -> dict[str, Any]:
        """{"weight_bytes", "dropout_states_bytes", "params"} of ``spec`` (see RnnWeightInfo);
        host calls only."""
        self._dnn._bind(self._ctx.compute.obj)
        plan = self._spec_plan(spec, False)
        return {"weight_bytes": plan.weight_bytes, "params": plan.params,
                "dropout_states_bytes": self.dropout_states_bytes()}

    def dropout_states_bytes(self) -> int:
        """Bytes of a dropout-states buffer (``cudnnDropoutGetStatesSize``, asked once)."""
        if not self._states_bytes:
            size = c_size_t(0)
            self._check(self.lib.cudnnDropoutGetStatesSize(self.raw_handle, ctypes.byref(size)),
                        "cudnnDropoutGetStatesSize")
            self._states_bytes = size.value
        return self._states_bytes

    def init_dropout(self, stream: Any, states: int, nbytes: int, seed: int) -> None:
        """Seed the dropout-states buffer ``states`` on ``stream``: cuDNN's initialization
        kernel through a dropout descriptor made for the call (destroyed once the kernel is
        enqueued; the states do not refer to it). The p given there (0.5) is not part of the
        states: each forward's descriptor carries the spec's p."""
        self._dnn._bind(stream)
        desc = self._new("Dropout")
        try:
            self._check(self.lib.cudnnSetDropoutDescriptor(desc, self.raw_handle, 0.5, states,
                                                           nbytes, seed),
                        "cudnnSetDropoutDescriptor")
        finally:
            self.lib.cudnnDestroyDropoutDescriptor(desc)

    def weight_bytes(self, spec: RnnSpec) -> int:
        return self._spec_plan(spec, False).weight_bytes

    # -- data plans ---------------------------------------------------------------------------
    def _data_plan(self, spec: RnnSpec, batch_first: bool, seq_len: int, batch: int,
                   lengths: tuple[int, ...] | None) -> _DataPlan:
        key = (spec, batch_first, seq_len, batch, lengths)
        plan = self.data.get(key)
        if plan is not None:
            return plan
        padded = batch_first or lengths is not None
        algo = auto_algo(spec, padded, batch)
        if algo != "standard" and spec.algo == "auto":
            try:
                plan = self._new_data_plan(spec, batch_first, seq_len, batch, lengths, algo)
            except LibraryError:  # cuDNN refuses the persistent kernels here: standard ones
                plan = self._new_data_plan(spec, batch_first, seq_len, batch, lengths,
                                           "standard")
        else:
            plan = self._new_data_plan(spec, batch_first, seq_len, batch, lengths, algo)
        self.data.put(key, plan)
        return plan

    def _new_data_plan(self, spec: RnnSpec, batch_first: bool, seq_len: int, batch: int,
                       lengths: tuple[int, ...] | None, algo: str) -> _DataPlan:
        padded = batch_first or lengths is not None
        sp = self._spec_plan(spec, padded, algo)
        lib, h = self.lib, self.raw_handle
        plan = _DataPlan()
        plan.algo = algo
        seqs = list(lengths) if lengths is not None else [seq_len] * batch
        if not padded:
            layout = RNN_SEQ_MAJOR_PACKED
        else:
            layout = RNN_BATCH_MAJOR_UNPACKED if batch_first else RNN_SEQ_MAJOR_UNPACKED
        dt = DATA_TYPE[spec.dtype]
        fill = ctypes.byref(_ZERO_FILL) if padded else None
        stream = self._ctx.compute.obj
        try:
            for name, width in (("x", spec.input_size),
                                ("y", spec.directions * spec.out_size)):
                d = self._new("RNNData")
                setattr(plan, name, d)
                self._check(lib.cudnnSetRNNDataDescriptor(d, dt, layout, seq_len, batch, width,
                                                          _arr(seqs), fill),
                            "cudnnSetRNNDataDescriptor")
            ld = spec.num_layers * spec.directions
            # h states are P wide, c states H wide (the same descriptor without a projection)
            for name, width in (("h", spec.out_size), ("c", spec.hidden_size)):
                if name == "c" and width == spec.out_size:
                    break
                d = self._new("Tensor")
                setattr(plan, name, d)
                self._check(lib.cudnnSetTensorNdDescriptor(
                    d, dt, 3, _arr([ld, batch, width]), _arr([batch * width, width, 1])),
                    "cudnnSetTensorNdDescriptor")
            ws, rs = c_size_t(0), c_size_t(0)
            self._check(lib.cudnnGetRNNTempSpaceSizes(h, sp.desc, FWD_MODE_INFERENCE, plan.x,
                                                      ctypes.byref(ws), ctypes.byref(rs)),
                        "cudnnGetRNNTempSpaceSizes")
            plan.ws_infer = ws.value
            self._check(lib.cudnnGetRNNTempSpaceSizes(h, sp.desc, FWD_MODE_TRAINING, plan.x,
                                                      ctypes.byref(ws), ctypes.byref(rs)),
                        "cudnnGetRNNTempSpaceSizes")
            plan.ws_train, plan.reserve = ws.value, rs.value
            self._upload_lengths(plan, seqs, stream)
        except BaseException:
            self._free_data(plan, stream)
            raise
        return plan

    def _upload_lengths(self, plan: _DataPlan, seqs: list[int], stream: Any) -> None:
        """The int32 device array of sequence lengths: packed into a pinned staging block and
        copied on ``stream`` ahead of the calls that read it; the block is given back once the
        copy has completed (a completion entry on the compute stream)."""
        ctx = self._ctx
        nbytes = 4 * len(seqs)
        block = ctx.pinned.allocate(nbytes, staging=True)
        block.bytes[:nbytes] = np.asarray(seqs, np.int32).view(np.uint8)
        plan.seq_bytes = nbytes
        plan.seq_dev = ctx.memory.allocate(nbytes, stream)
        try:
            ctx.backend.copy_htod(stream, plan.seq_dev, block.ptr, nbytes)
        except BaseException:
            ctx.pinned.release(block)
            raise
        ctx.complete(None, COMPUTE, finish=lambda v, f: ctx.pinned.release(block))

    def space_info(self, spec: RnnSpec, batch_first: bool, seq_len: int, batch: int,
                   lengths: tuple[int, ...] | None) -> dict[str, int]:
        """{"workspace_bytes", "reserve_bytes"} of a training call (see RnnSpaceInfo)."""
        self._dnn._bind(self._ctx.compute.obj)
        plan = self._data_plan(spec, batch_first, seq_len, batch, lengths)
        return {"workspace_bytes": plan.ws_train, "reserve_bytes": plan.reserve,
                "inference_workspace_bytes": plan.ws_infer, "algo": plan.algo,
                "dropout_states_bytes": self.dropout_states_bytes()}

    # -- the calls ----------------------------------------------------------------------------
    def run(self, stream: Any, call: RnnCall) -> None:
        """Issue ``call`` on ``stream`` with a workspace from the pool (freed stream-ordered)."""
        self._dnn._bind(stream)
        plan = self._data_plan(call.spec, call.batch_first, call.seq_len, call.batch,
                               call.seq_lengths)
        sp = self._spec_plan(call.spec, call.padded, plan.algo)
        training = call.op != "fwd" or bool(call.reserve)
        nbytes = plan.ws_train if training else plan.ws_infer
        memory = self._ctx.memory
        ws = memory.allocate(nbytes, stream) if nbytes else 0
        try:
            self._issue(stream, call, sp, plan, ws, nbytes)
        finally:
            if nbytes:
                memory.deallocate(ws, nbytes, stream)

    def _issue(self, stream: Any, c: RnnCall, sp: _SpecPlan, plan: _DataPlan, ws: int,
               nbytes: int) -> None:
        lib, h = self.lib, self.raw_handle
        lstm = c.spec.cell == "lstm"
        cdesc = plan.c or plan.h
        reserve = c.reserve or None
        w_bytes = sp.weight_bytes
        if c.op == "fwd":
            mode = FWD_MODE_TRAINING if c.reserve else FWD_MODE_INFERENCE
            if c.states:
                # this call's states (initialized by init_dropout; Restore runs no kernel),
                # then the RNN descriptor set again with the descriptor pointing at them
                self._point_dropout(sp, c.states, c.states_bytes)
            try:
                self._check(lib.cudnnRNNForward(
                    h, sp.desc, mode, plan.seq_dev, plan.x, c.x, plan.y, c.y, plan.h,
                    c.hx or None, c.hy or None, cdesc, (c.cx or None) if lstm else None,
                    (c.cy or None) if lstm else None, w_bytes, c.w, nbytes, ws or None,
                    c.reserve_bytes if c.reserve else 0, reserve), "cudnnRNNForward")
            finally:
                if c.states:  # back to the plan's own states: the caller's buffer may go
                    self._point_dropout(sp, sp.states, sp.states_bytes)
        elif c.op == "bwd_data":
            self._check(lib.cudnnRNNBackwardData_v8(
                h, sp.desc, plan.seq_dev, plan.y, c.y, c.dy, plan.x, c.dx, plan.h,
                c.hx or None, c.dhy or None, c.dhx or None, cdesc,
                (c.cx or None) if lstm else None, (c.dcy or None) if lstm else None,
                (c.dcx or None) if lstm else None, w_bytes, c.w, nbytes, ws or None,
                c.reserve_bytes, reserve), "cudnnRNNBackwardData_v8")
        else:
            if not c.accumulate:
                self._ctx.backend.memset(stream, c.w, 0, w_bytes, 1)
            self._check(lib.cudnnRNNBackwardWeights_v8(
                h, sp.desc, WGRAD_MODE_ADD, plan.seq_dev, plan.x, c.x, plan.h, c.hx or None,
                plan.y, c.y, w_bytes, c.w, nbytes, ws or None, c.reserve_bytes, reserve),
                "cudnnRNNBackwardWeights_v8")

    def _point_dropout(self, sp: _SpecPlan, states: int, nbytes: int) -> None:
        """Point ``sp``'s dropout descriptor at ``states`` (host only) and set its RNN
        descriptor again with it, as torch does before each call."""
        self._check(self.lib.cudnnRestoreDropoutDescriptor(
            sp.dropout, self.raw_handle, sp.spec.dropout, states, nbytes, 0),
            "cudnnRestoreDropoutDescriptor")
        self._set_rnn(sp)

    def cache_info(self) -> dict[str, dict[str, int]]:
        return {"specs": self.specs.info(), "data": self.data.info()}

    def close(self) -> None:
        self.data.clear()
        self.specs.clear()
