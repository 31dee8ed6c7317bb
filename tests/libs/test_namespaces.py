"""The Device's namespaces: raw ones named after their library, NumPy/SciPy/torch-level ones
with those packages' names only, each name in one namespace, the old names gone, and one
future per call."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import gpumsg
from gpumsg.libs import namespaces
from gpumsg.libs._answers import EighResult, QRResult, SVDResult
from gpumsg.libs._namespace import public_names, view

RAW = {"cublas", "cublaslt", "cusolver", "cufft", "curand", "cusparse", "cudnn", "nvrtc"}
LEVEL = {"linalg", "fft", "random", "sparse", "nn"}
#: torch.nn.functional names dev.nn may use (torch is not a dependency)
TORCH_F = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "softmax", "log_softmax", "layer_norm", "group_norm",
           "instance_norm", "batch_norm", "dropout", "scaled_dot_product_attention", "relu",
           "relu6", "elu", "leaky_relu", "sigmoid", "tanh", "silu", "gelu", "linear",
           "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "embedding", "pad", "interpolate", "cross_entropy",
           "nll_loss", "mse_loss"}
#: names a raw namespace and another may share (each library's own counters)
SHARED = {"cache_info", "replay_info", "matmul"}
#: torch.nn.functional names whose raw cuDNN form (gpumsg's arguments, statistics and
#: reserves) stays in dev.cudnn beside dev.nn's torch-shaped call
CUDNN_TWINS = {"conv1d", "conv2d", "conv3d", "softmax", "layer_norm", "group_norm",
               "instance_norm", "dropout", "scaled_dot_product_attention"}


def test_the_namespaces_are_the_contract() -> None:
    assert set(namespaces()) == RAW | LEVEL


def test_old_names_are_gone(backend) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        for old in ("blas", "dnn", "kernels"):
            assert not hasattr(dev, old)
        for name in RAW | LEVEL:
            assert type(getattr(dev, name)).__name__.lower().startswith(name[:2])


def test_numpy_level_names_are_numpy_names() -> None:
    ns = namespaces()
    assert public_names(ns["linalg"]) <= set(dir(np.linalg))
    assert {"matmul", "cholesky", "solve", "inv", "qr", "eigh", "svd", "det", "slogdet",
            "lstsq"} <= public_names(ns["linalg"])
    assert public_names(ns["fft"]) <= set(dir(np.fft))
    assert public_names(ns["random"]) <= set(dir(np.random)) | {"default_rng"}
    generator = set(dir(np.random.Generator))
    from gpumsg.libs.curand._numpy_random import Generator
    assert {n for n in vars(Generator) if not n.startswith("_")} <= generator | {"close"}
    assert public_names(ns["sparse"]) <= set(dir(scipy.sparse))
    assert public_names(ns["nn"]) <= TORCH_F


def test_each_name_lives_in_one_namespace() -> None:
    seen: dict[str, str] = {}
    for name, cls in namespaces().items():
        for method in public_names(cls) - SHARED - (CUDNN_TWINS if name in ("nn", "cudnn")
                                                    else set()):
            assert method not in seen, f"{method} in dev.{seen.get(method)} and dev.{name}"
            seen[method] = name
    raw = namespaces()
    assert {"potrf", "getrf", "syevj_batched", "gesvdj"} <= public_names(raw["cusolver"])
    assert {"plan", "execute", "cache_info"} <= public_names(raw["cufft"])
    assert "generator" in public_names(raw["curand"])
    assert {"gemm", "axpy", "geam"} <= public_names(raw["cublas"])
    assert "matmul" not in public_names(raw["cublas"])


def test_a_view_refuses_an_unknown_name() -> None:
    class Impl:
        def __init__(self, device):
            self._dev = device

        def a(self):
            return 1

    with pytest.raises(RuntimeError):
        view("V", "", (Impl,), ["a", "b"])
    v = view("V", "doc", (Impl,), {"c": "a"})
    assert public_names(v) == {"c"} and v(None).c() == 1 and v.__doc__ == "doc"


def _host(dev, buf):
    return dev.copy_to_host(buf).result(60)


def test_several_outputs_are_one_future_of_a_named_tuple(backend, rng) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        a = rng.standard_normal((6, 4)) + 0.1
        qr = dev.linalg.qr(dev.to_device(a))
        assert not isinstance(qr, tuple)
        q, r = res = qr.result(60)
        assert isinstance(res, QRResult) and res.Q is q and res.R is r
        np.testing.assert_allclose(_host(dev, q) @ _host(dev, r), a, rtol=1e-10, atol=1e-10)
        h = a.T @ a
        eig = dev.linalg.eigh(dev.to_device(h)).result(60)
        assert isinstance(eig, EighResult)
        np.testing.assert_allclose(_host(dev, eig.eigenvalues), np.linalg.eigvalsh(h),
                                   rtol=1e-9, atol=1e-9)
        svd = dev.linalg.svd(dev.to_device(a), full_matrices=False).result(60)
        assert isinstance(svd, SVDResult)
        np.testing.assert_allclose(_host(dev, svd.S), np.linalg.svd(a, compute_uv=False),
                                   rtol=1e-9)
        x = dev.to_device((rng.standard_normal(1000) + 2.0).astype(np.float32))
        drop = dev.cudnn.dropout(x, 0.25, 3)
        assert not isinstance(drop, tuple)
        y, reserve = drop.result(60)
        assert y.shape == (1000,) and reserve.dtype == np.uint8


def test_linalg_takes_stacks_as_numpy_does(backend, rng) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        m = rng.standard_normal((3, 5, 5))
        spd = m @ np.swapaxes(m, 1, 2) + 5 * np.eye(5)
        got = _host(dev, dev.linalg.cholesky(dev.to_device(spd)).result(60))
        np.testing.assert_allclose(got, np.linalg.cholesky(spd), rtol=1e-10, atol=1e-12)
        b = rng.standard_normal((3, 5))
        x = _host(dev, dev.linalg.solve(dev.to_device(spd), dev.to_device(b)).result(60))
        np.testing.assert_allclose(x, np.linalg.solve(spd, b[..., None])[..., 0], rtol=1e-9)
        w = dev.linalg.eigh(dev.to_device(spd)).result(60).eigenvalues
        np.testing.assert_allclose(_host(dev, w), np.linalg.eigvalsh(spd), rtol=1e-9)
        with pytest.raises(gpumsg.InvalidMessage) as info:
            dev.linalg.eigh(dev.to_device(spd), method="syevj")
        assert info.value.field == "a"


def test_sparse_takes_scipy_names(backend, rng) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        a = scipy.sparse.random(20, 30, density=0.2, random_state=rng, format="csr") + \
            scipy.sparse.eye(20, 30)
        m = dev.sparse.csr_array(a)
        assert m.format == "csr" and m.shape == (20, 30)
        np.testing.assert_allclose(m.to_scipy().toarray(), a.toarray())
