"""gpumsg's own cuDNN-side kernels (libs/cudnn/kernels/layer_norm.py, gelu.py, softmax.py) on every
path they choose: warp-per-row and block-per-row groups, 16-byte packs and the scalar path (row
lengths that are not a multiple of the pack, pointers off 16-byte alignment), several packs per
thread, rows longer than the registers of a block (the generic layer-norm kernels), more rows
than resident groups (the persistent backward). Against float64 references with the analytic
gradients on random inputs; GELU's gradients also by central differences."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.libs.cudnn.kernels._gelu import GELU_MODES
from gpumsg.libs.cudnn.kernels._rowkern import row_shape
from gpumsg.libs.cudnn.kernels._softmax import softmax_rows
from tests.libs.harness import BadArg, assert_close, check_bad_args, random_array, wide

STAT_TOL = {"f32": ("f32", 10.0), "f16": ("f32", 50.0), "bf16": ("f32", 50.0)}


# -- GELU -----------------------------------------------------------------------------------------
def gelu_ref(x: np.ndarray, mode: str) -> np.ndarray:
    from scipy.special import erf

    if mode == "gelu":
        return 0.5 * x * (1 + erf(x / np.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_grad_ref(x: np.ndarray, mode: str) -> np.ndarray:
    from scipy.special import erf

    if mode == "gelu":
        return 0.5 * (1 + erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    k = np.sqrt(2 / np.pi)
    t = np.tanh(k * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)


def test_gelu_reference_gradients(rng) -> None:
    """The analytic derivatives the tests use agree with central differences of the values."""
    x = rng.standard_normal(1000) * 3
    h = 1e-6
    for mode in GELU_MODES:
        fd = (gelu_ref(x + h, mode) - gelu_ref(x - h, mode)) / (2 * h)
        assert_close(gelu_grad_ref(x, mode), fd, "f32")


# sizes: below one pack, a pack tail, several blocks with a tail, exactly packed
GELU_SIZES = {"tiny": (5,), "tail": (3, 7, 11), "blocks": (1000, 37), "packed": (64, 512)}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("mode", list(GELU_MODES))
@pytest.mark.parametrize("size", list(GELU_SIZES))
def test_gelu_forward_backward(dev, rng, dtype: str, mode: str, size: str) -> None:
    shape = GELU_SIZES[size]
    x = (2 * wide(random_array(rng, shape, dtype))).astype(gpumsg.as_dtype(dtype))  # tails too
    dy = random_array(rng, shape, dtype)
    xd = dev.to_device(x)
    y = dev.cudnn.activation(xd, mode)
    assert_close(dev.copy_to_host(y).result(), gelu_ref(wide(x), mode), dtype)
    dx = dev.cudnn.activation_backward(xd, y, dev.to_device(dy), mode)
    assert_close(dev.copy_to_host(dx).result(), wide(dy) * gelu_grad_ref(wide(x), mode),
                 dtype, 2.0)


@pytest.mark.parametrize("mode", list(GELU_MODES))
def test_gelu_in_place(dev, rng, mode: str) -> None:
    x = random_array(rng, (33, 17), "bf16")
    dy = random_array(rng, (33, 17), "bf16")
    d = dev.to_device(x)
    g = dev.to_device(dy)
    xd = dev.to_device(x)
    dev.cudnn.activation_backward(xd, xd, g, mode, out=g).result()  # dx over dy
    assert_close(dev.copy_to_host(g).result(), wide(dy) * gelu_grad_ref(wide(x), mode), "bf16",
                 2.0)
    dev.cudnn.activation(d, mode, out=d).result()
    assert_close(dev.copy_to_host(d).result(), gelu_ref(wide(x), mode), "bf16")


BAD = [
    BadArg("gelu coef", lambda d: d.cudnn.activation(d.to_device(np.ones(4, np.float32)), "gelu",
                                                   act_coef=1.0), field="act_coef"),
    BadArg("gelu name", lambda d: d.cudnn.activation(d.to_device(np.ones(4, np.float32)),
                                                   "gelu_erf"), field="activation"),
    BadArg("gelu f64", lambda d: d.cudnn.activation(d.to_device(np.ones(4)), "gelu"), field="x"),
    BadArg("gelu fused in conv", lambda d: d.cudnn.conv2d(
        d.to_device(np.ones((1, 4, 5, 5), np.float32)),
        d.to_device(np.ones((3, 4, 3, 3), np.float32)), activation="gelu_tanh"),
        field="activation"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case: BadArg) -> None:
    check_bad_args(dev, case)


# -- layer norm -----------------------------------------------------------------------------------
def ln_ref(x, dy, gamma, beta, eps):
    """y, mean, invstd, dx, dgamma, dbeta in float64 (rows x d)."""
    mean = x.mean(axis=1)
    invstd = 1 / np.sqrt(x.var(axis=1) + eps)
    xhat = (x - mean[:, None]) * invstd[:, None]
    y = xhat * gamma + beta
    g = dy * gamma
    dx = invstd[:, None] * (g - xhat * (g * xhat).mean(axis=1, keepdims=True)
                            - g.mean(axis=1, keepdims=True))
    return y, mean, invstd, dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


LN_ROWS = {  # rows, d: the paths on a GPU (bf16/f16 pack 8, f32 pack 4)
    "warp_packed": (50, 64),        # a warp per row, one pack per lane or less
    "warp_scalar": (45, 37),        # a warp per row, elements one by one
    "warp_v4": (9, 1000),           # a warp per row, 4 packs per lane (f16/bf16)
    "block_packed": (13, 2056),     # a block per row, 16-byte packs
    "block_scalar": (7, 2055),      # a block per row, elements one by one
    "block_wide": (5, 8192),        # the benchmark's row, 4 packs per thread forward
    "persistent": (3000, 48),       # more rows than resident warps in the backward
    "generic": (3, 16392),          # backward rows too long for registers (f16/bf16)
    "generic_fwd": (2, 70000),      # forward rows too long as well
}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", list(LN_ROWS))
def test_layer_norm_paths(dev, rng, case: str, dtype: str) -> None:
    rows, d = LN_ROWS[case]
    x = random_array(rng, (rows, d), dtype)
    dy = random_array(rng, (rows, d), dtype)
    gamma, beta = random_array(rng, (d,), "f32"), random_array(rng, (d,), "f32")
    eps = float(rng.uniform(1e-5, 1e-3))
    y_ref, mean, invstd, dx_ref, dg_ref, db_ref = ln_ref(wide(x), wide(dy), wide(gamma),
                                                         wide(beta), eps)
    xd = dev.to_device(x)
    y, mu, inv = dev.cudnn.layer_norm(xd, dev.to_device(gamma), dev.to_device(beta),
                                   eps=eps).result(60)
    assert_close(dev.copy_to_host(y).result(), y_ref, dtype)
    assert_close(dev.copy_to_host(mu).result(), mean, *STAT_TOL[dtype])
    assert_close(dev.copy_to_host(inv).result(), invstd, *STAT_TOL[dtype])
    dx, dg, db = dev.cudnn.layer_norm_backward(xd, dev.to_device(dy), mu, inv,
                                               dev.to_device(gamma), eps=eps).result(60)
    assert_close(dev.copy_to_host(dx).result(), dx_ref, dtype, 4.0)
    assert_close(dev.copy_to_host(dg).result(), dg_ref, dtype, 4.0)
    assert_close(dev.copy_to_host(db).result(), db_ref, dtype, 4.0)
    # without gamma/beta: the same statistics, dx of the plain normalization
    y2, _, _ = dev.cudnn.layer_norm(xd, eps=eps).result(60)
    ones = np.ones(d)
    y_ref2, _, _, dx_ref2, _, _ = ln_ref(wide(x), wide(dy), ones, 0 * ones, eps)
    assert_close(dev.copy_to_host(y2).result(), y_ref2, dtype)
    dx2, _, _ = dev.cudnn.layer_norm_backward(xd, dev.to_device(dy), mu, inv, eps=eps).result(60)
    assert_close(dev.copy_to_host(dx2).result(), dx_ref2, dtype, 4.0)


def test_row_shapes() -> None:
    """The shapes the row kernels take: warps up to 128 packs, blocks within their bound."""
    assert row_shape(1, 256, 8) == (True, 1, 128)
    assert row_shape(128, 256, 8) == (True, 4, 128)
    assert row_shape(129, 256, 8) == (False, 1, 160)
    assert row_shape(1024, 256, 8) == (False, 4, 256)
    assert row_shape(1024, 1024, 4, lambda v: 1024 if v * 8 <= 8 else 512) == (False, 1, 1024)
    assert row_shape(4096, 256, 8, lambda v: 512) == (False, 8, 512)
    assert row_shape(8193, 256, 8) is None
    for nvec in (129, 300, 1000, 1025, 5000):
        warp, v, threads = row_shape(nvec, 256, 8)
        assert not warp and threads % 32 == 0 and threads * v >= nvec > (threads - 32) * v


def _torch_unaligned(torch, x: np.ndarray, dtype: str):
    """A CUDA tensor holding x whose data pointer is one element off a 16-byte boundary."""
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    base = torch.empty(x.size + 1, dtype=tdt, device="cuda")
    t = base[1:].view(x.shape)
    t.copy_(torch.from_numpy(wide(x).astype(np.float32)).to(tdt))
    assert t.data_ptr() % 16 != 0
    return t, base


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_unaligned_pointers(backend, rng, dtype: str) -> None:
    """Buffers adopted from torch one element off alignment take the scalar path of the layer
    norm, GELU and softmax kernels (row length a multiple of the pack)."""
    if backend != "cuda":
        pytest.skip("pointer alignment is a GPU matter")
    torch = pytest.importorskip("torch")
    rows, d = 6, 512
    x = random_array(rng, (rows, d), dtype)
    dy = random_array(rng, (rows, d), dtype)
    with gpumsg.open_device(0, backend="cuda") as dev:
        tx, keep_x = _torch_unaligned(torch, x, dtype)
        tdy, keep_dy = _torch_unaligned(torch, dy, dtype)
        torch.cuda.synchronize()
        xd, dyd = dev.from_dlpack(tx), dev.from_dlpack(tdy)
        y, mu, inv = dev.cudnn.layer_norm(xd, eps=1e-5).result(60)
        y_ref, _, _, dx_ref, _, _ = ln_ref(wide(x), wide(dy), np.ones(d), np.zeros(d), 1e-5)
        assert_close(dev.copy_to_host(y).result(), y_ref, dtype)
        dx, _, _ = dev.cudnn.layer_norm_backward(xd, dyd, mu, inv, eps=1e-5).result(60)
        assert_close(dev.copy_to_host(dx).result(), dx_ref, dtype, 4.0)
        g = dev.cudnn.activation(xd, "gelu")
        assert_close(dev.copy_to_host(g).result(), gelu_ref(wide(x), "gelu"), dtype)
        gx = dev.cudnn.activation_backward(xd, g, dyd, "gelu")
        assert_close(dev.copy_to_host(gx).result(), wide(dy) * gelu_grad_ref(wide(x), "gelu"),
                     dtype, 2.0)
        s = dev.cudnn.softmax(xd, "channel")
        s_ref = softmax_ref(wide(x))
        assert_close(dev.copy_to_host(s).result(), s_ref, dtype)
        sdx = dev.cudnn.softmax_backward(s, dyd, "channel")
        assert_close(dev.copy_to_host(sdx).result(), softmax_grad_ref(s_ref, wide(dy), False),
                     dtype, 4.0)
        dev.synchronize().result()
        del keep_x, keep_dy


# -- softmax over contiguous rows -----------------------------------------------------------------
def softmax_ref(x: np.ndarray, log: bool = False) -> np.ndarray:
    """Softmax over the last axis (float64)."""
    z = x - x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def softmax_grad_ref(y: np.ndarray, dy: np.ndarray, log: bool) -> np.ndarray:
    """dx of softmax (y its output) or log-softmax (y the log-probabilities), last axis."""
    if log:
        return dy - np.exp(y) * dy.sum(axis=-1, keepdims=True)
    return y * (dy - (y * dy).sum(axis=-1, keepdims=True))


def test_softmax_reference_gradient(rng) -> None:
    """The analytic gradients agree with central differences of <softmax(x), dy>."""
    x, dy = rng.standard_normal((3, 7)), rng.standard_normal((3, 7))
    h = 1e-6
    for log in (False, True):
        fd = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            p, m = x.copy(), x.copy()
            p[idx] += h
            m[idx] -= h
            fd[idx] = np.sum((softmax_ref(p, log) - softmax_ref(m, log)) * dy) / (2 * h)
        assert_close(softmax_grad_ref(softmax_ref(x, log), dy, log), fd, "f32")


SM_CASES = {  # layout, shape (in the layout), mode: each a softmax over contiguous rows
    "rows_warp": ("NCHW", (40, 10), "channel"),
    "rows_packed": ("NCHW", (9, 256), "channel"),
    "rows_block": ("NCHW", (5, 3000), "channel"),
    "rows_unit_spatial": ("NCHW", (4, 72, 1, 1), "channel"),
    "nhwc_channel": ("NHWC", (2, 3, 5, 24), "channel"),
    "instance": ("NCHW", (3, 4, 5, 6), "instance"),
    "instance_nhwc": ("NHWC", (2, 5, 6, 40), "instance"),
    "long_rows": ("NCHW", (2, 70000), "channel"),  # past the registers: cuDNN
}


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("case", list(SM_CASES))
def test_softmax_rows(dev, rng, case: str, log: bool, dtype: str) -> None:
    layout, shape, mode = SM_CASES[case]
    rows, d = softmax_rows(layout, shape, mode)
    x = random_array(rng, shape, dtype)
    dy = random_array(rng, shape, dtype)
    xw = wide(x).reshape(rows, d)
    y_ref = softmax_ref(xw, log)
    y = dev.cudnn.softmax(dev.to_device(x), mode, log, layout)
    tol = 4.0 if log else 1.0  # log-probabilities near zero: a relative error of their sum
    assert_close(dev.copy_to_host(y).result().reshape(rows, d), y_ref, dtype, tol)
    dx = dev.cudnn.softmax_backward(y, dev.to_device(dy), mode, log, layout)
    # the gradient from the device's own y (rounded to dtype), as the kernel sees it
    yw = wide(dev.copy_to_host(y).result()).reshape(rows, d)
    assert_close(dev.copy_to_host(dx).result().reshape(rows, d),
                 softmax_grad_ref(yw, wide(dy).reshape(rows, d), log), dtype, 4.0)


def test_softmax_rows_of_layouts() -> None:
    assert softmax_rows("NCHW", (4, 7), "channel") == (4, 7)
    assert softmax_rows("NCHW", (4, 7, 1, 1), "channel") == (4, 7)
    assert softmax_rows("NCHW", (4, 7, 2, 1), "channel") is None  # strided over C: cuDNN
    assert softmax_rows("NHWC", (4, 2, 3, 7), "channel") == (24, 7)
    assert softmax_rows("NCHW", (4, 7, 2, 3), "instance") == (4, 42)
    assert softmax_rows("NHWC", (4, 2, 3, 7), "instance") == (4, 42)


# -- batch normalization, inference (libs/cudnn/kernels/bn_infer.py) -------------------------------
# shapes channels first; which kernel path each layout takes on the GPU:
#   "c16": NHWC packs of 16 channels, NCHW packs within a channel (spatial 64)
#   "c24_s15": NHWC packs, NCHW element by element (spatial 15 is not a multiple of the pack)
#   "c12": NHWC element by element (12 channels is not a multiple of the bf16 pack of 8)
#   "c40_3d": 3-D spatial, several blocks per launch
BN_PATHS = {"c16": (4, 16, 8, 8), "c24_s15": (2, 24, 3, 5), "c12": (3, 12, 4, 4),
            "c40_3d": (2, 40, 6, 10, 12)}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("case", list(BN_PATHS))
def test_batch_norm_inference_paths(dev, rng, case: str, dtype: str, layout: str) -> None:
    cf = BN_PATHS[case]
    c = cf[1]
    x = random_array(rng, cf, dtype)
    gamma, beta, mean = (random_array(rng, (c,), "f32") for _ in range(3))
    var = random_array(rng, (c,), "f32", low=0.5)
    eps = float(rng.uniform(1e-5, 1e-2))
    shp = (1, -1) + (1,) * (len(cf) - 2)
    y_ref = ((wide(x) - wide(mean).reshape(shp)) / np.sqrt(wide(var).reshape(shp) + eps)
             * wide(gamma).reshape(shp) + wide(beta).reshape(shp))
    host = np.moveaxis(x, 1, -1).copy() if layout == "NHWC" else x
    vecs = [dev.to_device(v) for v in (gamma, beta, mean, var)]
    y = dev.cudnn.batch_norm_inference(dev.to_device(host), *vecs, eps=eps, layout=layout)
    got = dev.copy_to_host(y).result()
    assert_close(np.moveaxis(got, -1, 1) if layout == "NHWC" else got, y_ref, dtype)
