"""Level 1, 2 and 3 BLAS against NumPy float64/complex128 on random data, with strides, padded
leading dimensions and alpha/beta; reductions answer Python scalars without stalling the
device."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gpumsg
from gpumsg import messages
from tests.libs.cublas._helpers import opnd, rand, scalars
from tests.libs.harness import rel_err, tolerance, wide

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
    dev.cublas.axpy(dx, dy, alpha, n, incx, incy)
    expect_y = wide(y)
    expect_y[::incy] += alpha * wide(x)[::incx]
    assert rel_err(dev.copy_to_host(dy).result(), expect_y) < TOL[dtype]
    dev.cublas.scal(dx, alpha, n, incx)
    expect_x = wide(x)
    expect_x[::incx] *= alpha
    assert rel_err(dev.copy_to_host(dx).result(), expect_x) < TOL[dtype]
    # copy then swap
    z = dev.alloc((n,), dtype)
    dev.cublas.copy(dx, z, n, incx, 1)
    assert rel_err(dev.copy_to_host(z).result(), expect_x[::incx]) < TOL[dtype]
    before_y = dev.copy_to_host(dy).result()
    dev.cublas.swap(z, dy, n, 1, incy)
    assert rel_err(dev.copy_to_host(z).result(), wide(before_y)[::incy]) < TOL[dtype]
    # rotation
    c, s = 0.6, (0.8 if dtype in ("f32", "f64") else complex(0.6, 0.53))
    p, q = rand(rng, (n,), dtype), rand(rng, (n,), dtype)
    dp, dq = dev.to_device(p), dev.to_device(q)
    dev.cublas.rot(dp, dq, c, s)
    assert rel_err(dev.copy_to_host(dp).result(), c * wide(p) + s * wide(q)) < TOL[dtype]
    assert rel_err(dev.copy_to_host(dq).result(), c * wide(q) - np.conj(s) * wide(p)) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_return_python_scalars(dev, rng, dtype: str) -> None:
    n, incx = 300, 3
    x = rand(rng, (n * incx,), dtype)
    y = rand(rng, (n,), dtype)
    dx, dy = dev.to_device(x), dev.to_device(y)
    xs = wide(x)[::incx]
    dot = dev.cublas.dot(dx, dy, n, incx).result()
    assert isinstance(dot, complex if dtype in ("c64", "c128") else float)
    assert abs(dot - np.sum(xs * wide(y))) < TOL[dtype] * 50 * np.sqrt(n)
    if dtype in ("c64", "c128"):
        dotc = dev.cublas.dotc(dx, dy, n, incx).result()
        assert abs(dotc - np.sum(xs.conj() * wide(y))) < TOL[dtype] * 50 * np.sqrt(n)
    nrm = dev.cublas.nrm2(dx, n, incx).result()
    assert isinstance(nrm, float) and abs(nrm - np.linalg.norm(xs)) < TOL[dtype] * 10 * nrm
    asum = dev.cublas.asum(dx, n, incx).result()
    assert abs(asum - np.sum(np.abs(xs.real) + np.abs(xs.imag))) < TOL[dtype] * 10 * asum
    mag = np.abs(xs.real) + np.abs(xs.imag)
    assert dev.cublas.iamax(dx, n, incx).result() == int(np.argmax(mag))  # 0-based
    assert dev.cublas.iamin(dx, n, incx).result() == int(np.argmin(mag))


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
        dot = dev.cublas.dot(dx, dy).result()
        assert abs(dot - np.dot(xd, yd)) < TOL["f32"] * 50 * np.sqrt(n) * np.abs(xd).max()
        nrm = dev.cublas.nrm2(dx).result()
        assert abs(nrm - np.linalg.norm(xd)) < TOL["f32"] * 10 * nrm
        assert dev.cublas.iamax(dx).result() == int(np.argmax(np.abs(xd)))
    info = dev.cublas.replay_info().result()["cublas"]
    if backend == "cuda":
        red = info["reductions"]
        assert red["refused"] == "" and red["captures"] >= 3 and red["launches"] >= 9, red
        assert red["with_memory_nodes"] == 0, red  # no workspace allocated per replay


def test_reductions_do_not_stall_the_device(one_stream_dev, rng) -> None:
    dev = one_stream_dev  # per-stream bookkeeping: one compute stream
    x = rand(rng, (1000,), "f64")
    dx = dev.to_device(x).result()
    dev.inject_fault("hang", seconds=0.6)  # the compute stream is busy for a while
    t0 = time.perf_counter()
    futures = [dev.cublas.dot(dx, dx) for _ in range(20)]
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
        dev.cublas.axpy(x, dev.alloc((10,), np.float32), n=6, incx=2)
    assert info.value.field == "x"
    with pytest.raises(gpumsg.InvalidMessage):
        dev.cublas.dot(x, dev.alloc((10,), np.float64))
    with pytest.raises(gpumsg.InvalidMessage):
        dev.cublas.scal(x, 1j)
    with pytest.raises(gpumsg.InvalidMessage):
        dev.cublas.nrm2(dev.alloc((10,), np.int32))
    with pytest.raises(gpumsg.InvalidMessage, match="incx"):
        dev.cublas.asum(x, incx=0)


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
    dev.cublas.gemv(dev.to_device(a), dev.to_device(x), dy, m, n, alpha, beta, trans, lda=m + pad,
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
    dev.cublas.ger(dev.to_device(x), dev.to_device(y), da, m, n, alpha, conjugate=conjugate)
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
    dev.cublas.symv(dev.to_device(a), dev.to_device(x), dy, n, alpha, beta, uplo)
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
    dev.cublas.trsv(dev.to_device(a), dx, n, uplo, trans, diag)
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
    c = dev.alloc((m, n), dtype, order="F")
    dev.cublas.geam(dev.to_device(a), dev.to_device(b), c, m, n, alpha, beta, transa, transb)
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
    dev.cublas.syrk(dev.to_device(a), dc, n, k, alpha, beta, uplo, trans)
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
    dev.cublas.symm(dev.to_device(a), dev.to_device(b), dc, m, n, alpha, beta, side, uplo)
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
    c = dev.alloc((m, n), dtype, order="F")
    dev.cublas.trmm(da, db, c, m, n, alpha, side, uplo, trans, diag)
    prod = t @ wide(b) if side == "L" else wide(b) @ t
    assert rel_err(dev.copy_to_host(c).result(), alpha * prod) < TOL[dtype]
    dev.cublas.trsm(da, db, m, n, alpha, side, uplo, trans, diag)
    x = wide(dev.copy_to_host(db).result())
    back = t @ x if side == "L" else x @ t
    assert rel_err(back, alpha * wide(b)) < TOL[dtype] * 10


def test_level3_argument_checks(dev) -> None:
    a = dev.alloc((6, 6), np.float64, order="F")
    with pytest.raises(gpumsg.InvalidMessage, match="uplo"):
        dev.cublas.syrk(a, dev.alloc((6, 6), np.float64, order="F"), 6, 6, uplo="X")
    with pytest.raises(gpumsg.InvalidMessage, match="side"):
        dev.cublas.trsm(a, dev.alloc((6, 6), np.float64, order="F"), 6, 6, side="up")
    with pytest.raises(gpumsg.InvalidMessage, match="alias"):
        dev.cublas.symm(a, dev.alloc((6, 6), np.float64, order="F"), a, 6, 6)
    with pytest.raises(gpumsg.InvalidMessage, match="not transposed"):
        dev.cublas.geam(a, dev.alloc((6, 6), np.float64, order="F"), a, 6, 6, transa="T")


# -- repeated level-1/2 calls -------------------------------------------------------------------

LEVEL_TYPES = (messages.Axpy, messages.Scal, messages.Copy, messages.Swap, messages.Rot,
               messages.Gemv, messages.Ger, messages.Symv, messages.Trsv)


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeated_level_calls_follow_their_inputs(one_stream_dev, rng, backend: str, posted,
                                                  dtype: str) -> None:
    """Four rounds of the same nine level-1/2 calls on the same buffers, with fresh inputs
    written into them every round, every result against float64. The client sends each call
    as the same message every round (real scalars); the device thread keeps one launcher per
    message, however many rounds; on a GPU the second round is captured as CUDA graphs and the
    later ones replayed, so a graph keyed on too little (another buffer, a scalar) or a launcher
    kept for the wrong message shows as a wrong result."""
    dev = one_stream_dev  # per-stream bookkeeping: one compute stream
    ctx = dev._worker.ctx
    n, m = 40, 24
    real = dtype in ("f32", "f64")
    alpha, beta = scalars(rng, dtype)
    c, s = 0.6, (0.8 if real else complex(0.6, 0.53))
    shapes = {"x": (2 * n,), "y": (n,), "z": (n,), "w": (n,), "p": (n,), "q": (n,),
              "a": (m, n), "ym": (m,), "u": (m,), "v": (n,), "a2": (m, n), "sq": (n, n),
              "y3": (n,), "t": (n, n), "r": (n,)}
    d = {k: dev.alloc(shape, dtype, order="F").result() for k, shape in shapes.items()}
    sent = posted(dev, *LEVEL_TYPES)
    before = len(ctx.derived)
    tol = TOL[dtype] * 10
    for rnd in range(4):
        h = {k: rand(rng, shape, dtype) for k, shape in shapes.items()}
        h["t"] = triangular(rng, n, dtype, "L")
        for k, buf in d.items():
            dev.copy_from_host(buf, h[k])
        w = {k: wide(v) for k, v in h.items()}
        blas = dev.cublas
        blas.axpy(d["x"], d["y"], alpha, n, 2, 1)
        blas.scal(d["z"], alpha, n)
        blas.copy(d["x"], d["w"], n, 2, 1)
        blas.swap(d["p"], d["q"], n)
        blas.rot(d["p"], d["q"], c, s, n)
        blas.gemv(d["a"], d["x"], d["ym"], m, n, alpha, beta, "N", lda=m, incx=2)
        blas.ger(d["u"], d["v"], d["a2"], m, n, alpha)
        blas.symv(d["sq"], d["v"], d["y3"], n, alpha, beta, "L")
        blas.trsv(d["t"], d["r"], n, "L", "N", "N")
        got = {k: dev.copy_to_host(d[k]).result() for k in d}
        xs = w["x"][::2]
        assert rel_err(got["y"], w["y"] + alpha * xs) < tol, rnd
        assert rel_err(got["z"], alpha * w["z"]) < tol, rnd
        assert rel_err(got["w"], xs) < tol, rnd
        p, q = w["q"], w["p"]  # swapped, then rotated
        assert rel_err(got["p"], c * p + s * q) < tol, rnd
        assert rel_err(got["q"], c * q - np.conj(s) * p) < tol, rnd
        assert rel_err(got["ym"], alpha * w["a"] @ xs + beta * w["ym"]) < tol, rnd
        assert rel_err(got["a2"], w["a2"] + alpha * np.outer(w["u"], w["v"])) < tol, rnd
        full = np.tril(w["sq"]) + np.tril(w["sq"], -1).T
        assert rel_err(got["y3"], alpha * full @ w["v"] + beta * w["y3"]) < tol, rnd
        assert rel_err(tri(h["t"], "L", "N") @ wide(got["r"]), w["r"]) < tol, rnd
        # the same messages every round, complex scalars included (the memo keys them by
        # value and type)
        assert [type(x) for x in sent[9 * rnd:]] == list(LEVEL_TYPES), rnd
        if rnd:
            assert all(a is b for a, b in zip(sent[:9], sent[9 * rnd:], strict=True)), rnd
    assert len(ctx.derived) == before + 9  # one launcher per message
    levels = dev.cublas.replay_info().result()["cublas"].get("levels")
    if backend == "cuda":
        assert levels["enabled"] and levels["refused"] == "", levels
        assert levels["captures"] == 9 and levels["launches"] >= 27, levels
        assert levels["with_memory_nodes"] == 0, levels  # no workspace allocated per replay


def test_a_repeated_level_call_keeps_every_check(backend: str, rng, posted) -> None:
    """A repeated axpy/gemv goes through the memo and the kept launcher, and still: another
    scalar is another message (and result), a value equal as a key but of another type is
    refused, a freed or stale buffer and a closed device are refused at the call site."""
    n = 64
    xh, yh = rand(rng, (n,), "f32"), rand(rng, (n,), "f32")
    dev = gpumsg.open_device(0, backend=backend)
    try:
        sent = posted(dev, messages.Axpy)
        x, y = dev.to_device(xh).result(), dev.to_device(yh).result()
        for _ in range(3):
            dev.cublas.axpy(x, y, 0.5).result()
        assert len(sent) == 3 and sent[0] is sent[1] is sent[2]
        dev.cublas.axpy(x, y, -2.0).result()  # another scalar: another message and graph
        assert sent[-1] is not sent[0] and sent[-1].alpha == -2.0
        ref = wide(yh) + 3 * 0.5 * wide(xh) - 2.0 * wide(xh)
        assert rel_err(dev.copy_to_host(y).result(), ref) < TOL["f32"] * 10
        with pytest.raises(gpumsg.InvalidMessage, match="n"):
            dev.cublas.axpy(x, y, 0.5, n=float(n))  # n=64 was memoized as an int
        with pytest.raises(gpumsg.InvalidMessage, match="incx"):
            dev.cublas.axpy(x, y, 0.5, incx=True)
        z = dev.to_device(yh).result()
        dev.cublas.axpy(x, z, 0.5).result()
        z.free().result()
        with pytest.raises(gpumsg.GpuRefStale, match="freed"):
            dev.cublas.axpy(x, z, 0.5)
        assert rel_err(dev.copy_to_host(y).result(), ref) < TOL["f32"] * 10  # still serves
    finally:
        dev.close()
    with pytest.raises(gpumsg.GpuError):
        dev.cublas.axpy(x, y, 0.5)


def test_a_repeated_level_call_refuses_a_stale_buffer(backend: str, rng) -> None:
    """After the worker was replaced (a new generation), the kept message of a repeated call
    names buffers of the old generation: the call is refused at the call site."""
    dev = gpumsg.open_device(0, backend=backend, isolation="process", allow_fault_injection=True,
                             watchdog=2.0, max_restarts=2, standby=False)
    try:
        x, y = (dev.to_device(rand(rng, (32,), "f32")).result() for _ in range(2))
        for _ in range(2):
            dev.cublas.axpy(x, y, 0.5).result(timeout=60)
        with pytest.raises(gpumsg.ContextPoisoned):
            dev.inject_fault("illegal_address").result(timeout=60)
        dev.watch_generation(0).result(timeout=60)
        assert x.is_stale()
        with pytest.raises(gpumsg.GpuRefStale):
            dev.cublas.axpy(x, y, 0.5)
        fresh = [dev.to_device(rand(rng, (32,), "f32")).result() for _ in range(2)]
        dev.cublas.axpy(*fresh, 0.5).result(timeout=60)  # the device serves
    finally:
        dev.close(timeout=60)


class _StubCublas:
    """A cuBLAS stand-in for the CUDA handle without a GPU: each function records its name and
    arguments (ctypes values as Python values) and answers ``status``."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.status = 0

    def __getattr__(self, name: str):
        import ctypes

        if name == "cublasGetStatusName":
            return lambda status: b"CUBLAS_STATUS_STUB"

        def fn(*args):
            self.calls.append((name, *(a.value if isinstance(a, ctypes._SimpleCData) else a
                                       for a in args)))
            return self.status

        if name.startswith("cublas") and name.endswith("_v2") and "Create" not in name:
            from gpumsg.libs.cublas._bindings import SPEC

            types = {f.name: f.argtypes for f in SPEC.functions}
            fn.argtypes = list(types.get(name, ()))  # type: ignore[attr-defined]
        return fn


def test_a_level_launcher_issues_its_bound_call_and_replays_by_key() -> None:
    """CublasHandle.level_bound on a stand-in library and graph driver (what the GPU path runs,
    checked here): the launcher calls the function of the dtype with the arguments as typed
    ctypes values (the scalar by the address of its value), binds the stream only when it
    changed, raises LibraryError on a status; its key holds the scalars and pointers, so
    another alpha is another graph, and a zero-size call is never captured."""
    import ctypes

    from gpumsg.backends.cuda._replays import GraphReplays
    from gpumsg.libs.cublas._handle import CublasHandle
    from tests.libs.harness import FakeGraphDriver

    class Stream:
        def __int__(self) -> int:
            return 0x77

    lib = _StubCublas()
    h = CublasHandle(None, lib)
    cu = FakeGraphDriver()
    h.level_replays = GraphReplays(cu, 8)
    h._level_bound = h.level_replays.bound
    s1 = Stream()
    launch = h.level_bound("axpy", s1, "f32", 100, 0.25, 0x1000, 2, 0x2000, 1)
    made = len(lib.calls)
    launch(s1)
    names = [c[0] for c in lib.calls[made:]]
    assert names == ["cublasSetStream_v2", "cublasSaxpy_v2"]
    call = lib.calls[-1]
    assert call[2] == 100 and call[4:] == (0x1000, 2, 0x2000, 1)
    assert ctypes.c_float.from_address(call[3]).value == 0.25  # alpha, by address
    launch(s1)  # captured now (no second SetStream), then launched
    launch(s1)
    assert [c[0] for c in lib.calls[made + 2:]] == ["cublasSaxpy_v2"]
    assert h.level_replays.captures == 1 and len(cu.launched) == 2
    other = h.level_bound("axpy", s1, "f32", 100, 0.5, 0x1000, 2, 0x2000, 1)
    other(s1)
    other(s1)
    assert h.level_replays.captures == 2  # another scalar, another graph
    z = h.level_bound("gemv", s1, "c64", "T", 0, 5, 1j, 0x10, 1, 0x20, 1, 0j, 0x30, 1)
    for _ in range(3):
        z(s1)
    assert h.level_replays.captures == 2 and lib.calls[-1][0] == "cublasCgemv_v2"
    assert lib.calls[-1][2:4] == (1, 0)  # CUBLAS_OP_T, m = 0
    lib.status = 7
    bad = h.level_bound("scal", s1, "f64", 10, 2.0, 0x40, 1)
    with pytest.raises(gpumsg.LibraryError, match="cublasDscal_v2"):
        bad(s1)
    assert h.level_replays.reason == ""  # a failing call is not captured, and stops nothing
