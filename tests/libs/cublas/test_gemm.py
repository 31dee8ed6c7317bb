"""The GEMM family (Gemm, GemmStridedBatched, GemmBatched) and the row-major ``matmul``, against
NumPy in float64/complex128 on random data: every dtype, transposes, padded leading dimensions,
alpha/beta."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.libs.cublas._helpers import opnd, rand, scalars
from tests.libs.harness import BadArg, check_bad_args, rel_err, tolerance

TOL = {d: tolerance(d) for d in ("f64", "c128", "f32", "c64", "f16", "bf16")}
TF32_TOL = tolerance("tf32")
REF = {"f64": np.float64, "f32": np.float64, "f16": np.float64, "bf16": np.float64,
       "c64": np.complex128, "c128": np.complex128}
CASES = [(d, ta, tb) for d in ("f32", "f64", "f16", "bf16", "c64", "c128")
         for ta, tb in (("N", "N"), ("T", "N"), ("N", "T"), ("C", "T"))]


@pytest.mark.parametrize("dtype,transa,transb", CASES)
def test_gemm(dev, rng, dtype: str, transa: str, transb: str) -> None:
    m, n, k, pad = 37, 29, 53, 5
    a_rows, a_cols = (m, k) if transa == "N" else (k, m)
    b_rows, b_cols = (k, n) if transb == "N" else (n, k)
    a = rand(rng, (a_rows + pad, a_cols), dtype)
    b = rand(rng, (b_rows + pad, b_cols), dtype)
    c = rand(rng, (m + pad, n), dtype)
    alpha, beta = scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.cublas.gemm(dev.to_device(a), dev.to_device(b), dc, m, n, k, alpha, beta, transa, transb,
                    lda=a_rows + pad, ldb=b_rows + pad, ldc=m + pad)
    out = dev.copy_to_host(dc).result()
    ref = alpha * opnd(a[:a_rows], transa) @ opnd(b[:b_rows], transb) + beta * opnd(c[:m], "N")
    assert rel_err(out[:m], ref) < TOL[dtype]
    np.testing.assert_array_equal(out[m:], c[m:])  # padding rows untouched


@pytest.mark.parametrize("dtype", ["f32", "c64"])
def test_gemm_tf32_is_opt_in(dev, rng, dtype: str) -> None:
    m = n = k = 64
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    c = dev.alloc((m, n), dtype)
    dev.cublas.gemm(dev.to_device(a), dev.to_device(b), c, m, n, k, compute="tf32")
    assert rel_err(dev.copy_to_host(c).result(), opnd(a, "N") @ opnd(b, "N")) < TF32_TOL
    wide = {"f32": "f64", "c64": "c128"}[dtype]
    with pytest.raises(gpumsg.InvalidMessage, match="tf32"):
        dev.cublas.gemm(dev.to_device(rand(rng, (m, k), wide)),
                        dev.to_device(rand(rng, (k, n), wide)), dev.alloc((m, n), wide), m, n, k,
                        compute="tf32")


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "c64"])
def test_gemm_strided_batched(dev, rng, dtype: str) -> None:
    batch, m, n, k = 4, 17, 13, 11
    sa, sb, sc = 17 * 11 + 3, 11 * 13 + 7, 17 * 13 + 2  # padded batch strides
    a = rand(rng, (sa * batch,), dtype)
    b = rand(rng, (sb * batch,), dtype)
    c = rand(rng, (sc * batch,), dtype)
    alpha, beta = scalars(rng, dtype)
    dc = dev.to_device(c)
    dev.cublas.gemm_strided_batched(dev.to_device(a), dev.to_device(b), dc, m, n, k, batch, sa,
                                    sb, sc, alpha, beta)
    out = dev.copy_to_host(dc).result()
    for i in range(batch):
        am = a[i * sa:i * sa + m * k].reshape((m, k), order="F")
        bm = b[i * sb:i * sb + k * n].reshape((k, n), order="F")
        cm = c[i * sc:i * sc + m * n].reshape((m, n), order="F")
        ref = alpha * opnd(am, "N") @ opnd(bm, "N") + beta * opnd(cm, "N")
        got = out[i * sc:i * sc + m * n].reshape((m, n), order="F")
        assert rel_err(got, ref) < TOL[dtype], i
        gap = slice(i * sc + m * n, (i + 1) * sc)  # between the batch's matrices: untouched
        np.testing.assert_array_equal(out[gap], c[gap])


def test_gemm_strided_batched_broadcast_b(dev, rng) -> None:
    batch, m, n, k = 3, 8, 6, 5
    a = rand(rng, (m * k * batch,), "f64")
    b = rand(rng, (k, n), "f64")
    c = dev.alloc((m * n * batch,), np.float64)
    dev.cublas.gemm_strided_batched(dev.to_device(a), dev.to_device(b), c, m, n, k, batch, m * k,
                                    0, m * n)
    out = dev.copy_to_host(c).result()
    for i in range(batch):
        ref = a[i * m * k:(i + 1) * m * k].reshape((m, k), order="F") @ b
        assert rel_err(out[i * m * n:(i + 1) * m * n].reshape((m, n), order="F"), ref) < 1e-12


@pytest.mark.parametrize("dtype", ["f32", "c128"])
def test_gemm_batched_pointer_arrays(dev, rng, dtype: str) -> None:
    m, n, k, batch = 19, 7, 12, 5
    hosts = [(rand(rng, (k, m), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype))
             for _ in range(batch)]
    alpha, beta = scalars(rng, dtype)
    A = [dev.to_device(h[0]) for h in hosts]
    B = [dev.to_device(h[1]) for h in hosts]
    C = [dev.to_device(h[2]) for h in hosts]
    dev.cublas.gemm_batched(A, B, C, m, n, k, alpha, beta, transa="T").result()
    for (a, b, c), dc in zip(hosts, C):
        ref = alpha * opnd(a, "T") @ opnd(b, "N") + beta * opnd(c, "N")
        assert rel_err(dev.copy_to_host(dc).result(), ref) < TOL[dtype]


@pytest.mark.parametrize("shapes", [((33, 20), (20, 15)), ((4, 9, 7), (4, 7, 5)),
                                    ((3, 6, 8), (8, 4)), ((6, 8), (3, 8, 4))])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_matmul_row_major(dev, rng, shapes, dtype: str) -> None:
    sa, sb = shapes
    a = rand(rng, sa, dtype).copy(order="C")
    b = rand(rng, sb, dtype).copy(order="C")
    da, db = dev.to_device(a), dev.to_device(b)
    assert da.result().order == "C"
    out = dev.linalg.matmul(da, db)
    res = dev.copy_to_host(out).result()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert res.shape == ref.shape and res.flags.c_contiguous
    assert rel_err(res, ref) < TOL[dtype]
    # into an existing buffer
    target = dev.alloc(ref.shape, dtype, order="C")
    assert dev.linalg.matmul(da, db, out=target).result() is target.result()
    assert rel_err(dev.copy_to_host(target).result(), ref) < TOL[dtype]


def test_repeated_matmul_into_out_reuses_its_message_and_keeps_every_check(dev, rng,
                                                                          posted) -> None:
    """``matmul(a, b, out=c)`` repeated: one message, sent again, with fresh inputs written into
    the same buffers each round (results against float64); the future resolves to ``out``; a
    wrong ``out``, a freed operand are refused at the call after the message was kept."""
    da = dev.alloc((3, 6, 5), np.float32, order="C").result()
    db = dev.alloc((5, 4), np.float32, order="C").result()
    out = dev.alloc((3, 6, 4), np.float32, order="C").result()
    sent = posted(dev, gpumsg.messages.GemmStridedBatched, gpumsg.messages.Gemm)
    for _ in range(3):
        a, b = rand(rng, (3, 6, 5), "f32"), rand(rng, (5, 4), "f32")
        dev.copy_from_host(da, np.ascontiguousarray(a)).result()
        dev.copy_from_host(db, np.ascontiguousarray(b)).result()
        assert dev.linalg.matmul(da, db, out=out).result() is out
        ref = a.astype(np.float64) @ b.astype(np.float64)
        assert rel_err(dev.copy_to_host(out).result(), ref) < TOL["f32"]
    assert len(sent) == 3 and sent[0] is sent[1] is sent[2]
    with pytest.raises(gpumsg.InvalidMessage, match="out"):
        dev.linalg.matmul(da, db, out=dev.alloc((3, 6, 4), np.float64, order="C"))
    with pytest.raises(gpumsg.InvalidMessage, match="out"):
        dev.linalg.matmul(da, db, out=da)
    db.free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.linalg.matmul(da, db, out=out)
    assert dev.stats().result().generation == dev.generation  # the device still serves


def test_repeated_matmul_without_out_copies_its_checked_message(dev, rng, posted) -> None:
    """``matmul(a, b)`` repeated: each call posts one AllocThen whose GEMM is the first call's
    message with the call's own new output (nothing else differs), the products are right,
    the outputs distinct; other operands of the same shapes get their own message; a freed
    operand is refused at the call."""
    a, b, a2 = (rand(rng, s, "f32").copy(order="C") for s in ((3, 6, 5), (5, 4), (3, 6, 5)))
    da, db, da2 = dev.to_device(a), dev.to_device(b), dev.to_device(a2)
    sent = posted(dev, gpumsg.messages.AllocThen)
    outs = [dev.linalg.matmul(da, db).result() for _ in range(3)]
    gemms = [m.then for m in sent]
    assert len(gemms) == 3 and all(type(g) is gpumsg.messages.GemmStridedBatched for g in gemms)
    assert [g.c for g in gemms] == [o.ref for o in outs] and len({o.ref.id for o in outs}) == 3
    first = gemms[0]
    for g in gemms[1:]:
        assert g.a is first.a and g.b is first.b
        assert [getattr(g, f) for f in first.__dataclass_fields__ if f != "c"] == \
            [getattr(first, f) for f in first.__dataclass_fields__ if f != "c"]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for o in outs:
        assert rel_err(dev.copy_to_host(o).result(), ref) < TOL["f32"]
    other = dev.linalg.matmul(da2, db).result()
    assert sent[-1].then.b is not first.b  # the GEMM's b is the left operand (row-major swap)
    assert rel_err(dev.copy_to_host(other).result(),
                   a2.astype(np.float64) @ b.astype(np.float64)) < TOL["f32"]
    db.result().free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.linalg.matmul(da, db)


def test_a_small_gemm_keeps_its_launcher_per_message_and_by_value(dev, rng) -> None:
    """A small GEMM (cuBLASLt) keeps one launcher per repeated message; ``matmul`` into new
    outputs keeps none by identity (each GEMM is sent once) and finds its launcher by value.
    The products stay right."""
    ctx = dev._worker.ctx
    a, b = (rand(rng, (16, 16), "f32").copy(order="C") for _ in range(2))
    da, db = dev.to_device(a).result(), dev.to_device(b).result()
    out = dev.alloc((16, 16), np.float32, order="C").result()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    for _ in range(3):
        dev.linalg.matmul(da, db, out=out).result()
    kept = len(ctx.derived)
    for _ in range(3):
        dev.linalg.matmul(da, db, out=out).result()
    assert len(ctx.derived) == kept  # the repeated message's launcher, kept
    assert rel_err(dev.copy_to_host(out).result(), ref) < TOL["f32"]
    # new outputs (each GEMM a message sent once): none keeps an entry by identity, each
    # finds or makes its launcher by value (an address the pool hands out again finds one)
    for _ in range(8):
        got = dev.copy_to_host(dev.linalg.matmul(da, db)).result()
        assert rel_err(got, ref) < TOL["f32"]
    assert len(ctx.derived) == kept
    assert any(k[0] == "lt gemm" and k[14] == out.raw_device_ptr()
               for k in ctx.derived._values)


def test_matmul_refuses_bad_shapes(dev) -> None:
    a = dev.alloc((4, 5), np.float32, order="C")
    with pytest.raises(gpumsg.InvalidMessage, match="align"):
        dev.linalg.matmul(a, dev.alloc((4, 5), np.float32, order="C"))
    with pytest.raises(gpumsg.InvalidMessage, match="align"):  # F order: copied, then checked
        dev.linalg.matmul(a, dev.alloc((4, 2), np.float32, order="F"))
    with pytest.raises(gpumsg.InvalidMessage, match="batch"):
        dev.linalg.matmul(dev.alloc((2, 4, 5), np.float32, order="C"),
                          dev.alloc((3, 5, 2), np.float32, order="C"))
    with pytest.raises(gpumsg.InvalidMessage, match="dtype"):
        dev.linalg.matmul(a, dev.alloc((5, 2), np.float64, order="C"))


def _f32(dev, shape=(8, 8)):
    return dev.alloc(shape, np.float32)


BAD = [
    BadArg("dtype mix", lambda d: d.cublas.gemm(_f32(d), d.alloc((8, 8), np.float64), _f32(d),
                                              8, 8, 8), match="share one dtype"),
    BadArg("output aliases input", lambda d: (lambda a: d.cublas.gemm(a, _f32(d), a, 8, 8, 8))(
        _f32(d)), match="alias"),
    BadArg("lda below m", lambda d: d.cublas.gemm(_f32(d), _f32(d), _f32(d), 8, 8, 8, lda=4),
           field="lda"),
    BadArg("complex alpha on reals", lambda d: d.cublas.gemm(_f32(d), _f32(d), _f32(d), 8, 8, 8,
                                                           alpha=1j), match="complex|real"),
    BadArg("strided batches overlap", lambda d: d.cublas.gemm_strided_batched(
        _f32(d, (100,)), _f32(d, (100,)), _f32(d, (100,)), 4, 4, 4, 3, 16, 16, 8),
        match="overlap"),
    BadArg("batched lists differ", lambda d: d.cublas.gemm_batched(
        [_f32(d)], [_f32(d)], [_f32(d), _f32(d)], 8, 8, 8), match="same length"),
    BadArg("freed operand", lambda d: (lambda a: (a.free(), d.cublas.gemm(a, _f32(d), _f32(d),
                                                                         8, 8, 8)))(
        _f32(d).result()), error=gpumsg.GpuRefStale),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_gemm_bad_arguments(dev, case: BadArg) -> None:
    check_bad_args(dev, case)


def test_heuristic_cache_fills_and_hits(dev, rng) -> None:
    a = dev.to_device(rand(rng, (24, 24), "f32"))
    c = dev.alloc((24, 24), np.float32)
    before = dev.cublaslt.cache_info().result()
    for _ in range(5):
        dev.cublas.gemm(a, a, c, 24, 24, 24)
    after = dev.cublaslt.cache_info().result()
    # a repeat replayed as a CUDA graph looks no plan up (dev.cublas.replay_info)
    launches = dev.cublas.replay_info().result()["cublaslt"].get("launches", 0)
    assert after["misses"] == before["misses"] + 1
    assert after["hits"] + launches >= before["hits"] + 4
    assert after["size"] == before["size"] + 1
    dev.cublas.gemm(a, a, c, 24, 24, 23).result()  # another shape: another plan
    assert dev.cublaslt.cache_info().result()["misses"] == after["misses"] + 1


def test_repeated_gemms_are_replayed_with_fresh_inputs(dev, backend, rng) -> None:
    """Every GEMM path repeated on the same buffers with the same arguments: on the GPU the
    second call is captured as a CUDA graph and later ones replay it (backends/cuda/replays.py).
    Fresh inputs are written into the same buffers before every round and each result is checked
    against float64, so a replay that reused stale data, another shape or another scalar fails."""
    m, n, k, batch = 40, 24, 16, 3
    big = 256  # 256^3 = 2^24 MACs: through cublasGemmEx, not cuBLASLt (handlers.AUTO_LT_FLOPS)
    shapes = {"sgemm": ((m, k), (k, n), (m, n)), "gemm_lt": ((m, k), (k, n), (m, n)),
              "gemm_ex": ((big, big), (big, big), (big, big)),
              "strided": ((m * k * batch,), (k * n * batch,), (m * n * batch,)),
              "lt_bias": ((k, m), (k, n), (m, n))}
    dtypes = {"sgemm": "f32", "gemm_lt": "bf16", "gemm_ex": "f32", "strided": "bf16",
              "lt_bias": "f16"}
    bufs = {name: [dev.alloc(s, gpumsg.as_dtype(dtypes[name]), order="F") for s in shape]
            for name, shape in shapes.items()}
    bias = dev.alloc((m,), gpumsg.as_dtype("f16"))
    alpha, beta = 0.75, -0.5
    for _ in range(4):
        host = {name: [rand(rng, s, dtypes[name]) for s in shape]
                for name, shape in shapes.items()}
        hb = rand(rng, (m,), "f16")
        for name in shapes:
            for buf, h in zip(bufs[name], host[name]):
                dev.copy_from_host(buf, h)
        dev.copy_from_host(bias, hb)
        a, b, c = bufs["sgemm"]
        dev.sgemm(a, b, c, m, n, k, alpha, beta)
        a, b, c = bufs["gemm_lt"]
        dev.cublas.gemm(a, b, c, m, n, k, alpha, beta)
        a, b, c = bufs["gemm_ex"]
        dev.cublas.gemm(a, b, c, big, big, big, alpha, beta)
        a, b, c = bufs["strided"]
        dev.cublas.gemm_strided_batched(a, b, c, m, n, k, batch, m * k, k * n, m * n, alpha, beta)
        a, b, d = bufs["lt_bias"]
        dev.cublaslt.matmul(a, b, d, m, n, k, transa="T", epilogue="bias", bias=bias,
                            alpha=alpha)
        for name in ("sgemm", "gemm_lt", "gemm_ex"):
            ha, hb_, hc = host[name]
            ref = alpha * opnd(ha, "N") @ opnd(hb_, "N") + beta * opnd(hc, "N")
            got = dev.copy_to_host(bufs[name][2]).result()
            assert rel_err(got, ref) < TOL[dtypes[name]], name
        ha, hb_, hc = host["strided"]
        got = dev.copy_to_host(bufs["strided"][2]).result()
        for i in range(batch):
            am = ha[i * m * k:(i + 1) * m * k].reshape((m, k), order="F")
            bm = hb_[i * k * n:(i + 1) * k * n].reshape((k, n), order="F")
            cm = hc[i * m * n:(i + 1) * m * n].reshape((m, n), order="F")
            ref = alpha * opnd(am, "N") @ opnd(bm, "N") + beta * opnd(cm, "N")
            assert rel_err(got[i * m * n:(i + 1) * m * n].reshape((m, n), order="F"),
                           ref) < TOL["bf16"], i
        ha, hb_, _ = host["lt_bias"]
        ref = alpha * opnd(ha, "T") @ opnd(hb_, "N") + opnd(hb, "N")[:, None]
        assert rel_err(dev.copy_to_host(bufs["lt_bias"][2]).result(), ref) < TOL["f16"]
    info = dev.cublas.replay_info().result(timeout=60)
    if backend == "sim":
        assert info == {"cublas": {"enabled": False}, "cublaslt": {"enabled": False}}
        return
    # cuBLAS: sgemm, GemmEx, strided; cuBLASLt: the small bf16 gemm and the bias matmul. Each
    # ran as usual once, was captured once and launched in rounds 3 and 4.
    for lib, calls in (("cublas", 3), ("cublaslt", 2)):
        r = info[lib]
        assert r["enabled"] and r["refused"] == "", (lib, r)
        assert r["captures"] >= calls and r["launches"] >= 2 * calls, (lib, r)
        assert r["with_memory_nodes"] == 0, (lib, r)  # no workspace allocated per replay


def test_a_repeated_gemm_message_keeps_its_launcher(dev, rng) -> None:
    """The client sends a repeated sgemm / strided-batched call as the same message; the device
    thread keeps that message's launcher (service/derived.py), one per message and pointers.
    Every result is checked, with fresh inputs written between the calls, so a launcher kept
    for the wrong buffers or arguments fails."""
    ctx = dev._worker.ctx
    m, n, k, batch = 24, 16, 8, 3
    a, b = (dev.alloc(s, np.float32) for s in ((m, k), (k, n)))
    c1, c2 = (dev.alloc((m, n), np.float32) for _ in range(2))
    sa, sb, sc = (dev.alloc((x * batch,), gpumsg.as_dtype("bf16")) for x in (m * k, k * n, m * n))
    before = len(ctx.derived)
    for rnd in range(3):
        ha, hb = rand(rng, (m, k), "f32"), rand(rng, (k, n), "f32")
        hsa, hsb = rand(rng, (m * k * batch,), "bf16"), rand(rng, (k * n * batch,), "bf16")
        for buf, h in ((a, ha), (b, hb), (sa, hsa), (sb, hsb)):
            dev.copy_from_host(buf, h)
        dev.sgemm(a, b, c1, m, n, k)
        dev.sgemm(a, b, c2, m, n, k, 2.0)  # another message: its own launcher
        dev.cublas.gemm_strided_batched(sa, sb, sc, m, n, k, batch, m * k, k * n, m * n)
        ref = opnd(ha, "N") @ opnd(hb, "N")
        assert rel_err(dev.copy_to_host(c1).result(), ref) < TOL["f32"]
        assert rel_err(dev.copy_to_host(c2).result(), 2.0 * ref) < TOL["f32"]
        got = dev.copy_to_host(sc).result()
        for i in range(batch):
            am = hsa[i * m * k:(i + 1) * m * k].reshape((m, k), order="F")
            bm = hsb[i * k * n:(i + 1) * k * n].reshape((k, n), order="F")
            ref_i = opnd(am, "N") @ opnd(bm, "N")
            assert rel_err(got[i * m * n:(i + 1) * m * n].reshape((m, n), order="F"),
                           ref_i) < TOL["bf16"], (rnd, i)
        # three messages, three launchers, however many rounds
        assert len(ctx.derived) == before + 3
