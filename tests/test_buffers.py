"""Buffer handles are checked, not trusted: freed, stale, closed and foreign buffers are refused
before anything is sent; dropped buffers are freed."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpumsg
from gpumsg.messages import Sgemm


def test_buffer_properties(dev) -> None:
    buf = dev.alloc((3, 5), "bf16", order="C").result()
    assert buf.shape == (3, 5) and buf.dtype == gpumsg.bfloat16 and buf.order == "C"
    assert buf.nbytes == 30 and buf.size == 15 and buf.ndim == 2
    assert buf.device is dev and buf.device_id == dev.ordinal and buf.generation == 0
    assert buf.raw_device_ptr() > 0 and not buf.is_stale()
    assert "bf16" in repr(buf)


def test_freed_buffer_is_refused_before_sending(dev) -> None:
    a = dev.alloc((4, 4), np.float32).result()
    b = dev.alloc((4, 4), np.float32)
    c = dev.alloc((4, 4), np.float32)
    a.free().result()
    assert a.is_stale()
    before = dev.stats().result().ops_completed
    with pytest.raises(gpumsg.GpuRefStale, match="freed"):
        dev.sgemm(a, b, c, 4, 4, 4)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.copy_to_host(a)
    with pytest.raises(gpumsg.GpuRefStale):
        a.free()
    with pytest.raises(gpumsg.GpuRefStale):
        a.raw_device_ptr()
    # nothing reached the device
    assert dev.stats().result().ops_completed == before


def test_closed_device_buffers_are_stale(backend) -> None:
    dev = gpumsg.open_device(0, backend=backend)
    buf = dev.alloc((8,), np.float32).result()
    dev.close()
    assert buf.is_stale()
    with pytest.raises(gpumsg.GpuRefStale, match="closed"):
        buf.ref  # noqa: B018
    with pytest.raises(gpumsg.DeviceClosed):
        dev.copy_to_host(buf)
    del buf
    gc.collect()  # the finalizer of a buffer of a closed device does nothing harmful


def test_foreign_buffer_is_refused(backend) -> None:
    with gpumsg.open_device(0, backend=backend) as d1, gpumsg.open_device(0, backend=backend) as d2:
        a = d1.alloc((4, 4), np.float32)
        b = d2.alloc((4, 4), np.float32)
        c = d2.alloc((4, 4), np.float32)
        with pytest.raises(gpumsg.InvalidMessage, match="another device"):
            d2.sgemm(a, b, c, 4, 4, 4)
        with pytest.raises(gpumsg.InvalidMessage, match="another device"):
            d2.send(Sgemm(a, b, c, 4, 4, 4))
        with pytest.raises(gpumsg.InvalidMessage, match="another device"):
            d2.copy_to_host(a)
        assert d2.stats().result().generation == 0


def test_dropped_buffers_are_freed(dev) -> None:
    base = dev.stats().result().memory.current_count
    for _ in range(50):
        dev.alloc((1024,), np.float32)  # future and buffer dropped at once
    dev.synchronize().result()
    gc.collect()
    load = dev.stats().result()
    assert load.memory.current_count == base
    assert load.memory.total_frees >= 50


def test_future_can_stand_for_its_buffer(dev, rng) -> None:
    host = rng.standard_normal(16).astype(np.float32)
    fut = dev.to_device(host)
    assert isinstance(fut, gpumsg.BufferFuture)
    assert fut.cancel() is False
    np.testing.assert_array_equal(dev.copy_to_host(fut).result(), host)
    assert fut.result() is fut.buffer
