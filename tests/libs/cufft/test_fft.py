"""cuFFT (``dev.fft``) against ``numpy.fft`` in float64 on fresh random inputs: every NumPy-shaped
function with n/s, axes and the three norms on odd and prime sizes; explicit plans of every kind,
precision and rank with batched strided (advanced) layouts, in and out of place; the plan
cache's hits, evictions and capacity, two threads with different plans, a graph replay, cuFFT
statuses as LibraryError, and a bad-argument table."""

from __future__ import annotations

import gc
import math
import threading

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import gpumsg
from gpumsg.messages.fft import FftExec, FftPlan, FftSpec, layout_span
from tests.libs.harness import BadArg, assert_close, check_bad_args, device_still_serves, wide

CPLX = {"f32": np.complex64, "f64": np.complex128}
REAL = {"f32": np.float32, "f64": np.float64}
PREC = {"c64": "f32", "c128": "f64", "f32": "f32", "f64": "f64"}
NORMS = ["backward", "ortho", "forward"]
SHAPE = (6, 7, 11)  # odd and prime sizes


def crand(rng, shape, dtype) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def host(dev, buf) -> np.ndarray:
    return dev.copy_to_host(buf).result(timeout=60)


# -- NumPy-shaped -------------------------------------------------------------------------------
COMPLEX_CASES = [
    ("fft", {}), ("fft", {"n": 13, "axis": 0}), ("fft", {"n": 5, "axis": 1}),
    ("ifft", {"axis": 1}), ("fft2", {}), ("ifft2", {"s": (8, 17)}),
    ("fftn", {}), ("fftn", {"axes": (0, 2)}), ("ifftn", {"axes": (2, 0, 1)}),
    ("fftn", {"s": (3, 4), "axes": (1, 2)}), ("ifft2", {"axes": (0, 2)}),
]


@pytest.mark.parametrize("dtype", ["c64", "c128"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("func,kw", COMPLEX_CASES, ids=[f"{f}-{k}" for f, k in COMPLEX_CASES])
def test_complex_numpy(dev, rng, func, kw, norm, dtype) -> None:
    x = crand(rng, SHAPE, gpumsg.as_dtype(dtype))
    dx = dev.to_device(x)
    y = host(dev, getattr(dev.fft, func)(dx, norm=norm, **kw))
    ref = getattr(np.fft, func)(wide(x), norm=norm, **kw)
    assert y.dtype == x.dtype
    assert_close(y, ref, dtype, 5)
    assert np.array_equal(host(dev, dx), x), "the input is untouched"


REAL_CASES = [
    ("rfft", {}), ("rfft", {"n": 12, "axis": 1}), ("rfft", {"axis": 0}), ("rfft2", {}),
    ("rfftn", {}), ("rfftn", {"axes": (2, 0)}), ("rfftn", {"s": (5, 9), "axes": (0, 1)}),
    ("rfft2", {"axes": (0, 2)}), ("rfft", {"axis": 1}), ("rfftn", {"axes": (0, 1)}),
]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("func,kw", REAL_CASES, ids=[f"{f}-{k}" for f, k in REAL_CASES])
def test_real_forward_numpy(dev, rng, func, kw, norm, dtype) -> None:
    x = (rng.standard_normal(SHAPE) + 0.1).astype(gpumsg.as_dtype(dtype))
    dx = dev.to_device(x)
    y = host(dev, getattr(dev.fft, func)(dx, norm=norm, **kw))
    ref = getattr(np.fft, func)(wide(x), norm=norm, **kw)
    assert y.dtype == CPLX[dtype]
    assert_close(y, ref, dtype, 5)


# (inverse, its keywords, the forward transform and keywords that make its input)
INVERSE_CASES = [
    ("irfft", {}, "rfft", {}),
    ("irfft", {"n": 9, "axis": 0}, "rfft", {"axis": 0}),
    ("irfft", {"n": 14}, "rfft", {}),
    ("irfft2", {}, "rfft2", {}),
    ("irfftn", {}, "rfftn", {}),
    ("irfftn", {"axes": (0, 2), "s": (6, 11)}, "rfftn", {"axes": (0, 2)}),
    ("irfftn", {"axes": (2, 0)}, "rfftn", {"axes": (2, 0)}),
    # real data along a middle axis whose rows are an odd number of reals apart
    ("irfft", {"axis": 1, "n": 7}, "rfft", {"axis": 1}),
    ("irfft", {"axis": 1, "n": 8}, "rfft", {"axis": 1}),
]


@pytest.mark.parametrize("dtype", ["c64", "c128"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("func,kw,fwd,fkw", INVERSE_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in INVERSE_CASES])
def test_real_inverse_numpy(dev, rng, func, kw, fwd, fkw, norm, dtype) -> None:
    real = rng.standard_normal(SHAPE) + 0.1
    x = getattr(np.fft, fwd)(real, **fkw).astype(gpumsg.as_dtype(dtype))
    dx = dev.to_device(x)
    y = host(dev, getattr(dev.fft, func)(dx, norm=norm, **kw))
    ref = getattr(np.fft, func)(wide(x), norm=norm, **kw)
    assert y.dtype == REAL[PREC[dtype]]
    assert_close(y, ref, dtype, 5)
    # cuFFT's C2R overwrites its input: the NumPy-shaped call works on a copy
    assert np.array_equal(host(dev, dx), x)


@pytest.mark.parametrize("n", [10, 11])
def test_irfft_of_any_complex_input(dev, rng, n) -> None:
    """A half spectrum that no real signal has (imaginary DC and Nyquist parts): NumPy's
    semantics (those parts are ignored) on every backend."""
    x = crand(rng, (5, n // 2 + 1), np.complex128)
    y = host(dev, dev.fft.irfft(dev.to_device(x), n=n))
    assert_close(y, np.fft.irfft(x, n=n), "c128", 5)


def test_round_trip_and_empty_batch(dev, rng) -> None:
    x = crand(rng, (3, 64), np.complex64)
    dx = dev.to_device(x)
    back = host(dev, dev.fft.ifft(dev.fft.fft(dx)))
    assert_close(back, wide(x), "c64", 5)
    empty = dev.fft.fft(dev.alloc((0, 8), np.complex64, order="C"))
    assert host(dev, empty).shape == (0, 8)


# -- explicit plans, advanced layouts -----------------------------------------------------------
def _strides(embed, stride, item):
    out, inner = [], stride
    for e in reversed(embed):
        out.append(inner * item)
        inner *= e
    return tuple(reversed(out))


def layout(flat: np.ndarray, dims, embed, stride, dist, batch, offset=0) -> np.ndarray:
    """The (batch, *dims) view of a cuFFT layout over a host array."""
    item = flat.itemsize
    return as_strided(flat[offset:], (batch, *dims), (dist * item, *_strides(embed, stride,
                                                                                item)),
                      writeable=True)


def reference(kind, x: np.ndarray, n, direction) -> np.ndarray:
    axes = tuple(range(1, len(n) + 1))
    if kind == "c2c":
        return (np.fft.fftn(wide(x), axes=axes) if direction == "forward"
                else np.fft.ifftn(wide(x), axes=axes, norm="forward"))
    if kind == "r2c":
        return np.fft.rfftn(wide(x), axes=axes)
    return np.fft.irfftn(wide(x), s=n, axes=axes, norm="forward")


LAYOUTS = {
    1: dict(n=(15,), batch=3, istride=2, idist=40, ostride=3, odist=50,
            inembed=(15,), onembed=(15,)),
    2: dict(n=(6, 7), batch=2, inembed=(7, 9), istride=1, idist=70, onembed=(6, 10),
            ostride=2, odist=130),
    3: dict(n=(4, 5, 6), batch=2, inembed=(4, 6, 8), istride=1, idist=200,
            onembed=(5, 5, 7), ostride=1, odist=180),
}


def flat_random(rng, count: int, dtype: str) -> np.ndarray:
    t = gpumsg.as_dtype(dtype)
    return crand(rng, count, t) if t.kind == "c" else (rng.standard_normal(count) + 0.1
                                                        ).astype(t)


def _input(rng, spec: FftSpec, count: int, offset: int) -> np.ndarray:
    flat = flat_random(rng, count, spec.in_dtype)
    if spec.kind == "c2r":
        # a consistent half spectrum: the forward transform of real data, in the input layout
        real = rng.standard_normal((spec.batch, *spec.n))
        half = np.fft.rfftn(real, axes=tuple(range(1, len(spec.n) + 1)))
        layout(flat, spec.in_dims, spec.inembed, spec.istride, spec.idist, spec.batch,
               offset)[...] = half
    return flat


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
def test_cache_hits_and_evictions(dev, rng) -> None:
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


def test_two_threads_different_plans(dev, rng) -> None:
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


# -- repeated calls: the memo, the derived call, the replays -----------------------------------
def _c2c_case(dev, rng, n=48, batch=3):
    plan = dev.cufft.plan((n,), batch, "c2c", "c64")
    plan.result(timeout=60)
    x = dev.alloc((batch, n), np.complex64, order="C").result()
    out = dev.alloc((batch, n), np.complex64, order="C").result()
    return plan, x, out


def test_repeated_execute_reuses_its_message_and_keeps_every_check(dev, rng, posted) -> None:
    """``execute(plan, x, out)`` repeated: one message (MessageMemo), sent again, with fresh
    inputs written into x each round (results against float64). An equal spec object shares
    it; a changed argument is a message of its own; a bool where an int belongs, a wrong
    dtype, a freed buffer are refused at the call after the message was kept."""
    plan, x, out = _c2c_case(dev, rng)
    sent = posted(dev, FftExec)
    for _ in range(3):
        h = crand(rng, (3, 48), np.complex64)
        dev.copy_from_host(x, h)
        assert dev.cufft.execute(plan, x, out).result(timeout=60) is None
        assert_close(host(dev, out), np.fft.fft(wide(h)), "c64", 5)
    assert len(sent) == 3 and sent[0] is sent[1] is sent[2]
    # an equal spec built anew names the same plan: the same message
    dev.cufft.execute(FftSpec((48,), 3, "c2c", "f32"), x, out).result(timeout=60)
    assert sent[-1] is sent[0]
    # changed arguments: messages of their own, and their own results
    h = crand(rng, (3, 48), np.complex64)
    dev.copy_from_host(x, h)
    dev.cufft.execute(plan, x, out, scale=0.5).result(timeout=60)
    assert sent[-1] is not sent[0] and sent[-1].scale == 0.5
    assert_close(host(dev, out), 0.5 * np.fft.fft(wide(h)), "c64", 5)
    dev.cufft.execute(plan, x, out, direction="inverse").result(timeout=60)
    assert sent[-1].direction == "inverse" and sent[-1] is not sent[-2]
    assert_close(host(dev, out), 48 * np.fft.ifft(wide(h)), "c64", 5)
    # another spec on the same buffers and arguments: another transform, another message
    other = dev.cufft.plan((24,), 6, "c2c", "c64")
    dev.cufft.execute(other, x, out).result(timeout=60)
    assert sent[-1].spec == other.spec and sent[-1] is not sent[0]
    assert_close(host(dev, out), np.fft.fft(wide(h).reshape(6, 24)).reshape(3, 48), "c64", 5)
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cufft.execute(plan, x, out, repeat=True)  # equal to 1 as a value, still refused
    assert info.value.field == "repeat"
    with pytest.raises(gpumsg.InvalidMessage) as info:
        dev.cufft.execute(plan, x, dev.alloc((3, 48), np.complex128, order="C"))
    assert info.value.field == "out"
    count = len(sent)
    out.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cufft.execute(plan, x, out)
    assert len(sent) == count  # refused before anything was posted
    device_still_serves(dev)


def test_repeated_execute_is_refused_on_a_closed_device(backend, rng) -> None:
    d = gpumsg.open_device(0, backend=backend)
    plan, x, out = _c2c_case(d, rng, 16, 2)
    for _ in range(2):
        d.cufft.execute(plan, x, out).result(timeout=60)
    d.close()
    with pytest.raises(gpumsg.DeviceClosed):
        d.cufft.execute(plan, x, out)
    with pytest.raises(gpumsg.DeviceClosed):
        d.fft.fft(x)


def test_repeated_execute_is_refused_for_a_stale_buffer(backend, rng) -> None:
    """A worker process replaced after a sticky fault: the buffers of the old generation are
    stale, and a call whose message was kept is refused at the call site."""
    with gpumsg.open_device(0, backend=backend, isolation="process",
                            allow_fault_injection=True, max_restarts=2) as d:
        plan, x, out = _c2c_case(d, rng, 16, 2)
        for _ in range(2):
            d.cufft.execute(plan, x, out).result(timeout=60)
        watch = d.watch_generation()
        with pytest.raises(gpumsg.ContextPoisoned):
            d.inject_fault("illegal_address").result(timeout=60)
        assert watch.result(timeout=60) == 1 and d.generation == 1
        with pytest.raises(gpumsg.GpuRefStale):
            d.cufft.execute(plan, x, out)
        # the same spec on new buffers serves (the plan is made again by the new worker)
        h = crand(rng, (2, 16), np.complex64)
        x2, out2 = d.to_device(h), d.alloc((2, 16), np.complex64, order="C")
        d.cufft.execute(plan, x2, out2).result(timeout=60)
        assert_close(host(d, out2), np.fft.fft(wide(h)), "c64", 5)


def test_a_repeated_exec_keeps_its_call_and_follows_evictions(dev, rng) -> None:
    """The device thread keeps one derived call per message (service/derived.py), counts a hit
    per repeat, and looks the plan up again after it left the cache: every result is checked,
    so a call kept for an evicted (destroyed) plan or the wrong buffers fails."""
    ctx = dev._worker.ctx
    plan, x, out = _c2c_case(dev, rng, 40, 2)
    out2 = dev.alloc((2, 40), np.complex64, order="C").result()
    dev.cufft.execute(plan, x, out).result(timeout=60)  # the message and its call exist now
    before = len(ctx.derived)
    info0 = dev.cufft.cache_info().result(timeout=60)
    for rnd in range(4):
        if rnd == 2:  # the plan leaves the cache: made again at the next execution
            dev.cufft.cache_config(clear=True).result(timeout=60)
        h = crand(rng, (2, 40), np.complex64)
        dev.copy_from_host(x, h)
        dev.cufft.execute(plan, x, out)
        dev.cufft.execute(plan, x, out2, scale=2.0)  # another message: its own call
        ref = np.fft.fft(wide(h))
        assert_close(host(dev, out), ref, "c64", 5)
        assert_close(host(dev, out2), 2.0 * ref, "c64", 5)
    assert len(ctx.derived) == before + 1  # the second message's call; the first's was kept
    info = dev.cufft.cache_info().result(timeout=60)
    assert info["misses"] == info0["misses"] + 1  # made again once, after the clear
    assert info["hits"] == info0["hits"] + 7  # every other execution was a hit
    assert info["size"] == 1


REPLAY_CASES = [  # (kind, direction, precision, scale, in place)
    ("c2c", "forward", "f32", 1.0, False), ("c2c", "inverse", "f64", 0.25, False),
    ("r2c", "forward", "f32", 1.0, False), ("c2r", "inverse", "f32", 0.5, False),
    ("c2c", "forward", "f32", 1.0, True),
]


def test_repeated_executions_are_replayed_with_fresh_inputs(dev, backend, rng) -> None:
    """Executions repeated on the same buffers with the same arguments: on the GPU the message
    is issued as usual once, captured as a CUDA graph the second time and replayed after
    (libs/cufft/handle.py; GPUMSG_FFT_REPLAY unset). Fresh inputs are written before every
    round and every result is checked against float64, so a replay that reused stale data,
    another plan, pointer or scale fails. Then the plans leave the cache: the graphs go with
    them, and the next rounds (plans made again, captured again) are still right."""
    n, batch = 30, 3
    cases = []
    for kind, direction, precision, scale, inplace in REPLAY_CASES:
        spec = FftSpec((n,), batch, kind, precision, inplace)
        dev.send(FftPlan(spec)).result(timeout=60)
        x = dev.alloc((spec.in_span,), gpumsg.as_dtype(spec.in_dtype)).result()
        out = x if inplace else dev.alloc((spec.out_span,), gpumsg.as_dtype(spec.out_dtype)
                                          ).result()
        cases.append((spec, direction, scale, x, out))
    for rnd in range(6):
        if rnd == 4:
            dev.cufft.cache_config(clear=True).result(timeout=60)
        for spec, direction, scale, x, out in cases:
            if spec.kind == "r2c":
                h = rng.standard_normal((batch, n)).astype(REAL[spec.precision])
            else:
                m = n // 2 + 1 if spec.kind == "c2r" else n
                h = crand(rng, (batch, m), CPLX[spec.precision])
                if spec.kind == "c2r":  # a Hermitian input: imaginary DC and Nyquist are 0
                    h[:, 0] = h[:, 0].real
                    h[:, -1] = h[:, -1].real
            dev.copy_from_host(x, h.ravel())
            dev.cufft.execute(spec, x, None if spec.inplace else out, direction=direction,
                              scale=scale)
            ref = reference(spec.kind, wide(h), (n,), direction)
            got = host(dev, out)
            if spec.kind == "c2r":
                got = got.reshape(batch, n)
            else:
                got = got.reshape(batch, -1)
            assert_close(got, scale * ref, spec.precision, 5)
    info = dev.cufft.replay_info().result(timeout=60)
    if backend == "sim":
        assert info == {"enabled": False}
        return
    k = len(cases)
    # each message: round 1 as usual (the replays' first sight of its key), round 2 captured
    # and launched, rounds 3 and 4 launched; the clear destroyed those graphs with their
    # plans; round 5 (rebound to the new plans) as usual, round 6 captured and launched
    assert info["enabled"] and info["refused"] == "", info
    assert info["captures"] == 2 * k and info["launches"] == 4 * k, info
    assert info["graphs"] == k, info
    assert info["with_memory_nodes"] == 0, info  # the work area is the plan's: no allocation


def test_numpy_shaped_call_is_one_message_and_a_new_buffer(dev, rng, posted) -> None:
    """``fft(x)`` on innermost axes: one AllocThen (the output's allocation and its FftExec),
    the returned future resolves to a new buffer, its pointer known, once the transform
    completed, and a dropped output is freed."""
    x0 = crand(rng, (4, 64), np.complex64)
    x = dev.to_device(x0).result()
    dev.synchronize().result(timeout=60)
    live = len(dev._worker.ctx.buffers)  # read while the device thread is idle
    sent = posted(dev, gpumsg.messages.Alloc, gpumsg.messages.AllocThen, FftExec)
    outs = [dev.fft.fft(x, norm="ortho") for _ in range(3)]
    bufs = [f.result(timeout=60) for f in outs]
    assert [type(m).__name__ for m in sent] == ["AllocThen"] * 3
    assert all(type(m.then) is FftExec and m.then.out is m.out for m in sent)
    assert len({b.ref.id for b in bufs}) == 3 and all(b.ref.id != x.ref.id for b in bufs)
    ctx = dev._worker.ctx
    assert [b.raw_device_ptr() for b in bufs] == [ctx.buffers[b.ref.id].ptr for b in bufs]
    for b in bufs:
        assert_close(host(dev, b), np.fft.fft(wide(x0), norm="ortho"), "c64", 5)
    assert sent[1].then.scale == pytest.approx(1 / 8)
    assert len(ctx.buffers) == live + 3
    del outs, bufs, b
    gc.collect()
    dev.synchronize().result(timeout=60)
    assert len(dev._worker.ctx.buffers) == live  # the dropped outputs were freed


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
