"""The fill modes the NumPy-shaped Hermitian factorizations of ``dev.linalg`` run, under each
setting of their module constants (``CHOLESKY_FILL``, ``EIGH_FILL``): the uplo sent to
cuSOLVER, one triangle read (the other holds junk), the answers against NumPy float64."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.libs.cusolver import _client
from gpumsg.messages.cusolver import Potrf, Potri, Syevd, Syevj, Sygvd
from tests.libs.cusolver._helpers import hermitian, host, rand, spd
from tests.libs.harness import FLOAT_DTYPES, assert_close, rel_err, tolerance, wide


def _junk_above(rng, a: np.ndarray, dtype: str) -> np.ndarray:
    """``a``'s lower triangle with random values above it (which must not be read)."""
    return np.tril(a) + np.triu(rand(rng, a.shape, dtype), 1)


def _junk_below(rng, a: np.ndarray, dtype: str) -> np.ndarray:
    return np.triu(a) + np.tril(rand(rng, a.shape, dtype), -1)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fill", ["L", "U"])
def test_cholesky_and_positive_inverse(dev, rng, posted, monkeypatch, dtype: str,
                                       fill: str) -> None:
    monkeypatch.setattr(_client, "CHOLESKY_FILL", fill)
    n = 37
    a = spd(rng, n, dtype)
    stored = _junk_above(rng, a, dtype)
    sent = posted(dev, Potrf, Potri)
    low = host(dev, dev.linalg.cholesky(dev.to_device(stored)))
    assert_close(low, np.linalg.cholesky(wide(a)), dtype, 10)
    assert np.all(np.triu(low, 1) == 0)
    inv = host(dev, dev.linalg.inv(dev.to_device(stored), assume_a="pos"))
    assert_close(inv, np.linalg.inv(wide(a)), dtype, 50)
    assert np.array_equal(inv, inv.conj().T)  # exactly Hermitian, as the inverse is
    assert [m.uplo for m in sent] == [fill] * 3
    bad = a.copy()
    bad[4, 4] = -1.0
    for call in (dev.linalg.cholesky, lambda b: dev.linalg.inv(b, assume_a="pos")):
        with pytest.raises(gpumsg.NotPositiveDefinite) as info:
            call(dev.to_device(bad)).result(timeout=60)
        assert info.value.index == 5


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fill", ["flip", "same"])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dev, rng, posted, monkeypatch, dtype: str, fill: str, uplo: str) -> None:
    monkeypatch.setattr(_client, "EIGH_FILL", fill)
    n = 29
    h = hermitian(rng, n, dtype)
    junk = _junk_above if uplo == "L" else _junk_below
    stored = junk(rng, h, dtype)
    ran = uplo if fill == "same" else {"L": "U", "U": "L"}[uplo]
    sent = posted(dev, Syevd, Syevj, Sygvd)
    ref = np.linalg.eigvalsh(wide(h))
    for method in ("syevd", "syevj"):
        w_buf, v_buf = dev.linalg.eigh(dev.to_device(stored), uplo=uplo,
                                       method=method).result(timeout=60)
        w, v = host(dev, w_buf), wide(host(dev, v_buf))
        assert_close(w, ref, dtype, 20)
        assert rel_err(wide(h) @ v, v * w) < tolerance(dtype, 50)
        assert rel_err(v.conj().T @ v, np.eye(n)) < tolerance(dtype, 50)
    b = spd(rng, n, dtype)
    w_buf, v_buf = dev.linalg.eigh(dev.to_device(stored), uplo=uplo,
                                   b=dev.to_device(junk(rng, b, dtype))).result(timeout=60)
    w, v = host(dev, w_buf), wide(host(dev, v_buf))
    import scipy.linalg

    assert_close(w, scipy.linalg.eigh(wide(h), wide(b), eigvals_only=True), dtype, 50)
    assert rel_err(wide(h) @ v, wide(b) @ v * w) < tolerance(dtype, 100)
    assert [m.uplo for m in sent] == [ran] * 3


def test_unknown_settings_are_refused(dev, monkeypatch) -> None:
    a = dev.to_device(np.eye(3))
    monkeypatch.setattr(_client, "CHOLESKY_FILL", "X")
    with pytest.raises(gpumsg.InvalidMessage):
        dev.linalg.cholesky(a)
    monkeypatch.setattr(_client, "EIGH_FILL", "L")
    with pytest.raises(gpumsg.InvalidMessage):
        dev.linalg.eigh(a)
