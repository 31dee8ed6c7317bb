"""cuDNN normalizations: batch norm (training, inference, backward, with and without running
statistics; gradients checked by finite differences), layer, group and instance norms against
float64 references, and their bad arguments."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.libs.cudnn._helpers import _x, bn_ref, fd_grads, first, last
from tests.libs.harness import BadArg, assert_close, check_bad_args, random_array, wide

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
    from gpumsg.libs.cudnn._sim import bn_backward

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
    y, mu, inv = dev.cudnn.layer_norm(xd, gd, bd, normalized_ndim=k, eps=eps).result(60)
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
    y, mu, inv = dev.cudnn.layer_norm(xd, dev.to_device(gamma), dev.to_device(beta),
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
        y, mu, inv = dev.cudnn.instance_norm(xd, gd, bd, eps=eps).result(60)
    else:
        y, mu, inv = dev.cudnn.group_norm(xd, groups, gd, bd, eps=eps).result(60)
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
    BadArg("ln gamma length", lambda d: d.cudnn.layer_norm(_x(d), _v(d, 5), _v(d, 6)),
           field="gamma", match="6 elements"),
    BadArg("ln beta missing", lambda d: d.cudnn.layer_norm(_x(d), _v(d, 6)), field="beta"),
    BadArg("ln normalized_ndim", lambda d: d.cudnn.layer_norm(_x(d), normalized_ndim=5),
           field="normalized_ndim"),
    BadArg("ln one feature", lambda d: d.cudnn.layer_norm(_x(d, (4, 1))), field="x"),
    BadArg("ln f64", lambda d: d.cudnn.layer_norm(_x(d, dtype="f64")), field="x"),
    BadArg("ln gamma f16", lambda d: d.cudnn.layer_norm(_x(d), _v(d, 6, "f16"), _v(d, 6)),
           field="gamma", match="f32"),
    BadArg("ln backward mean length",
           lambda d: d.cudnn.layer_norm_backward(_x(d), _x(d), _v(d, 47), _v(d, 48)),
           field="mean"),
    BadArg("ln backward dy shape",
           lambda d: d.cudnn.layer_norm_backward(_x(d), _x(d, (2, 4, 6, 5)), _v(d, 48),
                                               _v(d, 48)), field="dy"),
    BadArg("gn groups", lambda d: d.cudnn.group_norm(_x(d), 3), field="groups"),
    BadArg("gn gamma length", lambda d: d.cudnn.group_norm(_x(d), 2, _v(d, 2), _v(d, 2)),
           field="gamma", match="4 elements"),
    BadArg("gn 1-D", lambda d: d.cudnn.group_norm(_x(d, (8,)), 1), field="x"),
    BadArg("gn backward invstd length",
           lambda d: d.cudnn.group_norm_backward(_x(d), _x(d), _v(d, 4), _v(d, 3), 2),
           field="invstd"),
    BadArg("gn out alias", lambda d: (lambda x: d.cudnn.group_norm(x, 2, out=x))(_x(d)),
           field="y", match="alias"),
]


@pytest.mark.parametrize("case", ROWNORM_BAD, ids=str)
def test_row_norm_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)
