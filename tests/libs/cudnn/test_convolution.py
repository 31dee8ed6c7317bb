"""cuDNN convolutions: forward, backward data and backward filter of 1-D, 2-D and 3-D problems
in both layouts, with stride, padding, dilation and groups (depthwise included), in f32, TF32,
f16 and bf16, against a direct-sum float64 reference whose gradients are checked by finite
differences; bias and activations; the algorithm cache; bad arguments."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import InvalidMessage
from tests.libs.harness import (
    BadArg,
    FakeGraphDriver,
    assert_close,
    check_bad_args,
    random_array,
    wide,
)


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
    y = dev.cudnn.conv(dx_dev, dw_dev, **kw)
    dx = dev.cudnn.conv_backward_data(ddy, dw_dev, last(x, layout).shape, **kw)
    dw = dev.cudnn.conv_backward_filter(dx_dev, ddy, last(w, layout).shape, **kw)
    # half precisions: a long reduction (backward filter sums over batch and space) rounds more
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, PREC[dtype])
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, PREC[dtype])
    assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, PREC[dtype], 2.0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_convolutions_recorded_in_a_graph(dev, rng, layout: str) -> None:
    """The three directions (the forward with bias and ReLU) recorded in a ``dev.graph`` after
    one eager run each, then replayed: every replay computes from the buffers' current contents
    (fresh inputs between replays, outputs poisoned with NaN first) and matches the float64
    reference; a convolution that never ran is refused as a capture error, and the device
    keeps serving."""
    shape, wshape, geo = (2, 8, 9, 9), (16, 8, 3, 3), ((2, 2), (1, 1), (1, 1), 1)
    kw = dict(stride=2, padding=1, layout=layout)
    w = random_array(rng, wshape, "f32")
    b = random_array(rng, (16,), "f32")
    y_shape = ref_conv(random_array(rng, shape, "f32"), w, *geo)[0].shape
    xd = dev.alloc(last(np.empty(shape), layout).shape, "f32", order="C").result()
    dyd = dev.alloc(last(np.empty(y_shape), layout).shape, "f32", order="C").result()
    wd, bd = dev.to_device(last(w, layout)).result(), dev.to_device(b).result()
    y, dx, dw = (dev.alloc(last(np.empty(s), layout).shape, "f32", order="C").result()
                 for s in (y_shape, shape, wshape))

    def record() -> None:
        dev.nn.conv2d(xd, wd, bias=bd, activation="relu", out=y, **kw)
        dev.cudnn.conv_backward_data(dyd, wd, dx.shape, out=dx, **kw)
        dev.cudnn.conv_backward_filter(xd, dyd, dw.shape, out=dw, **kw)

    def check(x, dy) -> None:
        y_ref, grads = ref_conv(x, w, *geo)
        dx_ref, dw_ref = grads(dy)
        assert_close(first(dev.copy_to_host(y).result(), layout),
                     np.maximum(y_ref + wide(b)[None, :, None, None], 0), "f32")
        assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, "f32")
        assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, "f32", 2.0)

    x, dy = random_array(rng, shape, "f32"), random_array(rng, y_shape, "f32")
    dev.copy_from_host(xd, last(x, layout))
    dev.copy_from_host(dyd, last(dy, layout))
    record()  # eager: plans the three problems
    check(x, dy)
    with dev.graph() as g:
        record()
    assert g.ready.result(timeout=120) >= 3
    for _ in range(3):
        x, dy = random_array(rng, shape, "f32"), random_array(rng, y_shape, "f32")
        dev.copy_from_host(xd, last(x, layout))
        dev.copy_from_host(dyd, last(dy, layout))
        for out in (y, dx, dw):
            dev.memset(out, 0xFF)  # NaN: a replay that does nothing cannot pass
        g.launch().result(timeout=60)
        check(x, dy)
    # a problem that never ran (another stride) cannot be planned under capture
    y1 = dev.alloc((2, 9, 9, 16) if layout == "NHWC" else (2, 16, 9, 9), "f32",
                   order="C").result()
    with dev.graph() as g2:
        dev.nn.conv2d(xd, wd, stride=1, padding=1, layout=layout, out=y1)
    with pytest.raises(gpumsg.GraphCaptureError, match="run once"):
        g2.ready.result(timeout=60)
    g.launch().result(timeout=60)  # the first graph still replays
    check(x, dy)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pooling_activations_and_softmax_recorded_in_a_graph(dev, rng, layout: str) -> None:
    """Max pooling (forward and backward), ReLU and GELU (forward and backward) and a channel
    softmax (forward and backward), recorded after one eager run and replayed on fresh inputs,
    give what the eager calls give on the same inputs (outputs poisoned with NaN before each
    replay)."""
    n, c, hw = 2, 8, 10
    shape = (n, hw, hw, c) if layout == "NHWC" else (n, c, hw, hw)
    pooled = (n, 5, 5, c) if layout == "NHWC" else (n, c, 5, 5)
    xd, dyd, pd = (dev.alloc(s, "f32", order="C").result() for s in (shape, shape, pooled))
    outs = {name: dev.alloc(s, "f32", order="C").result() for name, s in (
        ("pool", pooled), ("dpool", shape), ("relu", shape), ("drelu", shape), ("gelu", shape),
        ("dgelu", shape), ("soft", shape), ("dsoft", shape))}
    o = outs

    def sequence() -> None:
        dev.cudnn.pool(xd, window=2, stride=2, layout=layout, out=o["pool"])
        dev.cudnn.pool_backward(xd, o["pool"], pd, window=2, stride=2, layout=layout,
                                out=o["dpool"])
        dev.cudnn.activation(xd, "relu", out=o["relu"])
        dev.cudnn.activation_backward(xd, o["relu"], dyd, "relu", out=o["drelu"])
        dev.cudnn.activation(xd, "gelu", out=o["gelu"])
        dev.cudnn.activation_backward(xd, o["gelu"], dyd, "gelu", out=o["dgelu"])
        dev.nn.softmax(xd, layout=layout, out=o["soft"])
        dev.cudnn.softmax_backward(o["soft"], dyd, layout=layout, out=o["dsoft"])

    def inputs() -> None:
        dev.copy_from_host(xd, random_array(rng, shape, "f32"))
        dev.copy_from_host(dyd, random_array(rng, shape, "f32"))
        dev.copy_from_host(pd, random_array(rng, pooled, "f32"))

    inputs()
    sequence()  # eager: builds whatever the calls need
    with dev.graph() as g:
        sequence()
    assert g.ready.result(timeout=120) >= 8
    for _ in range(2):
        inputs()
        sequence()
        eager = {k: dev.copy_to_host(v).result() for k, v in outs.items()}
        for v in outs.values():
            dev.memset(v, 0xFF)  # NaN: a replay that does nothing cannot pass
        g.launch().result(timeout=60)
        for k, v in outs.items():
            assert_close(dev.copy_to_host(v).result(), wide(eager[k]), "f32")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_graph_records_batch_norm_inference_and_layer_norm(dev, rng, dtype: str) -> None:
    """Batch-norm inference (NHWC) and a layer-norm forward, recorded after one eager run,
    replay on whatever the buffers hold: each replay checked against float64 references of
    fresh inputs. Norms that take pool memory per call (training batch norm) stay refused."""
    n, h, w, c = 2, 3, 4, 16
    rows, d = 6, 64
    bn = {k: dev.alloc((c,), "f32").result() for k in ("gamma", "beta", "mean", "var")}
    ln_g, ln_b = dev.alloc((d,), "f32").result(), dev.alloc((d,), "f32").result()
    xb, yb = (dev.alloc((n, h, w, c), dtype, order="C").result() for _ in range(2))
    xl, yl = (dev.alloc((rows, d), dtype, order="C").result() for _ in range(2))
    mean, inv = dev.alloc((rows,), "f32").result(), dev.alloc((rows,), "f32").result()

    def sequence() -> None:
        dev.cudnn.batch_norm_inference(xb, bn["gamma"], bn["beta"], bn["mean"], bn["var"],
                                       eps=1e-3, layout="NHWC", out=yb)
        dev.nn.layer_norm(xl, ln_g, ln_b, eps=1e-5, out=yl, mean_out=mean, invstd_out=inv)

    def inputs() -> dict:
        host = {"xb": random_array(rng, (n, h, w, c), dtype),
                "xl": random_array(rng, (rows, d), dtype),
                "lg": random_array(rng, (d,), "f32"), "lb": random_array(rng, (d,), "f32")}
        host.update({k: random_array(rng, (c,), "f32") for k in ("gamma", "beta", "mean")})
        host["var"] = random_array(rng, (c,), "f32", low=0.5)
        for k in ("gamma", "beta", "mean", "var"):
            dev.copy_from_host(bn[k], host[k])
        for buf, k in ((xb, "xb"), (xl, "xl"), (ln_g, "lg"), (ln_b, "lb")):
            dev.copy_from_host(buf, host[k])
        return host

    inputs()
    sequence()  # eager: builds the kernels
    with dev.graph() as g:
        sequence()
    assert g.ready.result(timeout=120) >= 2
    for _ in range(3):
        host = inputs()
        for buf in (yb, yl, mean, inv):
            dev.memset(buf, 0xFF)  # NaN: a replay that does nothing cannot pass
        g.launch().result(timeout=60)
        xw = wide(host["xb"])
        y_ref = ((xw - wide(host["mean"])) / np.sqrt(wide(host["var"]) + 1e-3)
                 * wide(host["gamma"]) + wide(host["beta"]))
        assert_close(dev.copy_to_host(yb).result(), y_ref, dtype)
        xl_w = wide(host["xl"])
        mu = xl_w.mean(axis=1)
        invstd = 1 / np.sqrt(xl_w.var(axis=1) + 1e-5)
        ln_ref = (xl_w - mu[:, None]) * invstd[:, None] * wide(host["lg"]) + wide(host["lb"])
        assert_close(dev.copy_to_host(yl).result(), ln_ref, dtype)
        tol = ("f32", 10.0) if dtype == "f32" else ("f32", 50.0)
        assert_close(dev.copy_to_host(mean).result(), mu, *tol)
        assert_close(dev.copy_to_host(inv).result(), invstd, *tol)
    from gpumsg.messages.cudnn import BatchNormTrain

    train = BatchNormTrain(xb, bn["gamma"], bn["beta"], yb, bn["mean"], bn["var"],
                           layout="NHWC")
    with pytest.raises(gpumsg.GraphCaptureError, match="BatchNormTrain"):
        with dev.graph():
            dev.send(train)
    dev.send(train).result(timeout=60)  # eagerly it runs, and the device serves on
    assert np.isfinite(dev.copy_to_host(yb).result().astype(np.float32)).all()


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
    y = dev.nn.conv2d(dev.to_device(last(x, layout)), dev.to_device(last(w, layout)),
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
    y = dev.nn.conv2d(dev.to_device(last(x, layout)), dev.to_device(last(w, layout)),
                      bias=dev.to_device(b), stride=geo[0], padding=geo[1], groups=geo[3],
                      layout=layout, activation=activation, act_coef=coef)
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, PREC[dtype], 2.0)


def test_algorithm_cache_and_workspace_limit(dev, rng) -> None:
    x, w, geo = problem(rng, "plain", "f32", "NCHW")
    dx, dw = dev.to_device(x), dev.to_device(w)
    before = dev.cudnn.cache_info().result()
    y1 = dev.nn.conv2d(dx, dw, workspace_limit=0)
    y2 = dev.nn.conv2d(dx, dw, workspace_limit=0)
    y3 = dev.nn.conv2d(dx, dw)  # another limit: another plan
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


@pytest.fixture
def cuda_dev():
    from gpumsg.backends import cuda_available

    ok, why = cuda_available()
    if not ok:
        pytest.skip(f"no CUDA GPU here ({why})")
    d = gpumsg.open_device(0, backend="cuda")
    yield d
    d.close()


def _frontend_importable() -> bool:
    try:
        import cudnn  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _frontend_importable(), reason="nvidia-cudnn-frontend not installed")
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_graph_path(cuda_dev, rng, layout: str) -> None:
    """With the frontend installed, convolutions (fused bias + relu forward, both backwards)
    take the graph path: cache_info counts graph plans and names the frontend."""
    dev = cuda_dev
    x = random_array(rng, (4, 16, 10, 10), "bf16")
    w = random_array(rng, (32, 16, 3, 3), "bf16")
    b = random_array(rng, (32,), "bf16")
    geo = ((1, 1), (1, 1), (1, 1), 1)
    y_ref, grads = ref_conv(x, w, *geo)
    dy = random_array(rng, y_ref.shape, "bf16")
    dx_ref, dw_ref = grads(dy)
    kw = dict(stride=1, padding=1, layout=layout)
    before = dev.cudnn.cache_info().result()
    dxd, dwd, ddy = dev.to_device(last(x, layout)), dev.to_device(last(w, layout)), \
        dev.to_device(last(dy, layout))
    y = dev.nn.conv2d(dxd, dwd, bias=dev.to_device(b), activation="relu", **kw)
    dx = dev.cudnn.conv_backward_data(ddy, dwd, last(x, layout).shape, **kw)
    dw = dev.cudnn.conv_backward_filter(dxd, ddy, last(w, layout).shape, **kw)
    assert_close(first(dev.copy_to_host(y).result(), layout),
                 np.maximum(y_ref + wide(b)[None, :, None, None], 0), "bf16", 2.0)
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, "bf16")
    assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, "bf16", 2.0)
    after = dev.cudnn.cache_info().result()
    assert after["frontend"].startswith("cudnn-frontend"), after
    assert after["graph_plans"] - before["graph_plans"] == 3, after


@pytest.mark.gpu
@pytest.mark.skipif(not _frontend_importable(), reason="nvidia-cudnn-frontend not installed")
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_graph_replays_follow_the_buffers(cuda_dev, rng, layout: str) -> None:
    """Graph-path convolutions repeated on the same buffers are replayed as CUDA graphs, and the
    replays compute from the buffers' current contents: each round writes fresh inputs into the
    same buffers and checks all three directions against the reference; a new output buffer
    (a new pointer set) is right too."""
    dev = cuda_dev
    shape, wshape, geo = (4, 16, 10, 10), (32, 16, 3, 3), ((2, 2), (1, 1), (1, 1), 1)
    kw = dict(stride=2, padding=1, layout=layout)
    b = random_array(rng, (32,), "bf16")
    w = random_array(rng, wshape, "bf16")
    y_shape = ref_conv(random_array(rng, shape, "bf16"), w, *geo)[0].shape
    dxd, dwd = dev.alloc(last(np.empty(shape), layout).shape, "bf16", order="C").result(), \
        dev.to_device(last(w, layout)).result()
    ddy, dbias = dev.alloc(last(np.empty(y_shape), layout).shape, "bf16", order="C").result(), \
        dev.to_device(b).result()
    y, dx, dw = (dev.alloc(last(np.empty(s), layout).shape, "bf16", order="C").result()
                 for s in (y_shape, shape, wshape))
    before = dev.cudnn.cache_info().result()["replay"]
    for _ in range(4):
        x, dy = random_array(rng, shape, "bf16"), random_array(rng, y_shape, "bf16")
        dev.copy_from_host(dxd, last(x, layout))
        dev.copy_from_host(ddy, last(dy, layout))
        y_ref, grads = ref_conv(x, w, *geo)
        dx_ref, dw_ref = grads(dy)
        dev.nn.conv2d(dxd, dwd, bias=dbias, activation="relu", out=y, **kw)
        dev.cudnn.conv_backward_data(ddy, dwd, dx.shape, out=dx, **kw)
        dev.cudnn.conv_backward_filter(dxd, ddy, dw.shape, out=dw, **kw)
        assert_close(first(dev.copy_to_host(y).result(), layout),
                     np.maximum(y_ref + wide(b)[None, :, None, None], 0), "bf16", 2.0)
        assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, "bf16")
        assert_close(first(dev.copy_to_host(dw).result(), layout), dw_ref, "bf16", 2.0)
    after = dev.cudnn.cache_info().result()["replay"]
    assert after["enabled"] and after["refused"] == [], after
    assert after["with_memory_nodes"] == 0, after  # workspaces are ours, not allocated per launch
    # rounds 2-4 of three directions are replays (round 2 captures, then launches)
    assert after["launches"] - before["launches"] >= 9, (before, after)
    y2 = dev.nn.conv2d(dxd, dwd, bias=dbias, activation="relu", **kw)
    assert_close(first(dev.copy_to_host(y2).result(), layout),
                 np.maximum(y_ref + wide(b)[None, :, None, None], 0), "bf16", 2.0)


@pytest.mark.gpu
def test_kernels_not_built_yet_are_refused_in_a_graph(cuda_dev, rng) -> None:
    """GELU runs as gpumsg's own kernel, compiled on first use: recorded on a fresh device
    before any eager GELU, it is refused as a capture error (a module cannot be compiled and
    loaded under capture); after one eager call the same recording replays."""
    dev = cuda_dev
    x_h = random_array(rng, (4, 64), "f32")
    x = dev.to_device(x_h).result()
    y = dev.alloc((4, 64), "f32", order="C").result()
    with dev.graph() as g:
        dev.cudnn.activation(x, "gelu", out=y)
    with pytest.raises(gpumsg.GraphCaptureError, match="kernels are built"):
        g.ready.result(timeout=60)
    dev.cudnn.activation(x, "gelu", out=y).result(timeout=60)
    eager = dev.copy_to_host(y).result()
    dev.memset(y, 0xFF)
    with dev.graph() as g:
        dev.cudnn.activation(x, "gelu", out=y)
    g.launch().result(timeout=60)
    assert_close(dev.copy_to_host(y).result(), wide(eager), "f32")


@pytest.mark.gpu
def test_norm_kernels_not_built_yet_are_refused_in_a_graph(cuda_dev, rng) -> None:
    """Batch-norm inference and layer norm recorded on a fresh device before any eager call:
    their kernels cannot be compiled and loaded under capture, so the recording is refused;
    after one eager call each the same recording replays."""
    dev = cuda_dev
    x = dev.to_device(random_array(rng, (2, 4, 4, 8), "f32")).result()
    y = dev.alloc((2, 4, 4, 8), "f32", order="C").result()
    vec = [dev.to_device(random_array(rng, (8,), "f32", low=0.5)).result() for _ in range(4)]
    mean, inv = dev.alloc((32,), "f32").result(), dev.alloc((32,), "f32").result()
    calls = (lambda: dev.cudnn.batch_norm_inference(x, *vec, layout="NHWC", out=y),
             lambda: dev.nn.layer_norm(x, normalized_ndim=1, out=y, mean_out=mean,
                                        invstd_out=inv))
    for call in calls:
        with dev.graph() as g:
            call()
        with pytest.raises(gpumsg.GraphCaptureError, match="kernels are built"):
            g.ready.result(timeout=60)
        done = call()  # eager: builds the kernels
        (done[0] if isinstance(done, tuple) else done).result(timeout=60)
        eager = dev.copy_to_host(y).result()
        dev.memset(y, 0xFF)
        with dev.graph() as g:
            call()
        g.launch().result(timeout=60)
        assert_close(dev.copy_to_host(y).result(), wide(eager), "f32")


@pytest.mark.gpu
def test_conv_legacy_fallback(cuda_dev, rng, monkeypatch) -> None:
    """Without the frontend the legacy descriptor path serves the same problems and
    cache_info says why."""
    from gpumsg.libs.cudnn import graph

    monkeypatch.setattr(graph, "_STATE", {"module": None, "reason": "test: no frontend"})
    dev = cuda_dev
    x, w, geo = problem(rng, "dilated", "f16", "NHWC")
    before = dev.cudnn.cache_info().result()
    y = dev.nn.conv2d(dev.to_device(last(x, "NHWC")), dev.to_device(last(w, "NHWC")),
                      stride=geo[0], padding=geo[1], dilation=geo[2], layout="NHWC",
                      workspace_limit=12345)
    assert_close(first(dev.copy_to_host(y).result(), "NHWC"), ref_conv(x, w, *geo)[0], "f16")
    after = dev.cudnn.cache_info().result()
    assert after["legacy_plans"] - before["legacy_plans"] == 1
    assert after["frontend"] == "test: no frontend"


def test_frontend_disabled_by_environment(monkeypatch) -> None:
    """GPUMSG_CUDNN_FRONTEND=0 keeps the frontend out, with the reason recorded."""
    from gpumsg.libs.cudnn import graph

    monkeypatch.setattr(graph, "_STATE", {})
    monkeypatch.setenv("GPUMSG_CUDNN_FRONTEND", "0")
    assert graph.frontend(None) is None
    assert "GPUMSG_CUDNN_FRONTEND" in graph.frontend_reason()


class _FakeTensor:
    def __init__(self) -> None:
        self.uid = -1

    def set_uid(self, uid: int) -> None:
        self.uid = uid


class _FakeGraph:
    """Stands in for the frontend's backend_graph: plan 0 declines, plans 1-3 build with the
    workspaces below; executes are recorded with the pointers read from the raw array."""

    WS = [0, 4096, 256, 0]

    def __init__(self, **kw) -> None:
        self.kw, self.modes, self.notes, self.limit, self.runs = kw, [], None, None, []
        self.declines = {0}

    def validate(self) -> None: ...
    def build_operation_graph(self) -> None: ...
    def check_support(self) -> None: ...
    def _prepare_variant_pack_template(self) -> None: ...

    def create_execution_plans(self, modes) -> None:
        self.modes.append(modes)

    def deselect_numeric_notes(self, notes) -> None:
        self.notes = notes

    def deselect_workspace_greater_than(self, n) -> None:
        self.limit = n
        self.declines |= {i for i, w in enumerate(self.WS) if w > n}

    def get_execution_plan_count(self) -> int:
        return len(self.WS)

    def build_plan_at_index(self, i) -> None:
        if i in self.declines:
            raise RuntimeError("declined")

    def get_workspace_size_plan_at_index(self, i) -> int:
        return self.WS[i]

    def _get_variant_pack_uids_sorted(self):
        return [1, 2]

    def _execute_with_raw_ptrs(self, addr, n, ws, handle, index) -> None:
        import ctypes

        ptrs = list((ctypes.c_void_p * n).from_address(addr))
        self.runs.append((ptrs, ws, handle, index))


def _fake_frontend():
    from types import SimpleNamespace as NS

    return NS(data_type=NS(FLOAT="f", HALF="h", BFLOAT16="b"), heur_mode=NS(A="A", FALLBACK="F"),
              numerical_note=NS(TENSOR_CORE="tc", DOWN_CONVERT_INPUTS="dc",
                                REDUCED_PRECISION_REDUCTION="rp"),
              _pybind_module=NS(backend_graph=_FakeGraph))


@pytest.mark.parametrize("dtype,strict,notes", [("f32", True, ["tc", "dc"]), ("f32", False, None),
                                                ("bf16", False, ["rp"])])
def test_graph_executor_heuristic_choice(dtype: str, strict: bool, notes) -> None:
    """graph.build_graph: modes A then fallback, the note filters, the first ranked plan that
    builds; run() passes the pointers in uid order; next_plan() steps to a smaller workspace."""
    from gpumsg.libs.cudnn.graph import build_graph

    fe = _fake_frontend()
    t = {"y": _FakeTensor(), "x": _FakeTensor()}
    plan = build_graph(fe, 77, dtype, lambda g, f: t, name="t", strict_f32=strict,
                       workspace_limit=None)
    g = plan.graph
    assert g.modes == [["A"], ["F"]] and g.notes == notes and g.kw["handle"] == 77
    assert (t["x"].uid, t["y"].uid) == (1, 2)
    assert (plan.index, plan.workspace) == (1, 4096)
    plan.run(77, {"x": 0x1000, "y": 0x2000}, 0x9000)
    assert g.runs == [([0x1000, 0x2000], 0x9000, 77, 1)]
    assert plan.next_plan(0, below=4096) and (plan.index, plan.workspace) == (2, 256)
    assert not plan.next_plan(0, below=0)


def test_graph_executor_find_and_limits() -> None:
    """algo="find" keeps the fastest candidate that runs (one that fails is skipped); a
    workspace limit removes plans; no plan at all is GraphUnsupported."""
    from gpumsg.libs.cudnn.graph import GraphUnsupported, build_graph

    fe = _fake_frontend()
    times = {2: 1.0, 3: 2.0}  # plan 1 fails to run (KeyError): skipped
    timed = []

    def timer(plan, index, ws):
        timed.append((index, ws))
        return times[index]

    def describe(g, f):
        return {"x": _FakeTensor()}

    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False,
                       workspace_limit=None, algo="find", timer=timer)
    # two rounds over the candidates that build
    assert (plan.index, plan.workspace) == (2, 256) and timed == [(1, 4096), (2, 256), (3, 0)] * 2
    assert sorted(plan.timings) == [(2, 1.0), (3, 2.0)]
    timed.clear()
    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False,
                       workspace_limit=None, algo="find", timer=timer, find_limit=2)
    assert timed == [(1, 4096), (2, 256)] * 2 and plan.index == 2  # the top two that build
    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False, workspace_limit=300,
                       algo="heuristic")
    assert (plan.index, plan.workspace) == (2, 256) and plan.graph.limit == 300
    plan = build_graph(fe, 1, "f16", describe, name="t", strict_f32=False, workspace_limit=100,
                       algo="find", timer=timer)  # only plan 3 fits
    assert (plan.index, plan.workspace) == (3, 0) and plan.timings == [(3, 2.0)]
    _FakeGraph.WS = [0, 4096, 256, 8]
    try:
        with pytest.raises(GraphUnsupported):
            build_graph(fe, 1, "f16", describe, name="t", strict_f32=False, workspace_limit=4,
                        algo="heuristic")
    finally:
        _FakeGraph.WS = [0, 4096, 256, 0]


def test_graph_replays_capture_on_the_second_run_then_launch() -> None:
    """GraphPlan.run with replays: a pointer set runs as usual once, is captured the second
    time (the execute then runs under capture, and the graph is launched), and is launched
    alone from then on; another pointer set, workspace or stream is a key of its own; the
    oldest graph beyond the capacity is destroyed, and close() destroys the rest."""
    from gpumsg.backends.cuda.replays import GraphReplays
    from gpumsg.libs.cudnn.graph import build_graph

    fe = _fake_frontend()
    t = {"y": _FakeTensor(), "x": _FakeTensor()}
    plan = build_graph(fe, 77, "f16", lambda g, f: t, name="t", strict_f32=False,
                       workspace_limit=None)
    cu = FakeGraphDriver()
    plan.replays = GraphReplays(cu, capacity=2)
    g, ptrs = plan.graph, {"x": 0x1000, "y": 0x2000}
    under_capture = []
    real = g._execute_with_raw_ptrs

    def execute(*a) -> None:
        under_capture.append(cu.capturing)
        real(*a)

    g._execute_with_raw_ptrs = execute
    for _ in range(4):
        plan.run(77, ptrs, 0x9000, stream=5)
    assert under_capture == [False, True]  # once as usual, once captured, then launches only
    assert cu.launched == [(("exec", 1), 5)] * 3
    r = plan.replays
    assert (r.captures, r.launches, r.reason) == (1, 3, "")
    plan.run(77, ptrs, 0x9000, index=1, stream=5)  # an explicit plan index (find's timing)
    assert under_capture[-1] is False and len(cu.launched) == 3
    for key_change in ({"x": 0x3000, "y": 0x2000}, {"x": 0x4000, "y": 0x2000}):
        for _ in range(2):
            plan.run(77, key_change, 0x9000, stream=5)
    assert r.captures == 3 and cu.destroyed == [("exec", 1)]  # capacity 2: the oldest goes
    plan.run(77, ptrs, 0x9000, stream=6)  # another stream: runs as usual first
    assert under_capture[-1] is False and len(cu.launched) == 5
    plan.close()
    assert sorted(cu.destroyed) == [("exec", 1), ("exec", 2), ("exec", 3)] and not r.execs


def test_graph_replays_a_refused_capture_falls_back_for_good() -> None:
    """A capture that fails leaves nothing issued: the execute runs as usual right after, the
    reason is kept, and the plan is not captured again."""
    from gpumsg.backends.cuda.replays import GraphReplays
    from gpumsg.libs.cudnn.graph import build_graph

    fe = _fake_frontend()
    t = {"x": _FakeTensor(), "y": _FakeTensor()}
    plan = build_graph(fe, 7, "f16", lambda g, f: t, name="t", strict_f32=False,
                       workspace_limit=None)
    cu = FakeGraphDriver()
    cu.refuse = True
    plan.replays = GraphReplays(cu)
    for _ in range(4):
        plan.run(7, {"x": 0x10, "y": 0x20}, 0, stream=3)
    # as usual, captured (refused), as usual right after, as usual: 4 real executes + 1 captured
    assert len(plan.graph.runs) == 5 and cu.launched == []
    assert "cuStreamEndCapture" in plan.replays.reason and plan.replays.captures == 0


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


def softmax_ref(x, axes, log):
    z = x - x.max(axis=axes, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axes, keepdims=True))
    return z - lse if log else np.exp(z - lse)


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
    y = dev.nn.softmax(dxd, mode, log, layout)
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, dtype)
    dx = dev.cudnn.softmax_backward(y, dev.to_device(last(dy, layout)), mode, log, layout)
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, dtype, 4.0)


def pool_ref(x, mode, window, stride, padding):
    """Pooling by a loop over output positions (channels first, float64)."""
    n, c = x.shape[:2]
    sp = x.shape[2:]
    out = [(i + 2 * p - r) // s + 1 for i, r, s, p in zip(sp, window, stride, padding)]
    y = np.zeros((n, c, *out))
    for o in itertools.product(*(range(m) for m in out)):
        lo = [oi * s - p for oi, s, p in zip(o, stride, padding)]
        sl = tuple(slice(max(a, 0), min(a + r, i)) for a, r, i in zip(lo, window, sp))
        patch = x[(slice(None), slice(None)) + sl].reshape(n, c, -1)
        if mode == "max":
            y[(slice(None), slice(None)) + o] = patch.max(axis=2)
        elif mode == "avg":
            y[(slice(None), slice(None)) + o] = patch.mean(axis=2)
        else:
            y[(slice(None), slice(None)) + o] = patch.sum(axis=2) / np.prod(window)
    return y


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


def _x(dev, shape=(2, 4, 6, 6), dtype="f32"):
    return dev.to_device(np.ones(shape, gpumsg.as_dtype(dtype)) + 0.5)


BAD = [
    BadArg("channel mismatch", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 3, 3, 3))), field="w",
           match="channel mismatch"),
    BadArg("groups do not divide channels",
           lambda d: d.nn.conv2d(_x(d), _x(d, (6, 1, 3, 3)), groups=3), field="groups"),
    BadArg("groups do not divide K",
           lambda d: d.nn.conv2d(_x(d), _x(d, (3, 2, 3, 3)), groups=2), field="groups"),
    BadArg("output size <= 0", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 7, 7))), field="y",
           match="<= 0"),
    BadArg("dilated kernel too large",
           lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), dilation=3), field="y"),
    BadArg("dtype mix", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3), "f16")), field="w"),
    BadArg("f64 refused", lambda d: d.nn.conv2d(_x(d, dtype="f64"), _x(d, (3, 4, 3, 3), "f64")),
           field="x"),
    BadArg("rank mismatch", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3))), field="w"),
    BadArg("2-D input", lambda d: d.cudnn.conv(_x(d, (4, 6)), _x(d, (3, 4))), field="x"),
    BadArg("stride 0", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), stride=0),
           field="stride"),
    BadArg("negative padding", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), padding=-1),
           field="padding"),
    BadArg("wrong tuple length",
           lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), stride=(1, 1, 1)), field="stride"),
    BadArg("layout", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), layout="CHWN"),
           field="layout"),
    BadArg("algo", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), algo="fastest"),
           field="algo"),
    BadArg("tf32 on f16", lambda d: d.nn.conv2d(_x(d, dtype="f16"),
                                                 _x(d, (3, 4, 3, 3), "f16"), math="tf32"),
           field="math"),
    BadArg("bias length", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)),
                                                 bias=_x(d, (4,))), field="bias"),
    BadArg("activation", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), activation="gelu"),
           field="activation"),
    BadArg("coef on relu", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)), activation="relu",
                                                  act_coef=2.0), field="act_coef"),
    BadArg("wrong output shape", lambda d: d.nn.conv2d(_x(d), _x(d, (3, 4, 3, 3)),
                                                        out=_x(d, (2, 3, 5, 5))), field="y"),
    BadArg("backward data: dy shape",
           lambda d: d.cudnn.conv_backward_data(_x(d, (2, 3, 5, 5)), _x(d, (3, 4, 3, 3)),
                                              (2, 4, 6, 6)), field="dy"),
    BadArg("backward filter: dw channels",
           lambda d: d.cudnn.conv_backward_filter(_x(d), _x(d, (2, 3, 4, 4)), (3, 2, 3, 3)),
           field="dw"),
    BadArg("column-major buffer", lambda d: d.nn.conv2d(d.alloc((2, 4, 6, 6), "f32", order="F"),
                                                         _x(d, (3, 4, 3, 3))), field="x"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


POINTWISE_BAD = [
    BadArg("activation shape", lambda d: d.cudnn.activation_backward(
        _x(d), _x(d), _x(d, (2, 4, 6, 5))), field="dy"),
    BadArg("activation none", lambda d: d.cudnn.activation(_x(d), "none"), field="activation"),
    BadArg("softmax mode", lambda d: d.nn.softmax(_x(d), "spatial"), field="mode"),
    BadArg("softmax log", lambda d: d.nn.softmax(_x(d), log=1), field="log"),
    BadArg("softmax 1-D", lambda d: d.nn.softmax(_x(d, (5,))), field="x"),
    BadArg("softmax f64", lambda d: d.nn.softmax(_x(d, dtype="f64")), field="x"),
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


# -- batch normalization ----------------------------------------------------------------------
def bn_ref(x, gamma, beta, eps):
    """Training-mode batch norm of channels-first float64 x: y, mean, biased var, invstd."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    invstd = 1 / np.sqrt(var + eps)
    y = (x - mean.reshape(shape)) * (gamma * invstd).reshape(shape) + beta.reshape(shape)
    return y, mean, var, invstd


def fd_grads(f, args, dy, h=1e-6):
    """Central-difference gradients of <f(*args), dy> with respect to every element of every
    argument (float64, small shapes)."""
    out = []
    for i, a in enumerate(args):
        g = np.zeros_like(a)
        for idx in np.ndindex(*a.shape):
            plus = [b.copy() for b in args]
            minus = [b.copy() for b in args]
            plus[i][idx] += h
            minus[i][idx] -= h
            g[idx] = np.sum((f(*plus) - f(*minus)) * dy) / (2 * h)
        out.append(g)
    return out


STAT_TOL = {"f32": ("f32", 10.0), "f16": ("f32", 50.0), "bf16": ("f32", 50.0)}
BN_SHAPES = {"4d": (3, 4, 5, 3), "2d": (6, 5), "3d": (2, 3, 7), "5d": (2, 3, 2, 3, 2)}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("shape", list(BN_SHAPES))
def test_batch_norm_train_inference_backward(dev, rng, shape: str, dtype: str,
                                             layout: str) -> None:
    cf = BN_SHAPES[shape]  # channels first
    c = cf[1]
    x = random_array(rng, cf, dtype)
    dy = random_array(rng, cf, dtype)
    gamma, beta = random_array(rng, (c,), "f32"), random_array(rng, (c,), "f32")
    rmean, rvar = random_array(rng, (c,), "f32"), random_array(rng, (c,), "f32", low=0.5)
    eps, factor = float(rng.uniform(1e-5, 1e-2)), float(rng.uniform(0.05, 0.9))
    xw = wide(x)
    y_ref, mean, var, invstd = bn_ref(xw, wide(gamma), wide(beta), eps)
    m = x.size // c
    d_rm, d_rv = dev.to_device(rmean), dev.to_device(rvar)
    xd = dev.to_device(last(x, layout))
    gd, bd = dev.to_device(gamma), dev.to_device(beta)
    y, sm, si = dev.cudnn.batch_norm_train(xd, gd, bd, d_rm, d_rv, factor=factor, eps=eps,
                                           layout=layout).result(60)
    assert_close(first(dev.copy_to_host(y).result(), layout), y_ref, dtype)
    tol = STAT_TOL[dtype]
    assert_close(dev.copy_to_host(sm).result(), mean, *tol)
    assert_close(dev.copy_to_host(si).result(), invstd, *tol)
    assert_close(dev.copy_to_host(d_rm).result(), (1 - factor) * wide(rmean) + factor * mean,
                 *tol)
    assert_close(dev.copy_to_host(d_rv).result(),
                 (1 - factor) * wide(rvar) + factor * var * m / (m - 1), *tol)
    # inference with the running statistics just computed
    rm_h, rv_h = dev.copy_to_host(d_rm).result(), dev.copy_to_host(d_rv).result()
    shp = (1, -1) + (1,) * (x.ndim - 2)
    yi_ref = ((xw - wide(rm_h).reshape(shp)) / np.sqrt(wide(rv_h).reshape(shp) + eps)
              * wide(gamma).reshape(shp) + wide(beta).reshape(shp))
    yi = dev.cudnn.batch_norm_inference(xd, gd, bd, d_rm, d_rv, eps=eps, layout=layout)
    assert_close(first(dev.copy_to_host(yi).result(), layout), yi_ref, dtype)
    # backward: the reference's analytic gradients, themselves checked by finite differences
    # in test_batch_norm_reference_gradients
    xhat = (xw - mean.reshape(shp)) * invstd.reshape(shp)
    axes = (0,) + tuple(range(2, x.ndim))
    dyw = wide(dy)
    dbeta = dyw.sum(axis=axes)
    dgamma = (dyw * xhat).sum(axis=axes)
    dx_ref = (wide(gamma) * invstd).reshape(shp) * (
        dyw - (dbeta.reshape(shp) + xhat * dgamma.reshape(shp)) / m)
    dx, dg, db = dev.cudnn.batch_norm_backward(xd, dev.to_device(last(dy, layout)), gd, sm, si,
                                               eps=eps, layout=layout).result(60)
    assert_close(first(dev.copy_to_host(dx).result(), layout), dx_ref, dtype, 4.0)
    gtol = ("f32", 50.0) if dtype == "f32" else (dtype, 1.0)
    assert_close(dev.copy_to_host(dg).result(), dgamma, *gtol)
    assert_close(dev.copy_to_host(db).result(), dbeta, *gtol)


def test_batch_norm_reference_gradients(rng) -> None:
    """The analytic batch-norm gradients the GPU test uses are those of the forward."""
    x, gamma, beta = rng.standard_normal((3, 2, 2, 2)), rng.standard_normal(2), \
        rng.standard_normal(2)
    eps = 1e-3
    dy = rng.standard_normal(x.shape)
    fx, fg, fb = fd_grads(lambda a, g, b: bn_ref(a, g, b, eps)[0], [x, gamma, beta], dy)
    _, mean, _, invstd = bn_ref(x, gamma, beta, eps)
    from gpumsg.libs.cudnn.sim import bn_backward

    dx, dg, db = bn_backward(x, dy, gamma, mean, invstd)
    for got, ref in ((dx, fx), (dg, fg), (db, fb)):
        assert_close(got, ref, "f64", 1e5)  # central differences: about 1e-8 relative


def test_batch_norm_without_running_statistics(dev, rng) -> None:
    x = random_array(rng, (4, 3, 2, 2), "f32")
    g, b = random_array(rng, (3,), "f32"), random_array(rng, (3,), "f32")
    y, sm, si = dev.cudnn.batch_norm_train(dev.to_device(x), dev.to_device(g),
                                           dev.to_device(b)).result(60)
    y_ref, mean, _, invstd = bn_ref(wide(x), wide(g), wide(b), 1e-5)
    assert_close(dev.copy_to_host(y).result(), y_ref, "f32")
    assert_close(dev.copy_to_host(si).result(), invstd, "f32", 10.0)


def _v(d, n=4, dtype="f32"):
    return dev_vec(d, n, dtype)


def dev_vec(d, n, dtype="f32"):
    return d.to_device(np.ones((n,), gpumsg.as_dtype(dtype)))


NORM_BAD = [
    BadArg("bn gamma length", lambda d: d.cudnn.batch_norm_train(_x(d), _v(d, 3), _v(d)),
           field="gamma", match="4 elements"),
    BadArg("bn gamma dtype", lambda d: d.cudnn.batch_norm_train(_x(d), _v(d, 4, "f16"), _v(d)),
           field="gamma", match="f32"),
    BadArg("bn running_mean alone", lambda d: d.cudnn.batch_norm_train(_x(d), _v(d), _v(d),
                                                                      running_mean=_v(d)),
           field="running_var"),
    BadArg("bn factor", lambda d: d.cudnn.batch_norm_train(_x(d), _v(d), _v(d), factor=1.5),
           field="factor"),
    BadArg("bn eps", lambda d: d.cudnn.batch_norm_train(_x(d), _v(d), _v(d), eps=-1.0),
           field="eps"),
    BadArg("bn one value per channel",
           lambda d: d.cudnn.batch_norm_train(_x(d, (1, 4)), _v(d), _v(d)), field="x"),
    BadArg("bn f64", lambda d: d.cudnn.batch_norm_train(_x(d, dtype="f64"), _v(d), _v(d)),
           field="x"),
    BadArg("bn NHWC channels", lambda d: d.cudnn.batch_norm_train(_x(d), _v(d), _v(d),
                                                                 layout="NHWC"),
           field="gamma", match="6 elements"),
    BadArg("bn layout", lambda d: d.cudnn.batch_norm_train(_x(d), _v(d), _v(d), layout="CN"),
           field="layout"),
    BadArg("bn out alias", lambda d: (lambda x: d.cudnn.batch_norm_train(x, _v(d), _v(d),
                                                                       out=x))(_x(d)),
           field="y", match="alias"),
    BadArg("bn inference var length",
           lambda d: d.cudnn.batch_norm_inference(_x(d), _v(d), _v(d), _v(d), _v(d, 5)),
           field="var"),
    BadArg("bn backward dy shape",
           lambda d: d.cudnn.batch_norm_backward(_x(d), _x(d, (2, 4, 6, 5)), _v(d), _v(d), _v(d)),
           field="dy"),
]


@pytest.mark.parametrize("case", NORM_BAD, ids=str)
def test_norm_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


# -- dropout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_forward_backward(dev, rng, dtype: str, p: float) -> None:
    n = 20000
    x = random_array(rng, (40, n // 40), dtype)
    dy = random_array(rng, x.shape, dtype)
    seed = int(rng.integers(0, 2**63))
    xd = dev.to_device(x)
    y, reserve = dev.nn.dropout(xd, p, seed).result(60)
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
    y2, _ = dev.nn.dropout(xd, p, seed).result(60)
    assert np.array_equal(wide(dev.copy_to_host(y2).result()) != 0, kept)
    y3, _ = dev.nn.dropout(xd, p, seed + 1).result(60)
    assert not np.array_equal(wide(dev.copy_to_host(y3).result()) != 0, kept)


def test_dropout_in_place_and_p_zero(dev, rng) -> None:
    x = random_array(rng, (1000,), "f32")
    xd = dev.to_device(x)
    y, _ = dev.nn.dropout(xd, 0.0, 7, out=xd).result(60)
    assert_close(dev.copy_to_host(xd).result(), wide(x), "f32")
    y, r = dev.nn.dropout(xd, 0.3, 7, out=xd).result(60)
    got = wide(dev.copy_to_host(xd).result())
    kept = got != 0
    assert_close(got, np.where(kept, wide(x) / 0.7, 0.0), "f32")
    assert 0.2 < 1 - kept.mean() < 0.4


DROPOUT_BAD = [
    BadArg("dropout p = 1", lambda d: d.nn.dropout(_x(d), 1.0), field="p"),
    BadArg("dropout p < 0", lambda d: d.nn.dropout(_x(d), -0.1), field="p"),
    BadArg("dropout seed", lambda d: d.nn.dropout(_x(d), 0.5, -3), field="seed"),
    BadArg("dropout f64", lambda d: d.nn.dropout(_x(d, dtype="f64"), 0.5), field="x"),
    BadArg("dropout bf16 (cuDNN refuses it)", lambda d: d.nn.dropout(
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


# -- layer, group and instance norms ---------------------------------------------------------------
def row_norm_ref(x2, affine, gamma, beta, eps):
    """Per-row normalization of float64 x2 (rows, per_row), then gamma/beta per channel of
    the (A, K, B) view; returns y (affine view), mean, invstd."""
    mean = x2.mean(axis=1)
    invstd = 1 / np.sqrt(x2.var(axis=1) + eps)
    y = ((x2 - mean[:, None]) * invstd[:, None]).reshape(affine)
    if gamma is not None:
        y = y * gamma.reshape(1, -1, 1) + beta.reshape(1, -1, 1)
    return y, mean, invstd


LN_CASES = {  # shape, normalized_ndim
    "rows": ((6, 10), 1),
    "3d_last": ((2, 3, 8), 1),
    "last_two": ((3, 4, 5), 2),
    "all": ((4, 6), 2),
}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("case", list(LN_CASES))
def test_layer_norm_forward_backward(dev, rng, case: str, affine: bool, dtype: str) -> None:
    shape, k = LN_CASES[case]
    d = int(np.prod(shape[len(shape) - k:]))
    rows = int(np.prod(shape)) // d
    x = random_array(rng, shape, dtype)
    dy = random_array(rng, shape, dtype)
    gamma = random_array(rng, (d,), "f32") if affine else None
    beta = random_array(rng, (d,), "f32") if affine else None
    eps = float(rng.uniform(1e-5, 1e-2))
    xw, dyw = wide(x).reshape(rows, d), wide(dy)

    def f(xx, gg, bb):
        return row_norm_ref(xx, (rows, d, 1), gg if affine else None, bb, eps)[0]

    y_ref, mean, invstd = row_norm_ref(xw, (rows, d, 1), None if gamma is None else wide(gamma),
                                       None if beta is None else wide(beta), eps)
    g0 = wide(gamma) if affine else np.ones(d)
    b0 = wide(beta) if affine else np.zeros(d)
    fx, fg, fb = fd_grads(f, [xw, g0, b0], dyw.reshape(rows, d, 1))
    xd = dev.to_device(x)
    gd = dev.to_device(gamma) if affine else None
    bd = dev.to_device(beta) if affine else None
    y, mu, inv = dev.nn.layer_norm(xd, gd, bd, normalized_ndim=k, eps=eps).result(60)
    assert_close(dev.copy_to_host(y).result(), y_ref.reshape(shape), dtype)
    tol = STAT_TOL[dtype]
    assert_close(dev.copy_to_host(mu).result(), mean, *tol)
    assert_close(dev.copy_to_host(inv).result(), invstd, *tol)
    dx, dg, db = dev.cudnn.layer_norm_backward(xd, dev.to_device(dy), mu, inv, gd,
                                               normalized_ndim=k, eps=eps).result(60)
    assert_close(dev.copy_to_host(dx).result(), fx.reshape(shape), dtype, 4.0)
    if affine:
        gtol = ("f32", 50.0) if dtype == "f32" else (dtype, 1.0)
        assert_close(dev.copy_to_host(dg).result(), fg, *gtol)
        assert_close(dev.copy_to_host(db).result(), fb, *gtol)
    else:
        assert dg is None and db is None


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_layer_norm_wide_rows(dev, rng, dtype: str) -> None:
    """Rows of 1,500 (several warps per row, the column sums split over row slices) against
    the analytic float64 gradients: dx = invstd (g - x_hat mean(g x_hat) - mean(g)), g = dy
    gamma; dgamma = sum of dy x_hat, dbeta = sum of dy."""
    rows, d = 37, 1500
    x = random_array(rng, (rows, d), dtype)
    dy = random_array(rng, (rows, d), dtype)
    gamma, beta = random_array(rng, (d,), "f32"), random_array(rng, (d,), "f32")
    eps = 1e-5
    xw, dyw, gw = wide(x), wide(dy), wide(gamma)
    y_ref, mean, invstd = row_norm_ref(xw, (rows, d, 1), gw, wide(beta), eps)
    xhat = (xw - mean[:, None]) * invstd[:, None]
    g = dyw * gw
    dx_ref = invstd[:, None] * (g - xhat * (g * xhat).mean(axis=1, keepdims=True)
                                - g.mean(axis=1, keepdims=True))
    xd = dev.to_device(x)
    y, mu, inv = dev.nn.layer_norm(xd, dev.to_device(gamma), dev.to_device(beta),
                                   eps=eps).result(60)
    assert_close(dev.copy_to_host(y).result(), y_ref.reshape(rows, d), dtype)
    assert_close(dev.copy_to_host(mu).result(), mean, *STAT_TOL[dtype])
    assert_close(dev.copy_to_host(inv).result(), invstd, *STAT_TOL[dtype])
    dx, dg, db = dev.cudnn.layer_norm_backward(xd, dev.to_device(dy), mu, inv,
                                               dev.to_device(gamma), eps=eps).result(60)
    assert_close(dev.copy_to_host(dx).result(), dx_ref, dtype, 4.0)
    assert_close(dev.copy_to_host(dg).result(), (dyw * xhat).sum(axis=0), dtype, 4.0)
    assert_close(dev.copy_to_host(db).result(), dyw.sum(axis=0), dtype, 4.0)


GN_CASES = {  # shape (channels first), groups
    "groups2": ((2, 4, 3, 3), 2),
    "instance": ((2, 3, 4, 2), 3),
    "one_group": ((3, 4, 5), 1),
    "3d": ((2, 6, 2, 2, 3), 3),
}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("case", list(GN_CASES))
def test_group_norm_forward_backward(dev, rng, case: str, affine: bool, dtype: str) -> None:
    shape, groups = GN_CASES[case]
    n, c = shape[:2]
    s = int(np.prod(shape[2:]))
    rows, per_row = n * groups, c // groups * s
    x = random_array(rng, shape, dtype)
    dy = random_array(rng, shape, dtype)
    gamma = random_array(rng, (c,), "f32") if affine else None
    beta = random_array(rng, (c,), "f32") if affine else None
    eps = float(rng.uniform(1e-5, 1e-2))
    view = (n, c, s)

    def f(xx, gg, bb):
        return row_norm_ref(xx, view, gg if affine else None, bb, eps)[0]

    xw = wide(x).reshape(rows, per_row)
    y_ref, mean, invstd = row_norm_ref(xw, view, None if gamma is None else wide(gamma),
                                       None if beta is None else wide(beta), eps)
    g0 = wide(gamma) if affine else np.ones(c)
    b0 = wide(beta) if affine else np.zeros(c)
    fx, fg, fb = fd_grads(f, [xw, g0, b0], wide(dy).reshape(view))
    xd = dev.to_device(x)
    gd = dev.to_device(gamma) if affine else None
    bd = dev.to_device(beta) if affine else None
    if groups == c:
        y, mu, inv = dev.nn.instance_norm(xd, gd, bd, eps=eps).result(60)
    else:
        y, mu, inv = dev.nn.group_norm(xd, groups, gd, bd, eps=eps).result(60)
    assert_close(dev.copy_to_host(y).result(), y_ref.reshape(shape), dtype)
    tol = STAT_TOL[dtype]
    assert_close(dev.copy_to_host(mu).result(), mean, *tol)
    assert_close(dev.copy_to_host(inv).result(), invstd, *tol)
    dx, dg, db = dev.cudnn.group_norm_backward(xd, dev.to_device(dy), mu, inv, groups, gd,
                                               eps=eps).result(60)
    assert_close(dev.copy_to_host(dx).result(), fx.reshape(shape), dtype, 4.0)
    if affine:
        gtol = ("f32", 50.0) if dtype == "f32" else (dtype, 1.0)
        assert_close(dev.copy_to_host(dg).result(), fg, *gtol)
        assert_close(dev.copy_to_host(db).result(), fb, *gtol)


ROWNORM_BAD = [
    BadArg("ln gamma length", lambda d: d.nn.layer_norm(_x(d), _v(d, 5), _v(d, 6)),
           field="gamma", match="6 elements"),
    BadArg("ln beta missing", lambda d: d.nn.layer_norm(_x(d), _v(d, 6)), field="beta"),
    BadArg("ln normalized_ndim", lambda d: d.nn.layer_norm(_x(d), normalized_ndim=5),
           field="normalized_ndim"),
    BadArg("ln one feature", lambda d: d.nn.layer_norm(_x(d, (4, 1))), field="x"),
    BadArg("ln f64", lambda d: d.nn.layer_norm(_x(d, dtype="f64")), field="x"),
    BadArg("ln gamma f16", lambda d: d.nn.layer_norm(_x(d), _v(d, 6, "f16"), _v(d, 6)),
           field="gamma", match="f32"),
    BadArg("ln backward mean length",
           lambda d: d.cudnn.layer_norm_backward(_x(d), _x(d), _v(d, 47), _v(d, 48)),
           field="mean"),
    BadArg("ln backward dy shape",
           lambda d: d.cudnn.layer_norm_backward(_x(d), _x(d, (2, 4, 6, 5)), _v(d, 48),
                                               _v(d, 48)), field="dy"),
    BadArg("gn groups", lambda d: d.nn.group_norm(_x(d), 3), field="groups"),
    BadArg("gn gamma length", lambda d: d.nn.group_norm(_x(d), 2, _v(d, 2), _v(d, 2)),
           field="gamma", match="4 elements"),
    BadArg("gn 1-D", lambda d: d.nn.group_norm(_x(d, (8,)), 1), field="x"),
    BadArg("gn backward invstd length",
           lambda d: d.cudnn.group_norm_backward(_x(d), _x(d), _v(d, 4), _v(d, 3), 2),
           field="invstd"),
    BadArg("gn out alias", lambda d: (lambda x: d.nn.group_norm(x, 2, out=x))(_x(d)),
           field="y", match="alias"),
]


@pytest.mark.parametrize("case", ROWNORM_BAD, ids=str)
def test_row_norm_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)
