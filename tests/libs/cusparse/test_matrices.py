"""cuSPARSE matrices: dense <-> sparse and CSR <-> CSC, matrices over existing buffers and
their value updates, the workspace-size cache, the matrix handle's life cycle and a
bad-argument table (each row checks that the device still serves afterwards).

One device per backend serves each module (opening a CUDA device per case would dominate the
GPU run)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import scipy.sparse as sp

import gpumsg
from gpumsg.messages.cusparse import SparseRef
from tests.libs.cusparse._helpers import DENSITIES, INDEX, host, rand_sparse, upload, values
from tests.libs.harness import FLOAT_DTYPES, BadArg, assert_close, check_bad_args, wide


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
        # collected once nothing holds it: its ready future refers back to it, and the device
        # thread may still hold the product's reply for a moment after answering it (a CI
        # replica under load asked the size within that moment)
        deadline = time.monotonic() + 10
        while True:
            gc.collect()
            size = dev.cusparse.cache_info().result(timeout=60)["size"]
            if size == base or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert size == base
    finally:
        gc.enable()


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
