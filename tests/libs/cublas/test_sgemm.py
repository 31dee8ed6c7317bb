"""SGEMM against NumPy float64 on fresh random data: transposes, alpha/beta, padded leading
dimensions, beta=0 not reading C, degenerate sizes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpumsg
from tests.conftest import rel_err

# fp32 with k in the hundreds: the relative error of a correct product is ~1e-7..1e-6
TOL = 2e-5


def stored(rng, rows: int, cols: int, ld: int) -> tuple[np.ndarray, np.ndarray]:
    """A column-major rows x cols matrix inside an ld x cols array (padding rows random)."""
    full = rng.standard_normal((ld, cols)).astype(np.float32, order="F")
    return full, full[:rows, :]


@pytest.mark.parametrize("transa,transb", list(itertools.product("NTC", "NT")))
def test_sgemm_matches_numpy(dev, rng, transa: str, transb: str) -> None:
    m, n, k = 67, 45, 129
    pad = 3
    a_rows, a_cols = (m, k) if transa == "N" else (k, m)
    b_rows, b_cols = (k, n) if transb == "N" else (n, k)
    a_full, a = stored(rng, a_rows, a_cols, a_rows + pad)
    b_full, b = stored(rng, b_rows, b_cols, b_rows + pad)
    c_full, c = stored(rng, m, n, m + pad)
    alpha, beta = float(rng.uniform(0.5, 2)), float(rng.uniform(-1.5, -0.5))
    da, db, dc = dev.to_device(a_full), dev.to_device(b_full), dev.to_device(c_full)
    dev.sgemm(da, db, dc, m, n, k, alpha, beta, transa, transb, lda=a_rows + pad,
              ldb=b_rows + pad, ldc=m + pad)
    out = dev.copy_to_host(dc).result()
    opa = a.astype(np.float64) if transa == "N" else a.astype(np.float64).T
    opb = b.astype(np.float64) if transb == "N" else b.astype(np.float64).T
    ref = alpha * opa @ opb + beta * c.astype(np.float64)
    assert rel_err(out[:m, :], ref) < TOL
    # the padding rows of C are untouched
    np.testing.assert_array_equal(out[m:, :], c_full[m:, :])


def test_beta_zero_ignores_nan_in_c(dev, rng) -> None:
    a = rng.standard_normal((32, 16)).astype(np.float32, order="F")
    b = rng.standard_normal((16, 8)).astype(np.float32, order="F")
    c = dev.alloc((32, 8), np.float32)
    dev.memset(c, 0xFF)  # all-ones bits: NaN in every element
    dev.sgemm(dev.to_device(a), dev.to_device(b), c, 32, 8, 16, alpha=1.0, beta=0.0)
    out = dev.copy_to_host(c).result()
    assert not np.isnan(out).any()
    assert rel_err(out, a.astype(np.float64) @ b) < TOL


def test_k_zero_scales_c(dev, rng) -> None:
    c_host = rng.standard_normal((8, 8)).astype(np.float32, order="F")
    a = dev.alloc((8, 1), np.float32)
    b = dev.alloc((1, 8), np.float32)
    c = dev.to_device(c_host)
    dev.sgemm(a, b, c, 8, 8, 0, alpha=1.0, beta=2.0).result()
    np.testing.assert_allclose(dev.copy_to_host(c).result(), 2 * c_host, rtol=1e-6)


def test_wrong_dtype_is_refused_and_device_keeps_serving(dev, rng) -> None:
    a = dev.to_device(rng.standard_normal((4, 4)))  # float64
    b = dev.alloc((4, 4), np.float32)
    c = dev.alloc((4, 4), np.float32)
    with pytest.raises(gpumsg.InvalidMessage, match="f64"):
        dev.sgemm(a, b, c, 4, 4, 4)
    assert dev.stats().result().generation == 0
