"""cuDNN convolutions: forward, backward data and backward filter of 1-D, 2-D and 3-D problems
in both layouts, with stride, padding, dilation and groups (depthwise included), in f32, TF32,
f16 and bf16, against a direct-sum float64 reference whose gradients are checked by finite
differences; bias and activations; the algorithm cache; bad arguments."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from harness import BadArg, assert_close, check_bad_args, random_array, wide

import gpumsg
from gpumsg.errors import InvalidMessage


# -- the float64 reference: a direct sum over every output position -------------------------------
def ref_conv(x, w, stride, padding, dilation, groups):
    """y[n, k, o] = sum over c in k's group and r of x[n, c, o*s + r*d - p] w[k, c, r]
    (channels first, float64), and the two gradients of <y, dy> as closures."""
    x, w = wide(x), wide(w)
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    kernel = w.shape[2:]
    nd = len(kernel)
    out = tuple((x.shape[2 + i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1)
                // stride[i] + 1 for i in range(nd))
    kg = k // groups

    def taps(o):
        """(kernel offset, input position) pairs of output position o that land inside x."""
        for r in itertools.product(*(range(s) for s in kernel)):
            pos = tuple(o[i] * stride[i] + r[i] * dilation[i] - padding[i] for i in range(nd))
            if all(0 <= pos[i] < x.shape[2 + i] for i in range(nd)):
                yield r, pos

    y = np.zeros((n, k, *out))
    for o in itertools.product(*(range(s) for s in out)):
        for r, pos in taps(o):
            for g in range(groups):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]  # (n, cg)
                ws = w[(slice(g * kg, (g + 1) * kg), slice(None)) + r]  # (kg, cg)
                y[(slice(None), slice(g * kg, (g + 1) * kg)) + o] += xs @ ws.T

    def grads(dy):
        dy = wide(dy)
        dx, dw = np.zeros_like(x), np.zeros_like(w)
        for o in itertools.product(*(range(s) for s in out)):
            for r, pos in taps(o):
                for g in range(groups):
                    gy = dy[(slice(None), slice(g * kg, (g + 1) * kg)) + o]  # (n, kg)
                    ks, cs = slice(g * kg, (g + 1) * kg), slice(g * cg, (g + 1) * cg)
                    dx[(slice(None), cs) + pos] += gy @ w[(ks, slice(None)) + r]
                    dw[(ks, slice(None)) + r] += gy.T @ x[(slice(None), cs) + pos]
        return dx, dw

    return y, grads


def first(a, layout):
    return a if layout == "NCHW" else np.moveaxis(a, -1, 1)


def last(a, layout):
    return a if layout == "NCHW" else np.ascontiguousarray(np.moveaxis(a, 1, -1))


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


# name: (x shape channels first, K, kernel, stride, padding, dilation, groups)
CASES = {
    "plain": ((2, 3, 6, 7), 4, (3, 3), 1, 0, 1, 1),
    "stride_pad_groups": ((2, 4, 7, 6), 6, (3, 3), 2, 1, 1, 2),
    "dilated": ((1, 3, 9, 8), 4, (3, 2), 1, (2, 1), (2, 3), 1),
    "depthwise": ((2, 4, 6, 6), 4, (3, 3), 1, 1, 1, 4),
    "1x1_stride2": ((2, 8, 6, 6), 4, (1, 1), 2, 0, 1, 1),
    "1d": ((2, 4, 11), 6, (3,), 2, 1, 2, 2),
    "3d": ((1, 2, 4, 5, 4), 4, (2, 3, 2), (1, 2, 1), 1, 1, 1),
}
PREC = {"f32": "f32", "f16": "f16", "bf16": "bf16"}


def problem(rng, case, dtype, layout):
    shape, k, kernel, stride, padding, dilation, groups = CASES[case]
    nd = len(kernel)
    tup = lambda v: tuple(v) if isinstance(v, tuple) else (v,) * nd  # noqa: E731
    geo = (tup(stride), tup(padding), tup(dilation), groups)
    x = random_array(rng, shape, dtype)
    w = random_array(rng, (k, shape[1] // groups, *kernel), dtype)
    return x, w, geo


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
    y = dev.dnn.conv(dx_dev, dw_dev, **kw)
    dx = dev.dnn.conv_backward_data(ddy, dw_dev, last(x, layout).shape, **kw)
    dw = dev.dnn.conv_backward_filter(dx_dev, ddy, last(w, layout).shape, **kw)
    # half precisions: a long reduction (backward filter sums over batch and space) rounds more
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, PREC[dtype])
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, PREC[dtype])
    assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, PREC[dtype], 2.0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_tf32(dev, rng, layout: str) -> None:
    x, w, geo = problem(rng, "stride_pad_groups", "f32", layout)
    y_ref, _ = ref_conv(x, w, *geo)
    y = dev.dnn.conv2d(dev.to_device(last(x, layout)), dev.to_device(last(w, layout)),
                       stride=geo[0], padding=geo[1], groups=geo[3], layout=layout, math="tf32")
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, "tf32")


def act_ref(y, name, coef):
    return {"relu": lambda: np.maximum(y, 0), "sigmoid": lambda: 1 / (1 + np.exp(-y)),
            "tanh": lambda: np.tanh(y), "clipped_relu": lambda: np.clip(y, 0, coef),
            "elu": lambda: np.where(y > 0, y, coef * (np.exp(np.minimum(y, 0)) - 1)),
            "swish": lambda: y / (1 + np.exp(-coef * y)), "none": lambda: y}[name]()


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
    y = dev.dnn.conv2d(dev.to_device(last(x, layout)), dev.to_device(last(w, layout)),
                       bias=dev.to_device(b), stride=geo[0], padding=geo[1], groups=geo[3],
                       layout=layout, activation=activation, act_coef=coef)
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, PREC[dtype], 2.0)


def test_algorithm_cache_and_workspace_limit(dev, rng) -> None:
    x, w, geo = problem(rng, "plain", "f32", "NCHW")
    dx, dw = dev.to_device(x), dev.to_device(w)
    before = dev.dnn.cache_info().result()
    y1 = dev.dnn.conv2d(dx, dw, workspace_limit=0)
    y2 = dev.dnn.conv2d(dx, dw, workspace_limit=0)
    y3 = dev.dnn.conv2d(dx, dw)  # another limit: another plan
    after = dev.dnn.cache_info().result()
    assert after["misses"] - before["misses"] == 2
    assert after["hits"] - before["hits"] == 1
    y_ref, _ = ref_conv(x, w, *geo)
    for y in (y1, y2, y3):
        assert_close(dev.copy_to_host(y).result(), y_ref, "f32")


def _x(dev, shape=(2, 4, 6, 6), dtype="f32"):
    return dev.to_device(np.ones(shape, gpumsg.as_dtype(dtype)) + 0.5)


BAD = [
    BadArg("channel mismatch", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 3, 3, 3))), field="w",
           match="channel mismatch"),
    BadArg("groups do not divide channels",
           lambda d: d.dnn.conv2d(_x(d), _x(d, (6, 1, 3, 3)), groups=3), field="groups"),
    BadArg("groups do not divide K",
           lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 2, 3, 3)), groups=2), field="groups"),
    BadArg("output size <= 0", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 7, 7))), field="y",
           match="<= 0"),
    BadArg("dilated kernel too large",
           lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), dilation=3), field="y"),
    BadArg("dtype mix", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3), "f16")), field="w"),
    BadArg("f64 refused", lambda d: d.dnn.conv2d(_x(d, dtype="f64"), _x(d, (3, 4, 3, 3), "f64")),
           field="x"),
    BadArg("rank mismatch", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3))), field="w"),
    BadArg("2-D input", lambda d: d.dnn.conv(_x(d, (4, 6)), _x(d, (3, 4))), field="x"),
    BadArg("stride 0", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), stride=0),
           field="stride"),
    BadArg("negative padding", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), padding=-1),
           field="padding"),
    BadArg("wrong tuple length",
           lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), stride=(1, 1, 1)), field="stride"),
    BadArg("layout", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), layout="CHWN"),
           field="layout"),
    BadArg("tf32 on f16", lambda d: d.dnn.conv2d(_x(d, dtype="f16"),
                                                 _x(d, (3, 4, 3, 3), "f16"), math="tf32"),
           field="math"),
    BadArg("bias length", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)),
                                                 bias=_x(d, (4,))), field="bias"),
    BadArg("activation", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), activation="gelu"),
           field="activation"),
    BadArg("coef on relu", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), activation="relu",
                                                  act_coef=2.0), field="act_coef"),
    BadArg("wrong output shape", lambda d: d.dnn.conv2d(_x(d), _x(d, (3, 4, 3, 3)),
                                                        out=_x(d, (2, 3, 5, 5))), field="y"),
    BadArg("backward data: dy shape",
           lambda d: d.dnn.conv_backward_data(_x(d, (2, 3, 5, 5)), _x(d, (3, 4, 3, 3)),
                                              (2, 4, 6, 6)), field="dy"),
    BadArg("backward filter: dw channels",
           lambda d: d.dnn.conv_backward_filter(_x(d), _x(d, (2, 3, 4, 4)), (3, 2, 3, 3)),
           field="dw"),
    BadArg("column-major buffer", lambda d: d.dnn.conv2d(d.alloc((2, 4, 6, 6), "f32"),
                                                         _x(d, (3, 4, 3, 3))), field="x"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


def test_invalid_message_direct() -> None:
    with pytest.raises(InvalidMessage):
        gpumsg.messages.ConvForward(1, 2, 3)
