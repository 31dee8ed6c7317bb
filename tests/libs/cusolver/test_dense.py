"""cuSOLVER dense (``dev.linalg``): LU and Cholesky against NumPy/SciPy in float64/complex128 on
fresh random well-conditioned matrices, residual checks, deliberately singular and indefinite
matrices for the typed errors (raised on the future, outputs marked invalid), the raw
column-major messages with padded leading dimensions; det, slogdet, inv, lstsq and the solve
without pivoting."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.libs.cusolver._helpers import general, host, rand, rect, spd
from tests.libs.harness import FLOAT_DTYPES, assert_close, rel_err, tolerance, wide


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cholesky(dev, rng, dtype: str) -> None:
    n = 40
    a = spd(rng, n, dtype)
    L = host(dev, dev.linalg.cholesky(dev.to_device(a)))
    assert_close(L, np.linalg.cholesky(wide(a)), dtype, 10)
    assert np.all(np.triu(L, 1) == 0), "NumPy's cholesky has zeros above the diagonal"
    assert rel_err(wide(L) @ wide(L).conj().T, wide(a)) < tolerance(dtype, 10)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("rhs", [(), (3,)], ids=["vector", "matrix"])
def test_solve(dev, rng, dtype: str, rhs: tuple) -> None:
    n = 33
    a = general(rng, n, dtype)
    b = rand(rng, (n, *rhs), dtype)
    da, db = dev.to_device(a), dev.to_device(b)
    x = host(dev, dev.linalg.solve(da, db))
    assert x.shape == b.shape
    assert_close(x, np.linalg.solve(wide(a), wide(b)), dtype, 50)
    assert rel_err(wide(a) @ wide(x), wide(b)) < tolerance(dtype, 50)
    # the inputs are untouched
    assert np.array_equal(host(dev, da), a) and np.array_equal(host(dev, db), b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_inv(dev, rng, posted, dtype: str) -> None:
    """``inv`` solves against an identity made on the device: nothing of the matrix's size
    crosses from the host."""
    a = general(rng, 24, dtype)
    da = dev.to_device(a).result()
    sent = posted(dev, gpumsg.messages.CopyFromHost)
    inv = host(dev, dev.linalg.inv(da))
    assert not sent
    assert_close(inv, np.linalg.inv(wide(a)), dtype, 50)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_potrf_potrs_raw(dev, rng, dtype: str, uplo: str) -> None:
    n, nrhs, pad = 21, 4, 3
    lda = ldb = n + pad
    a = spd(rng, n, dtype)
    storage = rand(rng, (lda, n), dtype)  # random padding must survive
    storage[:n] = a
    fa = np.asfortranarray(storage)
    da = dev.to_device(fa)
    dev.cusolver.potrf(da, n, uplo, lda=lda).result(timeout=60)
    out = host(dev, da)
    assert np.array_equal(out[n:], fa[n:]), "padding rows were written"
    ref = np.linalg.cholesky(wide(a))
    if uplo == "L":
        assert_close(np.tril(out[:n]), ref, dtype, 10)
        assert np.array_equal(np.triu(out[:n], 1), np.triu(fa[:n], 1)), "other triangle"
    else:
        assert_close(np.triu(out[:n]), ref.conj().T, dtype, 10)
        assert np.array_equal(np.tril(out[:n], -1), np.tril(fa[:n], -1)), "other triangle"
    b = np.asfortranarray(rand(rng, (ldb, nrhs), dtype))
    db = dev.to_device(b)
    dev.cusolver.potrs(da, db, n, nrhs, uplo, lda=lda, ldb=ldb).result(timeout=60)
    x = host(dev, db)
    assert_close(x[:n], np.linalg.solve(wide(a), wide(b[:n])), dtype, 50)
    assert np.array_equal(x[n:], b[n:])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("pivot", [True, False], ids=["pivot", "nopivot"])
@pytest.mark.parametrize("trans", ["N", "T", "C"])
def test_getrf_getrs_raw(dev, rng, dtype: str, pivot: bool, trans: str) -> None:
    n, nrhs = 26, 3
    a = np.asfortranarray(general(rng, n, dtype))
    da = dev.to_device(a)
    ipiv = dev.alloc((n,), np.int64) if pivot else None
    dev.cusolver.getrf(da, n, n, ipiv).result(timeout=60)
    lu = wide(host(dev, da))
    L, U = np.tril(lu, -1) + np.eye(n), np.triu(lu)
    perm = np.arange(n)
    if pivot:
        piv = host(dev, ipiv)
        assert piv.min() >= 1 and piv.max() <= n
        for i, p in enumerate(piv):  # LAPACK's 1-based row interchanges, in order
            perm[[i, p - 1]] = perm[[p - 1, i]]
    assert rel_err(L @ U, wide(a)[perm]) < tolerance(dtype, 20)
    b = np.asfortranarray(rand(rng, (n, nrhs), dtype))
    db = dev.to_device(b)
    dev.cusolver.getrs(da, db, n, nrhs, ipiv, trans).result(timeout=60)
    op = {"N": wide(a), "T": wide(a).T, "C": wide(a).conj().T}[trans]
    assert_close(host(dev, db), np.linalg.solve(op, wide(b)), dtype, 50)


def test_getrf_rectangular(dev, rng) -> None:
    m, n = 30, 18
    a = np.asfortranarray(rand(rng, (m, n), "f64"))
    da, ipiv = dev.to_device(a), dev.alloc((n,), np.int64)
    dev.cusolver.getrf(da, m, n, ipiv).result(timeout=60)
    from scipy.linalg import lu_factor
    lu, piv = lu_factor(a)
    assert_close(host(dev, da), lu, "f64", 10)
    assert np.array_equal(host(dev, ipiv), piv + 1)


# -- numerical failure: typed errors on the future, outputs invalid


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_singular_lu(dev, rng, dtype: str) -> None:
    n, k = 12, 5
    a = general(rng, n, dtype)
    a[k, :] = 0  # solve factors A^T: its column k is zero, so U[k, k] is exactly zero
    fut = dev.linalg.solve(dev.to_device(a), dev.to_device(rand(rng, (n,), dtype)))
    with pytest.raises(gpumsg.SingularMatrix) as info:
        fut.result(timeout=60)
    assert info.value.index == k + 1 and info.value.batch_item is None
    assert isinstance(info.value, gpumsg.LinAlgError)


def test_singular_raw_marks_outputs_failed(dev, rng) -> None:
    n, k = 10, 3
    a = np.asfortranarray(general(rng, n, "f64"))
    a[k, :] = 0  # row k of A is column k of A^T; no pivoting: zero pivot at k
    da = dev.to_device(a)
    with pytest.raises(gpumsg.SingularMatrix) as info:
        dev.cusolver.getrf(da, n, n).result(timeout=60)
    assert info.value.index == k + 1
    with pytest.raises(gpumsg.DependencyFailed) as dep:
        dev.copy_to_host(da).result(timeout=60)
    assert isinstance(dep.value.__cause__, gpumsg.SingularMatrix)
    # a fresh write makes the buffer valid again, and the device serves
    dev.copy(da, dev.to_device(a)).result(timeout=60)
    assert np.array_equal(host(dev, da), a)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_not_positive_definite(dev, rng, dtype: str) -> None:
    n, k = 16, 9
    a = wide(spd(rng, n, dtype))
    # make the leading minor of order k+1 indefinite, the first k stay definite
    a[k, k] = -abs(a[k, k]) - n
    a = a.astype(gpumsg.as_dtype(dtype))
    fut = dev.linalg.cholesky(dev.to_device(a))
    with pytest.raises(gpumsg.NotPositiveDefinite) as info:
        fut.result(timeout=60)
    assert info.value.index == k + 1
    with pytest.raises(gpumsg.DependencyFailed):
        dev.copy_to_host(fut.buffer).result(timeout=60)
    # an unrelated operation still works afterwards
    L = host(dev, dev.linalg.cholesky(dev.to_device(spd(rng, n, dtype))))
    assert np.isfinite(wide(L)).all()


def test_workspace_size_cached(dev, rng) -> None:
    n = 20 + int(rng.integers(0, 1000))  # a shape no other test used
    before = dev.cusolver.cache_info().result(timeout=60)
    for _ in range(3):
        dev.linalg.cholesky(dev.to_device(spd(rng, n, "f64"))).result(timeout=60)
    after = dev.cusolver.cache_info().result(timeout=60)
    assert after["misses"] == before["misses"] + 1
    assert after["hits"] == before["hits"] + 2


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_cholesky_batched(dev, rng, dtype: str) -> None:
    batch, n = 37, 9
    stack = np.stack([spd(rng, n, dtype) for _ in range(batch)])
    # only the lower triangles are read (NumPy's contract): junk above the diagonal
    stored = np.tril(stack) + np.triu(rand(rng, stack.shape, dtype), 1)
    d_stored = dev.to_device(stored)
    L = host(dev, dev.linalg.cholesky(d_stored))
    assert np.array_equal(host(dev, d_stored), stored), "the input was modified"
    assert L.shape == stack.shape
    for i in range(batch):  # item by item
        assert_close(L[i], np.linalg.cholesky(wide(stack[i])), dtype, 10)
    assert np.all(np.triu(L, 1) == 0)


def test_cholesky_batched_failing_items(dev, rng) -> None:
    batch, n = 20, 6
    stack = np.stack([spd(rng, n, "f64") for _ in range(batch)])
    bad_items, k = sorted(rng.choice(batch, 3, replace=False).tolist()), 4
    for i in bad_items:
        stack[i, k, k] = -10.0
    fut = dev.linalg.cholesky(dev.to_device(stack))
    with pytest.raises(gpumsg.NotPositiveDefinite) as info:
        fut.result(timeout=60)
    assert info.value.batch_item == bad_items[0] and info.value.index == k + 1
    assert info.value.failed_items == bad_items
    with pytest.raises(gpumsg.DependencyFailed):
        dev.copy_to_host(fut.buffer).result(timeout=60)


def test_potrf_batched_raw_stride(dev, rng) -> None:
    batch, n, lda, stride = 5, 7, 9, 70  # padding inside and between matrices survives
    data = rand(rng, (stride * batch,), "c128")
    mats = [spd(rng, n, "c128") for _ in range(batch)]
    for i, m in enumerate(mats):
        view = data[i * stride:i * stride + lda * n].reshape(n, lda).T  # column-major, ld 9
        view[:n] = m
    da = dev.to_device(data)
    dev.cusolver.potrf_batched(da, n, batch, "L", lda=lda, stride=stride).result(timeout=60)
    out = host(dev, da)
    for i, m in enumerate(mats):
        got = out[i * stride:i * stride + lda * n].reshape(n, lda).T
        assert_close(np.tril(got[:n]), np.linalg.cholesky(wide(m)), "c128", 10)
        assert np.array_equal(got[n:], data[i * stride:i * stride + lda * n].reshape(n, lda).T[n:])
        tail = slice(i * stride + lda * n, (i + 1) * stride)
        assert np.array_equal(out[tail], data[tail])


# -- det, slogdet, inv, lstsq, solve without pivoting


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_det_slogdet(dev, rng, dtype: str) -> None:
    n = 18
    a = rand(rng, (n, n), dtype)
    da = dev.to_device(a)
    sign, logabs = dev.linalg.slogdet(da).result(timeout=60)
    rsign, rlog = np.linalg.slogdet(wide(a))
    assert abs(sign - rsign) < tolerance(dtype, 1e4)
    assert abs(logabs - rlog) < tolerance(dtype, 100) * max(1.0, abs(rlog))
    det = dev.linalg.det(da).result(timeout=60)
    assert abs(det - np.linalg.det(wide(a))) < tolerance(dtype, 1e3) * abs(np.linalg.det(wide(a)))


def test_det_singular_is_zero(dev, rng) -> None:
    a = rand(rng, (9, 9), "f64")
    a[:, 4] = 0  # LU keeps the zero row of the transpose zero: an exact zero pivot
    assert dev.linalg.slogdet(dev.to_device(a)).result(timeout=60) == (0.0, float("-inf"))
    assert dev.linalg.det(dev.to_device(a)).result(timeout=60) == 0.0


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_inv_pos(dev, rng, dtype: str) -> None:
    n = 21
    a = spd(rng, n, dtype)
    stored = np.tril(a) + np.triu(rand(rng, (n, n), dtype), 1)  # only the lower triangle read
    inv = host(dev, dev.linalg.inv(dev.to_device(stored), assume_a="pos"))
    assert_close(inv, np.linalg.inv(wide(a)), dtype, 50)


def test_inv_pos_indefinite(dev, rng) -> None:
    a = spd(rng, 10, "f64")
    a[3, 3] = -5.0
    with pytest.raises(gpumsg.NotPositiveDefinite) as info:
        dev.linalg.inv(dev.to_device(a), assume_a="pos").result(timeout=60)
    assert info.value.index == 4


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("rhs", [(), (3,)], ids=["vector", "matrix"])
def test_lstsq(dev, rng, dtype: str, rhs: tuple) -> None:
    m, n = 40, 15
    a, b = rect(rng, m, n, dtype), rand(rng, (m, *rhs), dtype)
    x = host(dev, dev.linalg.lstsq(dev.to_device(a), dev.to_device(b)))
    ref = np.linalg.lstsq(wide(a), wide(b), rcond=None)[0]
    assert x.shape == ref.shape
    assert_close(x, ref, dtype, 100)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_solve_without_pivoting(dev, rng, dtype: str) -> None:
    n = 25
    a, b = general(rng, n, dtype), rand(rng, (n, 2), dtype)
    x = host(dev, dev.linalg.solve(dev.to_device(a), dev.to_device(b), pivot=False))
    assert_close(x, np.linalg.solve(wide(a), wide(b)), dtype, 50)
    # a zero leading entry: no pivoting finds U[0, 0] == 0, pivoting solves it
    a2 = general(rng, n, dtype)
    a2[0, 0] = 0
    with pytest.raises(gpumsg.SingularMatrix) as info:
        dev.linalg.solve(dev.to_device(a2), dev.to_device(b), pivot=False).result(timeout=60)
    assert info.value.index == 1
    x2 = host(dev, dev.linalg.solve(dev.to_device(a2), dev.to_device(b)))
    assert_close(x2, np.linalg.solve(wide(a2), wide(b)), dtype, 100)
