"""cuSPARSE (``dev.sparse``) against ``scipy.sparse`` in float64/complex128: random matrices of
several densities with empty rows, every value dtype and both index widths, CSR/CSC/COO/BSR,
unsorted COO input with duplicates, SpMV/SpMM/SpGEMM/SpSV/SDDMM, dense <-> sparse and
CSR <-> CSC, the workspace-size cache, the matrix handle's life cycle and a bad-argument table.

One device per backend serves the whole module (opening a CUDA device per case would dominate
the GPU run); each bad-argument row checks that it still serves afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import BACKENDS, need_backend
from harness import FLOAT_DTYPES, BadArg, assert_close, check_bad_args, wide

import gpumsg
from gpumsg.messages.sparse import SparseRef

INDEX = ("i32", "i64")
FORMATS = ("csr", "csc", "coo", "bsr")
DENSITIES = (0.03, 0.3)


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


def rand_sparse(rng, m: int, n: int, density: float, dtype: str) -> sp.csr_matrix:
    """Random m x n CSR with about ``density`` of its entries stored (never zero) and about a
    fifth of its rows empty (the first row always)."""
    mask = rng.random((m, n)) < density
    mask[rng.random(m) < 0.2] = False
    mask[0] = False
    dense = np.zeros((m, n), gpumsg.as_dtype(dtype))
    dense[mask] = values(rng, int(mask.sum()), dtype)
    return sp.csr_matrix(dense)


def upload(dev, a: sp.spmatrix, fmt: str, index: str, block: int = 3):
    if fmt == "bsr":
        return dev.sparse.bsr(a, block, index_dtype=index)
    return getattr(dev.sparse, fmt)(a, index_dtype=index)


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


def opm(a, op: str):
    return a if op == "N" else a.T if op == "T" else a.conj().T


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
    dev.sparse.spmv(mat, dev.to_device(x), y, alpha, beta)
    ref = alpha * (wide(a.toarray()) @ wide(x)) + beta * wide(y0)
    assert_close(host(dev, y), ref, dtype, 10)
    # a new y, beta = 0 (y is not read)
    out = host(dev, dev.sparse.spmv(mat, dev.to_device(x)))
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
    out = host(dev, dev.sparse.spmv(mat, dev.to_device(x), op=op, alpha=2.0))
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
        assert_close(host(dev, dev.sparse.spmv(mat, dev.to_device(x))), ref_dense @ wide(x),
                     dtype, 10)
        assert_close(host(dev, dev.sparse.spmm(mat, dev.to_device(b))), ref_dense @ wide(b),
                     dtype, 10)
        assert_close(host(dev, dev.sparse.to_dense(mat)), ref_dense, dtype)
        mat.free()
    # COO arrays given as they are, duplicates kept (sorted by row): products sum them
    order = np.lexsort((cols, rows))
    it = gpumsg.as_dtype(index)
    raw = dev.sparse.from_buffers("coo", (m, n), dev.to_device(rows[order].astype(it)),
                                  dev.to_device(cols[order].astype(it)),
                                  dev.to_device(vals[order]))
    assert raw.nnz == nnz
    assert_close(host(dev, dev.sparse.spmv(raw, dev.to_device(x))), ref_dense @ wide(x), dtype,
                 10)
    assert_close(host(dev, dev.sparse.spmm(raw, dev.to_device(b))), ref_dense @ wide(b), dtype,
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
    dev.sparse.spmm(mat, dev.to_device(b), c, alpha=0.5, beta=2.0, op=op)
    ref = 0.5 * (opm(wide(a.toarray()), op) @ wide(b)) + 2.0 * wide(c0)
    assert_close(host(dev, c), ref, dtype, 10)


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_spgemm(dev, rng, dtype: str, index: str) -> None:
    a = rand_sparse(rng, 40, 50, 0.08, dtype)
    b = rand_sparse(rng, 50, 30, 0.1, dtype)
    ma, mb = dev.sparse.csr(a, index_dtype=index), dev.sparse.csr(b, index_dtype=index)
    c = dev.sparse.spgemm(ma, mb, alpha=2.0).result(timeout=60)
    assert c.format == "csr" and c.shape == (40, 30) and c.index_dtype == gpumsg.as_dtype(index)
    ref = 2.0 * (wide(a.toarray()) @ wide(b.toarray()))
    assert c.nnz >= np.count_nonzero(ref)
    got = c.to_scipy()
    assert_close(got.toarray(), ref, dtype, 10)
    assert all(np.all(np.diff(got.indices[got.indptr[i]:got.indptr[i + 1]]) > 0)
               for i in range(40)), "column indices sorted within rows"
    # the result is a usable matrix
    x = values(rng, 30, dtype)
    assert_close(host(dev, dev.sparse.spmv(c, dev.to_device(x))), ref @ wide(x), dtype, 10)
    # a product with nothing in it
    z = dev.sparse.spgemm(ma, dev.sparse.csr(sp.csr_matrix((50, 30), dtype=a.dtype),
                                             index_dtype=index)).result(timeout=60)
    assert z.nnz == 0 and np.all(z.to_scipy().toarray() == 0)


def triangular(rng, n: int, dtype: str, uplo: str) -> sp.csr_matrix:
    """A well-conditioned sparse triangular-ish matrix: random sparse plus a strong diagonal
    (both triangles stored; the solve reads one)."""
    a = rand_sparse(rng, n, n, 0.1, dtype).toarray()
    a = a + np.diag(np.full(n, 4.0)).astype(a.dtype)
    return sp.csr_matrix(a)


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
    y = host(dev, dev.sparse.spsv(mat, dev.to_device(x), alpha=1.5, op=op, uplo=uplo,
                                  diag=diag))
    ref = np.linalg.solve(opm(t, op), 1.5 * wide(x))
    assert_close(y, ref, dtype, 50)
    # again on the same matrix (kept analysis descriptor), other right-hand side
    x2 = values(rng, n, dtype)
    y2 = host(dev, dev.sparse.spsv(mat, dev.to_device(x2), op=op, uplo=uplo, diag=diag))
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
        c = host(dev, dev.sparse.spsm(mat, dev.to_device(b), alpha=0.5, op=op, uplo=uplo,
                                      diag=diag))
        assert c.shape == (n, k)
        assert_close(c, np.linalg.solve(opm(t, op), 0.5 * wide(b)), dtype, 50)


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sddmm(dev, rng, dtype: str, index: str) -> None:
    m, n, k = 30, 25, 7
    c = rand_sparse(rng, m, n, 0.2, dtype)
    a, b = values(rng, m * k, dtype).reshape(m, k), values(rng, k * n, dtype).reshape(k, n)
    mc = dev.sparse.csr(c, index_dtype=index)
    dev.sparse.sddmm(dev.to_device(a), dev.to_device(b), mc, alpha=2.0, beta=0.5).result(60)
    full = 2.0 * (wide(a) @ wide(b))
    spy = c.toarray() != 0
    ref = np.where(spy, full + 0.5 * wide(c.toarray()), 0)
    assert_close(mc.to_scipy().toarray(), ref, dtype, 10)


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("density", DENSITIES)
def test_dense_roundtrip(dev, rng, density: float, dtype: str, index: str) -> None:
    a = rand_sparse(rng, 33, 41, density, dtype)
    dense = a.toarray()
    for fmt in ("csr", "csc", "coo"):
        got = host(dev, dev.sparse.to_dense(upload(dev, a, fmt, index)))
        assert np.array_equal(got, dense), fmt
    mat = dev.sparse.from_dense(dev.to_device(dense), index_dtype=index).result(timeout=60)
    assert mat.format == "csr" and mat.nnz == a.nnz and mat.index_dtype == gpumsg.as_dtype(index)
    back = mat.to_scipy()
    assert np.array_equal(back.indptr, a.indptr) and np.array_equal(back.indices, a.indices)
    assert np.array_equal(back.data, a.data)
    # all zeros
    empty = dev.sparse.from_dense(dev.to_device(np.zeros((5, 4), dense.dtype))).result(60)
    assert empty.nnz == 0 and np.all(host(dev, dev.sparse.to_dense(empty)) == 0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_csr_csc_conversion(dev, rng, dtype: str) -> None:
    a = rand_sparse(rng, 37, 29, 0.15, dtype)
    csr = dev.sparse.csr(a)
    csc = dev.sparse.convert(csr, "csc")
    got = csc.to_scipy()
    ref = a.tocsc()
    ref.sort_indices()
    assert csc.format == "csc" and csc.shape == a.shape
    assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data)
    back = dev.sparse.convert(csc, "csr").to_scipy()
    assert np.array_equal(back.indptr, a.indptr) and np.array_equal(back.data, a.data)
    x = values(rng, 29, dtype)
    assert_close(host(dev, dev.sparse.spmv(csc, dev.to_device(x))), wide(a.toarray()) @ wide(x),
                 dtype, 10)


def test_from_buffers_and_value_update(dev, rng) -> None:
    a = rand_sparse(rng, 20, 20, 0.2, "f64")
    ptr, idx = dev.to_device(a.indptr.astype(np.int64)), dev.to_device(a.indices.astype(np.int64))
    val = dev.to_device(a.data)
    mat = dev.sparse.from_buffers("csr", (20, 20), ptr, idx, val)
    x = values(rng, 20, "f64")
    assert_close(host(dev, dev.sparse.spmv(mat, dev.to_device(x))), a.toarray() @ x, "f64")
    # new values in the same buffer: the next product sees them (descriptor over the buffers)
    dev.copy_from_host(val, 3.0 * a.data)
    assert_close(host(dev, dev.sparse.spmv(mat, dev.to_device(x))), 3.0 * (a.toarray() @ x),
                 "f64")
    mat.free().result(timeout=60)
    assert np.array_equal(host(dev, val), 3.0 * a.data), "from_buffers leaves the buffers"
    with pytest.raises(gpumsg.GpuRefStale):
        dev.sparse.spmv(mat, dev.to_device(x))


def test_workspace_sizes_cached(dev, rng) -> None:
    import gc

    a = rand_sparse(rng, 64, 64, 0.1, "f32")
    gc.collect()
    gc.disable()  # no other matrix's finalizer changes the counters meanwhile
    try:
        mat = dev.sparse.csr(a)
        x, y = dev.to_device(values(rng, 64, "f32")), dev.alloc(64, np.float32)
        before = dev.sparse.cache_info().result(timeout=60)
        for _ in range(20):
            dev.sparse.spmv(mat, x, y)
        after = dev.sparse.cache_info().result(timeout=60)
        assert after["misses"] - before["misses"] == 1
        assert after["hits"] - before["hits"] == 19
        mat.free().result(timeout=60)
        assert dev.sparse.cache_info().result(timeout=60)["size"] == after["size"] - 1
    finally:
        gc.enable()


def test_dropped_matrix_releases_its_descriptor(dev, rng) -> None:
    import gc

    x = dev.to_device(values(rng, 16, "f64"))
    gc.collect()  # matrices earlier tests left in reference cycles go first
    gc.disable()  # and no collection but the one below
    try:
        dev.synchronize().result(timeout=60)
        base = dev.sparse.cache_info().result(timeout=60)["size"]
        mat = dev.sparse.csr(rand_sparse(rng, 16, 16, 0.3, "f64"))
        dev.sparse.spmv(mat, x).result(timeout=60)
        assert dev.sparse.cache_info().result(timeout=60)["size"] == base + 1
        del mat
        gc.collect()  # (its ready future refers back to it)
        assert dev.sparse.cache_info().result(timeout=60)["size"] == base
    finally:
        gc.enable()


def test_freed_matrix_is_refused(dev, rng) -> None:
    mat = dev.sparse.csr(rand_sparse(rng, 8, 8, 0.5, "f64"))
    mat.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.sparse.spmv(mat, dev.to_device(np.ones(8)))
    with pytest.raises(gpumsg.GpuRefStale):
        mat.free()


# ---------------------------------------------------------------------------------------------
# bad arguments


def _m(dev, dtype="f64", index="i32", shape=(8, 6), fmt="csr"):
    a = sp.csr_matrix(np.eye(*shape, dtype=gpumsg.as_dtype(dtype)))
    return upload(dev, a, fmt, index, block=2)


def _v(dev, n, dtype=np.float64):
    return dev.alloc((n,), dtype)


BAD = [
    BadArg("spmv x length", lambda d: d.sparse.spmv(_m(d), _v(d, 7)), field="x"),
    BadArg("spmv y length", lambda d: d.sparse.spmv(_m(d), _v(d, 6), _v(d, 6)), field="y"),
    BadArg("spmv dtype mix", lambda d: d.sparse.spmv(_m(d), _v(d, 6, np.float32)), field="x"),
    BadArg("spmv op", lambda d: d.sparse.spmv(_m(d), _v(d, 6), op="X"), field="op"),
    BadArg("spmv complex alpha on real", lambda d: d.sparse.spmv(_m(d), _v(d, 6), alpha=1j),
           field="alpha"),
    BadArg("spmv y aliases x", lambda d: (lambda v: d.sparse.spmv(_m(d, shape=(6, 6)), v, v))(
        _v(d, 6)), field="y"),
    BadArg("spmv new y with beta", lambda d: d.sparse.spmv(_m(d), _v(d, 6), beta=1.0),
           field="beta"),
    BadArg("spmv not a matrix", lambda d: d.sparse.spmv(_v(d, 6), _v(d, 6), _v(d, 6)),
           field="a"),
    BadArg("spmm b rows", lambda d: d.sparse.spmm(_m(d), d.alloc((5, 3), np.float64, "C")),
           field="b"),
    BadArg("spmm b F-ordered", lambda d: d.sparse.spmm(_m(d), d.alloc((6, 3), np.float64, "F")),
           field="b"),
    BadArg("spmm c shape", lambda d: d.sparse.spmm(_m(d), d.alloc((6, 3), np.float64, "C"),
                                                   d.alloc((8, 4), np.float64, "C")), field="c"),
    BadArg("spmm bsr transposed", lambda d: d.sparse.spmm(
        _m(d, shape=(6, 6), fmt="bsr"), d.alloc((6, 2), np.float64, "C"), op="T"), field="op"),
    BadArg("spgemm inner dims", lambda d: d.sparse.spgemm(_m(d), _m(d)), field="b"),
    BadArg("spgemm csc", lambda d: d.sparse.spgemm(_m(d, fmt="csc"), _m(d, shape=(6, 4))),
           field="a"),
    BadArg("spgemm dtype mix", lambda d: d.sparse.spgemm(_m(d), _m(d, "f32", shape=(6, 4))),
           field="b"),
    BadArg("spgemm index mix", lambda d: d.sparse.spgemm(_m(d), _m(d, index="i64", shape=(6, 4))),
           field="b"),
    BadArg("spsv not square", lambda d: d.sparse.spsv(_m(d), _v(d, 8)), field="a"),
    BadArg("spsv csc", lambda d: d.sparse.spsv(_m(d, shape=(6, 6), fmt="csc"), _v(d, 6)),
           field="a"),
    BadArg("spsv uplo", lambda d: d.sparse.spsv(_m(d, shape=(6, 6)), _v(d, 6), uplo="X"),
           field="uplo"),
    BadArg("spsm b rows", lambda d: d.sparse.spsm(_m(d, shape=(6, 6)),
                                                  d.alloc((5, 2), np.float64, "C")), field="b"),
    BadArg("spsm c shape", lambda d: d.sparse.spsm(_m(d, shape=(6, 6)),
                                                   d.alloc((6, 2), np.float64, "C"),
                                                   d.alloc((6, 3), np.float64, "C")), field="c"),
    BadArg("spsm bsr", lambda d: d.sparse.spsm(_m(d, shape=(6, 6), fmt="bsr"),
                                               d.alloc((6, 2), np.float64, "C")), field="a"),
    BadArg("sddmm shape", lambda d: d.sparse.sddmm(d.alloc((8, 2), np.float64, "C"),
                                                   d.alloc((2, 5), np.float64, "C"), _m(d)),
           field="c"),
    BadArg("sddmm inner", lambda d: d.sparse.sddmm(d.alloc((8, 2), np.float64, "C"),
                                                   d.alloc((3, 6), np.float64, "C"), _m(d)),
           field="b"),
    BadArg("to_dense out shape", lambda d: d.sparse.to_dense(_m(d), d.alloc((6, 8), np.float64,
                                                                            "C")), field="out"),
    BadArg("to_dense bsr", lambda d: d.sparse.to_dense(_m(d, shape=(6, 6), fmt="bsr")),
           field="a"),
    BadArg("from_dense 1-D", lambda d: d.sparse.from_dense(_v(d, 6)), field="dense"),
    BadArg("from_dense index f32", lambda d: d.sparse.from_dense(
        d.alloc((3, 3), np.float64, "C"), index_dtype=np.float32), field="index_dtype"),
    BadArg("convert i64", lambda d: d.sparse.convert(_m(d, index="i64"), "csc"), field="a"),
    BadArg("convert to coo", lambda d: d.sparse.convert(_m(d), "coo"), field="format"),
    BadArg("csr int values", lambda d: d.sparse.csr(sp.eye(3, dtype=np.int32)), field="dtype"),
    BadArg("csr f16 array", lambda d: d.sparse.csr(np.eye(3, dtype=np.float16)), field="matrix"),
    BadArg("csr f16 dtype", lambda d: d.sparse.csr(np.eye(3), dtype=np.float16), field="dtype"),
    BadArg("csr index u8", lambda d: d.sparse.csr(np.eye(3), index_dtype=np.uint8),
           field="index_dtype"),
    BadArg("from_buffers index mix", lambda d: d.sparse.from_buffers(
        "csr", (3, 3), d.alloc(4, np.int64), d.alloc(3, np.int32), d.alloc(3, np.float64)),
        field="ptr"),
    BadArg("from_buffers float indices", lambda d: d.sparse.from_buffers(
        "csr", (3, 3), d.alloc(4, np.float32), d.alloc(3, np.float32), d.alloc(3, np.float64)),
        field="idx"),
    BadArg("from_buffers short ptr", lambda d: d.sparse.from_buffers(
        "csr", (3, 3), d.alloc(3, np.int32), d.alloc(3, np.int32), d.alloc(3, np.float64)),
        field="ptr"),
    BadArg("from_buffers short values", lambda d: d.sparse.from_buffers(
        "coo", (3, 3), d.alloc(3, np.int32), d.alloc(3, np.int32), d.alloc(2, np.float64)),
        field="val"),
    BadArg("from_buffers format", lambda d: d.sparse.from_buffers(
        "ell", (3, 3), d.alloc(3, np.int32), d.alloc(3, np.int32), d.alloc(3, np.float64)),
        field="format"),
    BadArg("bsr block", lambda d: d.sparse.bsr(np.eye(5), 2), field="block"),
    BadArg("freed matrix", lambda d: (lambda m: (m.free(), d.sparse.spmv(m, _v(d, 6))))(_m(d)),
           error=gpumsg.GpuRefStale),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case: BadArg) -> None:
    check_bad_args(dev, case)


def test_sparse_ref_is_plain_data(dev) -> None:
    import pickle

    mat = _m(dev)
    ref = mat.sparse_ref
    assert pickle.loads(pickle.dumps(ref)) == ref
    assert isinstance(ref, SparseRef)
