"""Host<->device copies for every dtype and order, pinned buffers, staged large copies,
partial copies, device-to-device copies and memset."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.client._staging import CHUNK, NEW_ARRAY_LIMIT
from gpumsg.dtypes import ALLOC_DTYPES
from tests.conftest import random_array, run_python
from tests.service.poison_check import check_pinned_copy


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ALLOC_DTYPES)
def test_round_trip_every_dtype(dev, rng, dtype: str, order: str) -> None:
    host = random_array(rng, (37, 19), dtype, order)
    buf = dev.to_device(host).result()
    assert buf.dtype == gpumsg.as_dtype(dtype)
    assert buf.shape == (37, 19) and buf.order == order
    back = dev.copy_to_host(buf).result()
    assert back.dtype == host.dtype and back.shape == host.shape
    assert back.flags.f_contiguous if order == "F" else back.flags.c_contiguous
    np.testing.assert_array_equal(back, host)


@pytest.mark.parametrize("dtype", ALLOC_DTYPES)
def test_alloc_then_copy_in_other_order(dev, rng, dtype: str) -> None:
    # a C-ordered array copied into an F-ordered buffer keeps its logical values
    host = random_array(rng, (5, 7, 3), dtype, "C")
    buf = dev.alloc((5, 7, 3), dtype, order="F")
    dev.copy_from_host(buf, host).result()
    np.testing.assert_array_equal(dev.copy_to_host(buf).result(), host)


@pytest.mark.parametrize("order", ["C", "F"])
def test_repeated_whole_copies_take_the_short_path_and_keep_every_check(dev, rng,
                                                                       order: str) -> None:
    """Whole-buffer copies of a dtype seen before skip building the message
    (Device.copy_from_host's common case): fresh arrays in either memory order and a flat 1-D
    array land with their logical values, a shorter one is a partial copy; a wrong dtype, shape
    or size, a freed buffer and a closed device are still refused at the call."""
    buf = dev.alloc((6, 5, 4), "f32", order=order).result()
    for host_order in ("C", "F", "C"):
        host = random_array(rng, (6, 5, 4), "f32", host_order)
        assert dev.copy_from_host(buf, host).result() is None
        np.testing.assert_array_equal(dev.copy_to_host(buf).result(), host)
    flat = random_array(rng, (120,), "f32")
    dev.copy_from_host(buf, flat).result()
    np.testing.assert_array_equal(dev.copy_to_host(buf).result().ravel(order=order), flat)
    part = random_array(rng, (119,), "f32")  # a shorter flat array: a partial copy
    dev.copy_from_host(buf, part).result()
    np.testing.assert_array_equal(dev.copy_to_host(buf).result().ravel(order=order)[:119], part)
    for bad in (random_array(rng, (6, 5, 4), "f64"), random_array(rng, (5, 6, 4), "f32"),
                random_array(rng, (121,), "f32")):
        with pytest.raises(gpumsg.InvalidMessage):
            dev.copy_from_host(buf, bad)
    buf.free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.copy_from_host(buf, flat)
    other = dev.alloc((120,), "f32").result()
    dev.close()
    with pytest.raises(gpumsg.DeviceClosed):
        dev.copy_from_host(other, flat)


@pytest.mark.parametrize("order", ["C", "F"])
def test_repeated_staged_copies_reuse_their_message_per_block(dev, rng, posted,
                                                              order: str) -> None:
    """A staging block keeps the last message that named it: repeated copies of one buffer
    post one message object per block; another buffer through the same block gets its own;
    every download answers a new array of its own, with the buffer's values at that time."""
    a = dev.alloc((9, 7), "f32", order=order).result()
    b = dev.alloc((63,), "f32").result()
    sent = posted(dev, gpumsg.messages.CopyToHost, gpumsg.messages.CopyFromHost)
    seen = []
    for _ in range(6):
        ha, hb = random_array(rng, (9, 7), "f32", "C"), random_array(rng, (63,), "f32")
        dev.copy_from_host(a, ha).result()
        dev.copy_from_host(b, hb).result()
        back_a, back_b = dev.copy_to_host(a).result(), dev.copy_to_host(b).result()
        np.testing.assert_array_equal(back_a, ha)
        np.testing.assert_array_equal(back_b, hb)
        assert back_a.flags.owndata and back_b.flags.owndata
        assert back_a.flags.f_contiguous if order == "F" else back_a.flags.c_contiguous
        assert all(back_a is not old for old in seen)
        seen.append(back_a)
    assert len(sent) == 24
    for ref in (a.ref, b.ref):
        for kind in (gpumsg.messages.CopyToHost, gpumsg.messages.CopyFromHost):
            mine = [m for m in sent if type(m) is kind and
                    (m.src if kind is gpumsg.messages.CopyToHost else m.dst) is ref]
            host = [m.dst if kind is gpumsg.messages.CopyToHost else m.src for m in mine]
            assert len(mine) == 6 and all(h.nbytes == ref.nbytes for h in host)
            # one message object per staging block used, so fewer objects than copies
            assert len({id(m) for m in mine}) == len({h.block for h in host}) < 6


@pytest.mark.parametrize("kind", ["new array", "into out"])
def test_a_failed_copy_out_of_the_staging_block_answers_the_caller(kind: str) -> None:
    """Copying a finished download out of its staging block can fail (no memory for the
    array): the caller's future gets the error, the block goes back to its pool, and nothing
    is raised into the thread answering (the device thread or a completion thread)."""
    from gpumsg.client._staging import _ChunkDownload, _NewArrayDownload

    class Pool:
        def __init__(self) -> None:
            self.released: list = []

        def release(self, block) -> None:
            self.released.append(block)

    class Block:
        @property
        def bytes(self):
            raise MemoryError("no memory for the copy")

    pool, block = Pool(), Block()
    if kind == "new array":
        fut = _NewArrayDownload(pool, block, 16, np.dtype(np.float32), (4,), "C")
    else:
        fut = _ChunkDownload(pool, block, np.empty(16, np.uint8), None)
    fut.set_result(None)  # what the answering thread calls: it must not raise
    with pytest.raises(MemoryError, match="no memory"):
        fut.result(0)
    assert pool.released == [block]


def test_flat_partial_copies(dev, rng) -> None:
    full = random_array(rng, (100,), "f64")
    buf = dev.to_device(full)
    part = random_array(rng, (30,), "f64")
    dev.copy_from_host(buf, part, offset=50).result()
    expect = full.copy()
    expect[50:80] = part
    np.testing.assert_array_equal(dev.copy_to_host(buf).result(), expect)
    tail = dev.send(gpumsg.messages.CopyToHost(buf, src_offset=8 * 90)).result()
    np.testing.assert_array_equal(tail, expect[90:])


def test_zero_size_buffers(dev) -> None:
    buf = dev.alloc((0, 4), np.float32).result()
    assert buf.nbytes == 0
    dev.copy_from_host(buf, np.empty((0, 4), np.float32)).result()
    assert dev.copy_to_host(buf).result().shape == (0, 4)


@pytest.mark.parametrize("nbytes", [NEW_ARRAY_LIMIT - 256, NEW_ARRAY_LIMIT])
def test_whole_downloads_either_side_of_the_new_array_limit(dev, rng, nbytes: int) -> None:
    """Below the limit a download makes its array out of the staging block, from it up the
    array is made first and filled over the memcpy threads: either way a new array of the
    buffer's values, shape and order."""
    host = random_array(rng, (nbytes // 256, 64), "f32", "F")
    buf = dev.to_device(host).result()
    back = dev.copy_to_host(buf).result()
    assert back.shape == host.shape and back.flags.f_contiguous and back.flags.owndata
    np.testing.assert_array_equal(back, host)


def test_large_staged_copy_crosses_chunks(dev, rng) -> None:
    n = (2 * CHUNK + 12345) // 4  # three staging chunks, the last one short
    host = rng.standard_normal(n).astype(np.float32)
    buf = dev.to_device(host)
    back = dev.copy_to_host(buf).result()
    np.testing.assert_array_equal(back, host)


def test_pinned_host_buffers_copy_directly(dev, rng) -> None:
    pinned = dev.alloc_pinned((64, 32), np.float32, order="F").result()
    arr = pinned.array
    arr[...] = random_array(rng, (64, 32), "f32")
    buf = dev.alloc((64, 32), np.float32, order="F")
    dev.copy_from_host(buf, arr).result()
    out_pinned = dev.alloc_pinned((64, 32), np.float32, order="F").result()
    out = out_pinned.array
    out[...] = 0
    got = dev.copy_to_host(buf, out=out).result()
    assert got is out
    np.testing.assert_array_equal(out, arr)
    # the copies did not go through staging: only the two pinned buffers are in use
    pool = dev._staging.pool
    assert pool.staging_in_use == 0
    block = pinned._block
    pinned.free().result()
    assert not block.in_use  # back in the pool by the time free() resolves
    with pytest.raises(gpumsg.GpuRefStale):
        pinned.array  # noqa: B018


def test_pinned_copies_at_an_offset_inside_a_block(dev, rng) -> None:
    """A pinned array that starts inside its block is copied from and to that offset, and
    the copy into it resolves to the caller's array (or fails with the device's error)."""
    src_block = dev.alloc_pinned((300,), np.float64).result()
    dst_block = dev.alloc_pinned((300,), np.float64).result()
    src_block.array[:] = rng.standard_normal(300)
    dst_block.array[:] = 0.0
    buf = dev.alloc((100,), np.float64)
    dev.copy_from_host(buf, src_block.array[57:157]).result()
    out = dst_block.array[123:223]
    assert dev.copy_to_host(buf, out=out).result() is out
    np.testing.assert_array_equal(out, src_block.array[57:157])
    assert not dst_block.array[:123].any() and not dst_block.array[223:].any()
    assert dev._staging.pool.staging_in_use == 0  # straight from and to the pinned blocks


def test_a_pinned_copy_reports_a_poisoned_device(backend) -> None:
    """A copy into the caller's pinned array, queued behind a sticky fault, fails with
    ContextPoisoned (the direct answer passes the device's error on)."""
    if backend == "sim":
        check_pinned_copy("sim")
        return
    # in a subprocess: the poisoned context would break every later test of this process
    proc = run_python("""
        from tests.service.poison_check import check_pinned_copy
        check_pinned_copy("cuda")
        print("POISON-OK")
    """)
    assert "POISON-OK" in proc.stdout, proc.stdout + proc.stderr


def test_copy_to_host_into_pageable_out(dev, rng) -> None:
    host = random_array(rng, (16, 9), "i32", "C")
    buf = dev.to_device(host)
    out = np.empty((16, 9), np.int32)
    assert dev.copy_to_host(buf, out=out).result() is out
    np.testing.assert_array_equal(out, host)


def test_device_to_device_copy(dev, rng) -> None:
    host = random_array(rng, (64,), "u64")
    src = dev.to_device(host)
    dst = dev.alloc((64,), np.uint64)
    dev.copy(dst, src).result()
    np.testing.assert_array_equal(dev.copy_to_host(dst).result(), host)
    # a range within one buffer
    dev.copy_bytes(dst, dst, nbytes=8 * 16, dst_offset=0, src_offset=8 * 32).result()
    expect = host.copy()
    expect[:16] = host[32:48]
    np.testing.assert_array_equal(dev.copy_to_host(dst).result(), expect)


@pytest.mark.parametrize("width,dtype", [(1, np.uint8), (2, np.uint16), (4, np.uint32)])
def test_memset_patterns(dev, rng, width: int, dtype) -> None:
    host = random_array(rng, (256,), np.dtype(dtype).name)
    buf = dev.to_device(host)
    value = int(rng.integers(1, 1 << (8 * width)))
    dev.memset(buf, value, offset=16 * width, nbytes=100 * width, width=width).result()
    expect = host.copy()
    expect[16:116] = value
    np.testing.assert_array_equal(dev.copy_to_host(buf).result(), expect)
