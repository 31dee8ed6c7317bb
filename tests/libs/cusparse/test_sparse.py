"""cuSPARSE (``dev.cusparse``) against ``scipy.sparse`` in float64/complex128: random matrices of
several densities with empty rows, every value dtype and both index widths, CSR/CSC/COO/BSR,
unsorted COO input with duplicates, SpMV/SpMM/SpGEMM/SpSV/SDDMM, dense <-> sparse and
CSR <-> CSC, the workspace-size cache, the matrix handle's life cycle and a bad-argument table.

One device per backend serves the whole module (opening a CUDA device per case would dominate
the GPU run); each bad-argument row checks that it still serves afterwards."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import gpumsg
from gpumsg.messages.sparse import SparseRef
from tests.conftest import BACKENDS, need_backend
from tests.libs.harness import (
    FLOAT_DTYPES,
    BadArg,
    FakeGraphDriver,
    assert_close,
    check_bad_args,
    device_still_serves,
    wide,
)

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
        return dev.cusparse.bsr(a, block, index_dtype=index)
    return getattr(dev.cusparse, fmt)(a, index_dtype=index)


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


@pytest.mark.parametrize("index", INDEX)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("density", DENSITIES)
def test_dense_roundtrip(dev, rng, density: float, dtype: str, index: str) -> None:
    a = rand_sparse(rng, 33, 41, density, dtype)
    dense = a.toarray()
    for fmt in ("csr", "csc", "coo"):
        got = host(dev, dev.cusparse.to_dense(upload(dev, a, fmt, index)))
        assert np.array_equal(got, dense), fmt
    mat = dev.cusparse.from_dense(dev.to_device(dense), index_dtype=index).result(timeout=60)
    assert mat.format == "csr" and mat.nnz == a.nnz and mat.index_dtype == gpumsg.as_dtype(index)
    back = mat.to_scipy()
    assert np.array_equal(back.indptr, a.indptr) and np.array_equal(back.indices, a.indices)
    assert np.array_equal(back.data, a.data)
    # all zeros
    empty = dev.cusparse.from_dense(dev.to_device(np.zeros((5, 4), dense.dtype))).result(60)
    assert empty.nnz == 0 and np.all(host(dev, dev.cusparse.to_dense(empty)) == 0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_csr_csc_conversion(dev, rng, dtype: str) -> None:
    a = rand_sparse(rng, 37, 29, 0.15, dtype)
    csr = dev.cusparse.csr(a)
    csc = dev.cusparse.convert(csr, "csc")
    got = csc.to_scipy()
    ref = a.tocsc()
    ref.sort_indices()
    assert csc.format == "csc" and csc.shape == a.shape
    assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.indices, ref.indices)
    assert np.array_equal(got.data, ref.data)
    back = dev.cusparse.convert(csc, "csr").to_scipy()
    assert np.array_equal(back.indptr, a.indptr) and np.array_equal(back.data, a.data)
    x = values(rng, 29, dtype)
    assert_close(host(dev, dev.cusparse.spmv(csc, dev.to_device(x))), wide(a.toarray()) @ wide(x),
                 dtype, 10)


def test_from_buffers_and_value_update(dev, rng) -> None:
    a = rand_sparse(rng, 20, 20, 0.2, "f64")
    ptr, idx = dev.to_device(a.indptr.astype(np.int64)), dev.to_device(a.indices.astype(np.int64))
    val = dev.to_device(a.data)
    mat = dev.cusparse.from_buffers("csr", (20, 20), ptr, idx, val)
    x = values(rng, 20, "f64")
    assert_close(host(dev, dev.cusparse.spmv(mat, dev.to_device(x))), a.toarray() @ x, "f64")
    # new values in the same buffer: the next product sees them (descriptor over the buffers)
    dev.copy_from_host(val, 3.0 * a.data)
    assert_close(host(dev, dev.cusparse.spmv(mat, dev.to_device(x))), 3.0 * (a.toarray() @ x),
                 "f64")
    mat.free().result(timeout=60)
    assert np.array_equal(host(dev, val), 3.0 * a.data), "from_buffers leaves the buffers"
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(mat, dev.to_device(x))


def test_workspace_sizes_cached(dev, rng) -> None:
    import gc

    a = rand_sparse(rng, 64, 64, 0.1, "f32")
    gc.collect()
    gc.disable()  # no other matrix's finalizer changes the counters meanwhile
    try:
        mat = dev.cusparse.csr(a)
        x, y = dev.to_device(values(rng, 64, "f32")), dev.alloc(64, np.float32)
        before = dev.cusparse.cache_info().result(timeout=60)
        for _ in range(20):
            dev.cusparse.spmv(mat, x, y)
        after = dev.cusparse.cache_info().result(timeout=60)
        assert after["misses"] - before["misses"] == 1
        assert after["hits"] - before["hits"] == 19
        mat.free().result(timeout=60)
        assert dev.cusparse.cache_info().result(timeout=60)["size"] == after["size"] - 1
    finally:
        gc.enable()


def test_dropped_matrix_releases_its_descriptor(dev, rng) -> None:
    import gc

    x = dev.to_device(values(rng, 16, "f64"))
    gc.collect()  # matrices earlier tests left in reference cycles go first
    gc.disable()  # and no collection but the one below
    try:
        dev.synchronize().result(timeout=60)
        base = dev.cusparse.cache_info().result(timeout=60)["size"]
        mat = dev.cusparse.csr(rand_sparse(rng, 16, 16, 0.3, "f64"))
        dev.cusparse.spmv(mat, x).result(timeout=60)
        assert dev.cusparse.cache_info().result(timeout=60)["size"] == base + 1
        del mat
        gc.collect()  # (its ready future refers back to it)
        assert dev.cusparse.cache_info().result(timeout=60)["size"] == base
    finally:
        gc.enable()


def test_repeated_spmv_reuses_its_message_and_keeps_every_check(dev, rng, posted) -> None:
    """``spmv(m, x, y)`` repeated: one message, sent again as is (its checks ran when it was
    built), with fresh vector and matrix values written into the same buffers every round and
    each result checked against float64; another scalar, another y or another matrix over the
    same buffers is a message of its own; a freed x, a freed matrix, a freed buffer under a
    matrix are refused at the call after the message was kept, and the device still serves."""
    n = 40
    a = rand_sparse(rng, n, n, 0.2, "f64")
    val = dev.to_device(a.data).result()
    ptr = dev.to_device(a.indptr.astype(np.int32)).result()
    idx = dev.to_device(a.indices.astype(np.int32)).result()
    mat = dev.cusparse.from_buffers("csr", (n, n), ptr, idx, val)
    x, y = dev.alloc(n, np.float64).result(), dev.alloc(n, np.float64).result()
    sent = posted(dev, gpumsg.messages.SpMV)
    for _ in range(4):
        hx, hy, hv = values(rng, n, "f64"), values(rng, n, "f64"), values(rng, a.nnz, "f64")
        for buf, h in ((x, hx), (y, hy), (val, hv)):
            dev.copy_from_host(buf, h)
        assert dev.cusparse.spmv(mat, x, y, 0.5, -2.0).result(timeout=60) is y
        dense = sp.csr_matrix((hv, a.indices, a.indptr), shape=(n, n)).toarray()
        assert_close(host(dev, y), 0.5 * (dense @ hx) - 2.0 * hy, "f64", 10)
    assert len(sent) == 4 and all(m is sent[0] for m in sent)
    # another scalar, another y: messages of their own, results right
    y2 = dev.alloc(n, np.float64).result()
    dev.cusparse.spmv(mat, x, y2, 1.5)
    dev.cusparse.spmv(mat, x, y2, 1.5)
    assert sent[4] is sent[5] and sent[4] is not sent[0] and sent[4].y is y2.ref
    assert_close(host(dev, y2), 1.5 * (dense @ hx), "f64", 10)
    # two matrices over the same buffers, called with the same vectors and arguments: the CSC
    # reading of the CSR arrays is the transpose. Never one message for both
    tr = dev.cusparse.from_buffers("csc", (n, n), ptr, idx, val)
    for _ in range(2):
        dev.cusparse.spmv(mat, x, y, 2.0)
        assert_close(host(dev, y), 2.0 * (dense @ hx), "f64", 10)
        dev.cusparse.spmv(tr, x, y, 2.0)
        assert_close(host(dev, y), 2.0 * (dense.T @ hx), "f64", 10)
    assert sent[-1] is not sent[-2] and sent[-1].a is tr.sparse_ref
    short = dev.alloc(7, np.float64).result()
    for _ in range(2):  # a call that fails its checks is never kept: refused every time
        with pytest.raises(gpumsg.InvalidMessage) as info:
            dev.cusparse.spmv(mat, x, short, 2.0)
        assert info.value.field == "y"
    # refusals at the call site of a kept message
    tr.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(tr, x, y, 2.0)
    x.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(mat, x, y, 2.0)
    x = dev.to_device(hx).result()
    assert_close(host(dev, dev.cusparse.spmv(mat, x, y, 2.0)), 2.0 * (dense @ hx), "f64", 10)
    val.free().result(timeout=60)  # a buffer the matrix is made of (from_buffers: the caller's)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(mat, x, y, 2.0)
    device_still_serves(dev)


def test_repeated_spmm_reuses_its_message_and_keeps_every_check(dev, rng, posted) -> None:
    """``spmm(m, b, c)`` repeated: one message, fresh inputs every round checked against
    float64; another op is another message; a freed matrix or a freed b is refused at the call
    after the message was kept."""
    m, n, k = 30, 20, 4
    a = rand_sparse(rng, m, n, 0.2, "c64")
    mat = dev.cusparse.coo(a)
    b = dev.alloc((n, k), np.complex64, order="C").result()
    c = dev.alloc((m, k), np.complex64, order="C").result()
    sent = posted(dev, gpumsg.messages.SpMM)
    for _ in range(3):
        hb, hc = (values(rng, s[0] * s[1], "c64").reshape(s) for s in ((n, k), (m, k)))
        dev.copy_from_host(b, hb)
        dev.copy_from_host(c, hc)
        dev.cusparse.spmm(mat, b, c, 1 - 1j, 0.5)
        ref = (1 - 1j) * (wide(a.toarray()) @ wide(hb)) + 0.5 * wide(hc)
        assert_close(host(dev, c), ref, "c64", 10)
    assert len(sent) == 3 and sent[0] is sent[1] is sent[2]
    ct = dev.alloc((n, k), np.complex64, order="C").result()
    hm = values(rng, m * k, "c64").reshape(m, k)
    dev.copy_from_host(c, hm)
    dev.cusparse.spmm(mat, c, ct, op="C")
    assert sent[-1] is not sent[0]
    assert_close(host(dev, ct), wide(a.toarray()).conj().T @ wide(hm), "c64", 10)
    b.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmm(mat, b, c, 1 - 1j, 0.5)
    mat.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmm(mat, c, ct, op="C")
    device_still_serves(dev)


def test_kept_sparse_messages_are_refused_when_stale_or_closed(dev, rng) -> None:
    """A kept SpMV message on a device whose generation moved (a rebuilt context) or that
    closed is refused at the call site: GpuRefStale, DeviceClosed."""
    d = gpumsg.open_device(0, backend=dev.backend)
    try:
        mat = d.cusparse.csr(rand_sparse(rng, 10, 10, 0.3, "f32"))
        x, y = d.to_device(values(rng, 10, "f32")).result(), d.alloc(10, np.float32).result()
        for _ in range(2):
            d.cusparse.spmv(mat, x, y).result(timeout=60)
        d.synchronize().result(timeout=60)
        d._state.bump()  # as a context rebuild would (process isolation)
        with pytest.raises(gpumsg.GpuRefStale):
            d.cusparse.spmv(mat, x, y)
    finally:
        d.close()
    with pytest.raises(gpumsg.DeviceClosed):
        d.cusparse.spmv(mat, x, y)


@pytest.mark.parametrize("fmt", FORMATS)
def test_repeated_products_are_replayed_with_fresh_inputs(dev, rng, fmt: str) -> None:
    """SpMV (beta 0 and not) and SpMM repeated on the same buffers: on the GPU the second call
    is captured as a CUDA graph and later ones replay it. Fresh vector and matrix values are
    written before every round and every result is checked against float64, so a replay that
    read stale scalars, another vector or a destroyed matrix's arrays fails. A matrix destroyed
    and another made (which may get its workspace's and descriptor's addresses) replays its
    own call."""
    m, n, k = 48, 36, 3
    dtype = "f32"
    before = dev.cusparse.replay_info().result(timeout=60)
    for _life in range(2):
        a = rand_sparse(rng, m, n, 0.15, dtype)
        mat = upload(dev, a, fmt, "i32")
        _, _, vbuf = mat.buffers
        x, y, z = dev.alloc(n, np.float32), dev.alloc(m, np.float32), dev.alloc(m, np.float32)
        b = dev.alloc((n, k), np.float32, order="C")
        c = dev.alloc((m, k), np.float32, order="C")
        nvals = vbuf.ref.size
        for _ in range(4):
            dev.copy_from_host(vbuf, values(rng, nvals, dtype))  # new values, same pattern
            hx, hy = values(rng, n, dtype), values(rng, m, dtype)
            hb = values(rng, n * k, dtype).reshape(n, k)
            hc = values(rng, m * k, dtype).reshape(m, k)
            for buf, h in ((x, hx), (y, hy), (b, hb), (c, hc)):
                dev.copy_from_host(buf, h)
            dev.cusparse.spmv(mat, x, y, 0.75, -0.5)
            dev.cusparse.spmv(mat, x, z)
            dev.cusparse.spmm(mat, b, c, 2.0, 0.25)
            dense = wide(mat.to_scipy().toarray())  # the values the products read
            assert_close(host(dev, y), 0.75 * (dense @ wide(hx)) - 0.5 * wide(hy), dtype, 10)
            assert_close(host(dev, z), dense @ wide(hx), dtype, 10)
            assert_close(host(dev, c), 2.0 * (dense @ wide(hb)) + 0.25 * wide(hc), dtype, 10)
        mat.free().result(timeout=60)
    info = dev.cusparse.replay_info().result(timeout=60)
    if dev.backend == "sim":
        assert info == {"enabled": False}
        return
    assert info["enabled"] and info["refused"] == "", info
    # two lives x two SpMV calls: each ran once, was captured once and replayed twice
    assert info["captures"] - before["captures"] >= 4, info
    assert info["launches"] - before["launches"] >= 8, info
    assert info["with_memory_nodes"] == 0, info  # no workspace allocated per replay
    mm = info["spmm"]
    if fmt == "csr" and mm["refused"] == "":  # (replayed where cusparseSpMM_preprocess took)
        assert mm["launches"] - before["spmm"]["launches"] >= 4, info


class _FakeCusparse:
    """Stands in for the loaded cuSPARSE library in a CusparseHandle: every function succeeds
    and is recorded; an output argument (``byref``) gets a fresh handle, or 512 for a size."""

    cusparseSpMV_preprocess = cusparseSpMM_preprocess = None  # set per test where wanted

    def __init__(self) -> None:
        import itertools

        self.calls: list[tuple[str, tuple]] = []
        self._handles = itertools.count(0x1000, 0x10)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def fn(*args):
            import ctypes

            for arg in args:
                if type(arg).__name__ == "CArgObject":
                    out = arg._obj
                    out.value = 512 if isinstance(out, ctypes.c_size_t) else next(self._handles)
            self.calls.append((name, args))
            return 0

        return fn

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


class _FakeMemory:
    def __init__(self) -> None:
        self.next, self.freed = 0x7000_0000, []

    def allocate(self, nbytes: int, stream) -> int:
        self.next += 0x1000
        return self.next

    def deallocate(self, ptr: int, nbytes: int, stream) -> None:
        self.freed.append(ptr)


def test_the_cuda_handle_keeps_a_launcher_and_replays_it(monkeypatch) -> None:
    """CusparseHandle.spmv_bound/spmm_bound on stand-ins for the library and the driver (any
    machine): a repeated launch derives nothing again, runs the library call once, captures
    it once and launches the graph from then on; scalars live at addresses that are never
    rewritten; another scalar is another graph; a released dense descriptor makes the launcher
    derive again (same graph); a destroyed matrix destroys its graphs and fails the launcher
    with InvalidMessage; a matrix made again under the same id gets graphs of its own."""
    import types

    from gpumsg.backends.cuda.replays import GraphReplays
    from gpumsg.libs.cusparse.handle import CusparseHandle

    monkeypatch.setenv("GPUMSG_SPARSE_REPLAY", "0")  # no driver here: the fakes go in below
    lib = _FakeCusparse()
    lib.cusparseSpMM_preprocess = lambda *args: lib.calls.append(("pre_mm", args)) or 0
    memory = _FakeMemory()
    stream = 77
    ctx = types.SimpleNamespace(memory=memory, capture=None,
                                compute=types.SimpleNamespace(obj=stream))
    h = CusparseHandle(ctx, lib=lib)
    drv, drv_mm = FakeGraphDriver(), FakeGraphDriver()
    h.spmv_replays = GraphReplays(drv, 64, lambda: ctx.capture is not None)
    h.spmm_replays = GraphReplays(drv_mm, 64, lambda: ctx.capture is not None)
    ref = types.SimpleNamespace(id=5, format="csr", shape=(8, 6), nnz=10, block=1,
                                dtype="f32", index_dtype="i32")
    h.create(ref, 0x100, 0x200, 0x300)
    x, y = 0x5000, 0x6000
    launch = h.spmv_bound(stream, 5, "N", 0.5, x, -1.0, y, 6, 8)
    sizes0 = dict(h.sizes.info())
    for _ in range(5):
        launch(stream)
    assert lib.count("cusparseSpMV") == 2  # the plain run, then the capture
    assert lib.count("cusparseCreateDnVec") == 2 and lib.count("cusparseSpMV_bufferSize") == 1
    assert len(drv.launched) == 4 and h.spmv_replays.captures == 1
    info = h.sizes.info()
    assert (info["misses"] - sizes0["misses"], info["hits"] - sizes0["hits"]) == (1, 4)
    args = next(a for n, a in lib.calls if n == "cusparseSpMV")
    pa, pb = args[2], args[5]
    import ctypes

    assert (ctypes.c_float.from_address(pa).value, ctypes.c_float.from_address(pb).value) == \
        (0.5, -1.0)
    h.spmv(stream, 5, "N", 3.0, x, 4.0, y, 6, 8)  # a plain call writes its own scalars...
    assert ctypes.c_float.from_address(pa).value == 0.5  # ...not the kept ones
    # another scalar: another launcher, another graph (same workspace)
    other = h.spmv_bound(stream, 5, "N", 2.0, x, -1.0, y, 6, 8)
    for _ in range(3):
        other(stream)
    assert h.spmv_replays.captures == 2 and len(h.spmv_replays.execs) == 2
    # a released dense descriptor: derive again, the same graph goes on
    h._vecs.resize(0)
    created = lib.count("cusparseCreateDnVec")
    launch(stream)
    assert lib.count("cusparseCreateDnVec") == created + 2
    assert h.spmv_replays.captures == 2 and len(drv.launched) == 4 + 2 + 1
    # SpMM: preprocessed workspace, replayed apart
    mm = h.spmm_bound(stream, 5, "N", 1.0, 0x8000, (6, 3), 0.0, 0x9000, (8, 3))
    for _ in range(3):
        mm(stream)
    assert lib.count("cusparseSpMM") == 2 and len(drv_mm.launched) == 2
    assert sum(1 for n, _ in lib.calls if n == "pre_mm") == 1
    # another matrix made and destroyed: nothing of this launcher's changes
    h.create(types.SimpleNamespace(**{**vars(ref), "id": 6}), 0x400, 0x500, 0x600)
    h.destroy(6)
    created = lib.count("cusparseCreateDnVec")
    launch(stream)
    assert lib.count("cusparseCreateDnVec") == created and len(drv.launched) == 4 + 2 + 2
    # destroyed: its graphs go, the launchers fail as a plain call would
    h.destroy(5)
    assert len(h.spmv_replays.execs) == 0 and len(h.spmm_replays.execs) == 0
    assert len(drv.destroyed) == 2 and len(drv_mm.destroyed) == 1
    with pytest.raises(gpumsg.InvalidMessage, match="no descriptor"):
        launch(stream)
    # made again under the same id (new descriptor, maybe the same workspace address): its
    # own graph, never the old one
    h.create(ref, 0x100, 0x200, 0x300)
    spmv_calls = lib.count("cusparseSpMV")
    for _ in range(3):
        launch(stream)
    assert lib.count("cusparseSpMV") == spmv_calls + 2 and h.spmv_replays.captures == 3
    h.close()
    assert h.raw_handle == 0


def test_freed_matrix_is_refused(dev, rng) -> None:
    mat = dev.cusparse.csr(rand_sparse(rng, 8, 8, 0.5, "f64"))
    mat.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(mat, dev.to_device(np.ones(8)))
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
    BadArg("spmv x length", lambda d: d.cusparse.spmv(_m(d), _v(d, 7)), field="x"),
    BadArg("spmv y length", lambda d: d.cusparse.spmv(_m(d), _v(d, 6), _v(d, 6)), field="y"),
    BadArg("spmv dtype mix", lambda d: d.cusparse.spmv(_m(d), _v(d, 6, np.float32)), field="x"),
    BadArg("spmv op", lambda d: d.cusparse.spmv(_m(d), _v(d, 6), op="X"), field="op"),
    BadArg("spmv complex alpha on real", lambda d: d.cusparse.spmv(_m(d), _v(d, 6), alpha=1j),
           field="alpha"),
    BadArg("spmv y aliases x", lambda d: (lambda v: d.cusparse.spmv(_m(d, shape=(6, 6)), v, v))(
        _v(d, 6)), field="y"),
    BadArg("spmv new y with beta", lambda d: d.cusparse.spmv(_m(d), _v(d, 6), beta=1.0),
           field="beta"),
    BadArg("spmv not a matrix", lambda d: d.cusparse.spmv(_v(d, 6), _v(d, 6), _v(d, 6)),
           field="a"),
    BadArg("spmm b rows", lambda d: d.cusparse.spmm(_m(d), d.alloc((5, 3), np.float64, "C")),
           field="b"),
    BadArg("spmm b F-ordered", lambda d: d.cusparse.spmm(_m(d), d.alloc((6, 3), np.float64, "F")),
           field="b"),
    BadArg("spmm c shape", lambda d: d.cusparse.spmm(_m(d), d.alloc((6, 3), np.float64, "C"),
                                                   d.alloc((8, 4), np.float64, "C")), field="c"),
    BadArg("spmm bsr transposed", lambda d: d.cusparse.spmm(
        _m(d, shape=(6, 6), fmt="bsr"), d.alloc((6, 2), np.float64, "C"), op="T"), field="op"),
    BadArg("spgemm inner dims", lambda d: d.cusparse.spgemm(_m(d), _m(d)), field="b"),
    BadArg("spgemm csc", lambda d: d.cusparse.spgemm(_m(d, fmt="csc"), _m(d, shape=(6, 4))),
           field="a"),
    BadArg("spgemm dtype mix", lambda d: d.cusparse.spgemm(_m(d), _m(d, "f32", shape=(6, 4))),
           field="b"),
    BadArg("spgemm index mix", lambda d: d.cusparse.spgemm(_m(d), _m(d, index="i64", shape=(6, 4))),
           field="b"),
    BadArg("spsv not square", lambda d: d.cusparse.spsv(_m(d), _v(d, 8)), field="a"),
    BadArg("spsv csc", lambda d: d.cusparse.spsv(_m(d, shape=(6, 6), fmt="csc"), _v(d, 6)),
           field="a"),
    BadArg("spsv uplo", lambda d: d.cusparse.spsv(_m(d, shape=(6, 6)), _v(d, 6), uplo="X"),
           field="uplo"),
    BadArg("spsm b rows", lambda d: d.cusparse.spsm(_m(d, shape=(6, 6)),
                                                  d.alloc((5, 2), np.float64, "C")), field="b"),
    BadArg("spsm c shape", lambda d: d.cusparse.spsm(_m(d, shape=(6, 6)),
                                                   d.alloc((6, 2), np.float64, "C"),
                                                   d.alloc((6, 3), np.float64, "C")), field="c"),
    BadArg("spsm bsr", lambda d: d.cusparse.spsm(_m(d, shape=(6, 6), fmt="bsr"),
                                               d.alloc((6, 2), np.float64, "C")), field="a"),
    BadArg("sddmm shape", lambda d: d.cusparse.sddmm(d.alloc((8, 2), np.float64, "C"),
                                                   d.alloc((2, 5), np.float64, "C"), _m(d)),
           field="c"),
    BadArg("sddmm inner", lambda d: d.cusparse.sddmm(d.alloc((8, 2), np.float64, "C"),
                                                   d.alloc((3, 6), np.float64, "C"), _m(d)),
           field="b"),
    BadArg("to_dense out shape", lambda d: d.cusparse.to_dense(_m(d), d.alloc((6, 8), np.float64,
                                                                            "C")), field="out"),
    BadArg("to_dense bsr", lambda d: d.cusparse.to_dense(_m(d, shape=(6, 6), fmt="bsr")),
           field="a"),
    BadArg("from_dense 1-D", lambda d: d.cusparse.from_dense(_v(d, 6)), field="dense"),
    BadArg("from_dense index f32", lambda d: d.cusparse.from_dense(
        d.alloc((3, 3), np.float64, "C"), index_dtype=np.float32), field="index_dtype"),
    BadArg("convert i64", lambda d: d.cusparse.convert(_m(d, index="i64"), "csc"), field="a"),
    BadArg("convert to coo", lambda d: d.cusparse.convert(_m(d), "coo"), field="format"),
    BadArg("csr int values", lambda d: d.cusparse.csr(sp.eye(3, dtype=np.int32)), field="dtype"),
    BadArg("csr f16 array", lambda d: d.cusparse.csr(np.eye(3, dtype=np.float16)), field="matrix"),
    BadArg("csr f16 dtype", lambda d: d.cusparse.csr(np.eye(3), dtype=np.float16), field="dtype"),
    BadArg("csr index u8", lambda d: d.cusparse.csr(np.eye(3), index_dtype=np.uint8),
           field="index_dtype"),
    BadArg("from_buffers index mix", lambda d: d.cusparse.from_buffers(
        "csr", (3, 3), d.alloc(4, np.int64), d.alloc(3, np.int32), d.alloc(3, np.float64)),
        field="ptr"),
    BadArg("from_buffers float indices", lambda d: d.cusparse.from_buffers(
        "csr", (3, 3), d.alloc(4, np.float32), d.alloc(3, np.float32), d.alloc(3, np.float64)),
        field="idx"),
    BadArg("from_buffers short ptr", lambda d: d.cusparse.from_buffers(
        "csr", (3, 3), d.alloc(3, np.int32), d.alloc(3, np.int32), d.alloc(3, np.float64)),
        field="ptr"),
    BadArg("from_buffers short values", lambda d: d.cusparse.from_buffers(
        "coo", (3, 3), d.alloc(3, np.int32), d.alloc(3, np.int32), d.alloc(2, np.float64)),
        field="val"),
    BadArg("from_buffers format", lambda d: d.cusparse.from_buffers(
        "ell", (3, 3), d.alloc(3, np.int32), d.alloc(3, np.int32), d.alloc(3, np.float64)),
        field="format"),
    BadArg("bsr block", lambda d: d.cusparse.bsr(np.eye(5), 2), field="block"),
    BadArg("freed matrix", lambda d: (lambda m: (m.free(), d.cusparse.spmv(m, _v(d, 6))))(_m(d)),
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
