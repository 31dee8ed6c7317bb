"""The float64 reference of the cuDNN RNN tests: each sequence stepped on its own, cell by
cell, with torch's parameter names and gate order (LSTM projections as torch's ``proj_size``:
h = W_hr (o tanh c)); central finite differences of it; and the networks, inputs and gradient
cases the tests share."""

from __future__ import annotations

import numpy as np

import gpumsg
from tests.libs.harness import random_array, wide

CELLS = ("rnn_tanh", "rnn_relu", "lstm", "gru")


GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}


# -- the float64 reference ------------------------------------------------------------------------
def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def ref_step(cell, p, x, h, c):
    """One step of one sequence: p holds w_ih, w_hh, b_ih, b_hh and w_hr (torch's, float64;
    w_hr None without a projection)."""
    hs = p["w_hh"].shape[0] // GATES[cell]  # H (h is P wide with a projection)
    a = p["w_ih"] @ x + p["b_ih"]
    r_ = p["w_hh"] @ h + p["b_hh"]
    if cell == "rnn_tanh":
        return np.tanh(a + r_), c
    if cell == "rnn_relu":
        return np.maximum(a + r_, 0.0), c
    if cell == "lstm":
        z = a + r_
        i, f, g, o = (z[k * hs:(k + 1) * hs] for k in range(4))
        c2 = _sig(f) * c + _sig(i) * np.tanh(g)
        h2 = _sig(o) * np.tanh(c2)
        return (h2 if p.get("w_hr") is None else p["w_hr"] @ h2), c2
    r = _sig(a[:hs] + r_[:hs])
    u = _sig(a[hs:2 * hs] + r_[hs:2 * hs])
    n = np.tanh(a[2 * hs:] + r * r_[2 * hs:])
    return (1.0 - u) * n + u * h, c


def ref_rnn(cell, params, x, h0, c0, layers, dirs, lengths=None, masks=None):
    """(y, hy, cy) of a network given torch-named float64 parameters; x (T, B, I) time-major,
    h0 (layers*dirs, B, P), c0 (layers*dirs, B, H) (P: the projection size, else H). Each
    sequence b runs over its own steps 0..len_b-1. ``masks[l]`` (T, B, dirs*P), when given,
    multiplies layer l's output before the layer above reads it (dropout)."""
    t_len, batch = x.shape[:2]
    hs = h0.shape[2]  # P
    lengths = [t_len] * batch if lengths is None else list(lengths)
    inp = x
    hy, cy = np.zeros_like(h0), np.zeros_like(c0)
    for layer in range(layers):
        out = np.zeros((t_len, batch, dirs * hs))
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            p = {"w_ih": params["weight_ih" + sfx], "w_hh": params["weight_hh" + sfx],
                 "b_ih": params.get("bias_ih" + sfx, 0.0), "b_hh": params.get("bias_hh" + sfx, 0.0),
                 "w_hr": params.get("weight_hr" + sfx)}
            k = layer * dirs + d
            for b in range(batch):
                h, c = h0[k, b], c0[k, b]
                steps = range(lengths[b]) if d == 0 else range(lengths[b] - 1, -1, -1)
                for s in steps:
                    h, c = ref_step(cell, p, inp[s, b], h, c)
                    out[s, b, d * hs:(d + 1) * hs] = h
                hy[k, b], cy[k, b] = h, c
        inp = out if masks is None or layer == layers - 1 else out * masks[layer]
    return inp, hy, cy


def random_params(rng, shapes, scale=1.0):
    return {n: rng.uniform(-scale, scale, s) / np.sqrt(s[0] if len(s) == 1 else s[1])
            for n, s in shapes.items()}


def fd_gradients(f, arrays, eps=1e-6):
    """Central differences of the scalar f() with respect to each array of ``arrays`` (modified
    in place and restored)."""
    out = {}
    for name, a in arrays.items():
        g = np.zeros_like(a)
        flat, gf = a.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            keep = flat[i]
            flat[i] = keep + eps
            up = f()
            flat[i] = keep - eps
            down = f()
            flat[i] = keep
            gf[i] = (up - down) / (2 * eps)
        out[name] = g
    return out


def _net(dev, cell, dtype="f32", bidirectional=False, layers=2, isz=5, hsz=4,
         batch_first=False, bias=True, **kw):
    return dev.cudnn.rnn(cell, isz, hsz, layers, bidirectional=bidirectional, dtype=dtype,
                         bias=bias, batch_first=batch_first, **kw)


def _rounded(a, dtype):
    return wide(np.asarray(a).astype(gpumsg.as_dtype(dtype)))


def _host(dev, buf):
    return wide(dev.copy_to_host(buf.result() if hasattr(buf, "result") else buf).result())


def _seq(a, batch_first):
    """Time-major reference array <-> the buffer's layout."""
    return a.transpose(1, 0, 2) if batch_first else a


# -- backward -------------------------------------------------------------------------------------
def _grad_case(dev, rng, cell, bidirectional, dtype="f32", batch_first=False, lengths=None,
               proj=0):
    t_len, batch, isz, layers = 3, 2, 3, 2
    hsz = 3 if proj else 2
    psz = proj or hsz
    dirs = 2 if bidirectional else 1
    net = _net(dev, cell, dtype=dtype, bidirectional=bidirectional, isz=isz, hsz=hsz,
               batch_first=batch_first, proj_size=proj)
    params = {k: _rounded(v, dtype) for k, v in
              random_params(rng, net.param_shapes(), 1.5).items()}
    net.set_weights(params).result()
    lstm = cell == "lstm"
    x = _rounded(random_array(rng, (t_len, batch, isz), "f32"), dtype)
    h0 = _rounded(random_array(rng, (layers * dirs, batch, psz), "f32") * 0.5, dtype)
    c0 = _rounded(random_array(rng, (layers * dirs, batch, hsz), "f32") * 0.5, dtype) \
        if lstm else np.zeros_like(h0)
    dy = _rounded(random_array(rng, (t_len, batch, dirs * psz), "f32"), dtype)
    dhy = _rounded(random_array(rng, h0.shape, "f32"), dtype)
    dcy = _rounded(random_array(rng, c0.shape, "f32"), dtype) if lstm else np.zeros_like(c0)

    def loss():
        y, hy, cy = ref_rnn(cell, params, x, h0, c0, layers, dirs, lengths)
        return float((y * dy).sum() + (hy * dhy).sum() + (cy * dcy).sum())

    wrt = {"x": x, "h0": h0, **params}
    if lstm:
        wrt["c0"] = c0
    ref = fd_gradients(loss, wrt)
    t = gpumsg.as_dtype(dtype)

    def up(a, seq=False):
        return dev.to_device(np.ascontiguousarray(_seq(a, batch_first) if seq else a).astype(t))

    dx_, h0_, c0_ = up(x, True), up(h0), up(c0) if lstm else None
    out = net(dx_, h0_, c0_, seq_lengths=lengths, train=True)
    g = net.backward(out, up(dy, True), up(dhy), up(dcy) if lstm else None).result()
    return net, ref, g, lstm, (dx_, out, h0_, lengths)
