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


# -- a new buffer and the message that writes it, as one message (AllocThen) ------------------
def test_a_call_answering_a_new_buffer_sends_one_message(dev, rng, posted) -> None:
    """``matmul`` without ``out`` posts one AllocThen: the product is right, and the new
    buffer's pointer is known once its future resolved. With the fusion off (process
    isolation's way) the same call posts an Alloc and the Gemm, with the same result."""
    a0, b0 = (rng.standard_normal((5, 7)), rng.standard_normal((7, 3)))
    a, b = dev.to_device(a0).result(), dev.to_device(b0).result()
    sent = posted(dev, gpumsg.messages.Message)
    c = dev.linalg.matmul(a, b).result(timeout=60)
    assert [type(m).__name__ for m in sent] == ["AllocThen"]
    assert sent[0].out is c.ref and sent[0].then.written() == [c.ref]
    assert c.raw_device_ptr() == dev._worker.ctx.buffers[c.ref.id].ptr
    np.testing.assert_allclose(dev.copy_to_host(c).result(), a0 @ b0, rtol=1e-12)
    sent.clear()
    dev._fuse_alloc = False
    d = dev.linalg.matmul(a, b).result(timeout=60)
    assert [type(m).__name__ for m in sent] == ["Alloc", "Gemm"]
    assert d.raw_device_ptr() and d.ref.id != c.ref.id
    np.testing.assert_allclose(dev.copy_to_host(d).result(), a0 @ b0, rtol=1e-12)


def test_alloc_then_is_the_clients_own(dev) -> None:
    out = dev.alloc((4,), np.float32).result()
    src = dev.alloc((4,), np.float32).result()
    with pytest.raises(gpumsg.InvalidMessage, match="AllocThen"):
        dev.send(gpumsg.messages.AllocThen(out.ref, gpumsg.messages.CopyDevice(out, src)))
    with pytest.raises(gpumsg.InvalidMessage, match="then"):
        gpumsg.messages.AllocThen(out.ref, gpumsg.messages.Alloc(out.ref))


def test_alloc_then_whose_allocation_fails_fails_only_that_call(dev, rng) -> None:
    a0 = rng.standard_normal((4, 4))
    a = dev.to_device(a0).result()
    dev.inject_fault("oom", count=2).result()  # the pool retries once after trimming
    with pytest.raises(gpumsg.OutOfMemory):
        dev.linalg.matmul(a, a).result(timeout=60)
    np.testing.assert_allclose(dev.copy_to_host(dev.linalg.matmul(a, a)).result(), a0 @ a0,
                               rtol=1e-12)


@pytest.mark.parametrize("fused", [True, False], ids=["AllocThen", "Alloc+Gemm"])
def test_a_new_buffer_whose_operation_fails_is_marked_and_freed(dev, rng, fused) -> None:
    """The allocation succeeds and the operation fails on the device (an input whose own
    allocation failed): the call's future fails naming the cause, the new buffer's contents
    are marked invalid for readers, the device keeps serving, and the dropped buffers are
    freed: the failed input's and the output's. (Before, both leaked in either form: the
    failure kept in each buffer's record held, through its traceback's frames, the reply that
    held the buffer.)"""
    dev._fuse_alloc = fused
    b0 = rng.standard_normal((4, 4))
    b = dev.to_device(b0).result()
    dev.synchronize().result(timeout=60)
    live = len(dev._worker.ctx.buffers)
    dev.inject_fault("oom", count=2).result()  # the pool retries once after trimming
    x = dev.alloc((4, 4), np.float64, order="C")  # fails on the device
    y = dev.linalg.matmul(x, b)
    with pytest.raises(gpumsg.DependencyFailed):
        y.result(timeout=60)
    with pytest.raises(gpumsg.DependencyFailed):
        dev.copy_to_host(y.buffer).result(timeout=60)
    np.testing.assert_allclose(dev.copy_to_host(dev.linalg.matmul(b, b)).result(), b0 @ b0,
                               rtol=1e-12)
    del x, y
    gc.collect()
    dev.synchronize().result(timeout=60)
    assert len(dev._worker.ctx.buffers) == live


def test_an_unnamed_buffer_dropped_on_the_device_thread_is_freed_without_a_message(
        dev, rng) -> None:
    """Allocations nobody named, their futures let go at once: each dies on the device thread
    when its Alloc is answered, and the device loop frees it itself: no Free is posted and the
    memory comes back. Outputs dropped elsewhere (a NumPy-shaped FFT's, answered by whichever
    thread sees its completion) come back either way. A buffer named by a message still queued
    posts its Free, which follows that message through the mailbox."""
    x = dev.to_device((rng.standard_normal(64) + 1j * rng.standard_normal(64))
                      .astype(np.complex64)).result()
    dev.synchronize().result(timeout=60)
    ctx = dev._worker.ctx
    live = len(ctx.buffers)
    frees: list = []  # a finalizer's Free goes through _submit, not _post
    submit = dev._submit
    dev._submit = lambda msg, reply: (frees.append(msg), submit(msg, reply))
    # the device thread held up meanwhile, so that every future is let go here before its
    # Alloc is answered (else the caller may hold the last reference: then a Free is posted)
    stalled = dev.inject_fault("stall", seconds=0.5)
    for _ in range(50):
        dev.alloc((256,), np.float32)  # the future let go at once
    assert not stalled.done()
    dev.synchronize().result(timeout=60)
    dev.synchronize().result(timeout=60)  # a turn after the one that let the last go
    assert frees == [] and len(ctx.buffers) == live
    for _ in range(50):
        dev.fft.fft(x)
    dev.synchronize().result(timeout=60)
    gc.collect()
    dev.synchronize().result(timeout=60)
    assert len(ctx.buffers) == live
    frees.clear()
    stalled = dev.inject_fault("stall", seconds=1.0)  # the memset below stays queued
    named = dev.alloc((4,), np.float32)
    dev.memset(named, 0)  # names it
    del named
    gc.collect()
    assert not stalled.done()
    dev.synchronize().result(timeout=60)
    assert [type(m).__name__ for m in frees] == ["Free"]  # queued behind the memset
    assert len(ctx.buffers) == live


def test_a_dropped_output_named_by_a_later_message_is_not_freed_early(dev, rng) -> None:
    """``y = fft(x)``, then a message reading y posted, then y's future dropped: the second
    message must still find y (freed behind it, not at the end of y's own turn)."""
    x0 = (rng.standard_normal(64) + 1j * rng.standard_normal(64)).astype(np.complex64)
    x = dev.to_device(x0).result()
    outs = []
    for _ in range(20):
        y = dev.fft.fft(x)
        z = dev.alloc((64,), np.complex64, order="C")
        dev.copy(z, y)
        del y
        outs.append(z)
    for z in outs:
        np.testing.assert_allclose(dev.copy_to_host(z).result(timeout=60), np.fft.fft(x0),
                                   rtol=1e-4, atol=1e-3)
