"""The Array object: attributes, the namespace protocol, devices, asynchronous dispatch and
its errors, DLPack, the inspection API."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from array_helpers import random_values

import gpumsg
import gpumsg.array_api as xpm
from gpumsg.errors import InvalidMessage
from tests.conftest import HostCapsule


def test_attributes(xp, rng) -> None:
    h = random_values(rng, (2, 3, 4), np.float32, False)
    x = xp.asarray(h)
    assert (x.shape, x.ndim, x.size, x.dtype) == ((2, 3, 4), 3, 24, xp.float32)
    assert x.mT.shape == (2, 4, 3)
    np.testing.assert_array_equal(np.asarray(x.mT), np.swapaxes(h, -1, -2))
    np.testing.assert_array_equal(np.asarray(x[0].T), h[0].T)
    with pytest.raises(ValueError):
        _ = x.T
    assert x.__array_namespace__() is xpm
    assert xpm.__array_api_version__ == "2024.12"
    assert len(x) == 2 and "float32" in repr(x)


def test_operators(xp, rng) -> None:
    a = random_values(rng, (3, 4), np.int32, False) % 100 + 1
    b = random_values(rng, (3, 4), np.int32, False) % 7 + 1
    x, y = xp.asarray(a), xp.asarray(b)
    for got, ref in ((x + y, a + b), (x - y, a - b), (x * y, a * b), (x // y, a // b),
                     (x % y, a % b), (x & y, a & b), (x | y, a | b), (x ^ y, a ^ b),
                     (x << 2, a << 2), (x >> 1, a >> 1), (-x, -a), (+x, a), (~x, ~a),
                     (abs(-x), a), (x < y, a < b), (x <= y, a <= b), (x > y, a > b),
                     (x >= y, a >= b), (x == y, a == b), (x != y, a != b), (5 - x, 5 - a),
                     (2 ** y, 2 ** b), (100 // y, 100 // b)):
        np.testing.assert_array_equal(np.asarray(got), ref)
    np.testing.assert_allclose(np.asarray(x / y), a / b)


def test_devices(backend) -> None:
    d1 = gpumsg.open_device(0, backend=backend)
    d2 = gpumsg.open_device(0, backend=backend)
    try:
        x = xpm.asarray([1.0, 2.0], device=d1)
        y = xpm.asarray([3.0, 4.0], device=d2)
        assert x.device is d1 and y.device is d2
        with pytest.raises(InvalidMessage):
            x + y
        z = x + y.to_device(d1)
        np.testing.assert_array_equal(np.asarray(z), [4.0, 6.0])
        assert xpm.zeros(3, device=d2).device is d2
        with pytest.raises(InvalidMessage):
            xpm.asarray([1.0], device="cuda:0")
    finally:
        d1.close()
        d2.close()


def test_chain_pipelines_without_waiting(xp, dev, posted) -> None:
    """A chain of operations posts its launches without waiting; only the read waits."""
    from gpumsg.messages.nvrtc import Launch

    x = xp.asarray(np.arange(1000, dtype=np.float64))
    with xp.fusion(False):  # one launch per operation
        float(xp.sum(x * 2.0 + 1.0))  # compiles the kernels once
        launches = posted(dev, Launch)
        y = x
        for _ in range(20):
            y = y * 2.0 + 1.0
        assert len(launches) == 40
        assert not y.buffer.done() or dev.backend == "sim"
    ref = np.arange(1000, dtype=np.float64)
    for _ in range(20):
        ref = ref * 2.0 + 1.0
    np.testing.assert_array_equal(np.asarray(y), ref)


def test_a_call_is_one_message_checked_at_the_call(xp, dev, posted) -> None:
    """An element-wise call and a reduction post one message each (the new output's
    allocation travels with its launch); the kind of launch is checked once, and a freed
    input still raises at the call."""
    from gpumsg.messages import Alloc, AllocThen, Launch

    x = xp.asarray(np.arange(8, dtype=np.float32))
    y = xp.asarray(np.ones(8, dtype=np.float32))
    with xp.fusion(False):
        np.asarray(x + y)  # the kernel, compiled and its launch checked once
        float(xp.sum(x))
        sent = posted(dev, Alloc, AllocThen, Launch)
        z = x + y
        s = xp.sum(x)
        assert [type(m) for m in sent] == [AllocThen, AllocThen]
        assert all(type(m.then) is Launch for m in sent)
        np.testing.assert_array_equal(np.asarray(z), np.arange(8) + 1)
        assert float(s) == 28
        w = xp.asarray(np.ones(8, dtype=np.float32))
        w.buffer.result().free()
        with pytest.raises(gpumsg.GpuRefStale):
            x + w
        with pytest.raises(gpumsg.GpuRefStale):
            xp.sum(w)
    np.testing.assert_array_equal(np.asarray(x + y), np.arange(8) + 1)


def test_a_failed_producer_raises_at_the_read(xp, backend, monkeypatch) -> None:
    """The array answers at once; the launch's failure is raised where the value is read. A
    failed kernel poisons its device, as on a GPU (it fails closed); other devices serve on."""
    from gpumsg.array_api import _codegen

    if backend != "sim":
        pytest.skip("the failure is injected into the simulator's twin of the kernel")
    with xp.fusion(False):  # exp's own kernel, generated now
        _failed_producer(xp, _codegen, monkeypatch)


def _failed_producer(xp, _codegen, monkeypatch) -> None:
    x = xp.asarray(np.ones(4, np.float32))
    y = xp.exp(x)  # generates (and registers) the kernel
    spec = _codegen.ElementwiseSpec("exp", "out = exp(x)", (("x", xp.float32, False),),
                                    (xp.float32,), (("out", xp.float32),))
    name = _codegen.render_elementwise(spec, "contig", False)[0]
    assert name in _codegen.SIM_KERNELS

    def broken(*args):
        raise RuntimeError("injected kernel failure")

    # every exp kernel registered so far (other tests may have made some for other dtypes)
    for name in [n for n in _codegen.SIM_KERNELS if n.startswith("gm_exp_")]:
        monkeypatch.setitem(_codegen.SIM_KERNELS, name, broken)
    d2 = gpumsg.open_device(0, backend="sim")  # loads the kernel from the registry anew
    try:
        z = xpm.exp(xpm.asarray(np.ones(4, np.float32), device=d2))
        with pytest.raises(gpumsg.ContextPoisoned, match="injected"):
            np.asarray(z)
        with pytest.raises(gpumsg.GpuError):
            xpm.asarray([1.0], device=d2) + 1
    finally:
        d2.close()
    np.testing.assert_allclose(np.asarray(y), np.exp(np.ones(4, np.float32)))


def test_dlpack(xp, backend, rng) -> None:
    h = random_values(rng, (3, 4), np.float64, False)
    x = xp.asarray(h)
    dev_type, _ = x.__dlpack_device__()
    assert dev_type == (1 if backend == "sim" else 2)
    if backend == "sim":
        v = np.from_dlpack(x[:, ::2])
        np.testing.assert_array_equal(v, h[:, ::2])
        y = xp.from_dlpack(h[1])
        np.testing.assert_array_equal(np.asarray(y), h[1])


class _Asking:
    """A producer that passes the consumer's request on with ``copy`` set."""

    def __init__(self, x, copy) -> None:
        self.x, self.copy = x, copy

    def __dlpack__(self, **kwargs):
        return self.x.__dlpack__(**{**kwargs, "copy": self.copy})

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


def _consume(backend):
    """The DLPack consumer of the backend's memory, as a NumPy reader: NumPy on the simulator
    (host memory), torch on a GPU."""
    if backend == "sim":
        return np.from_dlpack
    torch = pytest.importorskip("torch")
    return lambda x: torch.from_dlpack(x).cpu().numpy()


@pytest.mark.parametrize("copy", [None, False, True])
def test_dlpack_exports_views_and_bools_where_they_lie(xp, backend, rng, copy) -> None:
    """A strided view and a bool array export where they lie (``copy=True``: alike, over a
    copy): the consumer's tensor is the view's elements (a write through a ``copy=False``
    export shows in the array), bools as
    DLPack booleans; a view with negative strides (torch refuses them) is compacted unless
    ``copy=False``."""
    consume = _consume(backend)
    h = random_values(rng, (6, 8), np.float32, False)
    x = xp.asarray(h)
    views = {"rows and steps": (x[1:5, ::3], h[1:5, ::3]), "transpose": (x.T, h.T),
             "one row": (x[2], h[2]), "column": (x[:, 5], h[:, 5]),
             "bools": (x > 0, h > 0), "bool view": ((x > 0)[::2, 1:], (h > 0)[::2, 1:])}
    if copy is not False:
        views["flipped"] = (xp.flip(x, axis=1), h[:, ::-1])
    for name, (view, want) in views.items():
        got = consume(_Asking(view, copy))
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    if backend == "sim" and copy is False:  # the same memory: a write shows in the array
        v = np.from_dlpack(_Asking(x[1:3, ::2], False))
        v[...] = -1.0
        h[1:3, ::2] = -1.0
        np.testing.assert_array_equal(np.asarray(x), h)


def test_dlpack_imports_booleans_as_bools(xp, dev, backend, rng) -> None:
    """A producer's booleans (kDLBool) are adopted without a copy as a u8 buffer of 0s and 1s,
    which an array reads as bool (NumPy's on the simulator, torch's on a GPU)."""
    from gpumsg.client._dlpack import holds_bools

    h = random_values(rng, (37,), np.float64, False) > 0
    if backend == "sim":
        producer = h
    else:
        torch = pytest.importorskip("torch")
        producer = torch.from_numpy(h).cuda()
    buf = dev.from_dlpack(producer).result()
    assert buf.dtype == np.uint8 and holds_bools(buf)
    np.testing.assert_array_equal(dev.copy_to_host(buf).result(), h.astype(np.uint8))
    a = xp.from_dlpack(producer)
    assert a.dtype == xp.bool
    np.testing.assert_array_equal(np.asarray(a), h)
    assert not holds_bools(dev.from_dlpack(h.astype(np.uint8) if backend == "sim" else
                                           producer.to(torch.uint8)).result())


def test_dlpack_copy_as_numpy_takes_it(xp, backend, rng) -> None:
    h = random_values(rng, (3, 4), np.float64, False)
    x = xp.asarray(h)
    with pytest.raises(TypeError):  # asked for its truth value, as NumPy asks
        x.__dlpack__(copy=xp.ones(2))
    if backend == "sim":  # a true copy= exports a copy: writing to it leaves x as it was
        v = np.from_dlpack(HostCapsule(x.__dlpack__(max_version=(1, 0), copy=1)))
        v[...] = 0.0
        np.testing.assert_array_equal(np.asarray(x), h)


def test_inspection(xp) -> None:
    info = xp.__array_namespace_info__()
    assert info.default_device() is xp.default_device()
    assert info.default_dtypes()["real floating"] == xp.float64
    assert set(info.dtypes(kind="signed integer")) == {"int8", "int16", "int32", "int64"}
    assert "bool" in info.dtypes()
    assert xp.isdtype(xp.float32, "real floating") and xp.isdtype(xp.int8, "numeric")
    assert not xp.isdtype(xp.bool, ("integral", "real floating"))
    assert xp.result_type(xp.int8, xp.uint8) == xp.int16
    assert xp.can_cast(xp.int8, xp.int64) and not xp.can_cast(xp.float64, xp.float32)
    assert xp.finfo(xp.float32).eps == np.finfo(np.float32).eps
    assert xp.iinfo(xp.uint16).max == 65535


@pytest.mark.parametrize("producer_fails", [True, False], ids=["failed", "succeeded"])
def test_a_read_that_finds_the_buffer_stale_raises_the_producers_error(
        xp, monkeypatch, producer_fails: bool) -> None:
    """A producer whose failure poisons the device after the read looked at it (still
    running) but before the copy was posted: the copy finds the buffer stale, and the read
    raises the producer's own error (its cause), not the staleness it left behind; a stale
    buffer whose producer succeeded stays GpuRefStale."""
    import threading
    from concurrent.futures import Future

    from gpumsg.array_api._array import Array

    dev = xp.asarray(np.ones(2, np.float32)).device
    fut: Future = Future()  # the producer's, still running
    x = Array(fut, (4,), xp.float32, dev)

    def stale(*args, **kwargs):
        if producer_fails:
            threading.Timer(0.05, fut.set_exception,
                            [gpumsg.ContextPoisoned("injected kernel failure")]).start()
        else:
            fut.set_result(None)
        raise gpumsg.GpuRefStale("buffer #1 is stale: the device was rebuilt")

    monkeypatch.setattr(dev, "copy_to_host", stale)
    with pytest.raises(gpumsg.ContextPoisoned if producer_fails else gpumsg.GpuRefStale,
                       match="injected" if producer_fails else "stale"):
        np.asarray(x)


@contextlib.contextmanager
def _budgeted(backend: str, rng, mib: int):
    """A device whose memory budget is ``mib`` MiB, holding ``a``, 4 MiB of float32 (``h`` on
    the host): (device, h, a)."""
    with gpumsg.open_device(0, backend=backend,
                            memory=gpumsg.MemoryConfig(budget=mib << 20)) as d:
        h = random_values(rng, (1 << 20,), np.float32, False)
        yield d, h, xpm.asarray(h, device=d)


def test_a_read_of_an_array_whose_allocation_failed_raises_typed(backend, rng) -> None:
    """An output the budget refused fails every later kernel that reads it, with the cause
    named, while kernels reading only sound arrays run; nothing else is lost."""
    with _budgeted(backend, rng, 10) as (d, h, a):  # a: 4 MiB
        with xpm.fusion(False):
            b = a * 2  # 8 MiB held
            c = b + a  # a third 4 MiB: refused on the device
            head = c[:4] + 1  # a small output: its launch reads c and is refused
            sound = a[:4] + b[:4]
        with pytest.raises(gpumsg.DependencyFailed, match="OutOfBudget"):
            np.asarray(head)
        np.testing.assert_array_equal(np.asarray(sound), h[:4] + h[:4] * 2)
        np.testing.assert_array_equal(np.asarray(b), h * 2)


def test_a_failed_reduction_leaves_the_next_reductions_working(backend, rng) -> None:
    """Split reductions share a workspace of arrival counters: a reduction refused because its
    input failed leaves it as it was, so later reductions on the device still answer."""
    with _budgeted(backend, rng, 10) as (d, h, a):  # a: 4 MiB: a split reduction
        with xpm.fusion(False):
            b = a * 2
            c = b + a  # refused on the device: the budget is spent
            total = xpm.sum(c)
            del c
            later = [xpm.sum(a), xpm.max(a), xpm.sum(b)]
        with pytest.raises(gpumsg.DependencyFailed, match="OutOfBudget"):
            float(total)
        want = [h.astype(np.float64).sum(), h.max(), 2 * h.astype(np.float64).sum()]
        for got, ref in zip(later, want):
            np.testing.assert_allclose(float(got), ref, rtol=1e-4, atol=1e-2)


def test_a_reduction_of_a_failed_factorization_leaves_later_reductions_working(xp) -> None:
    """The same through a verdict decided at completion: the reduction of a Cholesky factor of a
    matrix that is not positive definite is gated on the factorization's check, and its failure
    must not reach the workspace the reduction shares with later ones."""
    n = 1024  # a split reduction: it uses the device's workspace
    with xp.fusion(False):
        factor = xp.linalg.cholesky(xp.asarray(-np.eye(n, dtype=np.float32)))
        total = xp.sum(factor)
        ones = xp.asarray(np.ones((n, n), np.float32))
        later = xp.sum(ones)
        with pytest.raises(gpumsg.GpuError):
            float(total)
        assert float(later) == n * n
        assert float(xp.sum(ones)) == n * n


def test_a_refused_workspace_is_made_again(backend, rng) -> None:
    """The first split reduction allocates the device's workspace; refused (the budget is
    spent), it is made again by the next reduction once memory is free, rather than kept and
    failing every reduction after."""
    with _budgeted(backend, rng, 12) as (d, h, a):  # a: 4 MiB: a split reduction
        with xpm.fusion(False):
            b = a * 2
            c = a + b  # fills the budget: the workspace's allocation is refused below
            first = xpm.sum(c)
            with pytest.raises(gpumsg.GpuError, match="OutOfBudget|budget"):
                float(first)
            del b, c
            np.testing.assert_allclose(float(xpm.sum(a)), h.astype(np.float64).sum(),
                                       rtol=1e-4, atol=1e-2)
            np.testing.assert_allclose(float(xpm.max(a)), h.max())
