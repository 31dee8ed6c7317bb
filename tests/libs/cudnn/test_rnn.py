"""cuDNN RNNs (v8 API): RNN-tanh, RNN-relu, LSTM and GRU, uni- and bidirectional, two layers,
sequence-major and batch-first, padded batches; forward (inference and training) against a
float64 reference written here (tests/libs/cudnn/_rnn_reference.py: each sequence stepped on
its own, cell by cell, with torch's parameter names and gate order), backward data and weights
against central finite differences of that reference; the torch-named weight access; the
caches; bad arguments."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.libs.cudnn.rnn import RnnGrads, RnnOutputs
from gpumsg.messages.cudnn_rnn import (
    RnnBackwardData,
    RnnBackwardWeights,
    RnnDropoutInit,
    RnnForward,
    RnnSpec,
)
from tests.libs.cudnn._rnn_reference import (
    CELLS,
    _grad_case,
    _host,
    _net,
    _rounded,
    _seq,
    random_params,
    ref_rnn,
)
from tests.libs.harness import BadArg, assert_close, check_bad_args, ones_array, random_array, wide


# -- forward --------------------------------------------------------------------------------------
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_forward_two_layers(dev, rng, cell, bidirectional) -> None:
    t_len, batch, isz, hsz = 7, 3, 5, 4
    net = _net(dev, cell, bidirectional=bidirectional, isz=isz, hsz=hsz)
    params = random_params(rng, net.param_shapes())
    net.set_weights(params).result()
    dirs = 2 if bidirectional else 1
    x = random_array(rng, (t_len, batch, isz), "f32")
    h0 = random_array(rng, (2 * dirs, batch, hsz), "f32") * 0.5
    c0 = random_array(rng, (2 * dirs, batch, hsz), "f32") * 0.5
    lstm = cell == "lstm"
    y_ref, hy_ref, cy_ref = ref_rnn(cell, {k: wide(v.astype(np.float32)) for k, v in
                                           params.items()}, wide(x), wide(h0),
                                    wide(c0) if lstm else np.zeros_like(wide(h0)), 2, dirs)
    for train in (False, True):
        out = net(dev.to_device(x), dev.to_device(h0), dev.to_device(c0) if lstm else None,
                  train=train).result()
        assert_close(_host(dev, out.y), y_ref, "f32", 5)
        assert_close(_host(dev, out.hy), hy_ref, "f32", 5)
        if lstm:
            assert_close(_host(dev, out.cy), cy_ref, "f32", 5)
        else:
            assert out.cy is None
        assert (out.reserve is not None) == train
    # zero initial states when hx/cx are omitted
    out = net(dev.to_device(x)).result()
    zeros = np.zeros((2 * dirs, batch, hsz))
    assert_close(_host(dev, out.y), ref_rnn(cell, params, wide(x), zeros, zeros, 2, dirs)[0],
                 "f32", 5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("batch_first", [False, True], ids=["seq_major", "batch_first"])
def test_padded_batch(dev, rng, cell, batch_first) -> None:
    """Per-sequence lengths: outputs past each end are zero, final states are those of each
    sequence's last step, the reverse direction starts there."""
    t_len, batch, isz, hsz = 6, 4, 3, 5
    net = _net(dev, cell, bidirectional=True, isz=isz, hsz=hsz, batch_first=batch_first)
    params = random_params(rng, net.param_shapes())
    net.set_weights(params).result()
    lengths = [int(v) for v in rng.integers(1, t_len + 1, batch)]
    lengths[0] = t_len - 1  # at least one padded sequence
    x = random_array(rng, (t_len, batch, isz), "f32")
    h0 = random_array(rng, (4, batch, hsz), "f32") * 0.5
    y_ref, hy_ref, cy_ref = ref_rnn(cell, params, wide(x), wide(h0), np.zeros_like(wide(h0)),
                                    2, 2, lengths)
    out = net(dev.to_device(np.ascontiguousarray(_seq(x, batch_first))), dev.to_device(h0),
              seq_lengths=np.array(lengths) if batch_first else lengths, train=True).result()
    y = _seq(_host(dev, out.y), batch_first)
    assert_close(y, y_ref, "f32", 5)
    for b, n in enumerate(lengths):
        assert not y[n:, b].any(), "padding of y must be zero"
    assert_close(_host(dev, out.hy), hy_ref, "f32", 5)
    if cell == "lstm":
        assert_close(_host(dev, out.cy), cy_ref, "f32", 5)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh"])
def test_forward_half(dev, rng, dtype, cell) -> None:
    t_len, batch, isz, hsz = 9, 4, 8, 8
    net = _net(dev, cell, dtype=dtype, bidirectional=True, isz=isz, hsz=hsz)
    params = {k: _rounded(v, dtype) for k, v in random_params(rng, net.param_shapes()).items()}
    net.set_weights(params).result()
    x = random_array(rng, (t_len, batch, isz), dtype)
    h0 = (random_array(rng, (4, batch, hsz), "f32") * 0.5).astype(gpumsg.as_dtype(dtype))
    y_ref, hy_ref, _ = ref_rnn(cell, params, wide(x), wide(h0), np.zeros_like(wide(h0)), 2, 2)
    out = net(dev.to_device(x), dev.to_device(h0)).result()
    assert_close(_host(dev, out.y), y_ref, dtype, 2)
    assert_close(_host(dev, out.hy), hy_ref, dtype, 2)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_backward_data_and_weights(dev, rng, cell, bidirectional) -> None:
    net, ref, g, lstm, _ = _grad_case(dev, rng, cell, bidirectional)
    assert_close(_host(dev, g.dx), ref["x"], "f32", 10)
    assert_close(_host(dev, g.dhx), ref["h0"], "f32", 10)
    if lstm:
        assert_close(_host(dev, g.dcx), ref["c0"], "f32", 10)
    else:
        assert g.dcx is None
    grads = net.get_weights(g.dw)
    assert set(grads) == set(net.params)
    for name, value in grads.items():
        assert_close(wide(value), ref[name], "f32", 10)


def test_training_step_is_sent_whole(dev, rng) -> None:
    """forward, backward: two calls, one future each, the backward sent while the forward
    is still queued (the stream held busy); they give what the same two calls give one after
    the other, and the forward the reference's y."""
    net, _, _, _, (x, out0, h0, _) = _grad_case(dev, rng, "gru", False)
    dy = dev.to_device(random_array(rng, (3, 2, 2), "f32"))
    dev.inject_fault("hang", seconds=0.5)
    fwd = net(x, h0, train=True)
    grads = net.backward(fwd, dy)
    assert not fwd.done() and not grads.done()
    assert isinstance(fwd.pending.y, gpumsg.BufferFuture) and fwd.pending.y.shape == (3, 2, 2)
    out, g = fwd.result(timeout=30), grads.result(timeout=30)
    assert isinstance(out, RnnOutputs) and isinstance(g, RnnGrads)
    assert all(isinstance(b, gpumsg.GpuBuffer) for b in (out.y, out.hy, out.reserve, g.dx,
                                                         g.dhx, g.dw))
    assert out.cy is None and g.dcx is None
    assert_close(_host(dev, out.y), _host(dev, out0.result().y), "f32")
    again = net(x, h0, train=True)
    again.result()
    g2 = net.backward(again, dy).result()
    for a, b in zip(g, g2):
        if a is None:
            continue
        assert_close(_host(dev, a), _host(dev, b), "f32")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_backward_padded_batch_first(dev, rng, cell) -> None:
    net, ref, g, lstm, _ = _grad_case(dev, rng, cell, True, batch_first=True, lengths=(2, 3))
    assert_close(_seq(_host(dev, g.dx), True), ref["x"], "f32", 10)
    assert_close(_host(dev, g.dhx), ref["h0"], "f32", 10)
    for name, value in net.get_weights(g.dw).items():
        assert_close(wide(value), ref[name], "f32", 10)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_backward_half(dev, rng, dtype) -> None:
    net, ref, g, lstm, _ = _grad_case(dev, rng, "lstm", True, dtype=dtype)
    assert_close(_host(dev, g.dx), ref["x"], dtype, 3)
    assert_close(_host(dev, g.dhx), ref["h0"], dtype, 3)
    grads = net.get_weights(g.dw)
    got = np.concatenate([wide(grads[n]).ravel() for n in net.params])
    want = np.concatenate([ref[n].ravel() for n in net.params])
    assert_close(got, want, dtype, 3)


def test_weight_gradients_accumulate(dev, rng) -> None:
    """cuDNN's weight pass adds: accumulate=True adds the gradient to dw, the default
    overwrites whatever dw held."""
    net, ref, g, _, (x, out, h0, lengths) = _grad_case(dev, rng, "gru", False)
    dw = g.dw
    once = _host(dev, dw)
    assert net.backward_weights(out, dw=dw, accumulate=True).result() is dw
    assert_close(_host(dev, dw), 2 * once, "f32")
    garbage = random_array(rng, (net.weight_elems,), "f32")
    dev.copy_from_host(dw, garbage).result()
    net.backward_weights(out, dw=dw).result()
    assert_close(_host(dev, dw), once, "f32")


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_persistent_and_standard_algorithms_agree(dev, rng, cell) -> None:
    """An f16 single-layer network of 128 in cuDNN's persistent-kernel regime: "auto" picks the
    persistent algorithm (where cuDNN accepts it), and it, "persist_static" and "standard" give
    the reference's forward and the same gradients from the same weight space."""
    t_len, batch, size = 6, 8, 128
    nets = {a: dev.cudnn.rnn(cell, size, size, 1, dtype="f16", algo=a)
            for a in ("auto", "persist_static", "standard")}
    assert len({n.weight_bytes for n in nets.values()}) == 1
    params = {k: _rounded(v, "f16") for k, v in
              random_params(rng, nets["standard"].param_shapes()).items()}
    x = random_array(rng, (t_len, batch, size), "f16")
    h0 = (random_array(rng, (1, batch, size), "f32") * 0.5).astype(np.float16)
    dy = random_array(rng, (t_len, batch, size), "f16")
    y_ref, hy_ref, _ = ref_rnn(cell, params, wide(x), wide(h0), np.zeros_like(wide(h0)), 1, 1)
    algo = dev.send(gpumsg.messages.RnnSpaceInfo(nets["auto"].spec, t_len, batch)
                    ).result()["algo"]
    assert algo in ("persist_static", "standard")
    if dev.backend == "sim":
        assert algo == "persist_static"
    xs, hs, dys = dev.to_device(x), dev.to_device(h0), dev.to_device(dy)
    grads = {}
    for a, net in nets.items():
        net.set_weights(params).result()
        fwd = net(xs, hs, train=True)
        g = net.backward(fwd, dys).result()  # sent before the forward is waited for
        out = fwd.result()
        assert_close(_host(dev, out.y), y_ref, "f16", 2)
        assert_close(_host(dev, out.hy), hy_ref, "f16", 2)
        grads[a] = (_host(dev, g.dx), _host(dev, g.dhx), _host(dev, g.dw))
    for a in ("auto", "persist_static"):
        for got, want in zip(grads[a], grads["standard"]):
            assert_close(got, want, "f16", 2)


# -- weights, caches ------------------------------------------------------------------------------
def test_torch_names_and_weight_access(dev, rng) -> None:
    net = _net(dev, "lstm", bidirectional=True, isz=3, hsz=2, bias=True)
    names = list(net.param_shapes())
    assert names[:4] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    assert names[4] == "weight_ih_l0_reverse" and len(names) == 16
    assert net.param_shapes()["weight_ih_l1"] == (8, 4)  # 4 gates x H, 2 directions x H
    params = random_params(rng, net.param_shapes())
    net.set_weights(params).result()
    got = net.get_weights()
    for n in names:
        assert_close(wide(got[n]), wide(params[n].astype(np.float32)), "f32")
    # a subset: only those blocks change
    new = rng.standard_normal((8, 2))
    net.set_weights({"weight_hh_l1_reverse": new}).result()
    got2 = net.get_weights()
    assert_close(wide(got2["weight_hh_l1_reverse"]), new, "f32")
    assert np.array_equal(got2["weight_ih_l0"], got["weight_ih_l0"])
    # pack/unpack round trip; the gate blocks do not overlap
    image = net.pack(params)
    back = net.unpack(image)
    for n in names:
        assert np.array_equal(back[n], params[n].astype(np.float32))
    spans = sorted((o, o + int(np.prod(e["shape"])) // len(e["offsets"]))
                   for e in net.params.values() for o in e["offsets"])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][1] * 4 <= net.weight_bytes
    nobias = _net(dev, "gru", isz=3, hsz=2, bias=False, layers=1)
    assert list(nobias.param_shapes()) == ["weight_ih_l0", "weight_hh_l0"]


def test_no_bias_forward(dev, rng) -> None:
    net = _net(dev, "gru", isz=4, hsz=3, bias=False)
    params = random_params(rng, net.param_shapes())
    net.set_weights(params).result()
    x = random_array(rng, (5, 2, 4), "f32")
    zeros = np.zeros((2, 2, 3))
    out = net(dev.to_device(x)).result()
    assert_close(_host(dev, out.y), ref_rnn("gru", params, wide(x), zeros, zeros, 2, 1)[0],
                 "f32", 5)


def test_caches_count_hits(dev, rng) -> None:
    net = _net(dev, "rnn_tanh", isz=3, hsz=2, layers=1)
    net.reset_parameters(seed=int(rng.integers(1 << 30))).result()
    x = dev.to_device(random_array(rng, (4, 2, 3), "f32"))
    before = dev.cudnn.rnn_cache_info().result()
    for _ in range(3):
        net(x).result()
    after = dev.cudnn.rnn_cache_info().result()
    assert after["data"]["hits"] - before["data"]["hits"] >= 2
    assert after["data"]["size"] >= 1 and after["specs"]["size"] >= 1


def test_data_plan_eviction(dev, rng) -> None:
    """More shapes than the data-plan cache holds: plans are evicted (their device arrays of
    sequence lengths freed stream-ordered) and every call still computes the right thing."""
    net = _net(dev, "rnn_tanh", isz=3, hsz=2, layers=1)
    params = random_params(rng, net.param_shapes())
    net.set_weights(params).result()
    before = dev.cudnn.rnn_cache_info().result()["data"]["evictions"]
    outs = []
    for t_len in range(1, 72):
        x = random_array(rng, (t_len, 2, 3), "f32")
        lengths = (t_len, max(1, t_len // 2))
        outs.append((x, lengths, net(dev.to_device(x), seq_lengths=lengths).pending.y))
    for x, lengths, y in outs[::10] + outs[-3:]:
        zeros = np.zeros((1, 2, 2))
        assert_close(_host(dev, y), ref_rnn("rnn_tanh", params, wide(x), zeros, zeros, 1, 1,
                                            lengths)[0], "f32", 5)
    assert dev.cudnn.rnn_cache_info().result()["data"]["evictions"] - before >= 71 - 64


# -- bad arguments --------------------------------------------------------------------------------
def _lstm(d, **kw):
    return d.cudnn.lstm(3, 4, 1, **kw)


def _buf(d, shape, dtype="f32"):
    return d.alloc(shape, dtype, order="C")


def _fwd_msg(d, **over):
    spec = RnnSpec("gru", 3, 4)
    fields = dict(spec=spec, x=_buf(d, (5, 2, 3)), y=_buf(d, (5, 2, 4)),
                  w=_buf(d, (4096,)))
    fields.update(over)
    return d.send(RnnForward(**fields))


BAD = [
    BadArg("unknown cell", lambda d: d.cudnn.rnn("lstmx", 3, 4), field="cell"),
    BadArg("hidden size 0", lambda d: d.cudnn.rnn("gru", 3, 0), field="hidden_size"),
    BadArg("f64 network", lambda d: d.cudnn.lstm(3, 4, dtype="f64"), field="dtype"),
    BadArg("tf32 on f16", lambda d: d.cudnn.lstm(3, 4, dtype="f16", math="tf32"), field="math"),
    BadArg("bidirectional not bool", lambda d: d.cudnn.lstm(3, 4, bidirectional=1),
           field="bidirectional"),
    BadArg("batch_first not bool", lambda d: d.cudnn.lstm(3, 4, batch_first="yes"),
           field="batch_first"),
    BadArg("train an array", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), train=ones_array(d, 2)),
           field="train"),
    BadArg("backward weights 1", lambda d: (lambda n: n.backward(
        n(_buf(d, (5, 2, 3)), train=True), _buf(d, (5, 2, 4)), weights=1))(_lstm(d)),
        field="weights"),
    BadArg("x dtype", lambda d: _lstm(d)(_buf(d, (5, 2, 3), "f64")), field="x"),
    BadArg("x features", lambda d: _lstm(d)(_buf(d, (5, 2, 6))), field="x"),
    BadArg("x 2-D", lambda d: _lstm(d)(_buf(d, (5, 3))), field="x"),
    BadArg("wrong hidden size in h0", lambda d: _lstm(d)(_buf(d, (5, 2, 3)),
                                                         _buf(d, (1, 2, 5))), field="hx"),
    BadArg("h0 batch mismatch", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), _buf(d, (1, 3, 4))),
           field="hx"),
    BadArg("h0 layers mismatch", lambda d: _lstm(d, bidirectional=True)(
        _buf(d, (5, 2, 3)), _buf(d, (1, 2, 4))), field="hx"),
    BadArg("c0 dtype", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), None, _buf(d, (1, 2, 4), "f16")),
           field="cx"),
    BadArg("c0 on a GRU", lambda d: d.cudnn.gru(3, 4)(_buf(d, (5, 2, 3)), None,
                                                   _buf(d, (1, 2, 4))), field="cx"),
    BadArg("seq_lengths count", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), seq_lengths=(5,)),
           field="seq_lengths"),
    BadArg("seq_length > T", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), seq_lengths=(6, 2)),
           field="seq_lengths"),
    BadArg("seq_lengths an int", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), seq_lengths=5),
           field="seq_lengths"),
    BadArg("seq_length 0", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), seq_lengths=(0, 2)),
           field="seq_lengths"),
    BadArg("weights too small", lambda d: _lstm(d)(_buf(d, (5, 2, 3)), w=_buf(d, (8,))),
           field="w"),
    BadArg("backward of buffers, not a forward", lambda d: _lstm(d).backward(
        _buf(d, (5, 2, 4)), _buf(d, (5, 2, 4))), field="forward"),
    BadArg("backward of an inference forward", lambda d: (lambda n: n.backward(
        n(_buf(d, (5, 2, 3))), _buf(d, (5, 2, 4))))(_lstm(d)), field="forward"),
    BadArg("backward of another network's forward", lambda d: _lstm(d).backward(
        _lstm(d)(_buf(d, (5, 2, 3)), train=True), _buf(d, (5, 2, 4))), field="forward"),
    BadArg("unknown parameter", lambda d: _lstm(d).set_weights({"weight_ih_l7": np.ones(3)}),
           field="weight_ih_l7"),
    BadArg("parameter shape", lambda d: _lstm(d).set_weights({"weight_ih_l0": np.ones((4, 3))}),
           field="weight_ih_l0"),
    BadArg("hy aliases hx", lambda d: (lambda h: _fwd_msg(d, hx=h, hy=h))(_buf(d, (1, 2, 4))),
           field="hy"),
    BadArg("y shape", lambda d: _fwd_msg(d, y=_buf(d, (5, 2, 8))), field="y"),
    BadArg("reserve dtype", lambda d: _fwd_msg(d, reserve=_buf(d, (64,), "f32")),
           field="reserve"),
    BadArg("reserve too small (device check)",
           lambda d: _fwd_msg(d, reserve=_buf(d, (1,), "u8")), field="reserve", deferred=True),
    BadArg("weight space too small (device check)", lambda d: _fwd_msg(d, w=_buf(d, (4,))),
           field="w", deferred=True),
    BadArg("dw dtype", lambda d: d.send(RnnBackwardWeights(
        RnnSpec("gru", 3, 4), _buf(d, (5, 2, 3)), _buf(d, (5, 2, 4)), _buf(d, (64,), "f16"),
        _buf(d, (64,), "u8"))), field="dw"),
    # projection
    BadArg("proj_size on a GRU", lambda d: d.cudnn.gru(3, 4, proj_size=2), field="proj_size"),
    BadArg("proj_size on an RNN", lambda d: d.cudnn.rnn("rnn_tanh", 3, 4, proj_size=2),
           field="proj_size"),
    BadArg("proj_size = hidden_size", lambda d: d.cudnn.lstm(3, 4, proj_size=4),
           field="proj_size"),
    BadArg("proj_size > hidden_size", lambda d: d.cudnn.lstm(3, 4, proj_size=9),
           field="proj_size"),
    BadArg("proj_size negative", lambda d: d.cudnn.lstm(3, 4, proj_size=-1), field="proj_size"),
    BadArg("proj_size a float", lambda d: d.cudnn.lstm(3, 4, proj_size=2.0), field="proj_size"),
    BadArg("proj: h0 hidden_size wide", lambda d: _lstm(d, proj_size=2)(
        _buf(d, (5, 2, 3)), _buf(d, (1, 2, 4))), field="hx"),
    BadArg("proj: c0 proj_size wide", lambda d: _lstm(d, proj_size=2)(
        _buf(d, (5, 2, 3)), _buf(d, (1, 2, 2)), _buf(d, (1, 2, 2))), field="cx"),
    BadArg("proj: y hidden_size wide", lambda d: _fwd_msg(
        d, spec=RnnSpec("lstm", 3, 4, proj_size=2), y=_buf(d, (5, 2, 4))), field="y"),
    BadArg("proj: dcy proj_size wide", lambda d: d.send(RnnBackwardData(
        RnnSpec("lstm", 3, 4, proj_size=2), _buf(d, (5, 2, 2)), _buf(d, (5, 2, 2)),
        _buf(d, (5, 2, 3)), _buf(d, (4096,)), _buf(d, (64,), "u8"),
        dcy=_buf(d, (1, 2, 2)))), field="dcy"),
    # dropout
    BadArg("dropout 1", lambda d: d.cudnn.lstm(3, 4, 2, dropout=1.0), field="dropout"),
    BadArg("dropout negative", lambda d: d.cudnn.gru(3, 4, 2, dropout=-0.1), field="dropout"),
    BadArg("dropout NaN", lambda d: d.cudnn.gru(3, 4, 2, dropout=float("nan")), field="dropout"),
    BadArg("dropout a string", lambda d: d.cudnn.gru(3, 4, 2, dropout="0.5"), field="dropout"),
    BadArg("seed negative", lambda d: d.cudnn.lstm(3, 4, 2, dropout=0.5, seed=-1), field="seed"),
    BadArg("seed too large", lambda d: d.cudnn.lstm(3, 4, 2, dropout=0.5, seed=2**64),
           field="seed"),
    BadArg("reseed with a bad seed", lambda d: d.cudnn.lstm(3, 4, 2, dropout=0.5).seed_dropout(
        1.5), field="seed"),
    BadArg("training with dropout without states", lambda d: _fwd_msg(
        d, spec=RnnSpec("gru", 3, 4, 2, dropout=0.5), reserve=_buf(d, (1 << 16,), "u8")),
        field="dropout_states"),
    BadArg("states given to inference", lambda d: _fwd_msg(
        d, spec=RnnSpec("gru", 3, 4, 2, dropout=0.5), dropout_states=_buf(d, (4096,), "u8")),
        field="dropout_states"),
    BadArg("states given without dropout", lambda d: _fwd_msg(
        d, reserve=_buf(d, (1 << 16,), "u8"), dropout_states=_buf(d, (4096,), "u8")),
        field="dropout_states"),
    BadArg("states dtype", lambda d: _fwd_msg(
        d, spec=RnnSpec("gru", 3, 4, 2, dropout=0.5), reserve=_buf(d, (1 << 16,), "u8"),
        dropout_states=_buf(d, (64,), "f32")), field="dropout_states"),
    BadArg("states alias the reserve", lambda d: (lambda r: _fwd_msg(
        d, spec=RnnSpec("gru", 3, 4, 2, dropout=0.5), reserve=r, dropout_states=r))(
        _buf(d, (1 << 16,), "u8")), field="dropout_states"),
    BadArg("states too small (device check)", lambda d: d.send(RnnDropoutInit(
        _buf(d, (1,), "u8"), 3)), field="states", deferred=True),
    BadArg("init: states dtype", lambda d: d.send(RnnDropoutInit(_buf(d, (64,), "f32"))),
           field="states"),
    BadArg("spec not an RnnSpec", lambda d: d.send(RnnForward(
        ("gru", 3, 4), _buf(d, (5, 2, 3)), _buf(d, (5, 2, 4)), _buf(d, (64,)))), field="spec"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


def test_backward_flags_are_refused_before_anything_is_sent(dev, posted) -> None:
    """``accumulate`` (which RnnBackwardWeights checks too) is refused by the call itself:
    a backward sends no data pass and allocates no dw before the refusal."""
    net = _lstm(dev)
    fwd = net(_buf(dev, (5, 2, 3)), train=True)
    dy = _buf(dev, (5, 2, 4))
    sent = posted(dev, RnnBackwardData, gpumsg.messages.Alloc)
    for call in (lambda: net.backward(fwd, dy, accumulate=1),
                 lambda: net.backward_weights(fwd, accumulate=1)):
        with pytest.raises(gpumsg.InvalidMessage) as info:
            call()
        assert info.value.field == "accumulate"
    assert sent == []
