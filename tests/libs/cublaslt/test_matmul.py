"""cuBLASLt Matmul: every epilogue (with its aux and bias-gradient outputs) against a NumPy
implementation of the same math, fp8 with per-tensor scales, TF32, the plan cache, and bad
arguments."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gpumsg
from tests.libs.harness import rel_err

M, N, K = 64, 48, 32
TOL = {"f32": 2e-5, "bf16": 2e-2, "f16": 3e-3}
SQ = math.sqrt(2 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(SQ * (x + 0.044715 * x ** 3)))


def dgelu(x: np.ndarray) -> np.ndarray:
    t = np.tanh(SQ * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQ * (1 + 3 * 0.044715 * x * x)


def host(rng, shape, dtype: str) -> np.ndarray:
    return np.asfortranarray(rng.standard_normal(shape).astype(gpumsg.as_dtype(dtype)))


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64)


class Problem:
    """A, B (and C) on the host and the device, and X = alpha op(A) op(B) + beta C in float64."""

    def __init__(self, dev, rng, dtype: str = "f32", transa: str = "N", transb: str = "N",
                 with_c: bool = True) -> None:
        self.dtype = dtype
        self.transa, self.transb = transa, transb
        a_shape = (M, K) if transa == "N" else (K, M)
        b_shape = (K, N) if transb == "N" else (N, K)
        self.a, self.b = host(rng, a_shape, dtype), host(rng, b_shape, dtype)
        self.c = host(rng, (M, N), dtype) if with_c else None
        self.alpha, self.beta = 0.75, (-0.5 if with_c else 0.0)
        self.da, self.db = dev.to_device(self.a), dev.to_device(self.b)
        self.dc = dev.to_device(self.c) if with_c else None
        oa = f64(self.a) if transa == "N" else f64(self.a).T
        ob = f64(self.b) if transb == "N" else f64(self.b).T
        self.oa, self.ob = oa, ob
        self.x = self.alpha * oa @ ob + (self.beta * f64(self.c) if with_c else 0)

    def run(self, dev, epilogue: str, **kw):
        d = dev.alloc((M, N), self.dtype, order="F")
        fut = dev.cublaslt.matmul(self.da, self.db, d, M, N, K, c=self.dc, alpha=self.alpha,
                                  beta=self.beta, transa=self.transa, transb=self.transb,
                                  epilogue=epilogue, **kw)
        fut.result()
        return f64(dev.copy_to_host(d).result())


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("epilogue", ["none", "relu", "gelu", "bias", "relu_bias", "gelu_bias"])
def test_forward_epilogues(dev, rng, dtype: str, epilogue: str) -> None:
    p = Problem(dev, rng, dtype, "T", "N")
    kw = {}
    x = p.x
    if "bias" in epilogue:
        bias = host(rng, (M,), dtype)
        kw["bias"] = dev.to_device(bias)
        x = x + f64(bias)[:, None]
    ref = {"none": x, "bias": x, "relu": np.maximum(x, 0), "relu_bias": np.maximum(x, 0),
           "gelu": gelu(x), "gelu_bias": gelu(x)}[epilogue]
    assert rel_err(p.run(dev, epilogue, **kw), ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gelu_aux_then_dgelu(dev, rng, dtype: str, with_bias: bool) -> None:
    fwd = Problem(dev, rng, dtype)
    kw: dict = {}
    x = fwd.x
    if with_bias:
        bias = host(rng, (M,), dtype)
        kw["bias"] = dev.to_device(bias)
        x = x + f64(bias)[:, None]
    aux = dev.alloc((M * N,), dtype)
    d = fwd.run(dev, "gelu_aux_bias" if with_bias else "gelu_aux", aux=aux, aux_ld=M, **kw)
    assert rel_err(d, gelu(x)) < TOL[dtype]
    pre = f64(dev.copy_to_host(aux).result()).reshape((M, N), order="F")
    assert rel_err(pre, x) < TOL[dtype]  # the aux output is the GELU input
    # backward: dX = (dY W) * gelu'(pre), and its bias gradient
    bwd = Problem(dev, rng, dtype, with_c=False)
    d2 = bwd.run(dev, "dgelu", aux=aux, aux_ld=M)
    ref = bwd.x * dgelu(pre)
    assert rel_err(d2, ref) < TOL[dtype] * 5
    grad = dev.alloc((M,), dtype)
    d3 = bwd.run(dev, "dgelu_bgrad", aux=aux, aux_ld=M, bias=grad)
    assert rel_err(d3, ref) < TOL[dtype] * 5
    assert rel_err(f64(dev.copy_to_host(grad).result()), ref.sum(axis=1)) < TOL[dtype] * 5


@pytest.mark.parametrize("with_bias", [False, True])
def test_relu_aux_then_drelu(dev, rng, with_bias: bool) -> None:
    fwd = Problem(dev, rng, "f32")
    kw: dict = {}
    x = fwd.x
    if with_bias:
        bias = host(rng, (M,), "f32")
        kw["bias"] = dev.to_device(bias)
        x = x + f64(bias)[:, None]
    aux_ld = 128  # bits per column: >= M and a multiple of 128
    mask = dev.alloc((aux_ld // 8 * N,), np.uint8)
    mask_bytes_before = dev.copy_to_host(mask).result()
    d = fwd.run(dev, "relu_aux_bias" if with_bias else "relu_aux", aux=mask, aux_ld=aux_ld, **kw)
    assert rel_err(d, np.maximum(x, 0)) < TOL["f32"]
    assert not np.array_equal(dev.copy_to_host(mask).result(), mask_bytes_before)
    bwd = Problem(dev, rng, "f32", with_c=False)
    ref = bwd.x * (x > 0)
    assert rel_err(bwd.run(dev, "drelu", aux=mask, aux_ld=aux_ld), ref) < TOL["f32"]
    grad = dev.alloc((M,), np.float32)
    assert rel_err(bwd.run(dev, "drelu_bgrad", aux=mask, aux_ld=aux_ld, bias=grad), ref) \
        < TOL["f32"]
    assert rel_err(f64(dev.copy_to_host(grad).result()), ref.sum(axis=1)) < TOL["f32"] * 5


@pytest.mark.parametrize("transb", ["N", "T"])
def test_bgrada(dev, rng, transb: str) -> None:
    p = Problem(dev, rng, "f32", "N", transb, with_c=False)
    grad = dev.alloc((M,), np.float32)
    assert rel_err(p.run(dev, "bgrada", bias=grad), p.x) < TOL["f32"]
    assert rel_err(f64(dev.copy_to_host(grad).result()), p.oa.sum(axis=1)) < TOL["f32"]


@pytest.mark.parametrize("transa", ["N", "T"])
def test_bgradb(dev, rng, transa: str) -> None:
    p = Problem(dev, rng, "f32", transa, "T", with_c=False)
    grad = dev.alloc((N,), np.float32)
    assert rel_err(p.run(dev, "bgradb", bias=grad), p.x) < TOL["f32"]
    assert rel_err(f64(dev.copy_to_host(grad).result()), p.ob.sum(axis=0)) < TOL["f32"]


def test_bias_gradient_layouts_without_kernels_are_refused(dev) -> None:
    a, b = dev.alloc((K, M), order="F"), dev.alloc((K, N), order="F")
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cublaslt.matmul(a, b, dev.alloc((M, N), order="F"), M, N, K, transa="T",
                            epilogue="bgrada",
                            bias=dev.alloc((M,)))
    assert info.value.field == "transa"
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cublaslt.matmul(dev.alloc((M, K), order="F"), b, dev.alloc((M, N), order="F"), M, N,
                            K, epilogue="bgradb",
                            bias=dev.alloc((N,)))
    assert info.value.field == "transb"


def test_tf32_compute(dev, rng) -> None:
    p = Problem(dev, rng, "f32")
    assert rel_err(p.run(dev, "none", compute="tf32"), p.x) < 5e-3


@pytest.mark.parametrize("a_type,b_type,d_type", [("e4m3", "e4m3", "bf16"),
                                                  ("e4m3", "e5m2", "f32"),
                                                  ("e5m2", "e4m3", "f16")])
def test_fp8_with_scales(dev, rng, a_type: str, b_type: str, d_type: str) -> None:
    if dev.props.compute_capability < (8, 9):
        pytest.skip("fp8 matmuls need compute capability 8.9+")
    a = np.asfortranarray((rng.standard_normal((K, M)) * 2).astype(gpumsg.as_dtype(a_type)))
    b = np.asfortranarray((rng.standard_normal((K, N)) * 2).astype(gpumsg.as_dtype(b_type)))
    sa, sb = 0.5, 0.25
    d = dev.alloc((M, N), d_type, order="F")
    dev.cublaslt.matmul(dev.to_device(a), dev.to_device(b), d, M, N, K, transa="T", transb="N",
                        scale_a=sa, scale_b=sb).result()
    ref = sa * sb * (f64(a).T @ f64(b))
    got = f64(dev.copy_to_host(d).result())
    # fp8 tensor cores accumulate with fewer bits than fp32 FMA: ~1e-4 relative for f32 out
    assert rel_err(got, ref) < {"bf16": 1e-2, "f16": 3e-3, "f32": 1e-3}[d_type]


def test_fp8_output_is_refused(dev) -> None:
    a, b = dev.alloc((K, M), "e4m3", order="F"), dev.alloc((K, N), "e4m3", order="F")
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cublaslt.matmul(a, b, dev.alloc((M, N), "e4m3", order="F"), M, N, K, transa="T")
    assert info.value.field == "d"


def test_plan_cache_hits_on_repeated_shapes(dev, rng) -> None:
    p = Problem(dev, rng, "f32", with_c=False)
    info0 = dev.cublaslt.cache_info().result()
    for _ in range(4):
        p.run(dev, "relu")
    info1 = dev.cublaslt.cache_info().result()
    # a repeat replayed as a CUDA graph looks no plan up (dev.cublas.replay_info)
    launches = dev.cublas.replay_info().result()["cublaslt"].get("launches", 0)
    assert info1["misses"] == info0["misses"] + 1
    assert info1["hits"] + launches >= info0["hits"] + 3
    p.run(dev, "gelu")  # another epilogue is another plan
    info2 = dev.cublaslt.cache_info().result()
    assert info2["misses"] == info1["misses"] + 1 and info2["size"] == info1["size"] + 1


BAD = [
    ("fp8 layout", dict(a=("e4m3", (M, K)), b=("e4m3", (K, N)), d=("bf16", (M, N))),
     dict(transa="N"), "transa"),
    ("both e5m2", dict(a=("e5m2", (K, M)), b=("e5m2", (K, N)), d=("bf16", (M, N))),
     dict(transa="T"), "b"),
    ("dtype mix", dict(a=("f32", (M, K)), b=("bf16", (K, N)), d=("f32", (M, N))), {}, "b"),
    ("missing bias", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(epilogue="bias"), "bias"),
    ("missing aux", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(epilogue="gelu_aux"), "aux"),
    ("beta without c", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(beta=1.0), "beta"),
    ("unknown epilogue", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(epilogue="swish"), "epilogue"),
    ("tf32 on bf16", dict(a=("bf16", (M, K)), b=("bf16", (K, N)), d=("bf16", (M, N))),
     dict(compute="tf32"), "compute"),
    ("scale on f32", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(scale_a=1.0), "scale_a"),
    # no C, yet its layout goes to cuBLASLt: a bad ldc once reached ctypes (ArgumentError)
    ("ldc a string without c", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(ldc="L"), "ldc"),
    ("ldc short without c", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(ldc=M - 1), "ldc"),
    ("aux_ld a string", dict(a=("f32", (M, K)), b=("f32", (K, N)), d=("f32", (M, N))),
     dict(aux_ld="L"), "aux_ld"),
]


@pytest.mark.parametrize("what,bufs,kw,field", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments(dev, what, bufs, kw, field) -> None:
    a, b, d = (dev.alloc(shape, dt, order="F") for dt, shape in (bufs["a"], bufs["b"], bufs["d"]))
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cublaslt.matmul(a, b, d, M, N, K, **kw)
    assert info.value.field == field
    x = np.arange(3.0)
    assert np.array_equal(dev.copy_to_host(dev.to_device(x)).result(), x)


def test_aux_mask_needs_its_size(dev) -> None:
    a, b, d = (dev.alloc((M, K), order="F"), dev.alloc((K, N), order="F"),
               dev.alloc((M, N), order="F"))
    with pytest.raises(gpumsg.InvalidMessage, match="aux_ld"):
        dev.cublaslt.matmul(a, b, d, M, N, K, epilogue="relu_aux",
                            aux=dev.alloc((1024,), np.uint8), aux_ld=100)
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cublaslt.matmul(a, b, d, M, N, K, epilogue="relu_aux",
                            aux=dev.alloc((16,), np.uint8), aux_ld=128)
    assert info.value.field == "aux"
