"""Every option value of every cuBLAS call against a float64/complex128 NumPy reference, with
bounds from the precision's unit roundoff and the reduction length (tests/tolerance.py): each
trans/uplo/side/diag of levels 2 and 3, every transpose pair of the GEMMs (single, strided and
pointer-array batched) in every dtype, and the 16-bit GEMMs held to an fp32-accumulation bound
that an fp16/bf16 accumulator cannot meet."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpumsg
from tests.libs.harness import random_scalars
from tests.tolerance import assert_rel, bound, rel_err, unit_roundoff

DTYPES = ("f32", "f64", "c64", "c128")
TRANS = ("N", "T", "C")


def rand(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Column-major random data of ``dtype``, never zero."""
    x = rng.standard_normal(shape) + 0.1
    if dtype in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(shape)
    return np.asfortranarray(x.astype(gpumsg.as_dtype(dtype)))


def w(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def opm(x: np.ndarray, trans: str) -> np.ndarray:
    x = w(x)
    return x if trans == "N" else x.T if trans == "T" else x.T.conj()


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


# -- the GEMM family ------------------------------------------------------------------------------

@pytest.mark.parametrize("transa,transb", list(itertools.product(TRANS, TRANS)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_every_transpose_pair(dev, rng, dtype: str, transa: str, transb: str) -> None:
    m, n, k = 13, 9, 21
    a = rand(rng, (m, k) if transa == "N" else (k, m), dtype)
    b = rand(rng, (k, n) if transb == "N" else (n, k), dtype)
    c = rand(rng, (m, n), dtype)
    alpha, beta = random_scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.cublas.gemm(dev.to_device(a), dev.to_device(b), dc, m, n, k, alpha, beta, transa, transb)
    ref = alpha * opm(a, transa) @ opm(b, transb) + beta * w(c)
    assert_rel(host(dev, dc), ref, dtype, n=k, what=f"gemm {transa}{transb}")


@pytest.mark.parametrize("transa,transb", list(itertools.product(TRANS, TRANS)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_strided_batched_every_transpose_pair(dev, rng, dtype: str, transa: str,
                                                   transb: str) -> None:
    batch, m, n, k = 3, 7, 5, 11
    ash = (m, k) if transa == "N" else (k, m)
    bsh = (k, n) if transb == "N" else (n, k)
    sa, sb, sc = m * k + 2, k * n + 3, m * n + 1
    a, b, c = rand(rng, (sa * batch,), dtype), rand(rng, (sb * batch,), dtype), \
        rand(rng, (sc * batch,), dtype)
    alpha, beta = random_scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.cublas.gemm_strided_batched(dev.to_device(a), dev.to_device(b), dc, m, n, k, batch, sa, sb,
                                    sc, alpha, beta, transa, transb, lda=ash[0], ldb=bsh[0], ldc=m)
    out = host(dev, dc)
    for i in range(batch):
        am = a[i * sa:i * sa + m * k].reshape(ash, order="F")
        bm = b[i * sb:i * sb + k * n].reshape(bsh, order="F")
        cm = c[i * sc:i * sc + m * n].reshape((m, n), order="F")
        ref = alpha * opm(am, transa) @ opm(bm, transb) + beta * w(cm)
        got = out[i * sc:i * sc + m * n].reshape((m, n), order="F")
        assert_rel(got, ref, dtype, n=k, what=f"item {i} {transa}{transb}")


@pytest.mark.parametrize("transa,transb", [("N", "C"), ("C", "N"), ("T", "C"), ("C", "T")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_batched_pointer_arrays_every_transpose(dev, rng, dtype: str, transa: str,
                                                     transb: str) -> None:
    m, n, k, batch = 6, 8, 10, 3
    items = [(rand(rng, (m, k) if transa == "N" else (k, m), dtype),
              rand(rng, (k, n) if transb == "N" else (n, k), dtype), rand(rng, (m, n), dtype))
             for _ in range(batch)]
    alpha, beta = random_scalars(rng, dtype)
    cs = [dev.to_device(it[2]) for it in items]
    dev.cublas.gemm_batched([dev.to_device(it[0]) for it in items],
                            [dev.to_device(it[1]) for it in items], cs, m, n, k, alpha, beta,
                            transa, transb).result(timeout=60)
    for (a, b, c), dc in zip(items, cs):
        ref = alpha * opm(a, transa) @ opm(b, transb) + beta * w(c)
        assert_rel(host(dev, dc), ref, dtype, n=k)


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    return w(x.astype(gpumsg.as_dtype(dtype)))


def _half_accumulated(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """op(A) op(B) with every partial sum rounded to ``dtype``: what a 16-bit accumulator
    gives (used to show the bound below separates the two)."""
    t = gpumsg.as_dtype(dtype)
    acc = np.zeros((a.shape[0], b.shape[1]), t)
    for p in range(a.shape[1]):
        acc = (acc.astype(np.float64) + np.outer(a[:, p], b[p, :])).astype(t)
    return w(acc)


@pytest.mark.parametrize("transa,transb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
@pytest.mark.parametrize("dtype", ("f16", "bf16"))
def test_half_gemm_accumulates_in_fp32(dev, rng, dtype: str, transa: str, transb: str) -> None:
    """f16/bf16 GEMM against the float64 product of the same 16-bit inputs, rounded to the
    output type once: an fp32 accumulator lands within a fraction of one 16-bit rounding of it
    (plus k * u(f32)); a 16-bit accumulator is off by several roundings and fails."""
    m, n, k = 24, 20, 256
    a = rand(rng, (m, k) if transa == "N" else (k, m), dtype)
    b = rand(rng, (k, n) if transb == "N" else (n, k), dtype)
    dc = dev.alloc((m, n), dtype, order="F")
    dev.cublas.gemm(dev.to_device(a), dev.to_device(b), dc, m, n, k, 1.0, 0.0, transa, transb)
    exact = opm(a, transa) @ opm(b, transb)
    ref = _round(exact, dtype)
    tol = unit_roundoff(dtype) + bound("f32", k)
    err = rel_err(host(dev, dc), ref)
    # the bound can fail: a 16-bit accumulator misses it several times over
    acc16 = rel_err(_half_accumulated(opm(a, transa).real, opm(b, transb).real, dtype), ref)
    assert acc16 > 3 * tol, (acc16, tol)
    assert err <= tol, f"{dtype} GEMM error {err:.3g} > {tol:.3g} (16-bit accumulation: " \
                       f"{acc16:.3g})"


@pytest.mark.parametrize("dtype", ("f16", "bf16"))
def test_half_gemm_alpha_beta(dev, rng, dtype: str) -> None:
    m, n, k = 16, 12, 128
    a, b, c = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype)
    dc = dev.to_device(c)
    dev.cublas.gemm(dev.to_device(a), dev.to_device(b), dc, m, n, k, 0.75, -0.5)
    ref = _round(0.75 * (w(a) @ w(b)) - 0.5 * w(c), dtype)
    err = rel_err(host(dev, dc), ref)
    assert err <= unit_roundoff(dtype) + bound("f32", k), err


# -- level 1 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_level1_every_option(dev, rng, dtype: str) -> None:
    n, incx, incy = 97, 2, 3
    x, y = rand(rng, (n * incx,), dtype), rand(rng, (n * incy,), dtype)
    xs, ys = w(x)[::incx], w(y)[::incy]
    dx, dy = dev.to_device(x), dev.to_device(y)
    scale = np.linalg.norm(xs) * np.linalg.norm(ys)
    for conj in (False, True):
        got = dev.cublas.dot(dx, dy, n, incx, incy, conjugate=conj).result(timeout=60)
        ref = np.sum((xs.conj() if conj else xs) * ys)
        assert abs(got - ref) <= bound(dtype, n) * scale, (conj, got, ref)
    assert abs(dev.cublas.nrm2(dx, n, incx).result() - np.linalg.norm(xs)) \
        <= bound(dtype, n) * np.linalg.norm(xs)
    s1 = np.sum(np.abs(xs.real) + np.abs(xs.imag))
    assert abs(dev.cublas.asum(dx, n, incx).result() - s1) <= bound(dtype, n) * s1
    alpha, _ = random_scalars(rng, dtype)
    dev.cublas.axpy(dx, dy, alpha, n, incx, incy)
    ref = w(y).copy()
    ref[::incy] += alpha * xs
    assert_rel(host(dev, dy), ref, dtype, n=2)


# -- level 2 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("trans", TRANS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_every_trans(dev, rng, dtype: str, trans: str) -> None:
    m, n = 19, 13
    a = rand(rng, (m, n), dtype)
    x = rand(rng, (n if trans == "N" else m,), dtype)
    y = rand(rng, (m if trans == "N" else n,), dtype)
    alpha, beta = random_scalars(rng, dtype)
    dy = dev.to_device(y)
    dev.cublas.gemv(dev.to_device(a), dev.to_device(x), dy, m, n, alpha, beta, trans)
    assert_rel(host(dev, dy), alpha * opm(a, trans) @ w(x) + beta * w(y), dtype, n=max(m, n))


@pytest.mark.parametrize("conjugate", (False, True))
@pytest.mark.parametrize("dtype", DTYPES)
def test_ger_both_conjugations(dev, rng, dtype: str, conjugate: bool) -> None:
    # on real values y^H is y^T: the conjugating call is plain ger (cublasSger/Dger)
    m, n = 11, 7
    x, y, a = rand(rng, (m,), dtype), rand(rng, (n,), dtype), rand(rng, (m, n), dtype)
    alpha, _ = random_scalars(rng, dtype)
    da = dev.to_device(a)
    dev.cublas.ger(dev.to_device(x), dev.to_device(y), da, m, n, alpha, conjugate=conjugate)
    yy = w(y).conj() if conjugate else w(y)
    assert_rel(host(dev, da), w(a) + alpha * np.outer(w(x), yy), dtype, n=2)


def symmetric_of(a: np.ndarray, uplo: str) -> np.ndarray:
    """The symmetric (not Hermitian: cuBLAS's symv/symm) matrix held in ``uplo`` of ``a``."""
    t = np.tril(w(a)) if uplo == "L" else np.triu(w(a))
    return t + (np.tril(t, -1).T if uplo == "L" else np.triu(t, 1).T)


@pytest.mark.parametrize("uplo", ("L", "U"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_symv_each_uplo(dev, rng, dtype: str, uplo: str) -> None:
    n = 15
    a, x, y = rand(rng, (n, n), dtype), rand(rng, (n,), dtype), rand(rng, (n,), dtype)
    alpha, beta = random_scalars(rng, dtype)
    dy = dev.to_device(y)
    dev.cublas.symv(dev.to_device(a), dev.to_device(x), dy, n, alpha, beta, uplo)
    assert_rel(host(dev, dy), alpha * symmetric_of(a, uplo) @ w(x) + beta * w(y), dtype, n=n)


def well_conditioned_triangle(rng, n: int, dtype: str) -> np.ndarray:
    """Random data whose triangles (unit or stored diagonal) are well conditioned: small
    off-diagonal entries, a diagonal near 1; the other triangle is junk never to be read."""
    a = rand(rng, (n, n), dtype) * (0.5 / n)
    a[np.diag_indices(n)] += 1
    return np.asfortranarray(a)


def triangle(a: np.ndarray, uplo: str, diag: str) -> np.ndarray:
    t = np.tril(w(a)) if uplo == "L" else np.triu(w(a))
    if diag == "U":
        np.fill_diagonal(t, 1)
    return t


TRI = list(itertools.product(("L", "U"), TRANS, ("N", "U")))


@pytest.mark.parametrize("uplo,trans,diag", TRI)
@pytest.mark.parametrize("dtype", DTYPES)
def test_trsv_every_option(dev, rng, dtype: str, uplo: str, trans: str, diag: str) -> None:
    n = 17
    a, x = well_conditioned_triangle(rng, n, dtype), rand(rng, (n,), dtype)
    dx = dev.to_device(x)
    dev.cublas.trsv(dev.to_device(a), dx, n, uplo, trans, diag)
    t = opm(triangle(a, uplo, diag), trans)
    assert_rel(host(dev, dx), np.linalg.solve(t, w(x)), dtype, n=n, cond=np.linalg.cond(t))


# -- level 3 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("transa,transb", list(itertools.product(TRANS, TRANS)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_geam_every_transpose_pair(dev, rng, dtype: str, transa: str, transb: str) -> None:
    m, n = 9, 6
    a = rand(rng, (m, n) if transa == "N" else (n, m), dtype)
    b = rand(rng, (m, n) if transb == "N" else (n, m), dtype)
    alpha, beta = random_scalars(rng, dtype)
    dc = dev.alloc((m, n), dtype, order="F")
    dev.cublas.geam(dev.to_device(a), dev.to_device(b), dc, m, n, alpha, beta, transa, transb)
    assert_rel(host(dev, dc), alpha * opm(a, transa) + beta * opm(b, transb), dtype, n=2)


@pytest.mark.parametrize("uplo,trans", list(itertools.product(("L", "U"), ("N", "T"))))
@pytest.mark.parametrize("dtype", DTYPES)
def test_syrk_every_option(dev, rng, dtype: str, uplo: str, trans: str) -> None:
    n, k = 8, 13
    a = rand(rng, (n, k) if trans == "N" else (k, n), dtype)
    c = rand(rng, (n, n), dtype)
    alpha, beta = random_scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.cublas.syrk(dev.to_device(a), dc, n, k, alpha, beta, uplo, trans)
    op_a = opm(a, trans)
    full = alpha * op_a @ op_a.T + beta * w(c)  # symmetric rank-k: A A^T, not A A^H
    mask = np.tri(n, dtype=bool) if uplo == "L" else np.tri(n, dtype=bool).T
    out = host(dev, dc)
    assert_rel(out[mask], full[mask], dtype, n=k, what="written triangle")
    np.testing.assert_array_equal(out[~mask], c[~mask])  # the other triangle is not touched


@pytest.mark.parametrize("side,uplo", list(itertools.product(("L", "R"), ("L", "U"))))
@pytest.mark.parametrize("dtype", DTYPES)
def test_symm_every_option(dev, rng, dtype: str, side: str, uplo: str) -> None:
    m, n = 7, 10
    ka = m if side == "L" else n
    a, b, c = rand(rng, (ka, ka), dtype), rand(rng, (m, n), dtype), rand(rng, (m, n), dtype)
    alpha, beta = random_scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.cublas.symm(dev.to_device(a), dev.to_device(b), dc, m, n, alpha, beta, side, uplo)
    s = symmetric_of(a, uplo)
    prod = s @ w(b) if side == "L" else w(b) @ s
    assert_rel(host(dev, dc), alpha * prod + beta * w(c), dtype, n=ka)


SIDED = list(itertools.product(("L", "R"), ("L", "U"), TRANS, ("N", "U")))


@pytest.mark.parametrize("side,uplo,trans,diag", SIDED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_trmm_every_option(dev, rng, dtype: str, side: str, uplo: str, trans: str,
                           diag: str) -> None:
    m, n = 6, 9
    ka = m if side == "L" else n
    a, b = well_conditioned_triangle(rng, ka, dtype), rand(rng, (m, n), dtype)
    alpha, _ = random_scalars(rng, dtype)
    dc = dev.alloc((m, n), dtype, order="F")
    dev.cublas.trmm(dev.to_device(a), dev.to_device(b), dc, m, n, alpha, side, uplo, trans, diag)
    t = opm(triangle(a, uplo, diag), trans)
    ref = alpha * (t @ w(b) if side == "L" else w(b) @ t)
    assert_rel(host(dev, dc), ref, dtype, n=ka)


@pytest.mark.parametrize("side,uplo,trans,diag", SIDED)
@pytest.mark.parametrize("dtype", DTYPES)
def test_trsm_every_option(dev, rng, dtype: str, side: str, uplo: str, trans: str,
                           diag: str) -> None:
    m, n = 6, 9
    ka = m if side == "L" else n
    a, b = well_conditioned_triangle(rng, ka, dtype), rand(rng, (m, n), dtype)
    alpha, _ = random_scalars(rng, dtype)
    db = dev.to_device(b)
    dev.cublas.trsm(dev.to_device(a), db, m, n, alpha, side, uplo, trans, diag)
    t = opm(triangle(a, uplo, diag), trans)
    ref = np.linalg.solve(t, alpha * w(b)) if side == "L" else \
        np.linalg.solve(t.T, alpha * w(b).T).T
    assert_rel(host(dev, db), ref, dtype, n=ka, cond=np.linalg.cond(t))
