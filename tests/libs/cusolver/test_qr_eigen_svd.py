"""cuSOLVER QR (geqrf, orgqr, ormqr), the Hermitian eigensolvers (standard and generalized,
divide and conquer and Jacobi) and the SVD against NumPy in float64/complex128 on fresh random
matrices, with the typed errors of an indefinite B and of a Jacobi sweep that does not
converge."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.libs.cusolver._helpers import hermitian, host, msgs_real, rand, rect, spd
from tests.libs.harness import FLOAT_DTYPES, assert_close, rel_err, tolerance, wide


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(40, 25), (25, 40), (30, 30)], ids=["tall", "wide", "square"])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(dev, rng, dtype: str, shape: tuple, mode: str) -> None:
    m, n = shape
    a = rect(rng, m, n, dtype)
    fut = dev.linalg.qr(dev.to_device(a), mode=mode)
    ref = np.linalg.qr(wide(a), mode=mode)
    if mode == "r":
        R = host(dev, fut)
        assert R.shape == ref.shape
        assert np.all(np.tril(R, -1) == 0), "R has exact zeros below the diagonal"
        # R is unique up to the signs of its rows: compare |R| and R^H R = A^H A
        assert_close(np.abs(R), np.abs(ref), dtype, 50)
        assert rel_err(wide(R).conj().T @ wide(R), wide(a).conj().T @ wide(a)) < tolerance(
            dtype, 50)
        return
    q_buf, r_buf = fut.result(timeout=60)
    Q, R = host(dev, q_buf), host(dev, r_buf)
    assert Q.shape == ref[0].shape and R.shape == ref[1].shape
    assert np.all(np.tril(R, -1) == 0)
    assert rel_err(wide(Q) @ wide(R), wide(a)) < tolerance(dtype, 20)  # ||QR - A||
    k = Q.shape[1]
    assert rel_err(wide(Q).conj().T @ wide(Q), np.eye(k)) < tolerance(dtype, 20)
    # LAPACK's signs on both sides
    assert_close(R, ref[1], dtype, 100)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("side", ["L", "R"])
def test_geqrf_ormqr_raw(dev, rng, dtype: str, side: str) -> None:
    m, n, pad = 23, 14, 2
    lda = m + pad
    storage = np.asfortranarray(rand(rng, (lda, n), dtype))
    da, tau = dev.to_device(storage), dev.alloc((n,), dtype)
    dev.cusolver.geqrf(da, tau, m, n, lda=lda).result(timeout=60)
    fac = host(dev, da)
    assert np.array_equal(fac[m:], storage[m:]), "padding rows were written"
    # Q from the reflectors (orgqr on a copy), then ormqr against Q
    qbuf = dev.to_device(np.asfortranarray(fac))
    dev.cusolver.orgqr(qbuf, tau, m, n, n, lda=lda).result(timeout=60)
    Q = wide(host(dev, qbuf)[:m])
    R = np.triu(wide(fac[:n]))
    assert rel_err(Q @ R, wide(storage[:m])) < tolerance(dtype, 20)
    cm, cn = (m, 5) if side == "L" else (5, m)
    c = np.asfortranarray(rand(rng, (cm, cn), dtype))
    trans = "T" if dtype in ("f32", "f64") else "C"
    dc = dev.to_device(c)
    # full Q (m x m) of the reflectors: complete them with orgqr on an m x m copy
    full = np.zeros((lda, m), fac.dtype, order="F")
    full[:, :n] = fac
    dq = dev.to_device(full)
    dev.cusolver.orgqr(dq, tau, m, m, n, lda=lda).result(timeout=60)
    Qf = wide(host(dev, dq)[:m])
    dev.cusolver.ormqr(da, tau, dc, cm, cn, n, side=side, trans=trans, lda=lda).result(timeout=60)
    ref = Qf.conj().T @ wide(c) if side == "L" else wide(c) @ Qf.conj().T
    assert_close(host(dev, dc), ref, dtype, 50)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("method", ["syevd", "syevj"])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dev, rng, dtype: str, method: str, uplo: str) -> None:
    n = 30
    a = hermitian(rng, n, dtype)
    junk = rand(rng, (n, n), dtype)  # the other triangle is not read
    stored = np.tril(a) + np.triu(junk, 1) if uplo == "L" else np.triu(a) + np.tril(junk, -1)
    w_buf, v_buf = dev.linalg.eigh(dev.to_device(stored), uplo=uplo, method=method).result(
        timeout=60)
    w, v = host(dev, w_buf), host(dev, v_buf)
    assert w.dtype == np.dtype(gpumsg.as_dtype(msgs_real(dtype)))
    assert_close(w, np.linalg.eigvalsh(wide(a)), dtype, 20)
    assert np.all(np.diff(w) >= 0), "ascending"
    # eigen residual ||A V - V diag(w)|| and orthonormality
    assert rel_err(wide(a) @ wide(v), wide(v) * wide(w)) < tolerance(dtype, 50)
    assert rel_err(wide(v).conj().T @ wide(v), np.eye(n)) < tolerance(dtype, 20)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_eigh_generalized(dev, rng, dtype: str) -> None:
    n = 20
    a, b = hermitian(rng, n, dtype), spd(rng, n, dtype)
    w_buf, v_buf = dev.linalg.eigh(dev.to_device(a), b=dev.to_device(b)).result(timeout=60)
    w, v = wide(host(dev, w_buf)), wide(host(dev, v_buf))
    from scipy.linalg import eigh
    assert_close(w, eigh(wide(a), wide(b), eigvals_only=True), dtype, 50)
    assert rel_err(wide(a) @ v, wide(b) @ v * w) < tolerance(dtype, 100)
    assert rel_err(v.conj().T @ wide(b) @ v, np.eye(n)) < tolerance(dtype, 50)


def test_eigh_generalized_b_indefinite(dev, rng) -> None:
    n, k = 12, 6
    a, b = hermitian(rng, n, "f64"), spd(rng, n, "f64")
    b[k, k] = -50.0
    fut = dev.linalg.eigh(dev.to_device(a), b=dev.to_device(b))
    with pytest.raises(gpumsg.NotPositiveDefinite) as info:
        fut.result(timeout=60)
    assert info.value.index == k + 1


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape", [(30, 20), (20, 30), (24, 24)], ids=["tall", "wide", "square"])
@pytest.mark.parametrize("method", ["gesvdj", "gesvd"])
@pytest.mark.parametrize("full", [True, False], ids=["full", "reduced"])
def test_svd(dev, rng, dtype: str, shape: tuple, method: str, full: bool) -> None:
    m, n = shape
    a = rect(rng, m, n, dtype)
    u_buf, s_buf, vh_buf = dev.linalg.svd(dev.to_device(a), full_matrices=full,
                                          method=method).result(timeout=60)
    u, s, vh = wide(host(dev, u_buf)), wide(host(dev, s_buf)), wide(host(dev, vh_buf))
    ru, rs, rvh = np.linalg.svd(wide(a), full_matrices=full)
    assert u.shape == ru.shape and s.shape == rs.shape and vh.shape == rvh.shape
    assert_close(s, rs, dtype, 20)
    k = min(m, n)
    # ||U S V^H - A||, orthonormal columns / rows
    assert rel_err((u[:, :k] * s) @ vh[:k], wide(a)) < tolerance(dtype, 50)
    assert rel_err(u.conj().T @ u, np.eye(u.shape[1])) < tolerance(dtype, 50)
    assert rel_err(vh @ vh.conj().T, np.eye(vh.shape[0])) < tolerance(dtype, 50)


@pytest.mark.parametrize("method", ["gesvdj", "gesvd"])
@pytest.mark.parametrize("shape", [(30, 20), (20, 30)], ids=["tall", "wide"])
def test_svd_values_only(dev, rng, method: str, shape: tuple) -> None:
    a = rect(rng, *shape, "f64")
    s = host(dev, dev.linalg.svd(dev.to_device(a), compute_uv=False, method=method))
    assert_close(s, np.linalg.svd(a, compute_uv=False), "f64", 20)


@pytest.mark.parametrize("dtype", ["f64", "c64"])
def test_gesvdj_raw_econ_padded(dev, rng, dtype: str) -> None:
    m, n, pad = 17, 11, 3
    a = np.asfortranarray(rand(rng, (m + pad, n), dtype))
    da = dev.to_device(a)
    s, u, v = dev.alloc((n,), msgs_real(dtype)), dev.alloc((m + pad, n), dtype, order="F"), \
        dev.alloc((n, n), dtype, order="F")
    dev.cusolver.gesvdj(da, s, m, n, u, v, econ=True, lda=m + pad, ldu=m + pad).result(
        timeout=60)
    U, S, V = wide(host(dev, u))[:m], wide(host(dev, s)), wide(host(dev, v))
    assert rel_err((U * S) @ V.conj().T, wide(a[:m])) < tolerance(dtype, 50)


def test_jacobi_did_not_converge(dev, rng) -> None:
    n = 24
    a = np.asfortranarray(hermitian(rng, n, "f64"))
    w = dev.alloc((n,), "f64")
    with pytest.raises(gpumsg.DidNotConverge) as info:
        dev.cusolver.syevj(dev.to_device(a), w, n, max_sweeps=1).result(timeout=60)
    assert info.value.index == n + 1
    with pytest.raises(gpumsg.DependencyFailed):
        dev.copy_to_host(w).result(timeout=60)
    s = dev.alloc((n,), "f64")
    fut = dev.cusolver.gesvdj(dev.to_device(np.asfortranarray(rect(rng, n, n, "f64"))), s, n, n,
                              vectors=False, max_sweeps=1)
    with pytest.raises(gpumsg.DidNotConverge) as info:
        fut.result(timeout=60)
    assert info.value.index == n + 1
