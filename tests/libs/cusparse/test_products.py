"""cuSPARSE (``dev.cusparse``) products and solves against ``scipy.sparse`` in
float64/complex128: random matrices of several densities with empty rows, every value dtype and
both index widths, CSR/CSC/COO/BSR, unsorted COO input with duplicates,
SpMV/SpMM/SpGEMM/SpSV/SpSM/SDDMM.

One device per backend serves each module (opening a CUDA device per case would dominate the
GPU run)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import gpumsg
from tests.libs.cusparse._helpers import (
    DENSITIES,
    FORMATS,
    INDEX,
    host,
    opm,
    rand_sparse,
    triangular,
    upload,
    values,
)
from tests.libs.harness import FLOAT_DTYPES, assert_close, wide


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_spmv(dev, rng, fmt: str, dtype: str, index: str, density: float) -> None:
    m, n = 60, 45
    a = rand_sparse(rng, m, n, density, dtype)
    mat = upload(dev, a, fmt, index)
    x, y0 = values(rng, n, dtype), values(rng, m, dtype)
    alpha, beta = (1.5 - 0.5j, 0.25 + 1j) if dtype in ("c64", "c128") else (1.5, -0.75)
    y = dev.to_device(y0)
    dev.cusparse.spmv(mat, dev.to_device(x), y, alpha, beta)
    ref = alpha * (wide(a.toarray()) @ wide(x)) + beta * wide(y0)
    assert_close(host(dev, y), ref, dtype, 10)
    # a new y, beta = 0 (y is not read)
    out = host(dev, dev.cusparse.spmv(mat, dev.to_device(x)))
    assert_close(out, wide(a.toarray()) @ wide(x), dtype, 10)
    mat.free().result(timeout=60)


@pytest.mark.parametrize("op", ["T", "C"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_spmv_transposed(dev, rng, fmt: str, dtype: str, op: str) -> None:
    m, n = 50, 70
    a = rand_sparse(rng, m, n, 0.1, dtype)
    mat = upload(dev, a, fmt, "i32")
    x = values(rng, m, dtype)
    out = host(dev, dev.cusparse.spmv(mat, dev.to_device(x), op=op, alpha=2.0))
    assert out.shape == (n,)
    assert_close(out, 2.0 * (opm(wide(a.toarray()), op) @ wide(x)), dtype, 10)


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_unsorted_coo_with_duplicates(dev, rng, dtype: str, index: str) -> None:
    m, n, nnz = 40, 30, 300
    rows = rng.integers(0, m, nnz)
    rows[rows == 0] = 1  # row 0 empty
    cols = rng.integers(0, n, nnz)
    vals = values(rng, nnz, dtype)
    a = sp.coo_matrix((vals, (rows, cols)), shape=(m, n))  # unsorted, with duplicates
    assert not np.all(np.diff(rows) >= 0)
    canonical = a.tocsr()
    canonical.sum_duplicates()
    assert canonical.nnz < nnz, "the input has duplicates"
    ref_dense = wide(a.toarray())
    x = values(rng, n, dtype)
    b = values(rng, n * 4, dtype).reshape(n, 4)
    for fmt in ("coo", "csr", "csc"):
        mat = upload(dev, a, fmt, index)
        assert mat.nnz == canonical.nnz, "uploads sum duplicates"
        assert_close(host(dev, dev.cusparse.spmv(mat, dev.to_device(x))), ref_dense @ wide(x),
                     dtype, 10)
        assert_close(host(dev, dev.cusparse.spmm(mat, dev.to_device(b))), ref_dense @ wide(b),
                     dtype, 10)
        assert_close(host(dev, dev.cusparse.to_dense(mat)), ref_dense, dtype)
        mat.free()
    # COO arrays given as they are, duplicates kept (sorted by row): products sum them
    order = np.lexsort((cols, rows))
    it = gpumsg.as_dtype(index)
    raw = dev.cusparse.from_buffers("coo", (m, n), dev.to_device(rows[order].astype(it)),
                                    dev.to_device(cols[order].astype(it)),
                                    dev.to_device(vals[order]))
    assert raw.nnz == nnz
    assert_close(host(dev, dev.cusparse.spmv(raw, dev.to_device(x))), ref_dense @ wide(x), dtype,
                 10)
    assert_close(host(dev, dev.cusparse.spmm(raw, dev.to_device(b))), ref_dense @ wide(b), dtype,
                 10)


# (BSR with op 'T' is refused: cuSPARSE SpMM on BSR takes op 'N' only; see the bad-arg table)
@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt,op", [(f, "N") for f in FORMATS] + [(f, "T") for f in FORMATS[:3]])
def test_spmm(dev, rng, fmt: str, op: str, dtype: str, index: str) -> None:
    m, n, k = 36, 27, 5
    a = rand_sparse(rng, m, n, 0.15, dtype)
    mat = upload(dev, a, fmt, index)
    rows_b = n if op == "N" else m
    b = values(rng, rows_b * k, dtype).reshape(rows_b, k)
    c0 = values(rng, (m if op == "N" else n) * k, dtype).reshape(-1, k)
    c = dev.to_device(c0)
    dev.cusparse.spmm(mat, dev.to_device(b), c, alpha=0.5, beta=2.0, op=op)
    ref = 0.5 * (opm(wide(a.toarray()), op) @ wide(b)) + 2.0 * wide(c0)
    assert_close(host(dev, c), ref, dtype, 10)


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_spgemm(dev, rng, dtype: str, index: str) -> None:
    a = rand_sparse(rng, 40, 50, 0.08, dtype)
    b = rand_sparse(rng, 50, 30, 0.1, dtype)
    ma, mb = dev.cusparse.csr(a, index_dtype=index), dev.cusparse.csr(b, index_dtype=index)
    c = dev.cusparse.spgemm(ma, mb, alpha=2.0).result(timeout=60)
    assert c.format == "csr" and c.shape == (40, 30) and c.index_dtype == gpumsg.as_dtype(index)
    ref = 2.0 * (wide(a.toarray()) @ wide(b.toarray()))
    assert c.nnz >= np.count_nonzero(ref)
    got = c.to_scipy()
    assert_close(got.toarray(), ref, dtype, 10)
    assert all(np.all(np.diff(got.indices[got.indptr[i]:got.indptr[i + 1]]) > 0)
               for i in range(40)), "column indices sorted within rows"
    # the result is a usable matrix
    x = values(rng, 30, dtype)
    assert_close(host(dev, dev.cusparse.spmv(c, dev.to_device(x))), ref @ wide(x), dtype, 10)
    # a product with nothing in it
    z = dev.cusparse.spgemm(ma, dev.cusparse.csr(sp.csr_matrix((50, 30), dtype=a.dtype),
                                                 index_dtype=index)).result(timeout=60)
    assert z.nnz == 0 and np.all(z.to_scipy().toarray() == 0)


@pytest.mark.parametrize("diag", ["N", "U"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("op", ["N", "T"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_spsv(dev, rng, fmt: str, dtype: str, op: str, uplo: str, diag: str) -> None:
    n = 48
    a = triangular(rng, n, dtype, uplo)
    d = wide(a.toarray())
    t = np.tril(d) if uplo == "L" else np.triu(d)
    if diag == "U":
        t = t - np.diag(np.diag(t)) + np.eye(n)
    x = values(rng, n, dtype)
    mat = upload(dev, a, fmt, "i32" if dtype in ("f32", "c64") else "i64")
    y = host(dev, dev.cusparse.spsv(mat, dev.to_device(x), alpha=1.5, op=op, uplo=uplo,
                                    diag=diag))
    ref = np.linalg.solve(opm(t, op), 1.5 * wide(x))
    assert_close(y, ref, dtype, 50)
    # again on the same matrix (kept analysis descriptor), other right-hand side
    x2 = values(rng, n, dtype)
    y2 = host(dev, dev.cusparse.spsv(mat, dev.to_device(x2), op=op, uplo=uplo, diag=diag))
    assert_close(y2, np.linalg.solve(opm(t, op), wide(x2)), dtype, 50)


@pytest.mark.parametrize("diag", ["N", "U"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("op", ["N", "T"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_spsm(dev, rng, dtype: str, op: str, uplo: str, diag: str) -> None:
    n, k = 40, 3
    a = triangular(rng, n, dtype, uplo)
    d = wide(a.toarray())
    t = np.tril(d) if uplo == "L" else np.triu(d)
    if diag == "U":
        t = t - np.diag(np.diag(t)) + np.eye(n)
    b = values(rng, n * k, dtype).reshape(n, k)
    for fmt in ("csr", "coo"):
        mat = upload(dev, a, fmt, "i32" if dtype in ("f32", "c64") else "i64")
        c = host(dev, dev.cusparse.spsm(mat, dev.to_device(b), alpha=0.5, op=op, uplo=uplo,
                                        diag=diag))
        assert c.shape == (n, k)
        assert_close(c, np.linalg.solve(opm(t, op), 0.5 * wide(b)), dtype, 50)


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sddmm(dev, rng, dtype: str, index: str) -> None:
    m, n, k = 30, 25, 7
    c = rand_sparse(rng, m, n, 0.2, dtype)
    a, b = values(rng, m * k, dtype).reshape(m, k), values(rng, k * n, dtype).reshape(k, n)
    mc = dev.cusparse.csr(c, index_dtype=index)
    dev.cusparse.sddmm(dev.to_device(a), dev.to_device(b), mc, alpha=2.0, beta=0.5).result(60)
    full = 2.0 * (wide(a) @ wide(b))
    spy = c.toarray() != 0
    ref = np.where(spy, full + 0.5 * wide(c.toarray()), 0)
    assert_close(mc.to_scipy().toarray(), ref, dtype, 10)
