"""cuFFT explicit plans against ``numpy.fft`` in float64: every kind, precision (half included)
and rank with batched strided (advanced) layouts, in and out of place; the plan cache's hits,
evictions and capacity, two threads with different plans, a graph replay, process isolation,
cuFFT statuses as LibraryError, and a bad-argument table."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

import gpumsg
from gpumsg.messages.cufft import FftExec, FftPlan, FftSpec, layout_span
from tests.libs.cufft._helpers import (
    CPLX,
    REAL,
    _input,
    crand,
    flat_random,
    host,
    layout,
    reference,
)
from tests.libs.harness import BadArg, assert_close, check_bad_args, device_still_serves, wide

LAYOUTS = {
    1: dict(n=(15,), batch=3, istride=2, idist=40, ostride=3, odist=50,
            inembed=(15,), onembed=(15,)),
    2: dict(n=(6, 7), batch=2, inembed=(7, 9), istride=1, idist=70, onembed=(6, 10),
            ostride=2, odist=130),
    3: dict(n=(4, 5, 6), batch=2, inembed=(4, 6, 8), istride=1, idist=200,
            onembed=(5, 5, 7), ostride=1, odist=180),
}


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("precision", ["f32", "f64"])
@pytest.mark.parametrize("kind,direction", [("c2c", "forward"), ("c2c", "inverse"),
                                            ("r2c", "forward"), ("c2r", "inverse")])
def test_explicit_plan_strided_layout(dev, rng, kind, direction, precision, rank) -> None:
    lay = dict(LAYOUTS[rank])
    n = lay["n"]
    if kind != "c2c":  # the complex side's last dimension is n // 2 + 1
        half = n[:-1] + (n[-1] // 2 + 1,)
        if kind == "c2r":
            lay["inembed"] = tuple(max(e, h) for e, h in zip(lay["inembed"], half))
    plan = dev.cufft.plan(shape=n, batch=lay["batch"], kind=kind,
                          dtype=CPLX[precision], inembed=lay["inembed"], istride=lay["istride"],
                          idist=lay["idist"], onembed=lay["onembed"], ostride=lay["ostride"],
                          odist=lay["odist"])
    info = plan.result(timeout=60)
    assert info["hit"] is False and info["workspace"] >= 0
    assert dev.cufft.plan(shape=n, batch=lay["batch"], kind=kind, dtype=CPLX[precision],
                          **{k: v for k, v in lay.items() if k not in ("n", "batch")}
                          ).result(timeout=60)["hit"] is True
    spec = plan.spec
    # element offsets: the layout starts inside the buffers (even on a real side: cuFFT wants
    # real data aligned to the complex type)
    x_off, o_off = (3, 5) if kind == "c2c" else (4, 6)
    x = _input(rng, spec, spec.in_span + x_off + 4, x_off)
    out0 = flat_random(rng, spec.out_span + o_off + 6, spec.out_dtype)
    dx, dout = dev.to_device(x), dev.to_device(out0)
    src = layout(x, spec.in_dims, spec.inembed, spec.istride, spec.idist, spec.batch, x_off)
    ref = reference(kind, src.copy(), n, direction)
    dev.cufft.execute(plan, dx, dout, direction=direction, x_offset=x_off,
                      out_offset=o_off).result(timeout=60)
    got = host(dev, dout)
    got_view = layout(got, spec.out_dims, spec.onembed, spec.ostride, spec.odist, spec.batch,
                      o_off)
    assert_close(got_view, ref, precision if kind == "r2c" or kind == "c2r" else
                 {"f32": "c64", "f64": "c128"}[precision], 5)
    if kind == "c2r" and dev.backend == "sim":
        # cuFFT's out-of-place C2R overwrites its input; the simulator makes that visible
        assert np.isnan(layout(host(dev, dx), spec.in_dims, spec.inembed, spec.istride,
                               spec.idist, spec.batch, x_off)).all()
    # elements outside the output layout are untouched
    mask = np.ones(got.shape, bool)
    layout(mask, spec.out_dims, spec.onembed, spec.ostride, spec.odist, spec.batch,
           o_off)[...] = False
    assert np.array_equal(got[mask], out0[mask])


@pytest.mark.parametrize("precision", ["f32", "f64"])
@pytest.mark.parametrize("n", [(16,), (9, 10), (4, 6, 5)])
def test_in_place(dev, rng, precision, n) -> None:
    batch = 3
    # C2C in place
    x = crand(rng, (batch, *n), CPLX[precision])
    dx = dev.to_device(x)
    plan = dev.cufft.plan(n, batch, "c2c", CPLX[precision], inplace=True)
    dev.cufft.execute(plan, dx, direction="forward").result(timeout=60)
    tol = {"f32": "c64", "f64": "c128"}[precision]
    assert_close(host(dev, dx), np.fft.fftn(wide(x), axes=tuple(range(1, len(n) + 1))), tol, 5)
    # R2C then C2R in place, on the padded real layout cuFFT requires
    r2c = dev.cufft.plan(n, batch, "r2c", precision, inplace=True)
    c2r = dev.cufft.plan(n, batch, "c2r", precision, inplace=True)
    pad = 2 * (n[-1] // 2 + 1)
    real = rng.standard_normal((batch, *n[:-1], pad))
    buf = dev.to_device(real.astype(REAL[precision]).ravel())
    dev.cufft.execute(r2c, buf, direction="forward")
    spec = r2c.spec
    cview = dev.alloc(spec.out_span, CPLX[precision])
    dev.copy_bytes(cview, buf, spec.out_span * np.dtype(CPLX[precision]).itemsize)
    got = host(dev, cview).reshape(batch, *n[:-1], n[-1] // 2 + 1)
    axes = tuple(range(1, len(n) + 1))
    assert_close(got, np.fft.rfftn(real[..., :n[-1]], axes=axes), tol, 5)
    dev.cufft.execute(c2r, buf, direction="inverse", scale=1.0 / math.prod(n))
    back = host(dev, buf).reshape(batch, *n[:-1], pad)[..., :n[-1]]
    assert_close(back, real[..., :n[-1]], precision, 5)


def _half_pairs(z: np.ndarray, dtype: str) -> np.ndarray:
    """Complex values as interleaved (re, im) pairs of an f16/bf16 buffer."""
    return np.stack([z.real, z.imag], axis=-1).astype(gpumsg.as_dtype(dtype))


def _from_pairs(a: np.ndarray) -> np.ndarray:
    w = a.astype(np.float64)
    return w[..., 0] + 1j * w[..., 1]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("n", [(64,), (16, 32)])
@pytest.mark.parametrize("kind,direction", [("c2c", "forward"), ("c2c", "inverse"),
                                            ("r2c", "forward"), ("c2r", "inverse")])
def test_half_precision_plans(dev, rng, kind, direction, n, dtype) -> None:
    """cuFFT's f16/bf16 transforms (cufftXtMakePlanMany), complex values interleaved in
    f16/bf16 buffers; compared with NumPy on the inputs as rounded to the half type."""
    batch = 3
    axes = tuple(range(1, len(n) + 1))
    half = n[:-1] + (n[-1] // 2 + 1,)
    t = gpumsg.as_dtype(dtype)
    plan = dev.cufft.plan(n, batch, kind, dtype)
    if kind == "r2c":
        x = (rng.standard_normal((batch, *n)) * 0.5).astype(t)
        ref = np.fft.rfftn(x.astype(np.float64), axes=axes)
        out = dev.alloc((batch, *half, 2), dtype, order="C")
    elif kind == "c2c":
        x = _half_pairs(crand(rng, (batch, *n), np.complex128) * 0.5, dtype)
        z = _from_pairs(x)
        ref = (np.fft.fftn(z, axes=axes) if direction == "forward"
               else np.fft.ifftn(z, axes=axes, norm="forward"))
        out = dev.alloc((batch, *n, 2), dtype, order="C")
    else:
        spectrum = np.fft.rfftn(rng.standard_normal((batch, *n)), axes=axes) / math.prod(n)
        x = _half_pairs(spectrum, dtype)
        ref = np.fft.irfftn(_from_pairs(x), s=n, axes=axes, norm="forward")
        out = dev.alloc((batch, *n), dtype, order="C")
    dev.cufft.execute(plan, dev.to_device(x), out, direction=direction).result(timeout=60)
    got = host(dev, out)
    got = got.astype(np.float64) if kind == "c2r" else _from_pairs(got)
    assert_close(got, ref, dtype, 4)


# -- the plan cache -----------------------------------------------------------------------------
def test_cache_hits_and_evictions(one_stream_dev, rng) -> None:
    dev = one_stream_dev  # per-stream bookkeeping: one compute stream
    dev.cufft.cache_config(clear=True).result(timeout=60)
    before = dev.cufft.cache_info().result(timeout=60)
    x = dev.to_device(crand(rng, (4, 30), np.complex64))
    for _ in range(3):
        dev.fft.fft(x)
    info = dev.cufft.cache_info().result(timeout=60)
    assert info["misses"] - before["misses"] == 1
    assert info["hits"] - before["hits"] == 2
    assert info["size"] == 1
    # capacity 2: a third shape evicts the least recently used
    info = dev.cufft.cache_config(capacity=2).result(timeout=60)
    assert info["capacity"] == 2
    arrays = [crand(rng, (4, m), np.complex64) for m in (31, 32, 33)]
    for a in arrays:
        assert_close(host(dev, dev.fft.fft(dev.to_device(a))), np.fft.fft(wide(a)), "c64", 5)
    info = dev.cufft.cache_info().result(timeout=60)
    assert info["size"] == 2 and info["evictions"] - before["evictions"] >= 2
    # an evicted plan is made again, and still right
    a = arrays[0]
    misses = info["misses"]
    assert_close(host(dev, dev.fft.fft(dev.to_device(a))), np.fft.fft(wide(a)), "c64", 5)
    assert dev.cufft.cache_info().result(timeout=60)["misses"] == misses + 1
    shrunk = dev.cufft.cache_config(capacity=1).result(timeout=60)
    assert shrunk["size"] == 1
    dev.cufft.cache_config(capacity=64).result(timeout=60)


def test_two_threads_different_plans(one_stream_dev, rng) -> None:
    dev = one_stream_dev  # per-stream bookkeeping: one compute stream
    inputs = {m: crand(rng, (8, m), np.complex128) for m in (60, 77)}
    errors: list[BaseException] = []

    def work(m: int) -> None:
        try:
            d = dev.to_device(inputs[m])
            for _ in range(6):
                out = host(dev, dev.fft.fft(d, norm="ortho"))
                assert_close(out, np.fft.fft(inputs[m], norm="ortho"), "c128", 5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(m,)) for m in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    info = dev.cufft.cache_info().result(timeout=60)
    assert info["size"] >= 2 and info["hits"] >= 10


def test_graph_replays_an_fft(dev, rng) -> None:
    x0 = crand(rng, (4, 128), np.complex64)
    x = dev.to_device(x0)
    out = dev.alloc((4, 128), np.complex64, order="C")
    plan = dev.cufft.plan((128,), 4, "c2c", "c64")
    plan.result(timeout=60)  # made before recording
    with dev.graph() as g:
        dev.cufft.execute(plan, x, out, direction="forward", scale=0.5)
    g.ready.result(timeout=60)
    for _ in range(2):
        dev.memset(out, 0xFF)  # NaN: a replay that does nothing cannot pass
        g.launch().result(timeout=60)
        assert_close(host(dev, out), 0.5 * np.fft.fft(wide(x0)), "c64", 5)


def test_graph_refuses_a_plan_not_made_yet(dev, rng) -> None:
    x = dev.to_device(crand(rng, (2, 96), np.complex64))
    out = dev.alloc((2, 96), np.complex64, order="C")
    spec = FftSpec((96,), 2, "c2c", "f32")  # never planned: capture cannot allocate one
    with dev.graph() as g:
        dev.cufft.execute(spec, x, out)
    with pytest.raises(gpumsg.GraphCaptureError, match="make it first"):
        g.ready.result(timeout=60)
    device_still_serves(dev)
    # made first, the same recording works
    dev.send(FftPlan(spec)).result(timeout=60)
    with dev.graph() as g:
        dev.cufft.execute(spec, x, out)
    g.launch().result(timeout=60)
    assert_close(host(dev, out), np.fft.fft(wide(host(dev, x))), "c64", 5)


def test_process_isolation(rng) -> None:
    """Messages and plans cross a process boundary: FftSpec is plain, picklable data."""
    with gpumsg.open_device(0, backend="sim", isolation="process") as d:
        x = crand(rng, (3, 10), np.complex64)
        y = host(d, d.fft.fft2(d.to_device(x), norm="ortho"))
        assert_close(y, np.fft.fft2(wide(x), norm="ortho"), "c64", 5)
        assert d.cufft.plan((10,), 3).result(timeout=60) == {"workspace": 0, "hit": False}
        assert d.cufft.cache_info().result(timeout=60)["size"] == 2


def test_cufft_status_is_library_error(dev) -> None:
    bogus = FftSpec.unchecked((0,), 1, "c2c", "f32", False, (1,), 1, 1, (1,), 1, 1)
    with pytest.raises(gpumsg.LibraryError) as info:
        dev.send(FftPlan(bogus)).result(timeout=60)
    assert info.value.lib == "cufft"
    device_still_serves(dev)


# -- bad arguments ------------------------------------------------------------------------------
def _c(dev, shape=(4, 8), dtype=np.complex64):
    return dev.alloc(shape, dtype, order="C")


def _plan(dev, **kw):
    args = dict(shape=(8,), batch=4, kind="c2c", dtype="c64")
    args.update(kw)
    return dev.cufft.plan(**args)


BAD = [
    BadArg("rfft of complex data", lambda d: d.fft.rfft(_c(d)), field="x"),
    BadArg("f16 input", lambda d: d.fft.rfft(_c(d, dtype=np.float16)), field="x"),
    BadArg("bad norm", lambda d: d.fft.fft(_c(d), norm="unitary"), field="norm"),
    BadArg("axis out of range", lambda d: d.fft.fft(_c(d), axis=2), field="axis"),
    BadArg("repeated axes", lambda d: d.fft.fftn(_c(d), axes=(1, -1)), field="axes"),
    BadArg("n = 0", lambda d: d.fft.fft(_c(d), n=0), field="n"),
    BadArg("s and axes lengths", lambda d: d.fft.fft2(_c(d), s=(4, 4, 4)), field="s"),
    BadArg("irfft of length 1", lambda d: d.fft.irfft(_c(d, (4, 1))), field="n"),
    BadArg("F-ordered", lambda d: d.fft.fft(d.alloc((4, 8), np.complex64, order="F")),
           field="x"),
    BadArg("plan rank 4", lambda d: _plan(d, shape=(2, 2, 2, 2)), field="n"),
    BadArg("plan size 0", lambda d: _plan(d, shape=(0,)), field="n"),
    BadArg("plan batch 0", lambda d: _plan(d, batch=0), field="batch"),
    BadArg("plan kind", lambda d: _plan(d, kind="dct"), field="kind"),
    BadArg("f16 size not a power of two", lambda d: _plan(d, shape=(12,), dtype="f16"),
           field="n"),
    BadArg("bf16 with a scale", lambda d: d.cufft.execute(
        _plan(d, dtype="bf16"), _c(d, (64,), "bf16"), _c(d, (64,), "bf16"), scale=0.5),
        field="scale"),
    BadArg("plan i32", lambda d: _plan(d, dtype="i32"), field="dtype"),
    BadArg("embed too small", lambda d: _plan(d, shape=(4, 8), inembed=(4, 7)),
           field="inembed"),
    BadArg("embed rank", lambda d: _plan(d, inembed=(8, 8)), field="inembed"),
    BadArg("stride 0", lambda d: _plan(d, ostride=0), field="ostride"),
    BadArg("exec x dtype", lambda d: d.cufft.execute(_plan(d), _c(d, (32,), np.complex128),
                                                   _c(d, (32,))), field="x"),
    BadArg("exec out too small", lambda d: d.cufft.execute(_plan(d), _c(d, (32,)),
                                                         _c(d, (31,))), field="out"),
    BadArg("exec x too small for repeat", lambda d: d.cufft.execute(
        _plan(d), _c(d, (32,)), _c(d, (64,)), repeat=2, x_step=32, out_step=32), field="x"),
    BadArg("exec direction", lambda d: d.cufft.execute(_plan(d), _c(d, (32,)), _c(d, (32,)),
                                                     direction="sideways"), field="direction"),
    BadArg("r2c inverse", lambda d: d.cufft.execute(
        _plan(d, kind="r2c"), _c(d, (32,), np.float32), _c(d, (20,)), direction="inverse"),
        field="direction"),
    BadArg("in place with an out-of-place plan", lambda d: (lambda x: d.cufft.execute(
        _plan(d), x, x))(_c(d, (32,))), field="out"),
    BadArg("r2c odd real offset", lambda d: d.cufft.execute(
        _plan(d, kind="r2c"), _c(d, (40,), np.float32), _c(d, (20,)), x_offset=1),
        field="x_offset"),
    BadArg("c2r odd real step", lambda d: d.cufft.execute(
        _plan(d, kind="c2r", batch=1), _c(d, (10,)), _c(d, (40,), np.float32),
        direction="inverse", repeat=2, x_step=5, out_step=9), field="out_step"),
    BadArg("exec nan scale", lambda d: d.cufft.execute(_plan(d), _c(d, (32,)), _c(d, (32,)),
                                                     scale=float("nan")), field="scale"),
    BadArg("capacity 0", lambda d: d.cufft.cache_config(capacity=0), field="capacity"),
]


@pytest.mark.parametrize("case", BAD, ids=str)
def test_bad_arguments(dev, case) -> None:
    check_bad_args(dev, case)


def test_c2r_declares_its_input_written(dev) -> None:
    x, out = _c(dev, (4, 5)), dev.alloc((4, 8), np.float32, order="C")
    spec = FftSpec((8,), 4, "c2r", "f32")
    refs = [r.id for r in FftExec(spec, x, out, "inverse").written()]
    assert refs == [out.ref.id, x.ref.id]
    spec = FftSpec((8,), 4, "r2c", "f32")
    assert [r.id for r in FftExec(spec, out, x).written()] == [x.ref.id]


def test_layout_span() -> None:
    assert layout_span((4,), (4,), 1, 4, 3) == 12
    assert layout_span((3, 4), (3, 6), 2, 100, 2) == 100 + 2 * (2 * 6 + 3) + 1
