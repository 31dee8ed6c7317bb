"""dev.nn's torch.nn.functional signatures and meanings for the calls cuDNN runs directly:
convolutions (padding 'same'/'valid', unbatched input), softmax over any dim, the
normalizations with torch's arguments, activations, dropout and attention, each against a
float64 reference on random inputs; and the refusals of what torch would refuse or gpumsg
does not offer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import erf

import gpumsg
from tests.libs.cudnn._helpers import act_ref, bn_ref, ref_conv, softmax_ref
from tests.libs.harness import BadArg, assert_close, check_bad_args, ones_array, random_array, wide


def _host(dev, fut):
    return dev.copy_to_host(fut.result(60)).result(60)


def _up(dev, a):
    return dev.to_device(np.asarray(a))


# -- convolutions --------------------------------------------------------------------------
@pytest.mark.parametrize("nd, kernel, padding, stride, dilation, groups", [
    (1, (3,), 1, 1, 1, 1),
    (1, (4,), "same", 1, 1, 1),          # even kernel: torch pads one more on the right
    (1, (3,), "same", 1, 2, 1),
    (2, (3, 2), "same", 1, (1, 3), 2),   # one axis odd, one even
    (2, (3, 3), "valid", 2, 1, 1),
    (2, (2, 3), (1, 0), (2, 1), 1, 2),
    (3, (2, 2, 3), "same", 1, 1, 1),
])
def test_conv_torch_arguments(dev, rng, nd, kernel, padding, stride, dilation, groups):
    cin, cout = 2 * groups, 3 * groups
    x = random_array(rng, (2, cin, *[7, 6, 5][:nd]), "f32")
    w = random_array(rng, (cout, cin // groups, *kernel), "f32")
    b = random_array(rng, (cout,), "f32")
    s = (stride,) * nd if isinstance(stride, int) else stride
    d = (dilation,) * nd if isinstance(dilation, int) else dilation
    if padding == "same":
        total = [di * (k - 1) for di, k in zip(d, kernel)]
        lo = [t // 2 for t in total]
        xp = np.pad(wide(x), [(0, 0), (0, 0)] + [(a, t - a) for a, t in zip(lo, total)])
        ref = ref_conv(xp, w, s, (0,) * nd, d, groups)[0]
        assert ref.shape[2:] == x.shape[2:]
    else:
        p = (0,) * nd if padding == "valid" else (padding,) * nd if isinstance(
            padding, int) else padding
        ref = ref_conv(x, w, s, p, d, groups)[0]
    ref = ref + wide(b).reshape(1, -1, *[1] * nd)
    conv = getattr(dev.nn, f"conv{nd}d")
    y = conv(_up(dev, x), _up(dev, w), _up(dev, b), stride, padding, dilation, groups)
    assert y.shape == ref.shape
    assert_close(_host(dev, y), ref, "f32", 20)
    one = conv(_up(dev, x[1]), _up(dev, w), _up(dev, b), stride=stride, padding=padding,
               dilation=dilation, groups=groups)  # unbatched (C, *spatial)
    assert_close(_host(dev, one), ref[1], "f32", 20)


def test_conv_into_out(dev, rng):
    x, w = random_array(rng, (1, 3, 5, 5), "f32"), random_array(rng, (2, 3, 3, 3), "f32")
    out = dev.alloc((1, 2, 5, 5), "f32")
    got = dev.nn.conv2d(_up(dev, x), _up(dev, w), padding=1, out=out)
    assert got.result(60) is out.result()
    assert_close(_host(dev, out), ref_conv(x, w, (1, 1), (1, 1), (1, 1), 1)[0], "f32", 20)


# -- softmax, activations ------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_softmax_over_any_dim(dev, rng, dim, dtype):
    x = random_array(rng, (3, 5, 4), dtype) * 3
    xd = _up(dev, x)
    assert_close(_host(dev, dev.nn.softmax(xd, dim)), softmax_ref(wide(x), dim, False),
                 dtype, 4)
    assert_close(_host(dev, dev.nn.log_softmax(xd, dim=dim)),
                 softmax_ref(wide(x), dim, True), dtype, 8)


@pytest.mark.parametrize("name, kw, ref", [
    ("relu", {}, lambda x: act_ref(x, "relu", 0)),
    ("relu6", {}, lambda x: np.clip(x, 0, 6)),
    ("elu", {"alpha": 0.7}, lambda x: act_ref(x, "elu", 0.7)),
    ("sigmoid", {}, lambda x: act_ref(x, "sigmoid", 0)),
    ("tanh", {}, np.tanh),
    ("silu", {}, lambda x: act_ref(x, "swish", 1.0)),
    ("gelu", {}, lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))),
    ("gelu", {"approximate": "tanh"},
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
], ids=["relu", "relu6", "elu", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh"])
def test_activations(dev, rng, name, kw, ref):
    x = random_array(rng, (4, 9), "f32") * 4
    assert_close(_host(dev, getattr(dev.nn, name)(_up(dev, x), **kw)), ref(wide(x)), "f32", 8)


def test_inplace_activation_writes_the_input(dev, rng):
    x = random_array(rng, (6,), "f32")
    xd = _up(dev, x)
    assert dev.nn.relu(xd, inplace=True).result(60) is xd.result()
    assert_close(_host(dev, xd), np.maximum(wide(x), 0), "f32")


# -- normalizations ------------------------------------------------------------------------
def _ln_ref(x, k, g, b, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    m = x.mean(axes, keepdims=True)
    v = x.var(axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


@pytest.mark.parametrize("affine", ["none", "both", "weight", "f16-weights"])
def test_layer_norm(dev, rng, affine):
    dtype = "f16" if affine == "f16-weights" else "f32"
    x = random_array(rng, (3, 4, 8), dtype)
    g = random_array(rng, (4, 8), dtype)
    b = random_array(rng, (4, 8), dtype)
    want_g = wide(g) if affine != "none" else 1.0
    want_b = wide(b) if affine in ("both", "f16-weights") else 0.0
    ref = _ln_ref(wide(x), 2, want_g, want_b, 1e-3)
    got = dev.nn.layer_norm(_up(dev, x), (4, 8),
                            _up(dev, g) if affine != "none" else None,
                            _up(dev, b) if affine in ("both", "f16-weights") else None,
                            eps=1e-3)
    assert_close(_host(dev, got), ref, dtype, 8)


def test_group_and_instance_norm(dev, rng):
    x = random_array(rng, (2, 6, 5), "f32")
    g, b = random_array(rng, (6,), "f32"), random_array(rng, (6,), "f32")
    xs = wide(x).reshape(2, 3, -1)
    ref = ((xs - xs.mean(-1, keepdims=True)) / np.sqrt(xs.var(-1, keepdims=True) + 1e-5)
           ).reshape(x.shape) * wide(g)[:, None] + wide(b)[:, None]
    assert_close(_host(dev, dev.nn.group_norm(_up(dev, x), 3, _up(dev, g), _up(dev, b))),
                 ref, "f32", 8)
    xw = wide(x)
    ref = (xw - xw.mean(-1, keepdims=True)) / np.sqrt(xw.var(-1, keepdims=True) + 1e-5)
    assert_close(_host(dev, dev.nn.instance_norm(_up(dev, x))), ref, "f32", 8)
    rm, rv = random_array(rng, (6,), "f32"), np.abs(random_array(rng, (6,), "f32")) + 0.5
    ref = (xw - wide(rm)[:, None]) / np.sqrt(wide(rv)[:, None] + 1e-5)
    got = dev.nn.instance_norm(_up(dev, x), _up(dev, rm), _up(dev, rv), use_input_stats=False)
    assert_close(_host(dev, got), ref, "f32", 8)


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 5), (2, 3, 4, 4)])
def test_batch_norm(dev, rng, shape):
    x = random_array(rng, shape, "f32")
    g, b = random_array(rng, (3,), "f32"), random_array(rng, (3,), "f32")
    rm, rv = random_array(rng, (3,), "f32"), np.abs(random_array(rng, (3,), "f32")) + 0.5
    view = (1, 3) + (1,) * (len(shape) - 2)
    ref = (wide(x) - wide(rm).reshape(view)) / np.sqrt(wide(rv).reshape(view) + 1e-5) \
        * wide(g).reshape(view) + wide(b).reshape(view)
    got = dev.nn.batch_norm(_up(dev, x), _up(dev, rm), _up(dev, rv), _up(dev, g), _up(dev, b))
    assert_close(_host(dev, got), ref, "f32", 8)
    rmd, rvd = _up(dev, rm), _up(dev, rv)
    got = dev.nn.batch_norm(_up(dev, x), rmd, rvd, training=True, momentum=0.3)
    x4 = wide(x).reshape(*shape[:2], -1, 1)
    y, mean, var, _ = bn_ref(x4, np.ones(3), np.zeros(3), 1e-5)
    assert_close(_host(dev, got), y.reshape(shape), "f32", 8)
    m = x4.size // 3
    assert_close(_host(dev, rmd), 0.7 * wide(rm) + 0.3 * mean, "f32", 8)
    assert_close(_host(dev, rvd), 0.7 * wide(rv) + 0.3 * var * m / (m - 1), "f32", 8)


# -- dropout -------------------------------------------------------------------------------
def test_dropout_torch_semantics(dev, rng):
    x = random_array(rng, (4000,), "f32") + 3.0
    xd = _up(dev, x)
    y = _host(dev, dev.nn.dropout(xd, 0.3))
    kept = y != 0
    assert abs(1 - kept.mean() - 0.3) < 5 * math.sqrt(0.3 * 0.7 / x.size)
    assert_close(y[kept], wide(x)[kept] / 0.7, "f32")
    other = _host(dev, dev.nn.dropout(xd, 0.3))
    assert not np.array_equal(kept, other != 0), "each call draws a new mask"
    a, b = (_host(dev, dev.nn.dropout(xd, 0.3, seed=11)) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert dev.nn.dropout(xd, 0.3, training=False).result(60) is xd.result()
    assert not _host(dev, dev.nn.dropout(xd, 1.0)).any()


# -- attention -----------------------------------------------------------------------------
def _attention_ref(q, k, v, causal, scale):
    q, k, v = wide(q), wide(k), wide(v)
    rep = q.shape[-3] // k.shape[-3]
    k, v = np.repeat(k, rep, -3), np.repeat(v, rep, -3)
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s[..., np.triu(np.ones(s.shape[-2:], bool), 1)] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True) @ v


@pytest.mark.parametrize("shape_q, shape_kv, causal, scale, gqa", [
    ((2, 2, 16, 32), (2, 2, 16, 32), True, None, False),
    ((1, 4, 8, 16), (1, 2, 24, 16), False, 0.3, True),
    ((3, 16, 8), (3, 16, 8), False, None, False),   # (B, L, E)
])
def test_scaled_dot_product_attention(dev, rng, shape_q, shape_kv, causal, scale, gqa):
    q = random_array(rng, shape_q, "f16")
    k, v = random_array(rng, shape_kv, "f16"), random_array(rng, shape_kv, "f16")
    got = dev.nn.scaled_dot_product_attention(_up(dev, q), _up(dev, k), _up(dev, v),
                                              is_causal=causal, scale=scale, enable_gqa=gqa)
    assert got.shape == shape_q
    assert_close(_host(dev, got), _attention_ref(q, k, v, causal, scale), "f16", 8)


def test_attention_dropout_draws_fresh_masks(dev, rng):
    q = _up(dev, random_array(rng, (1, 2, 16, 16), "f16"))
    plain = _host(dev, dev.nn.scaled_dot_product_attention(q, q, q))
    a = _host(dev, dev.nn.scaled_dot_product_attention(q, q, q, dropout_p=0.5))
    b = _host(dev, dev.nn.scaled_dot_product_attention(q, q, q, dropout_p=0.5))
    assert not np.array_equal(a, plain) and not np.array_equal(a, b)
    s1, s2 = (_host(dev, dev.nn.scaled_dot_product_attention(q, q, q, dropout_p=0.5, seed=3))
              for _ in range(2))
    np.testing.assert_array_equal(s1, s2)


# -- refusals ------------------------------------------------------------------------------
def _t(d, shape=(2, 3, 8), dtype="f32", order="C"):
    return d.to_device(np.asfortranarray(np.ones(shape, gpumsg.as_dtype(dtype)))
                       if order == "F" else np.ones(shape, gpumsg.as_dtype(dtype)) + 0.5)


def _i(d, values):
    return d.to_device(np.asarray(values, np.int64))


BAD = [
    BadArg("F-ordered input", lambda d: d.nn.relu(_t(d, (3, 4), order="F")), field="input"),
    BadArg("softmax without dim", lambda d: d.nn.softmax(_t(d)), field="dim"),
    BadArg("softmax dim out of range", lambda d: d.nn.softmax(_t(d), 3), field="dim"),
    BadArg("softmax dtype", lambda d: d.nn.softmax(_t(d), 1, dtype="f64"), field="dtype"),
    BadArg("conv1d of 4-D", lambda d: d.nn.conv1d(_t(d, (1, 2, 3, 4)), _t(d, (1, 2, 3))),
           field="input"),
    BadArg("same with stride", lambda d: d.nn.conv1d(_t(d), _t(d, (2, 3, 3)), stride=2,
                                                     padding="same"), field="padding"),
    BadArg("padding word", lambda d: d.nn.conv1d(_t(d), _t(d, (2, 3, 3)), padding="full"),
           field="padding"),
    BadArg("transpose output_padding", lambda d: d.nn.conv_transpose1d(
        _t(d), _t(d, (3, 2, 3)), stride=2, output_padding=2), field="output_padding"),
    BadArg("transpose channels", lambda d: d.nn.conv_transpose1d(_t(d), _t(d, (4, 2, 3))),
           field="weight"),
    BadArg("ceil_mode not a bool", lambda d: d.nn.max_pool1d(_t(d), 2, ceil_mode=1),
           field="ceil_mode"),
    BadArg("pool dilation 0", lambda d: d.nn.max_pool2d(_t(d, (1, 2, 6, 6)), 2, dilation=0),
           field="dilation"),
    BadArg("divisor_override 0", lambda d: d.nn.avg_pool2d(_t(d, (1, 2, 6, 6)), 2,
                                                           divisor_override=0),
           field="divisor_override"),
    # an array stride: compared with () element-wise it once raised NumPy's ValueError
    BadArg("pool stride an array", lambda d: d.nn.avg_pool2d(_t(d, (1, 2, 6, 6)), 2,
                                                             stride=np.ones(8, np.float32)),
           field="stride"),
    BadArg("pool padding > half", lambda d: d.nn.max_pool1d(_t(d), 2, padding=2),
           field="padding"),
    BadArg("layer_norm shape", lambda d: d.nn.layer_norm(_t(d), (3,)),
           field="normalized_shape"),
    BadArg("layer_norm nested shape", lambda d: d.nn.layer_norm(_t(d), ((8,),)),
           field="normalized_shape"),
    BadArg("layer_norm weight size", lambda d: d.nn.layer_norm(_t(d), 8, _t(d, (7,))),
           field="weight"),
    BadArg("instance running stats", lambda d: d.nn.instance_norm(
        _t(d), _t(d, (3,)), _t(d, (3,))), field="running_mean"),
    BadArg("dropout p > 1", lambda d: d.nn.dropout(_t(d), 1.5), field="p"),
    BadArg("attn_mask", lambda d: d.nn.scaled_dot_product_attention(
        *(_t(d, (1, 1, 8, 8), "f16"),) * 3, attn_mask=_t(d, (8, 8))), field="attn_mask"),
    BadArg("gqa not enabled", lambda d: d.nn.scaled_dot_product_attention(
        _t(d, (1, 2, 8, 8), "f16"), _t(d, (1, 1, 8, 8), "f16"), _t(d, (1, 1, 8, 8), "f16")),
        field="key"),
    BadArg("pad mode", lambda d: d.nn.pad(_t(d), (1, 1), "mirror"), field="mode"),
    BadArg("pad odd sizes", lambda d: d.nn.pad(_t(d), (1, 1, 1)), field="pad"),
    BadArg("reflect too wide", lambda d: d.nn.pad(_t(d), (8, 0), "reflect"), field="pad"),
    BadArg("value with reflect", lambda d: d.nn.pad(_t(d), (1, 1), "reflect", 2.0),
           field="value"),
    BadArg("size and factor", lambda d: d.nn.interpolate(_t(d), 4, 2.0), field="size"),
    BadArg("align_corners nearest", lambda d: d.nn.interpolate(_t(d), 4,
                                                               align_corners=True),
           field="align_corners"),
    BadArg("bilinear of 3-D", lambda d: d.nn.interpolate(_t(d), 4, mode="bilinear"),
           field="mode"),
    BadArg("antialias an array", lambda d: d.nn.interpolate(_t(d), 4, antialias=ones_array(d, 8)),
           field="antialias"),
    BadArg("align_corners an array", lambda d: d.nn.interpolate(
        _t(d), 4, mode="linear", align_corners=ones_array(d, 1)), field="align_corners"),
    BadArg("recompute_scale_factor 1", lambda d: d.nn.interpolate(
        _t(d), None, 2.0, recompute_scale_factor=1), field="recompute_scale_factor"),
    BadArg("count_include_pad 0", lambda d: d.nn.avg_pool1d(_t(d), 2, count_include_pad=0),
           field="count_include_pad"),
    BadArg("is_causal an array", lambda d: d.nn.scaled_dot_product_attention(
        *(_t(d, (1, 1, 8, 8), "f16"),) * 3, is_causal=ones_array(d, 2)), field="is_causal"),
    BadArg("bicubic", lambda d: d.nn.interpolate(_t(d, (1, 1, 4, 4)), 8, mode="bicubic"),
           field="mode"),
    BadArg("embedding float indices", lambda d: d.nn.embedding(_t(d, (3,)), _t(d, (4, 2))),
           field="input"),
    BadArg("embedding max_norm", lambda d: d.nn.embedding(_i(d, [1]), _t(d, (4, 2)),
                                                          max_norm=1.0), field="max_norm"),
    BadArg("embedding sparse 1", lambda d: d.nn.embedding(_i(d, [1]), _t(d, (4, 2)), sparse=1),
           field="sparse"),
    BadArg("reduction", lambda d: d.nn.mse_loss(_t(d), _t(d), reduction="avg"),
           field="reduction"),
    BadArg("legacy size_average", lambda d: d.nn.mse_loss(_t(d), _t(d), size_average=True),
           field="size_average"),
    BadArg("mse shapes", lambda d: d.nn.mse_loss(_t(d), _t(d, (2, 3, 7))), field="target"),
    BadArg("target shape", lambda d: d.nn.cross_entropy(_t(d, (4, 3)), _i(d, [0, 1, 2])),
           field="target"),
    BadArg("class weight size", lambda d: d.nn.cross_entropy(
        _t(d, (2, 3)), _i(d, [0, 1]), _t(d, (4,))), field="weight"),
    BadArg("label_smoothing", lambda d: d.nn.cross_entropy(
        _t(d, (2, 3)), _i(d, [0, 1]), label_smoothing=2.0), field="label_smoothing"),
    BadArg("out shape", lambda d: d.nn.relu(_t(d), out=_t(d, (2, 3, 7))), field="out"),
    BadArg("linear features", lambda d: d.nn.linear(_t(d), _t(d, (4, 7))), field="weight"),
    BadArg("linear bias", lambda d: d.nn.linear(_t(d), _t(d, (4, 8)), _t(d, (5,))),
           field="bias"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case):
    check_bad_args(dev, case)


def test_views_in_a_recorded_graph_follow_an_update(dev, rng):
    """dev.nn's softmax over the last axis of a 3-D buffer hands cuDNN a reshaped view of it;
    a recorded graph replays it, and re-pointed at other buffers of the same shape, replays on
    those."""
    shape = (2, 3, 5)
    x, y = dev.to_device(random_array(rng, shape, "f32")), dev.alloc(shape, "f32")
    dev.nn.softmax(x, -1, out=y).result(60)  # eager first: builds what the call needs
    with dev.graph(x=x, y=y) as g:
        dev.nn.softmax(x, -1, out=y)
    g.ready.result(timeout=120)
    data = random_array(rng, shape, "f32")
    dev.copy_from_host(x, data)
    g.launch().result(timeout=60)
    assert_close(_host(dev, y), softmax_ref(wide(data), -1, False), "f32", 4)
    x2, y2 = dev.to_device(random_array(rng, shape, "f32")), dev.alloc(shape, "f32")
    g.update(x=x2, y=y2).result(timeout=60)
    g.launch().result(timeout=60)
    assert_close(_host(dev, y2), softmax_ref(wide(_host(dev, x2)), -1, False), "f32", 4)


def test_repeated_conv_into_out_reuses_its_message(dev, rng):
    x, w = random_array(rng, (1, 2, 6, 6), "f32"), random_array(rng, (3, 2, 3, 3), "f32")
    xd, wd, out = _up(dev, x), _up(dev, w), dev.alloc((1, 3, 4, 4), "f32")
    ref = ref_conv(x, w, (1, 1), (0, 0), (1, 1), 1)[0]
    for _ in range(3):
        assert dev.nn.conv2d(xd, wd, out=out).result(60) is out.result()
        assert_close(_host(dev, out), ref, "f32", 20)
    assert len(dev.nn._memo._memo) == 1


def test_a_graph_refuses_the_calls_that_make_temporaries(dev, rng):
    x = _up(dev, random_array(rng, (2, 8), "f32"))
    y = dev.alloc((2, 8), "f32")
    dev.nn.layer_norm(x, 8, out=y).result(60)
    with pytest.raises(gpumsg.GraphCaptureError):
        with dev.graph():
            dev.nn.layer_norm(x, 8, out=y)
    dev.nn.leaky_relu(x, out=y).result(60)  # compiled eagerly first
    with dev.graph() as g:
        dev.nn.leaky_relu(x, 0.2, out=y)
    g.ready.result(timeout=120)
    data = random_array(rng, (2, 8), "f32")
    dev.copy_from_host(x, data)
    g.launch().result(timeout=60)
    assert_close(_host(dev, y), np.where(wide(data) > 0, wide(data), 0.2 * wide(data)), "f32")


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 3, 7)])
def test_linear(dev, rng, dtype, shape):
    x, w = random_array(rng, shape, dtype), random_array(rng, (5, 7), dtype)
    b = random_array(rng, (5,), dtype)
    ref = wide(x) @ wide(w).T
    assert_close(_host(dev, dev.nn.linear(_up(dev, x), _up(dev, w))), ref, dtype, 8)
    out = dev.alloc((*shape[:-1], 5), dtype)
    got = dev.nn.linear(_up(dev, x), _up(dev, w), _up(dev, b), out=out)
    assert got.result(60) is out.result()
    assert_close(_host(dev, out), ref + wide(b), dtype, 8)
