"""Every op value of every cuSPARSE product and solve against a float64/complex128 dense
reference, with bounds from the unit roundoff, the row length and the condition number
(tests/tolerance.py): SpMV and SpMM (each op, each format that takes it), SpSV and SpSM (each
op x uplo x diag, CSR and COO), SDDMM (each opa x opb). Complex data is used wherever the call
takes it, so that 'C' and 'T' give different answers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import gpumsg
from tests.conftest import BACKENDS, need_backend
from tests.tolerance import assert_rel

DTYPES = ("f32", "f64", "c64", "c128")
OPS = ("N", "T", "C")


@pytest.fixture(scope="module", params=BACKENDS)
def dev(request: pytest.FixtureRequest):
    need_backend(request.param)
    d = gpumsg.open_device(0, backend=request.param)
    yield d
    d.close()


def values(rng, n: int, dtype: str) -> np.ndarray:
    x = rng.standard_normal(n) + 0.1
    if dtype in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(n)
    x[x == 0] = 1.0
    return x.astype(gpumsg.as_dtype(dtype))


def dense(rng, shape, dtype: str) -> np.ndarray:
    return values(rng, int(np.prod(shape)), dtype).reshape(shape)


def rand_sparse(rng, m: int, n: int, density: float, dtype: str) -> sp.csr_matrix:
    mask = rng.random((m, n)) < density
    out = np.zeros((m, n), gpumsg.as_dtype(dtype))
    out[mask] = values(rng, int(mask.sum()), dtype)
    return sp.csr_matrix(out)


def w(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def opm(a, op: str) -> np.ndarray:
    a = w(a)
    return a if op == "N" else a.T if op == "T" else a.T.conj()


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


def upload(dev, a, fmt: str):
    return dev.cusparse.bsr(a, 3) if fmt == "bsr" else getattr(dev.cusparse, fmt)(a)


def scalars(dtype: str) -> tuple:
    return ((1.25 - 0.5j, 0.5 + 0.75j) if dtype in ("c64", "c128") else (1.25, -0.5))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fmt", ("csr", "csc", "coo", "bsr"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_spmv_every_op(dev, rng, dtype: str, fmt: str, op: str) -> None:
    m, n = 24, 18
    a = rand_sparse(rng, m, n, 0.25, dtype)
    mat = upload(dev, a, fmt)
    x = values(rng, n if op == "N" else m, dtype)
    y0 = values(rng, m if op == "N" else n, dtype)
    alpha, beta = scalars(dtype)
    y = dev.to_device(y0)
    if fmt == "bsr" and op != "N":  # cuSPARSE's BSR SpMV takes op 'N' only: refused at the call
        with pytest.raises(gpumsg.InvalidMessage, match="op"):
            dev.cusparse.spmv(mat, dev.to_device(x), y, alpha, beta, op)
        mat.free().result(timeout=60)
        return
    dev.cusparse.spmv(mat, dev.to_device(x), y, alpha, beta, op)
    ref = alpha * opm(a.toarray(), op) @ w(x) + beta * w(y0)
    assert_rel(host(dev, y), ref, dtype, n=max(m, n), what=f"spmv {fmt} {op}")
    mat.free().result(timeout=60)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fmt", ("csr", "csc", "coo"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_spmm_every_op(dev, rng, dtype: str, fmt: str, op: str) -> None:
    m, n, k = 20, 16, 5
    a = rand_sparse(rng, m, n, 0.25, dtype)
    mat = upload(dev, a, fmt)
    rows_b, rows_c = (n, m) if op == "N" else (m, n)
    b, c0 = dense(rng, (rows_b, k), dtype), dense(rng, (rows_c, k), dtype)
    alpha, beta = scalars(dtype)
    c = dev.to_device(c0)
    dev.cusparse.spmm(mat, dev.to_device(b), c, alpha, beta, op)
    ref = alpha * opm(a.toarray(), op) @ w(b) + beta * w(c0)
    assert_rel(host(dev, c), ref, dtype, n=max(m, n), what=f"spmm {fmt} {op}")
    mat.free().result(timeout=60)


def triangular_system(rng, n: int, dtype: str) -> sp.csr_matrix:
    """Sparse, both triangles stored, a strong diagonal: every triangle (unit or stored
    diagonal) is well conditioned, and none is symmetric, so each op solves another system."""
    a = rand_sparse(rng, n, n, 0.15, dtype).toarray()
    a = a + np.diag(values(rng, n, dtype) * 0.1 + 4.0).astype(a.dtype)
    return sp.csr_matrix(a)


def triangle(a, uplo: str, diag: str) -> np.ndarray:
    t = np.tril(w(a)) if uplo == "L" else np.triu(w(a))
    if diag == "U":
        np.fill_diagonal(t, 1)
    return t


SOLVES = list(itertools.product(OPS, ("L", "U"), ("N", "U")))


@pytest.mark.parametrize("op,uplo,diag", SOLVES)
@pytest.mark.parametrize("fmt", ("csr", "coo"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_spsv_every_option(dev, rng, dtype: str, fmt: str, op: str, uplo: str,
                           diag: str) -> None:
    n = 30
    a = triangular_system(rng, n, dtype)
    mat = upload(dev, a, fmt)
    x = values(rng, n, dtype)
    alpha = scalars(dtype)[0]
    y = host(dev, dev.cusparse.spsv(mat, dev.to_device(x), alpha=alpha, op=op, uplo=uplo,
                                    diag=diag))
    t = opm(triangle(a.toarray(), uplo, diag), op)
    assert_rel(y, np.linalg.solve(t, alpha * w(x)), dtype, n=n, cond=np.linalg.cond(t),
               what=f"spsv {op}{uplo}{diag}")
    mat.free().result(timeout=60)


@pytest.mark.parametrize("op,uplo,diag", SOLVES)
@pytest.mark.parametrize("fmt", ("csr", "coo"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_spsm_every_option(dev, rng, dtype: str, fmt: str, op: str, uplo: str,
                           diag: str) -> None:
    n, k = 24, 3
    a = triangular_system(rng, n, dtype)
    mat = upload(dev, a, fmt)
    b = dense(rng, (n, k), dtype)
    alpha = scalars(dtype)[0]
    c = host(dev, dev.cusparse.spsm(mat, dev.to_device(b), alpha=alpha, op=op, uplo=uplo,
                                    diag=diag))
    t = opm(triangle(a.toarray(), uplo, diag), op)
    assert_rel(c, np.linalg.solve(t, alpha * w(b)), dtype, n=n, cond=np.linalg.cond(t),
               what=f"spsm {op}{uplo}{diag}")
    mat.free().result(timeout=60)


@pytest.mark.parametrize("opa,opb", list(itertools.product(OPS, OPS)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_sddmm_every_op_pair(dev, rng, dtype: str, opa: str, opb: str) -> None:
    m, n, k = 14, 11, 6
    c = rand_sparse(rng, m, n, 0.3, dtype)
    a = dense(rng, (m, k) if opa == "N" else (k, m), dtype)
    b = dense(rng, (k, n) if opb == "N" else (n, k), dtype)
    alpha, beta = scalars(dtype)
    mc = dev.cusparse.csr(c)
    if "C" in (opa, opb) and dtype in ("c64", "c128"):  # no conjugate in cuSPARSE's SDDMM
        with pytest.raises(gpumsg.InvalidMessage, match="op"):
            dev.cusparse.sddmm(dev.to_device(a), dev.to_device(b), mc, alpha, beta, opa, opb)
        mc.free().result(timeout=60)
        return
    dev.cusparse.sddmm(dev.to_device(a), dev.to_device(b), mc, alpha, beta, opa,
                       opb).result(timeout=60)
    spy = c.toarray() != 0
    ref = np.where(spy, alpha * (opm(a, opa) @ opm(b, opb)) + beta * w(c.toarray()), 0)
    assert_rel(mc.to_scipy().toarray(), ref, dtype, n=k, what=f"sddmm {opa}{opb}")
    mc.free().result(timeout=60)
