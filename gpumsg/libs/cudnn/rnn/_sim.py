"""cuDNN's RNNs on the simulator: the cells step by step in float64 NumPy, with cuDNN's contract
kept: a weight space with a parameter table (its own packing: every pseudo-layer's matrices,
then every pseudo-layer's biases), a training forward that leaves its intermediates in the
reserve space, a backward-data pass that leaves the gate gradients there, and a backward-weights
pass that only adds to the gradient space and reads what the two before it left. The same
descriptor-cache bookkeeping as on a GPU (spec plans, data plans, hits and misses).

LSTM projections: h = W_hr (o tanh c), the reserve keeps o tanh c and the gradient reaching h.
Inter-layer dropout: a dropout-states buffer holds two u64 words, the seed and the number of
training forwards that read it; a forward draws its masks (keep with probability 1 - p, scale
1/(1 - p)) from NumPy's Philox keyed by seed + (count << 64), layer by layer, counts itself,
and keeps the masks in the reserve for the backward passes."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....backends.sim._device import SimBackend
from ....dtypes import dtype_of
from ....messages.cudnn_rnn import RnnSpec, auto_algo, param_names
from ....service._plans import PlanCache
from ._handle import RnnCall

__all__ = ["SimRnn", "sim_weight_table", "sim_reserve_layout", "SIM_STATES_BYTES"]

#: bytes of the simulator's dropout states: the seed and a call counter (u64 each)
SIM_STATES_BYTES = 16


def sim_weight_table(spec: RnnSpec) -> tuple[int, dict[str, dict[str, Any]]]:
    """(elements, torch name -> {"shape", "offsets"}) of the simulator's weight space."""
    g, h, nd, out = spec.gates, spec.hidden_size, spec.directions, spec.out_size
    pos = 0
    mats: dict[tuple[int, int, int], int] = {}
    for layer in range(spec.num_layers):
        for d in range(nd):
            for lin in range(2 * g):
                mats[(layer, d, lin)] = pos
                pos += h * (spec.layer_input(layer) if lin < g else out)
            if spec.proj_size:  # the projection (cuDNN's linear layer 8): (P, H)
                mats[(layer, d, 2 * g)] = pos
                pos += out * h
    biases: dict[tuple[int, int, int], int] = {}
    if spec.bias:
        for layer in range(spec.num_layers):
            for d in range(nd):
                for lin in range(2 * g):
                    biases[(layer, d, lin)] = pos
                    pos += h
    table: dict[str, dict[str, Any]] = {}
    for name, layer, d, kind in param_names(spec):
        if kind == "w_hr":
            table[name] = {"shape": (out, h), "offsets": [mats[(layer, d, 2 * g)]]}
            continue
        rec = kind in ("w_hh", "b_hh")
        src = mats if kind[0] == "w" else biases
        offsets = [src[(layer, d, gate + (g if rec else 0))] for gate in range(g)]
        cols = spec.layer_input(layer) if kind == "w_ih" else out
        shape = (g * h, cols) if kind[0] == "w" else (g * h,)
        table[name] = {"shape": shape, "offsets": offsets}
    return pos, table


def sim_reserve_layout(spec: RnnSpec, t: int, b: int
                       ) -> tuple[int, dict[str, tuple[int, tuple[int, ...]]]]:
    """(float64 values, name -> (offset, shape)) of the simulator's reserve space: per
    pseudo-layer p the activated gates, the state before each step (and LSTM's cell states,
    GRU's R_n h + b_Rn; with a projection o tanh c and the gradient reaching h), the
    input-side and recurrent-side gate gradients; per layer above the first its input (the
    layer below's output, after dropout); per layer but the last, with dropout, its mask
    (the factor of each output: 0 or 1/(1 - p))."""
    g, h, nd, out_w = spec.gates, spec.hidden_size, spec.directions, spec.out_size
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    pos = 0

    def add(name: str, shape: tuple[int, ...]) -> None:
        nonlocal pos
        out[name] = (pos, shape)
        pos += int(np.prod(shape))

    for layer in range(spec.num_layers):
        if layer:
            add(f"in{layer}", (t, b, nd * out_w))
        if spec.applies_dropout and layer < spec.num_layers - 1:
            add(f"keep{layer}", (t, b, nd * out_w))
        for d in range(nd):
            p = layer * nd + d
            add(f"gates{p}", (t, b, g * h))
            add(f"hprev{p}", (t, b, out_w))
            if spec.cell == "lstm":
                add(f"cprev{p}", (t, b, h))
                add(f"c{p}", (t, b, h))
            if spec.proj_size:
                add(f"hraw{p}", (t, b, h))
                add(f"dhr{p}", (t, b, out_w))
            if spec.cell == "gru":
                add(f"rn{p}", (t, b, h))
            add(f"dgi{p}", (t, b, g * h))
            add(f"dgr{p}", (t, b, g * h))
    return pos, out


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


class _Weights:
    """The parameters of one pseudo-layer as float64 (G*H, cols) / (G*H,) arrays."""

    def __init__(self, space: np.ndarray, spec: RnnSpec, table: dict[str, dict[str, Any]],
                 layer: int, d: int) -> None:
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        g, h = spec.gates, spec.hidden_size

        def get(name: str) -> np.ndarray | None:
            entry = table.get(name + sfx)
            if entry is None:
                return None
            shape = entry["shape"]
            block = int(np.prod(shape)) // len(entry["offsets"])
            parts = [space[o:o + block] for o in entry["offsets"]]
            return np.concatenate(parts).reshape(shape)

        self.w_ih = get("weight_ih")
        self.w_hh = get("weight_hh")
        self.w_hr = get("weight_hr")  # None without a projection
        zeros = np.zeros(g * h)
        b_ih, b_hh = get("bias_ih"), get("bias_hh")
        self.b_ih = zeros if b_ih is None else b_ih
        self.b_hh = zeros if b_hh is None else b_hh
        self.sfx = sfx


def _put(space: np.ndarray, table: dict[str, dict[str, Any]], name: str, value: np.ndarray,
         h: int) -> None:
    """Add ``value`` (torch-shaped) to the parameter ``name`` of a float64 weight space."""
    entry = table[name]
    flat = value.reshape(len(entry["offsets"]), -1)
    for o, row in zip(entry["offsets"], flat):
        space[o:o + row.size] += row


class SimRnn:
    """The simulator's RNN handle (the same methods as :class:`~.handle.RnnHandle`)."""

    def __init__(self, ctx: Any) -> None:
        self.sim: SimBackend = ctx.backend
        self.raw_handle = id(self)
        self.specs = PlanCache(32)
        self.data = PlanCache(64)

    def _spec_plan(self, spec: RnnSpec, padded: bool, algo: str = "standard"
                   ) -> tuple[int, dict[str, Any]]:
        key = (spec, padded, algo)
        plan = self.specs.get(key)
        if plan is None:
            plan = sim_weight_table(spec)
            self.specs.put(key, plan)
        return plan

    def _data_plan(self, spec: RnnSpec, batch_first: bool, t: int, b: int,
                   lengths: tuple[int, ...] | None) -> dict[str, int]:
        key = (spec, batch_first, t, b, lengths)
        plan = self.data.get(key)
        if plan is None:
            padded = batch_first or lengths is not None
            algo = auto_algo(spec, padded, b)  # the simulator accepts either
            self._spec_plan(spec, padded, algo)
            plan = {"workspace_bytes": 0, "reserve_bytes": 8 * sim_reserve_layout(spec, t, b)[0],
                    "inference_workspace_bytes": 0, "algo": algo,
                    "dropout_states_bytes": SIM_STATES_BYTES}
            self.data.put(key, plan)
        return plan

    def weight_info(self, spec: RnnSpec) -> dict[str, Any]:
        n, table = self._spec_plan(spec, False)
        return {"weight_bytes": n * dtype_of(spec.dtype).itemsize, "params": table,
                "dropout_states_bytes": SIM_STATES_BYTES}

    def dropout_states_bytes(self) -> int:
        return SIM_STATES_BYTES

    def init_dropout(self, stream: Any, states: int, nbytes: int, seed: int) -> None:
        def work() -> None:
            self.sim.view(states, SIM_STATES_BYTES).view(np.uint64)[:] = (seed, 0)

        stream.put(work)

    def weight_bytes(self, spec: RnnSpec) -> int:
        return self._spec_plan(spec, False)[0] * dtype_of(spec.dtype).itemsize

    def space_info(self, spec: RnnSpec, batch_first: bool, seq_len: int, batch: int,
                   lengths: tuple[int, ...] | None) -> dict[str, int]:
        return dict(self._data_plan(spec, batch_first, seq_len, batch, lengths))

    def run(self, stream: Any, call: RnnCall) -> None:
        plan = self._data_plan(call.spec, call.batch_first, call.seq_len, call.batch,
                               call.seq_lengths)
        self._spec_plan(call.spec, call.padded, plan["algo"])
        work = {"fwd": self._forward, "bwd_data": self._backward_data,
                "bwd_weights": self._backward_weights}[call.op]
        stream.put(lambda: work(call))

    def cache_info(self) -> dict[str, dict[str, int]]:
        return {"specs": self.specs.info(), "data": self.data.info()}

    def close(self) -> None:
        pass

    # -- memory -------------------------------------------------------------------------------
    def _typed(self, ptr: int, n: int, dtype: str) -> np.ndarray:
        t = dtype_of(dtype)
        return self.sim.view(ptr, n * t.itemsize).view(t)

    def _load(self, c: RnnCall, ptr: int, shape: tuple[int, ...], seq: bool = False
              ) -> np.ndarray:
        """A float64 copy of a tensor (sequence tensors time-major)."""
        a = self._typed(ptr, int(np.prod(shape)), c.spec.dtype).reshape(shape).astype(np.float64)
        return a.transpose(1, 0, 2) if seq and c.batch_first else a

    def _store(self, c: RnnCall, ptr: int, value: np.ndarray, seq: bool = False) -> None:
        if seq and c.batch_first:
            value = value.transpose(1, 0, 2)
        value = np.ascontiguousarray(value)
        self._typed(ptr, value.size, c.spec.dtype)[:] = value.reshape(-1).astype(
            dtype_of(c.spec.dtype))

    def _geometry(self, c: RnnCall) -> tuple[int, int, np.ndarray]:
        t, b = c.seq_len, c.batch
        lengths = np.asarray(c.seq_lengths if c.seq_lengths is not None else [t] * b)
        return t, b, (np.arange(t)[:, None] < lengths[None, :])

    def _seq_shape(self, c: RnnCall, width: int) -> tuple[int, int, int]:
        return (c.batch, c.seq_len, width) if c.batch_first else (c.seq_len, c.batch, width)

    def _states(self, c: RnnCall, ptr: int, cell: bool = False) -> np.ndarray:
        """h-like (P wide) or, with ``cell``, c-like (H wide) states; zeros when absent."""
        spec = c.spec
        width = spec.hidden_size if cell else spec.out_size
        shape = (spec.num_layers * spec.directions, c.batch, width)
        return self._load(c, ptr, shape) if ptr else np.zeros(shape)

    def _masks(self, c: RnnCall, t: int, b: int) -> list[np.ndarray]:
        """The dropout factors of each layer's output but the last's (training with dropout):
        drawn from the states' (seed, count), which is then counted up."""
        spec = c.spec
        words = self.sim.view(c.states, SIM_STATES_BYTES).view(np.uint64)
        seed, count = int(words[0]), int(words[1])
        words[1] = np.uint64((count + 1) % 2**64)
        gen = np.random.Generator(np.random.Philox(key=seed + (count << 64)))
        p = spec.dropout
        shape = (t, b, spec.directions * spec.out_size)
        return [np.where(gen.random(shape) >= p, 1.0 / (1.0 - p), 0.0)
                for _ in range(spec.num_layers - 1)]

    def _reserve(self, c: RnnCall) -> dict[str, np.ndarray]:
        n, layout = sim_reserve_layout(c.spec, c.seq_len, c.batch)
        space = self.sim.view(c.reserve, 8 * n).view(np.float64)
        return {k: space[o:o + int(np.prod(s))].reshape(s) for k, (o, s) in layout.items()}

    def _weights(self, c: RnnCall) -> tuple[np.ndarray, dict[str, Any]]:
        n, table = self._spec_plan(c.spec, False)
        return self._typed(c.w, n, c.spec.dtype).astype(np.float64), table

    # -- the passes ---------------------------------------------------------------------------
    def _forward(self, c: RnnCall) -> None:
        spec = c.spec
        h, nd, cell, pw = spec.hidden_size, spec.directions, spec.cell, spec.out_size
        t, b, mask = self._geometry(c)
        space, table = self._weights(c)
        res = self._reserve(c) if c.reserve else None
        keeps = self._masks(c, t, b) if res is not None and c.states else []
        inp = self._load(c, c.x, self._seq_shape(c, spec.input_size), seq=True)
        h0, c0 = self._states(c, c.hx), self._states(c, c.cx, cell=True)
        hy, cy = np.zeros_like(h0), np.zeros_like(c0)
        for layer in range(spec.num_layers):
            if layer and keeps:
                inp = inp * keeps[layer - 1]
                assert res is not None
                res[f"keep{layer - 1}"][:] = keeps[layer - 1]
            if layer and res is not None:
                res[f"in{layer}"][:] = inp
            outs = np.zeros((t, b, nd * pw))
            for d in range(nd):
                p = layer * nd + d
                wt = _Weights(space, spec, table, layer, d)
                hcur, ccur = h0[p].copy(), c0[p].copy()
                for step in (range(t) if d == 0 else reversed(range(t))):
                    m = mask[step][:, None]
                    gi = inp[step] @ wt.w_ih.T + wt.b_ih
                    gr = hcur @ wt.w_hh.T + wt.b_hh
                    cnew = None
                    if cell in ("rnn_tanh", "rnn_relu"):
                        pre = gi + gr
                        hnew = np.tanh(pre) if cell == "rnn_tanh" else np.maximum(pre, 0.0)
                        gates = hnew
                    elif cell == "lstm":
                        pre = gi + gr
                        i, f = _sigmoid(pre[:, :h]), _sigmoid(pre[:, h:2 * h])
                        g, o = np.tanh(pre[:, 2 * h:3 * h]), _sigmoid(pre[:, 3 * h:])
                        cnew = f * ccur + i * g
                        hnew = hraw = o * np.tanh(cnew)
                        if wt.w_hr is not None:
                            hnew = hraw @ wt.w_hr.T
                        gates = np.concatenate([i, f, g, o], axis=1)
                    else:
                        r = _sigmoid(gi[:, :h] + gr[:, :h])
                        z = _sigmoid(gi[:, h:2 * h] + gr[:, h:2 * h])
                        rn = gr[:, 2 * h:]
                        n = np.tanh(gi[:, 2 * h:] + r * rn)
                        hnew = (1.0 - z) * n + z * hcur
                        gates = np.concatenate([r, z, n], axis=1)
                    if res is not None:
                        res[f"gates{p}"][step] = gates
                        res[f"hprev{p}"][step] = hcur
                        if cell == "lstm":
                            res[f"cprev{p}"][step] = ccur
                            res[f"c{p}"][step] = cnew
                        if cell == "gru":
                            res[f"rn{p}"][step] = rn
                        if wt.w_hr is not None:
                            res[f"hraw{p}"][step] = hraw
                    outs[step, :, d * pw:(d + 1) * pw] = np.where(m, hnew, 0.0)
                    hcur = np.where(m, hnew, hcur)
                    if cnew is not None:
                        ccur = np.where(m, cnew, ccur)
                hy[p], cy[p] = hcur, ccur
            inp = outs
        self._store(c, c.y, inp, seq=True)
        if c.hy:
            self._store(c, c.hy, hy)
        if c.cy:
            self._store(c, c.cy, cy)

    def _backward_data(self, c: RnnCall) -> None:
        spec = c.spec
        h, nd, cell, pw = spec.hidden_size, spec.directions, spec.cell, spec.out_size
        t, b, mask = self._geometry(c)
        space, table = self._weights(c)
        res = self._reserve(c)
        dys = self._load(c, c.dy, self._seq_shape(c, nd * pw), seq=True) * mask[:, :, None]
        dhy, dcy = self._states(c, c.dhy), self._states(c, c.dcy, cell=True)
        dhx, dcx = np.zeros_like(dhy), np.zeros_like(dcy)
        for layer in reversed(range(spec.num_layers)):
            if spec.applies_dropout and layer < spec.num_layers - 1:
                dys = dys * res[f"keep{layer}"]  # the layer above read its output masked
            dx = np.zeros((t, b, spec.layer_input(layer)))
            for d in range(nd):
                p = layer * nd + d
                wt = _Weights(space, spec, table, layer, d)
                gates_all, hprev_all = res[f"gates{p}"], res[f"hprev{p}"]
                dh, dc = dhy[p].copy(), dcy[p].copy()
                for step in (reversed(range(t)) if d == 0 else range(t)):
                    m = mask[step][:, None]
                    dht = dh + dys[step, :, d * pw:(d + 1) * pw]
                    gates = gates_all[step]
                    dc_prev = dc
                    if cell in ("rnn_tanh", "rnn_relu"):
                        deriv = 1.0 - gates * gates if cell == "rnn_tanh" else \
                            (gates > 0).astype(np.float64)
                        dgi = dgr = dht * deriv
                        dh_prev = dgr @ wt.w_hh
                    elif cell == "lstm":
                        i, f = gates[:, :h], gates[:, h:2 * h]
                        g, o = gates[:, 2 * h:3 * h], gates[:, 3 * h:]
                        tc = np.tanh(res[f"c{p}"][step])
                        draw = dht  # the gradient reaching o tanh c
                        if wt.w_hr is not None:
                            res[f"dhr{p}"][step] = np.where(m, dht, 0.0)
                            draw = dht @ wt.w_hr
                        dcn = dc + draw * o * (1.0 - tc * tc)
                        dgi = dgr = np.concatenate(
                            [dcn * g * i * (1 - i), dcn * res[f"cprev{p}"][step] * f * (1 - f),
                             dcn * i * (1 - g * g), draw * tc * o * (1 - o)], axis=1)
                        dc_prev = dcn * f
                        dh_prev = dgr @ wt.w_hh
                    else:
                        r, z, n = gates[:, :h], gates[:, h:2 * h], gates[:, 2 * h:]
                        hp = hprev_all[step]
                        dpn = dht * (1.0 - z) * (1.0 - n * n)
                        dpr = dpn * res[f"rn{p}"][step] * r * (1.0 - r)
                        dpz = dht * (hp - n) * z * (1.0 - z)
                        dgi = np.concatenate([dpr, dpz, dpn], axis=1)
                        dgr = np.concatenate([dpr, dpz, dpn * r], axis=1)
                        dh_prev = dht * z + dgr @ wt.w_hh
                    dgi, dgr = np.where(m, dgi, 0.0), np.where(m, dgr, 0.0)
                    res[f"dgi{p}"][step] = dgi
                    res[f"dgr{p}"][step] = dgr
                    dx[step] += dgi @ wt.w_ih
                    dh = np.where(m, dh_prev, dh)
                    dc = np.where(m, dc_prev, dc)
                dhx[p], dcx[p] = dh, dc
            dys = dx
        self._store(c, c.dx, dys * mask[:, :, None], seq=True)
        if c.dhx:
            self._store(c, c.dhx, dhx)
        if c.dcx:
            self._store(c, c.dcx, dcx)

    def _backward_weights(self, c: RnnCall) -> None:
        spec = c.spec
        h, nd = spec.hidden_size, spec.directions
        n, table = self._spec_plan(spec, False)
        res = self._reserve(c)
        dws = self._typed(c.w, n, spec.dtype)
        grad = dws.astype(np.float64) if c.accumulate else np.zeros(n)
        x = self._load(c, c.x, self._seq_shape(c, spec.input_size), seq=True)
        for layer in range(spec.num_layers):
            inp = x if layer == 0 else res[f"in{layer}"]
            for d in range(nd):
                p = layer * nd + d
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                dgi, dgr = res[f"dgi{p}"], res[f"dgr{p}"]
                _put(grad, table, "weight_ih" + sfx, np.einsum("tbg,tbi->gi", dgi, inp), h)
                _put(grad, table, "weight_hh" + sfx,
                     np.einsum("tbg,tbi->gi", dgr, res[f"hprev{p}"]), h)
                if spec.bias:
                    _put(grad, table, "bias_ih" + sfx, dgi.sum(axis=(0, 1)), h)
                    _put(grad, table, "bias_hh" + sfx, dgr.sum(axis=(0, 1)), h)
                if spec.proj_size:
                    _put(grad, table, "weight_hr" + sfx,
                         np.einsum("tbp,tbh->ph", res[f"dhr{p}"], res[f"hraw{p}"]), h)
        dws[:] = grad.astype(dws.dtype)
