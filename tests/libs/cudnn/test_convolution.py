"""cuDNN convolutions: forward, backward data and backward filter of 1-D, 2-D and 3-D problems
in both layouts, with stride, padding, dilation and groups (depthwise included), in f32, TF32,
f16 and bf16, against a direct-sum float64 reference whose gradients are checked by finite
differences; bias and activations; the algorithm cache; bad arguments."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import InvalidMessage
from tests.libs.cudnn._helpers import CASES, PREC, _x, act_ref, first, last, problem, ref_conv
from tests.libs.harness import BadArg, assert_close, check_bad_args, ones_array, random_array, wide


def test_reference_gradients_by_finite_differences(rng) -> None:
    """The reference's gradients are those of its forward (central differences, float64)."""
    x, w = rng.standard_normal((2, 4, 5, 6)), rng.standard_normal((6, 2, 3, 2))
    geo = ((2, 1), (1, 1), (1, 2), 2)
    y, grads = ref_conv(x, w, *geo)
    dy = rng.standard_normal(y.shape)
    dx, dw = grads(dy)
    eps = 1e-6
    for arr, grad in ((x, dx), (w, dw)):
        for idx in [tuple(rng.integers(0, s) for s in arr.shape) for _ in range(6)]:
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            on_x = arr is x
            pair = [(p, w) if on_x else (x, p) for p in (plus, minus)]
            fd = (np.sum(ref_conv(*pair[0], *geo)[0] * dy)
                  - np.sum(ref_conv(*pair[1], *geo)[0] * dy)) / (2 * eps)
            assert abs(fd - grad[idx]) < 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
def test_conv_three_directions(dev, rng, case: str, dtype: str, layout: str) -> None:
    x, w, geo = problem(rng, case, dtype, layout)
    stride, padding, dilation, groups = geo
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, layout=layout)
    y_ref, grads = ref_conv(x, w, *geo)
    dy = random_array(rng, y_ref.shape, dtype)
    dx_ref, dw_ref = grads(dy)
    dx_dev, dw_dev = dev.to_device(last(x, layout)), dev.to_device(last(w, layout))
    ddy = dev.to_device(last(dy, layout))
    y = dev.cudnn.conv(dx_dev, dw_dev, **kw)
    dx = dev.cudnn.conv_backward_data(ddy, dw_dev, last(x, layout).shape, **kw)
    dw = dev.cudnn.conv_backward_filter(dx_dev, ddy, last(w, layout).shape, **kw)
    # half precisions: a long reduction (backward filter sums over batch and space) rounds more
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, PREC[dtype])
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, PREC[dtype])
    assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, PREC[dtype], 2.0)


def test_conv_with_out_reuses_its_message_and_keeps_every_check(dev, rng) -> None:
    """Repeated convolutions into a given ``out`` reuse their validated message: the results
    follow the buffers' current contents, other buffers of the same shapes get messages of
    their own, and a freed operand or a changed argument is still refused."""
    x, w, geo = problem(rng, "stride_pad_groups", "f32", "NCHW")
    stride, padding, dilation, groups = geo
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y_ref, grads = ref_conv(x, w, *geo)
    dx_dev, dw_dev = dev.to_device(x), dev.to_device(w)
    y = dev.alloc(y_ref.shape, "f32", order="C")
    dy = random_array(rng, y_ref.shape, "f32")
    ddy = dev.to_device(dy)
    dx = dev.alloc(x.shape, "f32", order="C")
    dw = dev.alloc(w.shape, "f32", order="C")
    dx_ref, dw_ref = grads(dy)
    for _ in range(2):
        dev.cudnn.conv(dx_dev, dw_dev, out=y, **kw)
        dev.cudnn.conv_backward_data(ddy, dw_dev, x.shape, out=dx, **kw)
        dev.cudnn.conv_backward_filter(dx_dev, ddy, w.shape, out=dw, **kw)
        assert_close(dev.copy_to_host(y).result(), y_ref, PREC["f32"])
        assert_close(dev.copy_to_host(dx).result(), dx_ref, PREC["f32"])
        assert_close(dev.copy_to_host(dw).result(), dw_ref, PREC["f32"], 2.0)
    # the device thread built each direction's ConvCall once (service/derived.py)
    assert len(dev._worker.ctx.derived) == 3
    x2 = random_array(rng, x.shape, "f32")  # new contents, same buffer: a new result
    dev.copy_from_host(dx_dev.result(), x2)
    dev.cudnn.conv(dx_dev, dw_dev, out=y, **kw)
    assert_close(dev.copy_to_host(y).result(), ref_conv(x2, w, *geo)[0], PREC["f32"])
    w3 = random_array(rng, w.shape, "f32")  # another buffer of the same shape
    dev.cudnn.conv(dx_dev, dev.to_device(w3), out=y, **kw)
    assert_close(dev.copy_to_host(y).result(), ref_conv(x2, w3, *geo)[0], PREC["f32"])
    with pytest.raises(InvalidMessage) as info:
        dev.cudnn.conv(dx_dev, dw_dev, out=y, **{**kw, "stride": 1})  # y has the wrong shape now
    assert info.value.field == "y"
    dw_dev.result().free()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cudnn.conv(dx_dev, dw_dev, out=y, **kw)
    assert_close(dev.copy_to_host(dev.to_device(x)).result(), x, PREC["f32"])  # still serves


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_tf32(dev, rng, layout: str) -> None:
    x, w, geo = problem(rng, "stride_pad_groups", "f32", layout)
    y_ref, _ = ref_conv(x, w, *geo)
    y = dev.cudnn.conv2d(dev.to_device(last(x, layout)), dev.to_device(last(w, layout)),
                      stride=geo[0], padding=geo[1], groups=geo[3], layout=layout, math="tf32")
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, "tf32")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("activation,coef", [("none", None), ("relu", None), ("sigmoid", None),
                                             ("tanh", None), ("elu", 0.7),
                                             ("clipped_relu", 1.5), ("swish", 1.3)])
def test_conv_bias_activation(dev, rng, dtype: str, activation: str, coef) -> None:
    layout = "NHWC"
    x, w, geo = problem(rng, "stride_pad_groups", dtype, layout)
    b = random_array(rng, (w.shape[0],), dtype)
    y_ref, _ = ref_conv(x, w, *geo)
    y_ref = act_ref(y_ref + wide(b)[None, :, None, None], activation,
                    coef if coef is not None else 0.0)
    y = dev.cudnn.conv2d(dev.to_device(last(x, layout)), dev.to_device(last(w, layout)),
                      bias=dev.to_device(b), stride=geo[0], padding=geo[1], groups=geo[3],
                      layout=layout, activation=activation, act_coef=coef)
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, PREC[dtype], 2.0)


def test_algorithm_cache_and_workspace_limit(one_stream_dev, rng) -> None:
    dev = one_stream_dev  # per-stream bookkeeping: one compute stream
    x, w, geo = problem(rng, "plain", "f32", "NCHW")
    dx, dw = dev.to_device(x), dev.to_device(w)
    before = dev.cudnn.cache_info().result()
    y1 = dev.cudnn.conv2d(dx, dw, workspace_limit=0)
    y2 = dev.cudnn.conv2d(dx, dw, workspace_limit=0)
    y3 = dev.cudnn.conv2d(dx, dw)  # another limit: another plan
    after = dev.cudnn.cache_info().result()
    assert after["misses"] - before["misses"] == 2
    assert after["hits"] - before["hits"] == 1
    y_ref, _ = ref_conv(x, w, *geo)
    for y in (y1, y2, y3):
        assert_close(dev.copy_to_host(y).result(), y_ref, "f32")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("case", ["stride_pad_groups", "1x1_stride2", "1d"])
def test_conv_find(dev, rng, case: str, dtype: str) -> None:
    """algo="find" (every candidate timed once) gives the same convolutions, as its own cached
    plan: the three directions, then a repeat that hits the cache."""
    layout = "NHWC"
    x, w, geo = problem(rng, case, dtype, layout)
    stride, padding, dilation, groups = geo
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups, layout=layout,
              algo="find")
    y_ref, grads = ref_conv(x, w, *geo)
    dy = random_array(rng, y_ref.shape, dtype)
    dx_ref, dw_ref = grads(dy)
    dxd, dwd, ddy = dev.to_device(last(x, layout)), dev.to_device(last(w, layout)), \
        dev.to_device(last(dy, layout))
    before = dev.cudnn.cache_info().result()
    for _ in range(2):
        y = dev.cudnn.conv(dxd, dwd, **kw)
        dx = dev.cudnn.conv_backward_data(ddy, dwd, last(x, layout).shape, **kw)
        dw = dev.cudnn.conv_backward_filter(dxd, ddy, last(w, layout).shape, **kw)
        assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, PREC[dtype])
        assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, PREC[dtype])
        assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, PREC[dtype], 2.0)
    after = dev.cudnn.cache_info().result()
    assert after["hits"] - before["hits"] >= 3


BAD = [
    BadArg("channel mismatch", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 3, 3, 3))), field="w",
           match="channel mismatch"),
    BadArg("groups do not divide channels",
           lambda d: d.cudnn.conv2d(_x(d), _x(d, (6, 1, 3, 3)), groups=3), field="groups"),
    BadArg("groups do not divide K",
           lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 2, 3, 3)), groups=2), field="groups"),
    BadArg("output size <= 0", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 7, 7))), field="y",
           match="<= 0"),
    BadArg("dilated kernel too large",
           lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), dilation=3), field="y"),
    BadArg("dtype mix", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3), "f16")), field="w"),
    BadArg("f64 refused", lambda d: d.cudnn.conv2d(_x(d, dtype="f64"), _x(d, (3, 4, 3, 3), "f64")),
           field="x"),
    BadArg("rank mismatch", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3))), field="w"),
    BadArg("2-D input", lambda d: d.cudnn.conv(_x(d, (4, 6)), _x(d, (3, 4))), field="x"),
    BadArg("stride 0", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), stride=0),
           field="stride"),
    BadArg("padding an array", lambda d: d.cudnn.conv2d(
        _x(d), _x(d, (3, 4, 3, 3)), padding=ones_array(d, 8)), field="padding"),
    BadArg("pool window an array", lambda d: d.cudnn.pool(_x(d), window=ones_array(d, 2)),
           field="window"),
    BadArg("negative padding", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), padding=-1),
           field="padding"),
    BadArg("wrong tuple length",
           lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), stride=(1, 1, 1)), field="stride"),
    BadArg("layout", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), layout="CHWN"),
           field="layout"),
    BadArg("algo", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), algo="fastest"),
           field="algo"),
    BadArg("tf32 on f16", lambda d: d.cudnn.conv2d(_x(d, dtype="f16"),
                                                 _x(d, (3, 4, 3, 3), "f16"), math="tf32"),
           field="math"),
    BadArg("bias length", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)),
                                                 bias=_x(d, (4,))), field="bias"),
    BadArg("activation", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), activation="gelu"),
           field="activation"),
    BadArg("coef on relu", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), activation="relu",
                                                  act_coef=2.0), field="act_coef"),
    BadArg("wrong output shape", lambda d: d.cudnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)),
                                                        out=_x(d, (2, 3, 5, 5))), field="y"),
    BadArg("backward data: dy shape",
           lambda d: d.cudnn.conv_backward_data(_x(d, (2, 3, 5, 5)), _x(d, (3, 4, 3, 3)),
                                              (2, 4, 6, 6)), field="dy"),
    BadArg("backward filter: dw channels",
           lambda d: d.cudnn.conv_backward_filter(_x(d), _x(d, (2, 3, 4, 4)), (3, 2, 3, 3)),
           field="dw"),
    BadArg("column-major buffer", lambda d: d.cudnn.conv2d(d.alloc((2, 4, 6, 6), "f32", order="F"),
                                                         _x(d, (3, 4, 3, 3))), field="x"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


POINTWISE_BAD = [
    BadArg("activation shape", lambda d: d.cudnn.activation_backward(
        _x(d), _x(d), _x(d, (2, 4, 6, 5))), field="dy"),
    BadArg("activation none", lambda d: d.cudnn.activation(_x(d), "none"), field="activation"),
    BadArg("softmax mode", lambda d: d.cudnn.softmax(_x(d), "spatial"), field="mode"),
    BadArg("softmax log", lambda d: d.cudnn.softmax(_x(d), log=1), field="log"),
    BadArg("softmax 1-D", lambda d: d.cudnn.softmax(_x(d, (5,))), field="x"),
    BadArg("softmax f64", lambda d: d.cudnn.softmax(_x(d, dtype="f64")), field="x"),
    BadArg("pool window too big", lambda d: d.cudnn.pool(_x(d), 7), field="y"),
    BadArg("pool padding >= window", lambda d: d.cudnn.pool(_x(d), 2, padding=2), field="padding"),
    BadArg("pool 1-D", lambda d: d.cudnn.pool(_x(d, (2, 4, 6)), 2), field="x"),
    BadArg("pool mode", lambda d: d.cudnn.pool(_x(d), 2, mode="min"), field="mode"),
    BadArg("pool out shape", lambda d: d.cudnn.pool(_x(d), 2, out=_x(d, (2, 4, 2, 2))),
           field="y"),
    BadArg("pool backward dy", lambda d: d.cudnn.pool_backward(
        _x(d), _x(d, (2, 4, 3, 3)), _x(d, (2, 4, 3, 2)), 2), field="dy"),
]


@pytest.mark.parametrize("case", POINTWISE_BAD, ids=str)
def test_pointwise_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


def test_invalid_message_direct() -> None:
    with pytest.raises(InvalidMessage):
        gpumsg.messages.ConvForward(1, 2, 3)
