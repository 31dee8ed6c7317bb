"""cuFFT (``dev.fft``) against ``numpy.fft`` in float64 on fresh random inputs: every NumPy-shaped
function with n/s, axes and the three norms on odd and prime sizes, the inverse real transform
of any complex input, round trips and empty batches; a NumPy-shaped call is one message and a
new buffer."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpumsg
from gpumsg.messages.cufft import FftExec
from tests.libs.cufft._helpers import CPLX, NORMS, PREC, REAL, SHAPE, crand, host
from tests.libs.harness import assert_close, wide

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


def test_inverse_real_call_is_one_message_and_leaves_its_input(dev, rng, posted) -> None:
    """``irfft2(x)``: one AllocThen whose FftExec transforms a copy its handler makes
    (``preserve``), so cuFFT's C2R leaves x as it was (the simulator poisons an overwritten
    input)."""
    real = rng.standard_normal((6, 16))
    x0 = np.fft.rfft2(real).astype(np.complex64)
    x = dev.to_device(x0).result()
    sent = posted(dev, gpumsg.messages.Alloc, gpumsg.messages.AllocThen, FftExec,
                  gpumsg.messages.CopyDevice)
    y = dev.fft.irfft2(x, s=(6, 16)).result(timeout=60)
    assert [type(m).__name__ for m in sent] == ["AllocThen"]
    assert sent[0].then.preserve and sent[0].then.x is x.ref
    assert_close(host(dev, y), np.fft.irfft2(wide(x0), s=(6, 16)), "c64", 5)
    assert np.array_equal(host(dev, x), x0)


def test_execute_preserve(dev, rng) -> None:
    """The raw ``execute(..., preserve=True)`` of an out-of-place C2R leaves x as it was; a
    transform that does not overwrite its input refuses the flag by name."""
    x0 = np.fft.rfft(rng.standard_normal((3, 10))).astype(np.complex64)
    x = dev.to_device(x0)
    out = dev.alloc((3, 10), np.float32, order="C")
    plan = dev.cufft.plan((10,), 3, "c2r", "f32")
    dev.cufft.execute(plan, x, out, direction="inverse", preserve=True).result(timeout=60)
    assert_close(host(dev, out), 10 * np.fft.irfft(wide(x0), n=10), "c64", 5)
    assert np.array_equal(host(dev, x), x0)
    c2c = dev.cufft.plan((10,), 3, "c2c", "c64")
    with pytest.raises(gpumsg.InvalidMessage, match="preserve"):
        dev.cufft.execute(c2c, x, dev.alloc((3, 10), np.complex64, order="C"), preserve=True)
    # a graph refuses it at the call (its copy is allocated at the call)
    with pytest.raises(gpumsg.GraphCaptureError, match="preserve"):
        with dev.graph():
            dev.cufft.execute(plan, x, out, direction="inverse", preserve=True)
    dev.cufft.execute(plan, x, out, direction="inverse", preserve=True).result(timeout=60)
