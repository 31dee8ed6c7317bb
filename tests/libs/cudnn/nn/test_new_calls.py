"""dev.nn's calls beyond the convolution/normalization core, each against a float64 NumPy
reference of torch's CPU semantics on random inputs: transposed convolutions, 1-D pooling,
adaptive pooling, leaky_relu, embedding, pad, interpolate and the losses."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.libs.cudnn._helpers import ref_conv
from tests.libs.cudnn.nn._reference import (
    ref_adaptive,
    ref_conv_transpose,
    ref_cross_entropy,
    ref_interpolate,
    ref_pad,
    ref_pool,
    ref_pool_torch,
)
from tests.libs.harness import assert_close, random_array, wide

KERNEL_DTYPES = ["f32", "f64", "f16", "bf16"]


def _host(dev, fut):
    value = fut.result(60)
    if isinstance(value, tuple):
        return tuple(dev.copy_to_host(b).result(60) for b in value)
    return dev.copy_to_host(value).result(60)


def _up(dev, a):
    a = np.asarray(a)
    return dev.to_device(a if a.flags.c_contiguous else np.ascontiguousarray(a))


# -- transposed convolutions ----------------------------------------------------------------
@pytest.mark.parametrize("nd, stride, padding, output_padding, groups, dilation", [
    (1, (2,), (1,), (1,), 1, (1,)),
    (1, (1,), (0,), (0,), 2, (2,)),
    (2, (2, 1), (1, 0), (1, 0), 1, (1, 2)),
    (2, (3, 2), (2, 1), (2, 1), 3, (1, 1)),
    (3, (2, 1, 2), (0, 1, 1), (1, 0, 0), 1, (1, 1, 1)),
], ids=["1d-stride", "1d-groups-dilated", "2d", "2d-groups", "3d"])
def test_conv_transpose(dev, rng, nd, stride, padding, output_padding, groups, dilation):
    cin, cog = 3 * groups // groups * groups, 2
    x = random_array(rng, (2, cin, *[5, 4, 3][:nd]), "f32")
    w = random_array(rng, (cin, cog, *[3, 2, 2][:nd]), "f32")
    b = random_array(rng, (cog * groups,), "f32")
    ref = ref_conv_transpose(x, w, stride, padding, output_padding, groups, dilation)
    call = getattr(dev.nn, f"conv_transpose{nd}d")
    y = call(_up(dev, x), _up(dev, w), None, stride, padding, output_padding, groups,
             dilation)
    assert y.shape == ref.shape  # known before it resolves
    assert_close(_host(dev, y), ref, "f32", 20)
    yb = call(_up(dev, x), _up(dev, w), _up(dev, b), stride=stride, padding=padding,
              output_padding=output_padding, groups=groups, dilation=dilation)
    assert_close(_host(dev, yb), ref + wide(b).reshape(1, -1, *[1] * nd), "f32", 20)


def test_conv_transpose_is_the_adjoint_of_conv(dev, rng):
    """<conv(x), y> = <x, conv_transpose(y)> with the same weight, and unbatched input."""
    x = random_array(rng, (3, 9, 7), "f32")
    w = random_array(rng, (4, 3, 3, 2), "f32")
    fwd = ref_conv(x[None], w, (2, 2), (1, 0), (1, 1), 1)[0][0]
    yt = random_array(rng, fwd.shape, "f32")
    back = _host(dev, dev.nn.conv_transpose2d(_up(dev, yt), _up(dev, w), stride=2,
                                              padding=(1, 0), output_padding=(0, 1)))
    assert back.shape == x.shape
    assert abs(np.vdot(fwd, wide(yt)) - np.vdot(wide(x), wide(back))) < 1e-3 * np.abs(
        fwd).sum()


# -- pooling -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["max", "avg", "avg_include_pad"])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_pool1d(dev, rng, mode, batched):
    x = random_array(rng, (2, 3, 11) if batched else (3, 11), "f32")
    k, s, p = 3, 2, 1
    ref = ref_pool(x, (k,), (s,), (p,), "max" if mode == "max" else mode)
    if mode == "max":
        y = dev.nn.max_pool1d(_up(dev, x), k, s, p)
    else:
        y = dev.nn.avg_pool1d(_up(dev, x), k, s, p, count_include_pad=mode != "avg")
    assert_close(_host(dev, y), ref, "f32", 4)


@pytest.mark.parametrize("nd", [2, 3])
def test_pool2d_3d_default_stride(dev, rng, nd):
    x = random_array(rng, (2, 2, *[6, 7, 5][:nd]), "f32")
    ref = ref_pool(x, (2,) * nd, (2,) * nd, (0,) * nd, "max")
    assert_close(_host(dev, getattr(dev.nn, f"max_pool{nd}d")(_up(dev, x), 2)), ref, "f32")
    ref = ref_pool(x, (3,) * nd, (1,) * nd, (1,) * nd, "avg_include_pad")
    got = getattr(dev.nn, f"avg_pool{nd}d")(_up(dev, x), 3, 1, 1)
    assert_close(_host(dev, got), ref, "f32", 4)


@pytest.mark.parametrize("nd, kernel, stride, padding, dilation, ceil", [
    (1, (3,), (2,), (1,), (2,), True),
    (1, (4,), (3,), (2,), (1,), True),
    (2, (3, 2), (2, 2), (1, 1), (1, 2), False),
    (2, (3, 3), (2, 3), (1, 0), (2, 1), True),
    (3, (2, 3, 2), (2, 1, 2), (1, 1, 0), (1, 1, 2), True),
])
@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
def test_max_pool_every_option(dev, rng, nd, kernel, stride, padding, dilation, ceil, dtype):
    """Dilation, ceil mode and indices (the generated kernel) as torch's."""
    x = random_array(rng, (2, 3, *[9, 8, 7][:nd]), dtype)
    ref, idx = ref_pool_torch(x, kernel, stride, padding, dilation, ceil, "max")
    call = getattr(dev.nn, f"max_pool{nd}d")
    y, got = _host(dev, call(_up(dev, x), kernel, stride, padding, dilation, ceil,
                             return_indices=True))
    assert_close(y, ref, dtype)
    np.testing.assert_array_equal(got, idx)
    y = call(_up(dev, x[0]), kernel, stride, padding, dilation, ceil)  # unbatched
    assert_close(_host(dev, y), ref[0], dtype)


@pytest.mark.parametrize("nd, kernel, stride, padding, ceil, include, divisor", [
    (1, (3,), (2,), (1,), True, True, None),
    (1, (4,), (3,), (2,), True, False, None),
    (2, (3, 2), (2, 2), (1, 1), True, True, None),
    (2, (3, 3), (2, 3), (1, 0), False, False, 5),
    (3, (2, 3, 2), (2, 1, 2), (1, 1, 0), True, False, None),
])
def test_avg_pool_every_option(dev, rng, nd, kernel, stride, padding, ceil, include, divisor):
    x = random_array(rng, (2, 3, *[9, 8, 7][:nd]), "f32")
    mode = "avg_include_pad" if include else "avg"
    ref, _ = ref_pool_torch(x, kernel, stride, padding, (1,) * nd, ceil, mode, divisor)
    kw = {} if nd == 1 else {"divisor_override": divisor}
    got = getattr(dev.nn, f"avg_pool{nd}d")(_up(dev, x), kernel, stride, padding, ceil,
                                            include, **kw)
    assert_close(_host(dev, got), ref, "f32", 4)


@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
@pytest.mark.parametrize("nd, outs", [(1, (4,)), (1, (7,)), (2, (3, 2)), (2, (5, 4))])
def test_adaptive_pooling(dev, rng, dtype, nd, outs):
    x = random_array(rng, (2, 3, *[7, 5][:nd]), dtype)
    xd = _up(dev, x)
    for is_max in (False, True):
        ref, idx = ref_adaptive(x, outs, is_max)
        name = f"adaptive_{'max' if is_max else 'avg'}_pool{nd}d"
        size = outs[0] if nd == 1 else outs
        assert_close(_host(dev, getattr(dev.nn, name)(xd, size)), ref, dtype, 4)
        if is_max:
            y, got = _host(dev, getattr(dev.nn, name)(xd, size, return_indices=True))
            assert_close(y, ref, dtype)
            np.testing.assert_array_equal(got, idx)


# -- element-wise and lookups ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
def test_leaky_relu(dev, rng, dtype):
    x = random_array(rng, (5, 7), dtype)
    slope = float(rng.uniform(0.01, 0.5))
    ref = np.where(wide(x) > 0, wide(x), slope * wide(x))
    assert_close(_host(dev, dev.nn.leaky_relu(_up(dev, x), slope)), ref, dtype)
    xd = _up(dev, x)
    assert dev.nn.leaky_relu(xd, inplace=True).result(60) is xd.result()
    assert_close(_host(dev, xd), np.where(wide(x) > 0, wide(x), 0.01 * wide(x)), dtype)


@pytest.mark.parametrize("index", ["i64", "i32"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_embedding(dev, rng, index, dtype):
    w = random_array(rng, (13, 6), dtype)
    idx = rng.integers(0, 13, (4, 5)).astype(np.dtype({"i64": np.int64, "i32": np.int32}[
        index]))
    y = dev.nn.embedding(_up(dev, idx), _up(dev, w), padding_idx=0)
    assert y.shape == (4, 5, 6)
    np.testing.assert_array_equal(_host(dev, y), w[idx])


def test_embedding_index_out_of_range_fails_the_future(dev, rng):
    w = random_array(rng, (5, 3), "f32")
    y = dev.nn.embedding(_up(dev, np.array([1, 5, 2])), _up(dev, w))
    with pytest.raises(gpumsg.InvalidMessage) as info:
        y.result(60)
    assert info.value.field == "input"
    y = dev.nn.embedding(_up(dev, np.array([4, 0])), _up(dev, w))
    np.testing.assert_array_equal(_host(dev, y), w[[4, 0]])  # the device still serves


@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
@pytest.mark.parametrize("mode, pad", [
    ("constant", (2, 1)), ("constant", (1, -1, 0, 2)), ("constant", (1, 0, 2, 1, 0, 3)),
    ("reflect", (2, 3)), ("reflect", (1, 2, 3, 0)), ("replicate", (3, 1, 0, 2)),
    ("circular", (2, 4)), ("circular", (1, 1, 2, 3, 1, 0)),
])
def test_pad(dev, rng, dtype, mode, pad):
    x = random_array(rng, (2, 4, 5, 6), dtype)
    value = float(rng.standard_normal()) if mode == "constant" else None
    ref = ref_pad(x, pad, mode, 0.0 if value is None else float(np.asarray(
        value, gpumsg.as_dtype(dtype))))
    y = dev.nn.pad(_up(dev, x), pad, mode, value)
    assert y.shape == ref.shape
    assert_close(_host(dev, y), ref, dtype)


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
@pytest.mark.parametrize("mode, shape, size, factor, align", [
    ("nearest", (2, 3, 5), (9,), None, None),
    ("nearest", (1, 2, 4, 6), None, (2.0, 0.5), None),
    ("nearest", (1, 2, 3, 4, 5), (4, 7, 3), None, None),
    ("nearest-exact", (2, 2, 7, 3), (3, 8), None, None),
    ("linear", (2, 3, 6), (11,), None, False),
    ("linear", (2, 3, 6), None, (1.7,), True),
    ("bilinear", (2, 2, 5, 4), (8, 3), None, False),
    ("bilinear", (1, 3, 4, 6), (7, 9), None, True),
    ("bilinear", (1, 1, 6, 5), None, (1.5, 2.5), False),
    ("trilinear", (1, 2, 3, 4, 5), (5, 3, 6), None, False),
])
def test_interpolate(dev, rng, dtype, mode, shape, size, factor, align):
    x = random_array(rng, shape, dtype)
    outs = size if size is not None else tuple(int(np.floor(n * f))
                                               for n, f in zip(shape[2:], factor))
    ref = ref_interpolate(x, outs, mode, bool(align), factor)
    y = dev.nn.interpolate(_up(dev, x), size=size, scale_factor=factor, mode=mode,
                           align_corners=align)
    assert y.shape == ref.shape
    assert_close(_host(dev, y), ref, dtype, 4)


def test_interpolate_area_is_adaptive_average(dev, rng):
    x = random_array(rng, (2, 3, 9, 7), "f32")
    got = _host(dev, dev.nn.interpolate(_up(dev, x), size=(4, 3), mode="area"))
    assert_close(got, ref_adaptive(x, (4, 3), False)[0], "f32", 4)


# -- losses --------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", ["2d", "weighted", "spatial", "unbatched", "smooth",
                                  "smooth-weighted", "i32"])
def test_cross_entropy_class_targets(dev, rng, reduction, case):
    c = 5
    shape = {"spatial": (3, c, 4, 2), "unbatched": (c,)}.get(case, (7, c))
    logits = random_array(rng, shape, "f32") * 2
    tshape = (shape[0], *shape[2:]) if len(shape) > 1 else ()
    target = rng.integers(0, c, tshape)
    if target.ndim:
        target.reshape(-1)[0] = -100  # an ignored position
        target.reshape(-1)[-1] = 3
    weight = random_array(rng, (c,), "f32") ** 2 + 0.5 if "weighted" in case else None
    ls = 0.2 if "smooth" in case else 0.0
    ref = ref_cross_entropy(logits, target, weight, -100, reduction, ls)
    t = target.astype(np.int32 if case == "i32" else np.int64)
    got = dev.nn.cross_entropy(_up(dev, logits), _up(dev, t),
                               None if weight is None else _up(dev, weight),
                               reduction=reduction, label_smoothing=ls)
    assert got.shape == np.shape(ref)
    assert_close(_host(dev, got), ref, "f32", 20)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_probability_targets(dev, rng, reduction):
    logits = random_array(rng, (4, 6, 3), "f32")
    p = rng.random((4, 6, 3)).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    weight = (rng.random(6) + 0.5).astype(np.float32)
    ref = ref_cross_entropy(logits, p, weight, reduction=reduction, label_smoothing=0.1,
                            soft=True)
    got = dev.nn.cross_entropy(_up(dev, logits), _up(dev, p), _up(dev, weight),
                               reduction=reduction, label_smoothing=0.1)
    assert_close(_host(dev, got), ref, "f32", 20)


def test_cross_entropy_bad_class_fails_the_future(dev, rng):
    logits = _up(dev, random_array(rng, (3, 4), "f32"))
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.nn.cross_entropy(logits, _up(dev, np.array([0, 4, 1]))).result(60)
    assert info.value.field == "target"


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(dev, rng, reduction):
    lp = random_array(rng, (6, 4), "f64")
    t = rng.integers(0, 4, 6)
    t[2] = 1
    w = rng.random(4) + 0.5
    ref = ref_cross_entropy(lp, t, w, reduction=reduction)  # log_softmax of ... see below
    # nll_loss takes log-probabilities as they are: the reference of cross_entropy applied
    # to log_softmax(lp) equals nll_loss of log_softmax(lp)
    from tests.libs.cudnn.nn._reference import log_softmax
    lsm = log_softmax(lp, 1)
    got = dev.nn.nll_loss(_up(dev, lsm), _up(dev, t), _up(dev, w), reduction=reduction)
    assert_close(_host(dev, got), ref, "f64", 20)


@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(dev, rng, dtype, reduction):
    x, t = random_array(rng, (4, 3, 5), dtype), random_array(rng, (4, 3, 5), dtype)
    e = (wide(x) - wide(t)) ** 2
    ref = {"mean": e.mean(), "sum": e.sum(), "none": e}[reduction]
    got = dev.nn.mse_loss(_up(dev, x), _up(dev, t), reduction=reduction)
    assert got.shape == np.shape(ref)
    assert_close(_host(dev, got), ref, dtype, 4)


@pytest.mark.parametrize("when", ["pipelined", "after"])
def test_an_index_out_of_range_fails_every_reader(dev, rng, when):
    """The output of an embedding with an index out of range never reaches the host, nor any
    reader, whether queued before the failure was seen or sent after."""
    w = _up(dev, random_array(rng, (5, 3), "f32"))
    y = dev.nn.embedding(_up(dev, np.array([[1, 7]])), w)
    if when == "after":
        with pytest.raises(gpumsg.IndexOutOfRange):  # an InvalidMessage and an IndexError
            y.result(60)
    readers = [dev.copy_to_host(y), dev.nn.relu(y), dev.nn.leaky_relu(y)]
    for fut in readers:
        with pytest.raises(gpumsg.DependencyFailed, match="IndexOutOfRange"):
            fut.result(60)
    loss = dev.nn.cross_entropy(_up(dev, random_array(rng, (2, 3), "f32")),
                                _up(dev, np.array([0, 3])))
    host = dev.copy_to_host(loss)
    with pytest.raises(gpumsg.DependencyFailed, match="class index"):
        host.result(60)
