"""cuDNN activations, softmax, pooling and dropout, forward and backward, against float64
NumPy references on random data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpumsg
from tests.libs.cudnn._helpers import _x, act_ref, first, last, pool_ref, softmax_ref
from tests.libs.harness import BadArg, assert_close, check_bad_args, random_array, wide

# -- activations, softmax, pooling ----------------------------------------------------------------
ACTS = [("relu", None), ("sigmoid", None), ("tanh", None), ("elu", 0.8), ("clipped_relu", 1.2),
        ("swish", 1.5)]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("activation,coef", ACTS)
def test_activation_forward_backward(dev, rng, dtype: str, activation: str, coef) -> None:
    x = random_array(rng, (3, 5, 7), dtype)
    dy = random_array(rng, (3, 5, 7), dtype)
    c = coef if coef is not None else 0.0
    y_ref = act_ref(wide(x), activation, c)
    h = 1e-6  # the derivative by central differences of the float64 reference
    grad = (act_ref(wide(x) + h, activation, c) - act_ref(wide(x) - h, activation, c)) / (2 * h)
    dx_dev = dev.to_device(x)
    y = dev.cudnn.activation(dx_dev, activation, act_coef=coef)
    y_h = dev.copy_to_host(y).result()
    assert_close(y_h, y_ref, dtype)
    # the backward takes the forward's own output y
    dx = dev.cudnn.activation_backward(dx_dev, y, dev.to_device(dy), activation, act_coef=coef)
    assert_close(dev.copy_to_host(dx).result(), wide(dy) * grad, dtype, 2.0)


def test_activation_in_place(dev, rng) -> None:
    x = random_array(rng, (4, 9), "f32")
    d = dev.to_device(x)
    dev.cudnn.activation(d, "tanh", out=d).result()
    assert_close(dev.copy_to_host(d).result(), np.tanh(wide(x)), "f32")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mode", ["channel", "instance"])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_forward_backward(dev, rng, dtype: str, layout: str, mode: str,
                                  log: bool) -> None:
    x = random_array(rng, (2, 5, 3, 4), dtype)  # channels first
    dy = random_array(rng, x.shape, dtype)
    axes = (1,) if mode == "channel" else (1, 2, 3)
    xw = wide(x)
    y_ref = softmax_ref(xw, axes, log)
    # gradient of <softmax(x), dy> by central differences, one element at a time
    h = 1e-6
    dx_ref = np.zeros_like(xw)
    for idx in np.ndindex(*x.shape):
        plus, minus = xw.copy(), xw.copy()
        plus[idx] += h
        minus[idx] -= h
        dx_ref[idx] = np.sum((softmax_ref(plus, axes, log) - softmax_ref(minus, axes, log))
                             * wide(dy)) / (2 * h)
    dxd = dev.to_device(last(x, layout))
    y = dev.cudnn.softmax(dxd, mode, log, layout)
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, dtype)
    dx = dev.cudnn.softmax_backward(y, dev.to_device(last(dy, layout)), mode, log, layout)
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, dtype, 4.0)


POOLS = {  # x shape (channels first), window, stride, padding
    "2x2": ((2, 3, 6, 8), (2, 2), (2, 2), (0, 0)),
    "3x3_s2_p1": ((2, 3, 7, 6), (3, 3), (2, 2), (1, 1)),
    "3x2_s1_p1": ((1, 2, 5, 5), (3, 2), (1, 2), (1, 1)),
    "3d": ((1, 2, 4, 5, 4), (2, 3, 2), (2, 1, 2), (0, 1, 0)),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mode", ["max", "avg", "avg_include_pad"])
@pytest.mark.parametrize("case", list(POOLS))
def test_pool_forward_backward(dev, rng, case: str, mode: str, layout: str) -> None:
    shape, window, stride, padding = POOLS[case]
    x = random_array(rng, shape, "f32")
    xw = wide(x)
    y_ref = pool_ref(xw, mode, window, stride, padding)
    dy = random_array(rng, y_ref.shape, "f32")
    # gradient of <pool(x), dy>: max pooling routes each dy to its window's maximum (random f32
    # data has no ties); the averages by central differences
    h = 1e-4
    dx_ref = np.zeros_like(xw)
    for idx in np.ndindex(*shape) if mode != "max" else ():
        plus, minus = xw.copy(), xw.copy()
        plus[idx] += h
        minus[idx] -= h
        diff = (pool_ref(plus, mode, window, stride, padding)
                - pool_ref(minus, mode, window, stride, padding))
        dx_ref[idx] = np.sum(diff * wide(dy)) / (2 * h)
    if mode == "max":
        out = y_ref.shape[2:]
        for o in itertools.product(*(range(m) for m in out)):
            lo = [oi * s - p for oi, s, p in zip(o, stride, padding)]
            sl = tuple(slice(max(a, 0), min(a + r, i))
                       for a, r, i in zip(lo, window, shape[2:]))
            for b, ch in np.ndindex(*shape[:2]):
                patch = xw[(b, ch) + sl]
                at = np.unravel_index(np.argmax(patch), patch.shape)
                pos = tuple(sl[i].start + at[i] for i in range(len(sl)))
                dx_ref[(b, ch) + pos] += dy[(b, ch) + o]
    kw = dict(window=window, stride=stride, padding=padding, mode=mode, layout=layout)
    xd = dev.to_device(last(x, layout))
    y = dev.cudnn.pool(xd, **kw)
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, "f32")
    dx = dev.cudnn.pool_backward(xd, y, dev.to_device(last(dy, layout)), **kw)
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, "f32", 10.0)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_pool_half(dev, rng, dtype: str) -> None:
    x = random_array(rng, (2, 4, 6, 6), dtype)
    y = dev.cudnn.pool(dev.to_device(last(x, "NHWC")), 3, 2, 1, "avg", "NHWC")
    assert_close(first(dev.copy_to_host(y).result(), "NHWC"),
                 pool_ref(wide(x), "avg", (3, 3), (2, 2), (1, 1)), dtype)


# -- dropout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_forward_backward(dev, rng, dtype: str, p: float) -> None:
    n = 20000
    x = random_array(rng, (40, n // 40), dtype)
    dy = random_array(rng, x.shape, dtype)
    seed = int(rng.integers(0, 2**63))
    xd = dev.to_device(x)
    y, reserve = dev.cudnn.dropout(xd, p, seed).result(60)
    y_h = wide(dev.copy_to_host(y).result())
    kept = y_h != 0  # x is never zero
    # the fraction dropped is p within 5 standard deviations of a binomial count
    frac = 1 - kept.mean()
    assert abs(frac - p) < 5 * np.sqrt(p * (1 - p) / n), frac
    # kept elements are scaled by 1 / (1 - p), dropped ones are zero
    assert_close(y_h, np.where(kept, wide(x) / (1 - p), 0.0), dtype)
    # backward applies the same mask and scale
    dx = dev.cudnn.dropout_backward(dev.to_device(dy), reserve, p, seed)
    assert_close(wide(dev.copy_to_host(dx).result()), np.where(kept, wide(dy) / (1 - p), 0.0),
                 dtype)
    # reproducible: the same seed gives the same mask, another seed another one
    y2, _ = dev.cudnn.dropout(xd, p, seed).result(60)
    assert np.array_equal(wide(dev.copy_to_host(y2).result()) != 0, kept)
    y3, _ = dev.cudnn.dropout(xd, p, seed + 1).result(60)
    assert not np.array_equal(wide(dev.copy_to_host(y3).result()) != 0, kept)


def test_dropout_in_place_and_p_zero(dev, rng) -> None:
    x = random_array(rng, (1000,), "f32")
    xd = dev.to_device(x)
    y, _ = dev.cudnn.dropout(xd, 0.0, 7, out=xd).result(60)
    assert_close(dev.copy_to_host(xd).result(), wide(x), "f32")
    y, r = dev.cudnn.dropout(xd, 0.3, 7, out=xd).result(60)
    got = wide(dev.copy_to_host(xd).result())
    kept = got != 0
    assert_close(got, np.where(kept, wide(x) / 0.7, 0.0), "f32")
    assert 0.2 < 1 - kept.mean() < 0.4


DROPOUT_BAD = [
    BadArg("dropout p = 1", lambda d: d.cudnn.dropout(_x(d), 1.0), field="p"),
    BadArg("dropout p < 0", lambda d: d.cudnn.dropout(_x(d), -0.1), field="p"),
    BadArg("dropout seed", lambda d: d.cudnn.dropout(_x(d), 0.5, -3), field="seed"),
    BadArg("dropout f64", lambda d: d.cudnn.dropout(_x(d, dtype="f64"), 0.5), field="x"),
    BadArg("dropout bf16 (cuDNN refuses it)", lambda d: d.cudnn.dropout(
        d.to_device(np.ones((4, 5), gpumsg.as_dtype("bf16"))), 0.5),
           field="x", match="f32 or f16"),
    BadArg("dropout reserve dtype", lambda d: d.cudnn.dropout_backward(_x(d), _x(d), 0.5),
           field="reserve"),
    BadArg("dropout reserve too small",
           lambda d: d.cudnn.dropout_backward(_x(d), d.to_device(np.ones(1, np.uint8)), 0.5),
           field="reserve", match="needs"),
    BadArg("dropout dx shape",
           lambda d: d.cudnn.dropout_backward(_x(d), d.to_device(np.ones(300, np.uint8)), 0.5,
                                            out=_x(d, (2, 4, 6, 5))), field="dx"),
]


@pytest.mark.parametrize("case", DROPOUT_BAD, ids=str)
def test_dropout_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)
