"""Types are checked where memory changes hands: a kernel's pointer parameters against the
buffers passed, NumPy conversions of device buffers, DLPack exports NumPy cannot take."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import gpumsg
from tests.conftest import random_array, run_python
from tests.libs.kernels import SAXPY, SCALE, SCALE_HEADERS


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMSG_CACHE_DIR", str(tmp_path / "nvrtc-cache"))


def test_pointer_parameter_dtype_is_checked(dev, rng) -> None:
    n = 64
    k = dev.compile(SAXPY, "saxpy").result(timeout=60)
    assert k.pointees == (None, "f32", "f32", None)
    x64 = dev.to_device(random_array(rng, n, "f64"))
    y32 = dev.to_device(random_array(rng, n, "f32"))
    with pytest.raises(gpumsg.InvalidMessage, match="pointer to f32") as info:
        dev.launch(k, (1,), (n,), (2.0, x64, y32, n))
    assert info.value.field == "args[1]"
    # a matching launch runs and computes
    x = random_array(rng, n, "f32")
    y = random_array(rng, n, "f32")
    dx, dy = dev.to_device(x), dev.to_device(y)
    dev.launch(k, (1,), (n,), (2.0, dx, dy, n)).result(timeout=60)
    np.testing.assert_allclose(dev.copy_to_host(dy).result(), 2.0 * x.astype(np.float64) + y,
                               rtol=1e-6)
    # the explicit cast: f64 memory read through float*
    dev.launch(k, (1,), (n // 2,), (1.0, dev.nvrtc.untyped(x64), y32, n // 2)).result(
        timeout=60)


def test_template_and_signature_pointees(dev) -> None:
    k = dev.compile(SCALE, "scale<double>", headers=SCALE_HEADERS).result(timeout=60)
    assert k.pointees == ("f64", None, None)
    with pytest.raises(gpumsg.InvalidMessage, match="pointer to f64"):
        dev.launch(k, (1,), (4,), (dev.alloc(4, np.float32), 2.0, 4))
    k2 = dev.compile(SAXPY, "saxpy", signature=(
        ctypes.c_float, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_int)).result(
        timeout=60)
    assert k2.pointees == (None, "f32", None, None)
    with pytest.raises(gpumsg.InvalidMessage, match="args\\[1\\]"):
        dev.launch(k2, (1,), (4,), (1.0, dev.alloc(4, np.int32), dev.alloc(4, np.float32), 4))


@pytest.mark.parametrize("order", ["C", "F"])
def test_asarray_of_a_device_buffer_is_a_copy_of_its_data(dev, rng, order) -> None:
    host = random_array(rng, (3, 4), "f32", order)
    fut = dev.to_device(host)
    for obj in (fut, fut.result()):
        for got in (np.asarray(obj), np.array(obj), np.asarray(obj, dtype=np.float64)):
            assert got.shape == (3, 4)
            np.testing.assert_array_equal(got, host)
        assert np.asarray(obj).flags[f"{order}_CONTIGUOUS"]
        with pytest.raises(ValueError, match="copy"):
            np.asarray(obj, copy=False)


def test_asarray_of_pinned_host_memory_is_its_data(dev, rng) -> None:
    pinned = dev.alloc_pinned((3, 4), np.float64).result()
    pinned.array[...] = random_array(rng, (3, 4), "f64")
    got = np.asarray(pinned)
    assert got.shape == (3, 4) and got.dtype == np.float64
    np.testing.assert_array_equal(got, pinned.array)


@pytest.mark.parametrize("dtype", ["bf16", "e4m3", "e5m2"])
def test_dlpack_to_numpy_of_dtypes_numpy_lacks(dtype: str) -> None:
    """A clear BufferError, and nothing printed (no ignored exception from a destructor)."""
    proc = run_python(f"""
        import gc, numpy as np, gpumsg
        with gpumsg.open_device(0, backend="sim") as dev:
            buf = dev.alloc((4,), {dtype!r}).result()
            try:
                np.from_dlpack(buf)
            except BufferError as exc:
                print("REFUSED", exc)
            gc.collect()
            other = np.from_dlpack(dev.to_device(np.arange(3.0)).result())
            print("F64", other.tolist())
    """)
    assert "REFUSED" in proc.stdout and "copy_to_host" in proc.stdout, proc.stdout + proc.stderr
    assert "F64 [0.0, 1.0, 2.0]" in proc.stdout
    assert proc.stderr == "", proc.stderr
