"""Level 1, 2 and 3 BLAS against NumPy float64/complex128 on random data, with strides, padded
leading dimensions and alpha/beta; reductions answer Python scalars without stalling the
device."""

from __future__ import annotations

import time

import numpy as np
import pytest
from harness import rel_err, tolerance, wide
from test_cublas_gemm import opnd, rand, scalars

import gpumsg

DTYPES = ["f32", "f64", "c64", "c128"]
TOL = {d: tolerance(d) for d in DTYPES}


# -- level 1 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_axpy_scal_copy_swap_rot(dev, rng, dtype: str) -> None:
    n, incx, incy = 50, 2, 3
    x = rand(rng, (n * incx,), dtype)
    y = rand(rng, (n * incy,), dtype)
    alpha, _ = scalars(rng, dtype)
    dx, dy = dev.to_device(x), dev.to_device(y)
    dev.blas.axpy(dx, dy, alpha, n, incx, incy)
    expect_y = wide(y)
    expect_y[::incy] += alpha * wide(x)[::incx]
    assert rel_err(dev.copy_to_host(dy).result(), expect_y) < TOL[dtype]
    dev.blas.scal(dx, alpha, n, incx)
    expect_x = wide(x)
    expect_x[::incx] *= alpha
    assert rel_err(dev.copy_to_host(dx).result(), expect_x) < TOL[dtype]
    # copy then swap
    z = dev.alloc((n,), dtype)
    dev.blas.copy(dx, z, n, incx, 1)
    assert rel_err(dev.copy_to_host(z).result(), expect_x[::incx]) < TOL[dtype]
    before_y = dev.copy_to_host(dy).result()
    dev.blas.swap(z, dy, n, 1, incy)
    assert rel_err(dev.copy_to_host(z).result(), wide(before_y)[::incy]) < TOL[dtype]
    # rotation
    c, s = 0.6, (0.8 if dtype in ("f32", "f64") else complex(0.6, 0.53))
    p, q = rand(rng, (n,), dtype), rand(rng, (n,), dtype)
    dp, dq = dev.to_device(p), dev.to_device(q)
    dev.blas.rot(dp, dq, c, s)
    assert rel_err(dev.copy_to_host(dp).result(), c * wide(p) + s * wide(q)) < TOL[dtype]
    assert rel_err(dev.copy_to_host(dq).result(), c * wide(q) - np.conj(s) * wide(p)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_return_python_scalars(dev, rng, dtype: str) -> None:
    n, incx = 300, 3
    x = rand(rng, (n * incx,), dtype)
    y = rand(rng, (n,), dtype)
    dx, dy = dev.to_device(x), dev.to_device(y)
    xs = wide(x)[::incx]
    dot = dev.blas.dot(dx, dy, n, incx).result()
    assert isinstance(dot, complex if dtype in ("c64", "c128") else float)
    assert abs(dot - np.sum(xs * wide(y))) < TOL[dtype] * 50 * np.sqrt(n)
    if dtype in ("c64", "c128"):
        dotc = dev.blas.dotc(dx, dy, n, incx).result()
        assert abs(dotc - np.sum(xs.conj() * wide(y))) < TOL[dtype] * 50 * np.sqrt(n)
    nrm = dev.blas.nrm2(dx, n, incx).result()
    assert isinstance(nrm, float) and abs(nrm - np.linalg.norm(xs)) < TOL[dtype] * 10 * nrm
    asum = dev.blas.asum(dx, n, incx).result()
    assert abs(asum - np.sum(np.abs(xs.real) + np.abs(xs.imag))) < TOL[dtype] * 10 * asum
    mag = np.abs(xs.real) + np.abs(xs.imag)
    assert dev.blas.iamax(dx, n, incx).result() == int(np.argmax(mag))  # 0-based
    assert dev.blas.iamin(dx, n, incx).result() == int(np.argmin(mag))


def test_repeated_reductions_follow_their_inputs(dev, rng, backend: str) -> None:
    """Round trips of the same reductions (each gets back the result slot it gave back, so on a
    GPU the second is captured and the rest are replayed CUDA graphs): fresh inputs written
    into the same buffers every round, each result against float64."""
    n = 4096
    dx, dy = dev.alloc((n,), np.float32).result(), dev.alloc((n,), np.float32).result()
    for _ in range(5):
        x, y = rand(rng, (n,), "f32"), rand(rng, (n,), "f32")
        dev.copy_from_host(dx, x)
        dev.copy_from_host(dy, y)
        xd, yd = wide(x), wide(y)
        dot = dev.blas.dot(dx, dy).result()
        assert abs(dot - np.dot(xd, yd)) < TOL["f32"] * 50 * np.sqrt(n) * np.abs(xd).max()
        nrm = dev.blas.nrm2(dx).result()
        assert abs(nrm - np.linalg.norm(xd)) < TOL["f32"] * 10 * nrm
        assert dev.blas.iamax(dx).result() == int(np.argmax(np.abs(xd)))
    info = dev.blas.replay_info().result()["cublas"]
    if backend == "cuda":
        red = info["reductions"]
        assert red["refused"] == "" and red["captures"] >= 3 and red["launches"] >= 9, red
        assert red["with_memory_nodes"] == 0, red  # no workspace allocated per replay


def test_reductions_do_not_stall_the_device(dev, rng) -> None:
    x = rand(rng, (1000,), "f64")
    dx = dev.to_device(x).result()
    dev.inject_fault("hang", seconds=0.6)  # the compute stream is busy for a while
    t0 = time.perf_counter()
    futures = [dev.blas.dot(dx, dx) for _ in range(20)]
    issued = time.perf_counter() - t0
    stats = dev.stats().result(timeout=5)  # the device thread answers meanwhile
    answered = time.perf_counter() - t0
    assert issued < 0.3 and answered < 0.4, (issued, answered)
    assert not futures[0].done()
    assert stats.ops_in_flight >= 20
    expect = float(np.dot(x, x))
    for f in futures:
        assert abs(f.result(timeout=30) - expect) < 1e-9 * expect


def test_level1_argument_checks(dev) -> None:
    x = dev.alloc((10,), np.float32)
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.blas.axpy(x, dev.alloc((10,), np.float32), n=6, incx=2)
    assert info.value.field == "x"
    with pytest.raises(gpumsg.InvalidMessage):
        dev.blas.dot(x, dev.alloc((10,), np.float64))
    with pytest.raises(gpumsg.InvalidMessage):
        dev.blas.scal(x, 1j)
    with pytest.raises(gpumsg.InvalidMessage):
        dev.blas.nrm2(dev.alloc((10,), np.int32))
    with pytest.raises(gpumsg.InvalidMessage, match="incx"):
        dev.blas.asum(x, incx=0)


# -- level 2 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("trans", ["N", "T", "C"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv(dev, rng, dtype: str, trans: str) -> None:
    m, n, pad = 23, 17, 4
    a = rand(rng, (m + pad, n), dtype)
    xn, yn = (n, m) if trans == "N" else (m, n)
    x = rand(rng, (xn * 2,), dtype)
    y = rand(rng, (yn,), dtype)
    alpha, beta = scalars(rng, dtype)
    dy = dev.to_device(y)
    dev.blas.gemv(dev.to_device(a), dev.to_device(x), dy, m, n, alpha, beta, trans, lda=m + pad,
                  incx=2)
    ref = alpha * opnd(a[:m], trans) @ wide(x)[::2] + beta * wide(y)
    assert rel_err(dev.copy_to_host(dy).result(), ref) < TOL[dtype]


@pytest.mark.parametrize("dtype,conjugate", [("f32", False), ("f64", False), ("c64", False),
                                             ("c64", True), ("c128", False), ("c128", True)])
def test_ger(dev, rng, dtype: str, conjugate: bool) -> None:
    m, n = 14, 9
    x, y, a = rand(rng, (m,), dtype), rand(rng, (n,), dtype), rand(rng, (m, n), dtype)
    alpha, _ = scalars(rng, dtype)
    da = dev.to_device(a)
    dev.blas.ger(dev.to_device(x), dev.to_device(y), da, m, n, alpha, conjugate=conjugate)
    yy = wide(y).conj() if conjugate else wide(y)
    assert rel_err(dev.copy_to_host(da).result(), wide(a) + alpha * np.outer(wide(x), yy)) \
        < TOL[dtype]


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_symv(dev, rng, dtype: str, uplo: str) -> None:
    n = 21
    a = rand(rng, (n, n), dtype)  # only the uplo triangle is read
    full = np.tril(wide(a)) if uplo == "L" else np.triu(wide(a))
    full = full + (np.tril(full, -1).T if uplo == "L" else np.triu(full, 1).T)
    x, y = rand(rng, (n,), dtype), rand(rng, (n,), dtype)
    alpha, beta = scalars(rng, dtype)
    dy = dev.to_device(y)
    dev.blas.symv(dev.to_device(a), dev.to_device(x), dy, n, alpha, beta, uplo)
    assert rel_err(dev.copy_to_host(dy).result(), alpha * full @ wide(x) + beta * wide(y)) \
        < TOL[dtype]


def triangular(rng, n: int, dtype: str, uplo: str) -> np.ndarray:
    """A well-conditioned triangle with a unit or a stored diagonal: small off-diagonal
    entries; the other triangle holds junk the routines must not read."""
    a = rand(rng, (n, n), dtype) * (0.5 / n)
    a[np.diag_indices(n)] += 1
    return a


def tri(a: np.ndarray, uplo: str, diag: str) -> np.ndarray:
    t = np.tril(wide(a)) if uplo == "L" else np.triu(wide(a))
    if diag == "U":
        np.fill_diagonal(t, 1)
    return t


@pytest.mark.parametrize("uplo,trans,diag", [("L", "N", "N"), ("U", "T", "N"), ("L", "C", "U"),
                                             ("U", "N", "U")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_trsv(dev, rng, dtype: str, uplo: str, trans: str, diag: str) -> None:
    n = 19
    a = triangular(rng, n, dtype, uplo)
    x = rand(rng, (n,), dtype)
    dx = dev.to_device(x)
    dev.blas.trsv(dev.to_device(a), dx, n, uplo, trans, diag)
    got = wide(dev.copy_to_host(dx).result())
    assert rel_err(opnd(tri(a, uplo, diag), trans) @ got, wide(x)) < TOL[dtype] * 10


# -- level 3 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("transa,transb", [("N", "N"), ("T", "N"), ("N", "C")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_geam(dev, rng, dtype: str, transa: str, transb: str) -> None:
    m, n = 13, 11
    a = rand(rng, (m, n) if transa == "N" else (n, m), dtype)
    b = rand(rng, (m, n) if transb == "N" else (n, m), dtype)
    alpha, beta = scalars(rng, dtype)
    c = dev.alloc((m, n), dtype)
    dev.blas.geam(dev.to_device(a), dev.to_device(b), c, m, n, alpha, beta, transa, transb)
    ref = alpha * opnd(a, transa) + beta * opnd(b, transb)
    assert rel_err(dev.copy_to_host(c).result(), ref) < TOL[dtype]


@pytest.mark.parametrize("uplo,trans", [("L", "N"), ("U", "T")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_syrk_writes_one_triangle(dev, rng, dtype: str, uplo: str, trans: str) -> None:
    n, k = 15, 8
    a = rand(rng, (n, k) if trans == "N" else (k, n), dtype)
    c = rand(rng, (n, n), dtype)
    alpha, beta = scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.blas.syrk(dev.to_device(a), dc, n, k, alpha, beta, uplo, trans)
    got = wide(dev.copy_to_host(dc).result())
    oa = opnd(a, trans)
    full = alpha * oa @ oa.T + beta * wide(c)
    mask = np.tri(n, dtype=bool) if uplo == "L" else np.tri(n, dtype=bool).T
    assert rel_err(got[mask], full[mask]) < TOL[dtype]
    np.testing.assert_array_equal(got[~mask], wide(c)[~mask])


@pytest.mark.parametrize("side,uplo", [("L", "L"), ("R", "U")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_symm(dev, rng, dtype: str, side: str, uplo: str) -> None:
    m, n = 12, 9
    ka = m if side == "L" else n
    a = rand(rng, (ka, ka), dtype)
    low = np.tril(wide(a)) if uplo == "L" else np.triu(wide(a)).T
    sym = low + np.tril(low, -1).T
    b, c = rand(rng, (m, n), dtype), rand(rng, (m, n), dtype)
    alpha, beta = scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.blas.symm(dev.to_device(a), dev.to_device(b), dc, m, n, alpha, beta, side, uplo)
    prod = sym @ wide(b) if side == "L" else wide(b) @ sym
    assert rel_err(dev.copy_to_host(dc).result(), alpha * prod + beta * wide(c)) < TOL[dtype]


@pytest.mark.parametrize("side,uplo,trans,diag", [("L", "L", "N", "N"), ("R", "U", "T", "U"),
                                                  ("L", "U", "C", "N")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_trmm_and_trsm(dev, rng, dtype: str, side: str, uplo: str, trans: str,
                       diag: str) -> None:
    m, n = 11, 7
    ka = m if side == "L" else n
    a = triangular(rng, ka, dtype, uplo)
    b = rand(rng, (m, n), dtype)
    alpha, _ = scalars(rng, dtype)
    t = opnd(tri(a, uplo, diag), trans)
    da, db = dev.to_device(a), dev.to_device(b)
    c = dev.alloc((m, n), dtype)
    dev.blas.trmm(da, db, c, m, n, alpha, side, uplo, trans, diag)
    prod = t @ wide(b) if side == "L" else wide(b) @ t
    assert rel_err(dev.copy_to_host(c).result(), alpha * prod) < TOL[dtype]
    dev.blas.trsm(da, db, m, n, alpha, side, uplo, trans, diag)
    x = wide(dev.copy_to_host(db).result())
    back = t @ x if side == "L" else x @ t
    assert rel_err(back, alpha * wide(b)) < TOL[dtype] * 10


def test_level3_argument_checks(dev) -> None:
    a = dev.alloc((6, 6), np.float64)
    with pytest.raises(gpumsg.InvalidMessage, match="uplo"):
        dev.blas.syrk(a, dev.alloc((6, 6), np.float64), 6, 6, uplo="X")
    with pytest.raises(gpumsg.InvalidMessage, match="side"):
        dev.blas.trsm(a, dev.alloc((6, 6), np.float64), 6, 6, side="up")
    with pytest.raises(gpumsg.InvalidMessage, match="alias"):
        dev.blas.symm(a, dev.alloc((6, 6), np.float64), a, 6, 6)
    with pytest.raises(gpumsg.InvalidMessage, match="not transposed"):
        dev.blas.geam(a, dev.alloc((6, 6), np.float64), a, 6, 6, transa="T")
