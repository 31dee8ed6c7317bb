"""DLPack both ways and the CUDA Array Interface.

On the simulator the device memory is host memory, exported and imported as kDLCPU: NumPy is
the peer, so CI tests the plumbing (capsules, versions, deleters, keep-alive, read-only, stream
ordering). On a GPU the peers are torch, CuPy and JAX (where importable): round trips, zero copy
(the same pointer) and ordering after a write still in flight.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time
import types
import weakref

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.sim import SimBackend
from gpumsg.client import _dlpack as dlpack
from gpumsg.errors import GpuRefStale, InvalidMessage
from tests.conftest import CUDA_OK, CUDA_WHY, HostCapsule, random_array

NUMPY_DTYPES = ["f32", "f64", "f16", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64",
                "c64", "c128"]
_valid = ctypes.pythonapi.PyCapsule_IsValid
_valid.restype = ctypes.c_int
_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


@pytest.fixture
def sim():
    d = gpumsg.open_device(0, backend="sim", allow_fault_injection=True)
    yield d
    d.close()


def _exports() -> int:
    return len(dlpack._exports)


# -- export to NumPy (simulator) ---
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_export_to_numpy_zero_copy(sim, rng, dtype, order) -> None:
    data = random_array(rng, (5, 7), dtype, order=order)
    buf = sim.to_device(data).result()
    assert buf.__dlpack_device__() == (dlpack.KDLCPU, 0)
    view = np.from_dlpack(buf)
    assert view.dtype == data.dtype and view.shape == data.shape
    assert np.array_equal(view, data)
    assert view.flags.f_contiguous if order == "F" else view.flags.c_contiguous
    # zero copy: a write through the view is the device's memory
    fresh = random_array(rng, (5, 7), dtype)
    view[...] = fresh
    assert np.array_equal(sim.copy_to_host(buf).result(), fresh)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (1, 1, 4), (6,)])
def test_export_shapes(sim, rng, shape) -> None:
    data = random_array(rng, shape, "f32")
    view = np.from_dlpack(sim.to_device(data).result())
    assert view.shape == data.shape and np.array_equal(view, data)


def test_capsule_versions(sim, rng) -> None:
    buf = sim.to_device(random_array(rng, (4,), "f64")).result()
    legacy = buf.__dlpack__()
    assert _valid(legacy, b"dltensor") and not _valid(legacy, b"dltensor_versioned")
    v1 = buf.__dlpack__(max_version=(1, 0))
    assert _valid(v1, b"dltensor_versioned")
    old = buf.__dlpack__(max_version=(0, 8))
    assert _valid(old, b"dltensor")
    assert _exports() >= 3
    del legacy, v1, old  # never consumed: the capsule destructor calls the deleter
    gc.collect()
    assert _exports() == 0


def test_versioned_struct_contents(sim, rng) -> None:
    data = random_array(rng, (3, 5), "c64", order="F")
    buf = sim.to_device(data).result()
    cap = buf.__dlpack__(max_version=(1, 1))
    ptr = ctypes.pythonapi.PyCapsule_GetPointer
    ptr.restype, ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    m = dlpack.DLManagedTensorVersioned.from_address(ptr(cap, b"dltensor_versioned"))
    t = m.dl_tensor
    assert (m.version.major, m.version.minor) == dlpack.VERSION and m.flags == 0
    assert (t.device.device_type, t.ndim, t.dtype.code, t.dtype.bits, t.dtype.lanes) == \
        (dlpack.KDLCPU, 2, 5, 64, 1)
    assert [t.shape[i] for i in range(2)] == [3, 5]
    assert [t.strides[i] for i in range(2)] == [1, 3]  # column-major, in elements
    del cap, m, t
    gc.collect()


def test_export_keeps_the_buffer_alive(sim, rng) -> None:
    data = random_array(rng, (64,), "f32")
    buf = sim.to_device(data).result()
    alive = weakref.ref(buf)
    view = np.from_dlpack(buf)
    del buf
    gc.collect()
    assert alive() is not None  # the consumer holds it
    sim.to_device(random_array(rng, (64,), "f32")).result()  # would reuse freed memory
    assert np.array_equal(view, data)
    del view
    gc.collect()
    assert alive() is None and _exports() == 0


def test_export_after_a_write_in_flight(rng) -> None:
    """The copy is held behind a hang on the h2d stream: the export must wait for it."""
    with gpumsg.open_device(0, backend=SimBackend(jitter=1e-3),
                            allow_fault_injection=True) as d:
        for _ in range(3):
            data = random_array(rng, (256,), "f64")
            buf = d.alloc((256,), np.float64).result()
            d.inject_fault("hang", stream="h2d", seconds=0.05)
            d.copy_from_host(buf, data)  # not waited for
            assert np.array_equal(np.from_dlpack(buf), data)


def test_export_without_sync_sees_the_write_missing(sim, rng) -> None:
    """The companion of the test above: stream=-1 asks for no ordering, and the copy behind the
    hang has not run yet (so the ordering test above can fail)."""
    data = random_array(rng, (256,), "f64")
    buf = sim.alloc((256,), np.float64).result()
    sim.inject_fault("hang", stream="h2d", seconds=1.0)  # long enough for a loaded machine
    done = sim.copy_from_host(buf, data)
    early = np.from_dlpack(HostCapsule(buf.__dlpack__(stream=-1)))
    assert not np.array_equal(early, data) and not done.done()
    done.result()
    assert np.array_equal(early, data)  # the same memory, written later


def _wait_quiet(dev) -> None:
    dev.synchronize().result()
    deadline = time.monotonic() + 5
    while not dlpack.quiet(dev):
        assert time.monotonic() < deadline, "the device never became quiet"
        time.sleep(0.001)


def test_export_needs_no_message_when_the_device_is_quiet(sim, rng) -> None:
    data = random_array(rng, (64,), "f32")
    buf = sim.to_device(data).result()
    _wait_quiet(sim)
    before = dict(dlpack.counts)
    view = np.from_dlpack(buf)
    assert dlpack.counts["zero_trip"] == before["zero_trip"] + 1
    assert dlpack.counts["round_trip"] == before["round_trip"]
    assert np.array_equal(view, data)
    # with work in flight the export is a round trip, and still ordered after the write
    sim.inject_fault("hang", stream="h2d", seconds=0.05)
    fresh = random_array(rng, (64,), "f32")
    sim.copy_from_host(buf, fresh)
    assert not dlpack.quiet(sim)
    assert np.array_equal(np.from_dlpack(buf), fresh)
    assert dlpack.counts["round_trip"] == before["round_trip"] + 1


def test_export_of_a_failed_buffer_raises_even_when_quiet(sim, rng) -> None:
    from gpumsg.errors import DependencyFailed
    from gpumsg.messages import CopyFromHost, HostRef

    buf = sim.to_device(random_array(rng, (16,), "f32")).result()
    bad = sim.send(CopyFromHost(buf, HostRef("pinned", 10**6, 0, buf.nbytes)))
    with pytest.raises(InvalidMessage):
        bad.result()
    _wait_quiet(sim)
    with pytest.raises(DependencyFailed):
        np.from_dlpack(buf)


def test_export_copy_true_is_a_copy(sim, rng) -> None:
    data = random_array(rng, (4, 4), "f32")
    buf = sim.to_device(data).result()
    copied = np.from_dlpack(buf, copy=True) if _numpy_copy_kw() else \
        np.from_dlpack(HostCapsule(buf.__dlpack__(max_version=(1, 0), copy=True)))
    assert np.array_equal(copied, data)
    copied[...] = 0
    assert np.array_equal(sim.copy_to_host(buf).result(), data)


def _numpy_copy_kw() -> bool:
    try:
        np.from_dlpack(np.zeros(1), copy=None)
        return True
    except TypeError:
        return False


@pytest.mark.parametrize("kwargs,error", [
    ({"stream": 5}, BufferError),  # the simulator's consumers are on the host
    ({"dl_device": (2, 0)}, BufferError),
    ({"stream": "x"}, BufferError),
    ({"copy": 1}, InvalidMessage),  # None, True or False: 1 is not taken for True
])
def test_export_bad_arguments(sim, rng, kwargs, error) -> None:
    buf = sim.to_device(random_array(rng, (3,), "f32")).result()
    with pytest.raises(error):
        buf.__dlpack__(**kwargs)
    assert np.array_equal(np.from_dlpack(buf), sim.copy_to_host(buf).result())


def test_export_freed_buffer_is_stale(sim, rng) -> None:
    buf = sim.to_device(random_array(rng, (3,), "f32")).result()
    buf.free().result()
    with pytest.raises(GpuRefStale):
        buf.__dlpack__()


def test_export_refused_in_process_isolation(rng) -> None:
    with gpumsg.open_device(0, backend="sim", isolation="process") as d:
        buf = d.to_device(random_array(rng, (3,), "f32")).result()
        with pytest.raises(BufferError, match="isolation"):
            buf.__dlpack__()
        with pytest.raises(InvalidMessage):
            d.from_dlpack(np.ones(3))


# -- import from NumPy (simulator) ---
@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_import_from_numpy_zero_copy(sim, rng, dtype, order) -> None:
    data = random_array(rng, (6, 3), dtype, order=order)
    buf = sim.from_dlpack(data).result()
    assert buf.shape == data.shape and buf.dtype == data.dtype and buf.order == order
    assert np.array_equal(sim.copy_to_host(buf).result(), data)
    fresh = random_array(rng, (6, 3), dtype, order=order)
    sim.copy_from_host(buf, fresh).result()
    assert np.array_equal(data, fresh)  # the device wrote the producer's memory


def test_import_is_a_point_in_the_compute_stream(rng) -> None:
    """The producer's wait lands on the compute stream before Adopt: the adoption must count
    as a compute-stream operation, so that a copy on another stream waits for a fence recorded
    after it (a fence of an earlier point would not cover the producer's work)."""
    with gpumsg.open_device(0, backend="sim") as d:
        buf = d.from_dlpack(random_array(rng, (8,), "f32")).result()
        ctx = d._worker.ctx
        a = ctx.buffers[buf.id]
        assert a.write_stream == 0 and a.write_seq == ctx.compute.seq >= 1
        d.copy_to_host(buf).result()
        d2h = ctx.streams[2]
        assert d2h.waited[0] >= a.write_seq  # the read waited for that point


def test_imported_buffer_in_a_gemm(sim, rng) -> None:
    a = random_array(rng, (5, 4), "f32", order="F")
    b = random_array(rng, (4, 3), "f32", order="F")
    c = np.asfortranarray(random_array(rng, (5, 3), "f32"))
    da, db, dc = sim.from_dlpack(a), sim.from_dlpack(b), sim.from_dlpack(c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    sim.sgemm(da, db, dc, 5, 3, 4).result()
    assert np.allclose(c, ref, rtol=1e-5, atol=1e-5)  # written in place, zero copy


def test_import_holds_the_producer_until_freed(sim, rng) -> None:
    data = random_array(rng, (100,), "f64")
    expect = data.copy()
    producer = weakref.ref(data)
    buf = sim.from_dlpack(data).result()
    del data
    gc.collect()
    assert producer() is not None
    assert np.array_equal(sim.copy_to_host(buf).result(), expect)
    buf.free().result()
    sim.synchronize().result()
    gc.collect()
    assert producer() is None


def test_import_released_when_the_buffer_is_dropped(sim, rng) -> None:
    data = random_array(rng, (10,), "f32")
    producer = weakref.ref(data)
    sim.from_dlpack(data).result()
    del data
    gc.collect()
    sim.synchronize().result()
    gc.collect()
    assert producer() is None


def test_import_released_at_close(rng) -> None:
    d = gpumsg.open_device(0, backend="sim")
    data = random_array(rng, (10,), "f32")
    producer = weakref.ref(data)
    buf = d.from_dlpack(data).result()
    del data
    d.close()
    gc.collect()
    assert producer() is None and buf.is_stale()


def test_import_readonly(sim, rng) -> None:
    data = random_array(rng, (8,), "f32")
    data.flags.writeable = False
    buf = sim.from_dlpack(data).result()
    assert dlpack.is_readonly(buf)
    with pytest.raises(InvalidMessage, match="read-only"):
        sim.copy_from_host(buf, random_array(rng, (8,), "f32")).result()
    with pytest.raises(InvalidMessage, match="read-only"):
        sim.memset(buf, 0).result()
    # nothing was written and the contents are still valid for readers
    assert np.array_equal(sim.copy_to_host(buf).result(), data)
    out = sim.alloc((8,), np.float32)
    sim.copy(out, buf).result()
    assert np.array_equal(sim.copy_to_host(out).result(), data)
    # re-exported read-only: a versioned consumer sees the flag, a legacy one is refused
    with pytest.raises(BufferError, match="read-only"):
        buf.__dlpack__()
    view = np.from_dlpack(buf)
    assert not view.flags.writeable and np.array_equal(view, data)


def test_gpumsg_to_gpumsg_every_dtype(rng) -> None:
    """bf16 and fp8 (which NumPy's DLPack does not take) between two simulated devices."""
    with gpumsg.open_device(0, backend="sim") as d0, gpumsg.open_device(0, backend="sim") as d1:
        for dtype in ("bf16", "e4m3", "e5m2", "f16", "c128"):
            data = random_array(rng, (4, 3), dtype, order="F")
            src = d0.to_device(data).result()
            dst = d1.from_dlpack(src).result()
            assert dst.dtype == data.dtype and dst.order == "F"
            got = d1.copy_to_host(dst).result()
            assert got.tobytes(order="F") == data.tobytes(order="F")
            alive = weakref.ref(src)
            del src
            gc.collect()
            assert alive() is not None  # d1's buffer holds the exported capsule
            dst.free().result()
            d1.synchronize().result()
            gc.collect()
            assert alive() is None


class _Foreign:
    def __init__(self, device) -> None:
        self.device = device

    def __dlpack__(self, **kwargs):
        raise AssertionError("must be refused before the capsule is asked for")

    def __dlpack_device__(self):
        return self.device


@pytest.mark.parametrize("obj,match", [
    (lambda: [1.0, 2.0], "DLPack"),
    (lambda: _Foreign((2, 0)), "host"),
    (lambda: np.ones((4, 4))[:, ::2], "strides"),
    (lambda: np.ones(3, np.longdouble), "DLPack can export"),  # bools are taken: u8
])
def test_import_bad_objects(sim, obj, match) -> None:
    with pytest.raises(InvalidMessage, match=match) as info:
        sim.from_dlpack(obj())
    assert info.value.field == "obj"
    assert sim.stats().result().ops_in_flight == 0  # still serving


def test_import_refused_contents_release_the_producer(sim) -> None:
    data = np.ones((4, 4))[:, ::2]
    producer = weakref.ref(data.base)
    with pytest.raises(InvalidMessage):
        sim.from_dlpack(data)
    del data
    gc.collect()
    assert producer() is None


def test_a_stream_handle_must_point_at_mapped_memory() -> None:
    """A consumer's stream handle is the address of the driver's stream object: the handler
    refuses one where nothing is mapped (the driver would dereference it)."""
    from gpumsg.service._interop import _mapped

    here = ctypes.c_int(7)
    assert _mapped(ctypes.addressof(here))
    assert not _mapped(3 * 4096)  # below the lowest address Linux maps
    assert not _mapped(2**64 - 1)


# -- GPU peers ---
gpu = pytest.mark.gpu


@gpu
def test_export_to_an_unmapped_stream_handle_is_refused(cuda, rng) -> None:
    buf = cuda.to_device(random_array(rng, (8, 8), "f32")).result()  # a write to order after
    with pytest.raises(InvalidMessage, match="not a CUstream"):
        cuda.send(gpumsg.messages.ExportSync(buf.ref, 2**31 + 1)).result(timeout=60)
    assert cuda.copy_to_host(buf).result(timeout=60).shape == (8, 8)  # the device serves on


@pytest.fixture
def cuda():
    if not CUDA_OK:
        pytest.skip(f"no CUDA GPU here ({CUDA_WHY})")
    d = gpumsg.open_device(0, backend="cuda", allow_fault_injection=True)
    yield d
    d.close()


@gpu
def test_torch_round_trip_zero_copy(cuda, rng) -> None:
    torch = pytest.importorskip("torch")
    data = random_array(rng, (64, 33), "f32", order="F")
    buf = cuda.to_device(data).result()
    t = torch.from_dlpack(buf)
    assert t.data_ptr() == buf.raw_device_ptr() and t.is_cuda
    assert np.array_equal(t.cpu().numpy(), data)
    t.mul_(2.0)
    torch.cuda.synchronize()
    assert np.array_equal(cuda.copy_to_host(buf).result(), 2 * data)
    src = torch.from_numpy(random_array(rng, (40, 8), "f64")).cuda()
    back = cuda.from_dlpack(src).result()
    assert back.raw_device_ptr() == src.data_ptr()
    assert np.array_equal(cuda.copy_to_host(back).result(), src.cpu().numpy())
    alive = weakref.ref(src)
    del src
    gc.collect()
    assert alive() is not None
    back.free().result()
    cuda.synchronize().result()
    gc.collect()
    assert alive() is None


@gpu
def test_torch_ordered_after_a_write_in_flight(cuda, rng) -> None:
    torch = pytest.importorskip("torch")
    n = 1 << 22
    for stream in (None, torch.cuda.Stream()):
        data = random_array(rng, (n,), "f32")
        buf = cuda.alloc((n,), np.float32).result()
        cuda.inject_fault("hang", stream="h2d", seconds=0.05)  # the copy waits behind it
        cuda.copy_from_host(buf, data)
        with torch.cuda.stream(stream) if stream is not None else _nothing():
            t = torch.from_dlpack(buf)
            total = float(t.double().sum())  # .item() on the consumer's stream
        assert abs(total - float(data.astype(np.float64).sum())) < 1e-6 * n


@gpu
def test_torch_streams_that_die_right_after_their_tensors(cuda, rng) -> None:
    """A consumer's tensor deleted, then its stream destroyed at once: the release event was
    recorded on the stream before the deleter returned (it used to be recorded later by the
    device thread, on a stream that might be gone: a crash in the driver)."""
    torch = pytest.importorskip("torch")
    data = random_array(rng, (4096,), "f32")
    buf = cuda.to_device(data).result()
    for _ in range(300):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            t = torch.from_dlpack(buf)
            t.add_(0.0)
        del t
        del stream
    assert np.array_equal(cuda.copy_to_host(buf).result(), data)


@gpu
def test_consumer_streams_destroyed_before_their_tensors(cuda, rng) -> None:
    """CuPy arrays imported on a stream of their own that is destroyed (its ``with`` block
    over, its last reference dropped) before the arrays: their deleters must not touch the
    dead stream (recording an event on it crashed the driver), and gpumsg's later uses still
    follow the arrays' work."""
    cp = pytest.importorskip("cupy")
    data = random_array(rng, (1 << 16,), "f32")
    buf = cuda.to_device(data).result()
    for _ in range(200):
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            arr = cp.from_dlpack(buf)
            arr *= 1.0  # work on s that writes the buffer
        del s
        gc.collect()  # the stream is destroyed here, the array lives on
        del arr  # its deleter runs after its stream is gone
    assert np.array_equal(cuda.copy_to_host(buf).result(), data)


def test_the_deleter_waits_for_the_context_not_the_consumer_stream(monkeypatch) -> None:
    """The deleter of an export to a CUDA consumer stream waits until the device's context has
    run what was sent to it (the backend's synchronize_context, on the deleter's thread), and
    touches no stream; the legacy default stream (1), which always exists, is settled alone
    (queried, synchronized only when busy); an export to the per-thread stream, a stale buffer
    or a closing device waits for nothing."""
    from gpumsg.client import _dlpack as dlpack
    from gpumsg.client._dlpack import PER_THREAD_STREAM

    monkeypatch.setattr(dlpack, "_settle_legacy", lambda backend: backend.calls.append(
        "legacy:" + threading.current_thread().name))

    class Backend:
        def __init__(self) -> None:
            self.calls = []

        def synchronize_context(self) -> None:
            self.calls.append(threading.current_thread().name)

    class Buffer:
        def __init__(self, accepting: bool = True, stale: bool = False) -> None:
            self.backend = Backend()
            ctx = types.SimpleNamespace(backend=self.backend)
            self._device = types.SimpleNamespace(
                _state=types.SimpleNamespace(accepting=accepting),
                _worker=types.SimpleNamespace(ctx=ctx))
            self.stale = stale

        def is_stale(self) -> bool:
            return self.stale

    def delete(buf: Buffer, stream: int) -> list:
        dlpack._exports[12345] = (None, buf, None, stream)
        th = threading.Thread(target=dlpack._delete_export, args=(12345,), name="consumer")
        th.start()
        th.join()
        assert 12345 not in dlpack._exports
        return buf.backend.calls

    assert delete(Buffer(), 77) == ["consumer"]  # a consumer stream (maybe destroyed by now)
    assert delete(Buffer(), 1) == ["legacy:consumer"]  # the legacy default stream
    assert delete(Buffer(), PER_THREAD_STREAM) == []  # the caller's own stream: it waits
    assert delete(Buffer(), -1) == []  # no synchronization asked
    assert delete(Buffer(stale=True), 77) == []
    assert delete(Buffer(accepting=False), 77) == []


@gpu
def test_torch_default_stream_work_is_done_before_gpumsg_goes_on(cuda, rng) -> None:
    """A tensor written by work queued on torch's default (legacy) stream and dropped at once:
    gpumsg's next use of the buffer comes after that work (the deleter settles the stream)."""
    torch = pytest.importorskip("torch")
    data = random_array(rng, (1 << 20,), "f32")
    buf = cuda.to_device(data).result()
    for _ in range(10):
        t = torch.from_dlpack(buf)
        torch.cuda._sleep(1 << 21)  # a millisecond or so of GPU time ahead of the write
        t.mul_(2.0)
        del t
        data = data * np.float32(2)
    assert np.array_equal(cuda.copy_to_host(buf).result(), data)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


@gpu
def test_torch_import_is_ordered_after_torch(cuda, rng) -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2048, 2048, device="cuda")
    y = x @ x  # still running when gpumsg reads it
    buf = cuda.from_dlpack(y).result()
    host = cuda.copy_to_host(buf).result()
    assert np.allclose(host, y.cpu().numpy())


@gpu
def test_cupy_round_trip(cuda, rng) -> None:
    cp = pytest.importorskip("cupy")
    data = random_array(rng, (32, 16), "c64")
    buf = cuda.to_device(data).result()
    with cp.cuda.Stream(non_blocking=True):
        arr = cp.from_dlpack(buf)
        assert arr.data.ptr == buf.raw_device_ptr()
        assert np.array_equal(cp.asnumpy(arr), data)
    cai = cp.asarray(buf)  # __cuda_array_interface__
    assert cai.data.ptr == buf.raw_device_ptr() and np.array_equal(cp.asnumpy(cai), data)
    src = cp.asarray(random_array(rng, (7, 5), "f64"))
    back = cuda.from_dlpack(src).result()
    assert back.raw_device_ptr() == src.data.ptr
    assert np.array_equal(cuda.copy_to_host(back).result(), cp.asnumpy(src))


@gpu
def test_jax_round_trip(cuda, rng) -> None:
    jax = pytest.importorskip("jax", reason="JAX is not installed on this machine")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    import jax.numpy as jnp

    data = random_array(rng, (16, 8), "f32")
    buf = cuda.to_device(data).result()
    arr = jnp.from_dlpack(buf)
    assert np.array_equal(np.asarray(arr), data)
    back = cuda.from_dlpack(jnp.asarray(data) * 2).result()
    assert np.array_equal(cuda.copy_to_host(back).result(), 2 * data)
