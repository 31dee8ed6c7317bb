"""One memory-order rule, NumPy's: C is the default everywhere, and the cuBLAS-level calls read
each buffer's own order (a C-ordered operand is handled as the transpose it is)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gpumsg
from tests.conftest import rel_err

TOL = {"f32": 2e-5, "f64": 1e-12, "c64": 2e-5, "c128": 1e-12}


def rand(rng, shape, dtype: str, order: str) -> np.ndarray:
    dt = gpumsg.as_dtype(dtype)
    x = rng.standard_normal(shape) + 0.1
    if dt.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return np.asarray(x.astype(dt), order=order)


def op(x: np.ndarray, trans: str) -> np.ndarray:
    x = x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)
    return {"N": x, "T": x.T, "C": x.conj().T}[trans]


def test_defaults_are_c(dev) -> None:
    assert dev.alloc((3, 4)).result().order == "C"
    assert dev.alloc((3, 4), np.float64).order == "C"  # known before it resolves
    assert dev.alloc_pinned((3, 4)).result().order == "C"
    assert dev.to_device(np.ones((3, 4))).result().order == "C"
    # an F-ordered host array keeps its layout, as np.asarray does
    assert dev.to_device(np.asfortranarray(np.ones((3, 4)))).result().order == "F"
    assert dev.linalg.matmul(dev.alloc((2, 3)), dev.alloc((3, 2))).result().order == "C"


ORDERS = list(itertools.product("CF", repeat=3))


@pytest.mark.parametrize("oa,ob,oc", ORDERS)
@pytest.mark.parametrize("transa,transb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
def test_sgemm_reads_each_order(dev, rng, oa: str, ob: str, oc: str, transa: str,
                                transb: str) -> None:
    m, n, k = 7, 5, 3
    a = rand(rng, (m, k) if transa == "N" else (k, m), "f32", oa)
    b = rand(rng, (k, n) if transb == "N" else (n, k), "f32", ob)
    c = rand(rng, (m, n), "f32", oc)
    alpha, beta = float(rng.uniform(0.5, 2)), float(rng.uniform(-1.5, -0.5))
    da, db, dc = dev.to_device(a), dev.to_device(b), dev.to_device(c)
    assert (da.order, db.order, dc.order) == (oa, ob, oc)
    # m, n, k from the shapes
    dev.sgemm(da, db, dc, alpha=alpha, beta=beta, transa=transa, transb=transb)
    ref = alpha * op(a, transa) @ op(b, transb) + beta * c.astype(np.float64)
    assert rel_err(dev.copy_to_host(dc).result(), ref) < TOL["f32"]
    # the same, spelled out
    dc2 = dev.to_device(c)
    dev.sgemm(da, db, dc2, m, n, k, alpha, beta, transa, transb)
    assert rel_err(dev.copy_to_host(dc2).result(), ref) < TOL["f32"]


def test_sgemm_issue_case(dev, rng) -> None:
    """Buffers from to_device of C-ordered arrays, explicit m, n, k: the right product."""
    A, B = rand(rng, (4, 3), "f32", "C"), rand(rng, (3, 5), "f32", "C")
    c = dev.alloc((4, 5), np.float32)
    dev.sgemm(dev.to_device(A), dev.to_device(B), c, m=4, n=5, k=3).result()
    assert rel_err(dev.copy_to_host(c).result(), A.astype(np.float64) @ B) < TOL["f32"]


@pytest.mark.parametrize("dtype", ["f64", "c64", "c128"])
@pytest.mark.parametrize("oa,ob,oc", ORDERS)
def test_gemm_reads_each_order(dev, rng, dtype: str, oa: str, ob: str, oc: str) -> None:
    m, n, k = 6, 4, 5
    for transa, transb in (("N", "N"), ("T", "N"), ("C", "T"), ("N", "C")):
        # conjugate transposes of an operand of the other order cannot be expressed
        bad = dtype[0] == "c" and ((transa == "C" and oa != oc) or (transb == "C" and ob != oc))
        a = rand(rng, (m, k) if transa == "N" else (k, m), dtype, oa)
        b = rand(rng, (k, n) if transb == "N" else (n, k), dtype, ob)
        c = rand(rng, (m, n), dtype, oc)
        da, db, dc = dev.to_device(a), dev.to_device(b), dev.to_device(c)
        if bad:
            with pytest.raises(gpumsg.InvalidMessage, match="order") as info:
                dev.cublas.gemm(da, db, dc, transa=transa, transb=transb)
            assert info.value.field in ("transa", "transb")
            continue
        dev.cublas.gemm(da, db, dc, alpha=1.5, beta=-0.5, transa=transa, transb=transb)
        ref = 1.5 * op(a, transa) @ op(b, transb) - 0.5 * op(c, "N")
        assert rel_err(dev.copy_to_host(dc).result(), ref) < TOL[dtype], (transa, transb)


@pytest.mark.parametrize("oa", "CF")
@pytest.mark.parametrize("trans", "NT")
def test_gemv_reads_order(dev, rng, oa: str, trans: str) -> None:
    m, n = 6, 4
    a = rand(rng, (m, n), "f64", oa)
    x = rand(rng, (n if trans == "N" else m,), "f64", "C")
    y = rand(rng, (m if trans == "N" else n,), "f64", "C")
    dy = dev.to_device(y)
    dev.cublas.gemv(dev.to_device(a), dev.to_device(x), dy, alpha=2.0, beta=0.5, trans=trans)
    ref = 2.0 * op(a, trans) @ x + 0.5 * y
    assert rel_err(dev.copy_to_host(dy).result(), ref) < TOL["f64"]


def test_gemm_batched_reads_order(dev, rng) -> None:
    m, n, k = 4, 3, 5
    As = [rand(rng, (m, k), "f32", "C") for _ in range(3)]
    Bs = [rand(rng, (k, n), "f32", "C") for _ in range(3)]
    cs = [dev.alloc((m, n), np.float32) for _ in range(3)]
    dev.cublas.gemm_batched([dev.to_device(x) for x in As], [dev.to_device(x) for x in Bs], cs,
                            m, n, k).result()
    for A, B, c in zip(As, Bs, cs, strict=True):
        assert rel_err(dev.copy_to_host(c).result(), A.astype(np.float64) @ B) < TOL["f32"]


def test_flat_storage_keeps_cublas_semantics(dev, rng) -> None:
    """1-D buffers are column-major storage with explicit dimensions, as in cuBLAS."""
    m, n, k = 4, 3, 5
    a, b = rand(rng, (m, k), "f32", "F"), rand(rng, (k, n), "f32", "F")
    c = dev.alloc((m * n,), np.float32)
    dev.sgemm(dev.to_device(a.ravel(order="F")), dev.to_device(b.ravel(order="F")), c,
              m, n, k).result()
    out = dev.copy_to_host(c).result().reshape((m, n), order="F")
    assert rel_err(out, a.astype(np.float64) @ b) < TOL["f32"]


@pytest.mark.parametrize("order", "CF")
def test_contradicting_arguments_are_refused(dev, order: str) -> None:
    a = dev.alloc((4, 3), np.float32, order=order)
    b = dev.alloc((3, 5), np.float32, order=order)
    c = dev.alloc((4, 5), np.float32, order=order)
    own = 4 if order == "F" else 3
    with pytest.raises(gpumsg.InvalidMessage, match=f"{order}-ordered") as info:
        dev.sgemm(a, b, c, 4, 5, 3, lda=own + 1)
    assert info.value.field == "lda"
    with pytest.raises(gpumsg.InvalidMessage, match=f"{order} order") as info:
        dev.sgemm(a, b, c, 4, 5, 4)
    assert info.value.field == "k"
    with pytest.raises(gpumsg.InvalidMessage, match=f"{order} order") as info:
        dev.cublas.gemm(a, b, c, m=5)
    assert info.value.field == "m"
    # a leading block of a larger buffer is fine
    dev.sgemm(a, b, c, 2, 2, 2).result()


def test_column_major_only_calls_refuse_c_order(dev) -> None:
    a = dev.alloc((4, 4), np.float64)
    with pytest.raises(gpumsg.InvalidMessage, match="C-ordered") as info:
        dev.cublas.trsm(a, dev.alloc((4, 2), np.float64), 4, 2)
    assert info.value.field == "a"


def test_buffer_errors_name_the_order(dev) -> None:
    a = dev.alloc((4, 5), np.float32)
    with pytest.raises(gpumsg.InvalidMessage, match="C order"):
        dev.copy_to_host(a, out=np.empty((5, 4), np.float32))
    assert "order=C" in repr(a.result())
