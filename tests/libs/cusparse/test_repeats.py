"""Repeated cuSPARSE products: a kept SpMV/SpMM message sent again with fresh inputs keeps every
check (stale or closed operands refused), repeated products replayed as CUDA graphs compute from
fresh inputs, and the CUDA handle's launchers and graphs on stand-ins for the library and the
driver.

One device per backend serves each module (opening a CUDA device per case would dominate the
GPU run)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import gpumsg
from tests.libs.cusparse._helpers import FORMATS, host, rand_sparse, upload, values
from tests.libs.harness import FakeGraphDriver, assert_close, device_still_serves, wide


def test_repeated_spmv_reuses_its_message_and_keeps_every_check(dev, rng, posted) -> None:
    """``spmv(m, x, y)`` repeated: one message, sent again as is (its checks ran when it was
    built), with fresh vector and matrix values written into the same buffers every round and
    each result checked against float64; another scalar, another y or another matrix over the
    same buffers is a message of its own; a freed x, a freed matrix, a freed buffer under a
    matrix are refused at the call after the message was kept, and the device still serves."""
    n = 40
    a = rand_sparse(rng, n, n, 0.2, "f64")
    val = dev.to_device(a.data).result()
    ptr = dev.to_device(a.indptr.astype(np.int32)).result()
    idx = dev.to_device(a.indices.astype(np.int32)).result()
    mat = dev.cusparse.from_buffers("csr", (n, n), ptr, idx, val)
    x, y = dev.alloc(n, np.float64).result(), dev.alloc(n, np.float64).result()
    sent = posted(dev, gpumsg.messages.SpMV)
    for _ in range(4):
        hx, hy, hv = values(rng, n, "f64"), values(rng, n, "f64"), values(rng, a.nnz, "f64")
        for buf, h in ((x, hx), (y, hy), (val, hv)):
            dev.copy_from_host(buf, h)
        assert dev.cusparse.spmv(mat, x, y, 0.5, -2.0).result(timeout=60) is y
        dense = sp.csr_matrix((hv, a.indices, a.indptr), shape=(n, n)).toarray()
        assert_close(host(dev, y), 0.5 * (dense @ hx) - 2.0 * hy, "f64", 10)
    assert len(sent) == 4 and all(m is sent[0] for m in sent)
    # another scalar, another y: messages of their own, results right
    y2 = dev.alloc(n, np.float64).result()
    dev.cusparse.spmv(mat, x, y2, 1.5)
    dev.cusparse.spmv(mat, x, y2, 1.5)
    assert sent[4] is sent[5] and sent[4] is not sent[0] and sent[4].y is y2.ref
    assert_close(host(dev, y2), 1.5 * (dense @ hx), "f64", 10)
    # two matrices over the same buffers, called with the same vectors and arguments: the CSC
    # reading of the CSR arrays is the transpose. Never one message for both
    tr = dev.cusparse.from_buffers("csc", (n, n), ptr, idx, val)
    for _ in range(2):
        dev.cusparse.spmv(mat, x, y, 2.0)
        assert_close(host(dev, y), 2.0 * (dense @ hx), "f64", 10)
        dev.cusparse.spmv(tr, x, y, 2.0)
        assert_close(host(dev, y), 2.0 * (dense.T @ hx), "f64", 10)
    assert sent[-1] is not sent[-2] and sent[-1].a is tr.sparse_ref
    short = dev.alloc(7, np.float64).result()
    for _ in range(2):  # a call that fails its checks is never kept: refused every time
        with pytest.raises(gpumsg.InvalidMessage) as info:
            dev.cusparse.spmv(mat, x, short, 2.0)
        assert info.value.field == "y"
    # refusals at the call site of a kept message
    tr.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(tr, x, y, 2.0)
    x.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(mat, x, y, 2.0)
    x = dev.to_device(hx).result()
    assert_close(host(dev, dev.cusparse.spmv(mat, x, y, 2.0)), 2.0 * (dense @ hx), "f64", 10)
    val.free().result(timeout=60)  # a buffer the matrix is made of (from_buffers: the caller's)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmv(mat, x, y, 2.0)
    device_still_serves(dev)


def test_repeated_spmm_reuses_its_message_and_keeps_every_check(dev, rng, posted) -> None:
    """``spmm(m, b, c)`` repeated: one message, fresh inputs every round checked against
    float64; another op is another message; a freed matrix or a freed b is refused at the call
    after the message was kept."""
    m, n, k = 30, 20, 4
    a = rand_sparse(rng, m, n, 0.2, "c64")
    mat = dev.cusparse.coo(a)
    b = dev.alloc((n, k), np.complex64, order="C").result()
    c = dev.alloc((m, k), np.complex64, order="C").result()
    sent = posted(dev, gpumsg.messages.SpMM)
    for _ in range(3):
        hb, hc = (values(rng, s[0] * s[1], "c64").reshape(s) for s in ((n, k), (m, k)))
        dev.copy_from_host(b, hb)
        dev.copy_from_host(c, hc)
        dev.cusparse.spmm(mat, b, c, 1 - 1j, 0.5)
        ref = (1 - 1j) * (wide(a.toarray()) @ wide(hb)) + 0.5 * wide(hc)
        assert_close(host(dev, c), ref, "c64", 10)
    assert len(sent) == 3 and sent[0] is sent[1] is sent[2]
    ct = dev.alloc((n, k), np.complex64, order="C").result()
    hm = values(rng, m * k, "c64").reshape(m, k)
    dev.copy_from_host(c, hm)
    dev.cusparse.spmm(mat, c, ct, op="C")
    assert sent[-1] is not sent[0]
    assert_close(host(dev, ct), wide(a.toarray()).conj().T @ wide(hm), "c64", 10)
    b.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmm(mat, b, c, 1 - 1j, 0.5)
    mat.free().result(timeout=60)
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cusparse.spmm(mat, c, ct, op="C")
    device_still_serves(dev)


def test_kept_sparse_messages_are_refused_when_stale_or_closed(dev, rng) -> None:
    """A kept SpMV message on a device whose generation moved (a rebuilt context) or that
    closed is refused at the call site: GpuRefStale, DeviceClosed."""
    d = gpumsg.open_device(0, backend=dev.backend)
    try:
        mat = d.cusparse.csr(rand_sparse(rng, 10, 10, 0.3, "f32"))
        x, y = d.to_device(values(rng, 10, "f32")).result(), d.alloc(10, np.float32).result()
        for _ in range(2):
            d.cusparse.spmv(mat, x, y).result(timeout=60)
        d.synchronize().result(timeout=60)
        d._state.bump()  # as a context rebuild would (process isolation)
        with pytest.raises(gpumsg.GpuRefStale):
            d.cusparse.spmv(mat, x, y)
    finally:
        d.close()
    with pytest.raises(gpumsg.DeviceClosed):
        d.cusparse.spmv(mat, x, y)


@pytest.mark.parametrize("fmt", FORMATS)
def test_repeated_products_are_replayed_with_fresh_inputs(dev, rng, fmt: str) -> None:
    """SpMV (beta 0 and not) and SpMM repeated on the same buffers: on the GPU the second call
    is captured as a CUDA graph and later ones replay it. Fresh vector and matrix values are
    written before every round and every result is checked against float64, so a replay that
    read stale scalars, another vector or a destroyed matrix's arrays fails. A matrix destroyed
    and another made (which may get its workspace's and descriptor's addresses) replays its
    own call."""
    m, n, k = 48, 36, 3
    dtype = "f32"
    before = dev.cusparse.replay_info().result(timeout=60)
    for _life in range(2):
        a = rand_sparse(rng, m, n, 0.15, dtype)
        mat = upload(dev, a, fmt, "i32")
        _, _, vbuf = mat.buffers
        x, y, z = dev.alloc(n, np.float32), dev.alloc(m, np.float32), dev.alloc(m, np.float32)
        b = dev.alloc((n, k), np.float32, order="C")
        c = dev.alloc((m, k), np.float32, order="C")
        nvals = vbuf.ref.size
        for _ in range(4):
            dev.copy_from_host(vbuf, values(rng, nvals, dtype))  # new values, same pattern
            hx, hy = values(rng, n, dtype), values(rng, m, dtype)
            hb = values(rng, n * k, dtype).reshape(n, k)
            hc = values(rng, m * k, dtype).reshape(m, k)
            for buf, h in ((x, hx), (y, hy), (b, hb), (c, hc)):
                dev.copy_from_host(buf, h)
            dev.cusparse.spmv(mat, x, y, 0.75, -0.5)
            dev.cusparse.spmv(mat, x, z)
            dev.cusparse.spmm(mat, b, c, 2.0, 0.25)
            dense = wide(mat.to_scipy().toarray())  # the values the products read
            assert_close(host(dev, y), 0.75 * (dense @ wide(hx)) - 0.5 * wide(hy), dtype, 10)
            assert_close(host(dev, z), dense @ wide(hx), dtype, 10)
            assert_close(host(dev, c), 2.0 * (dense @ wide(hb)) + 0.25 * wide(hc), dtype, 10)
        mat.free().result(timeout=60)
    info = dev.cusparse.replay_info().result(timeout=60)
    if dev.backend == "sim":
        assert info == {"enabled": False}
        return
    assert info["enabled"] and info["refused"] == "", info
    # two lives x two SpMV calls: each ran once, was captured once and replayed twice
    assert info["captures"] - before["captures"] >= 4, info
    assert info["launches"] - before["launches"] >= 8, info
    assert info["with_memory_nodes"] == 0, info  # no workspace allocated per replay
    mm = info["spmm"]
    if fmt == "csr" and mm["refused"] == "":  # (replayed where cusparseSpMM_preprocess took)
        assert mm["launches"] - before["spmm"]["launches"] >= 4, info


class _FakeCusparse:
    """Stands in for the loaded cuSPARSE library in a CusparseHandle: every function succeeds
    and is recorded; an output argument (``byref``) gets a fresh handle, or 512 for a size."""

    cusparseSpMV_preprocess = cusparseSpMM_preprocess = None  # set per test where wanted

    def __init__(self) -> None:
        import itertools

        self.calls: list[tuple[str, tuple]] = []
        self._handles = itertools.count(0x1000, 0x10)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def fn(*args):
            import ctypes

            for arg in args:
                if type(arg).__name__ == "CArgObject":
                    out = arg._obj
                    out.value = 512 if isinstance(out, ctypes.c_size_t) else next(self._handles)
            self.calls.append((name, args))
            return 0

        return fn

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


class _FakeMemory:
    def __init__(self) -> None:
        self.next, self.freed = 0x7000_0000, []

    def allocate(self, nbytes: int, stream) -> int:
        self.next += 0x1000
        return self.next

    def deallocate(self, ptr: int, nbytes: int, stream) -> None:
        self.freed.append(ptr)


def test_the_cuda_handle_keeps_a_launcher_and_replays_it(monkeypatch) -> None:
    """CusparseHandle.spmv_bound/spmm_bound on stand-ins for the library and the driver (any
    machine): a repeated launch derives nothing again, runs the library call once, captures
    it once and launches the graph from then on; scalars live at addresses that are never
    rewritten; another scalar is another graph; a released dense descriptor makes the launcher
    derive again (same graph); a destroyed matrix destroys its graphs and fails the launcher
    with InvalidMessage; a matrix made again under the same id gets graphs of its own."""
    import types

    from gpumsg.backends.cuda._replays import GraphReplays
    from gpumsg.libs.cusparse._handle import CusparseHandle

    monkeypatch.setenv("GPUMSG_SPARSE_REPLAY", "0")  # no driver here: the fakes go in below
    lib = _FakeCusparse()
    lib.cusparseSpMM_preprocess = lambda *args: lib.calls.append(("pre_mm", args)) or 0
    memory = _FakeMemory()
    stream = 77
    ctx = types.SimpleNamespace(memory=memory, capture=None,
                                compute=types.SimpleNamespace(obj=stream))
    h = CusparseHandle(ctx, lib=lib)
    drv, drv_mm = FakeGraphDriver(), FakeGraphDriver()
    h.spmv_replays = GraphReplays(drv, 64, lambda: ctx.capture is not None)
    h.spmm_replays = GraphReplays(drv_mm, 64, lambda: ctx.capture is not None)
    ref = types.SimpleNamespace(id=5, format="csr", shape=(8, 6), nnz=10, block=1,
                                dtype="f32", index_dtype="i32")
    h.create(ref, 0x100, 0x200, 0x300)
    x, y = 0x5000, 0x6000
    launch = h.spmv_bound(stream, 5, "N", 0.5, x, -1.0, y, 6, 8)
    sizes0 = dict(h.sizes.info())
    for _ in range(5):
        launch(stream)
    # the new workspace's scratch product (CusparseHandle._scratch_spmv), the plain run, then
    # the capture; the scratch vector has a descriptor of its own
    assert lib.count("cusparseSpMV") == 3
    assert lib.count("cusparseCreateDnVec") == 3 and lib.count("cusparseSpMV_bufferSize") == 1
    assert lib.count("cusparseDestroyDnVec") == 1 and len(memory.freed) == 1
    assert len(drv.launched) == 4 and h.spmv_replays.captures == 1
    info = h.sizes.info()
    assert (info["misses"] - sizes0["misses"], info["hits"] - sizes0["hits"]) == (1, 4)
    args = [a for n, a in lib.calls if n == "cusparseSpMV"][1]  # the caller's first
    pa, pb = args[2], args[5]
    import ctypes

    assert (ctypes.c_float.from_address(pa).value, ctypes.c_float.from_address(pb).value) == \
        (0.5, -1.0)
    h.spmv(stream, 5, "N", 3.0, x, 4.0, y, 6, 8)  # a plain call writes its own scalars...
    assert ctypes.c_float.from_address(pa).value == 0.5  # ...not the kept ones
    # another scalar: another launcher, another graph (same workspace)
    other = h.spmv_bound(stream, 5, "N", 2.0, x, -1.0, y, 6, 8)
    for _ in range(3):
        other(stream)
    assert h.spmv_replays.captures == 2 and len(h.spmv_replays.execs) == 2
    # a released dense descriptor: derive again, the same graph goes on
    h._vecs.resize(0)
    created = lib.count("cusparseCreateDnVec")
    launch(stream)
    assert lib.count("cusparseCreateDnVec") == created + 2
    assert h.spmv_replays.captures == 2 and len(drv.launched) == 4 + 2 + 1
    # SpMM: preprocessed workspace, replayed apart
    mm = h.spmm_bound(stream, 5, "N", 1.0, 0x8000, (6, 3), 0.0, 0x9000, (8, 3))
    for _ in range(3):
        mm(stream)
    assert lib.count("cusparseSpMM") == 2 and len(drv_mm.launched) == 2
    assert sum(1 for n, _ in lib.calls if n == "pre_mm") == 1
    # another matrix made and destroyed: nothing of this launcher's changes
    h.create(types.SimpleNamespace(**{**vars(ref), "id": 6}), 0x400, 0x500, 0x600)
    h.destroy(6)
    created = lib.count("cusparseCreateDnVec")
    launch(stream)
    assert lib.count("cusparseCreateDnVec") == created and len(drv.launched) == 4 + 2 + 2
    # destroyed: its graphs go, the launchers fail as a plain call would
    h.destroy(5)
    assert len(h.spmv_replays.execs) == 0 and len(h.spmm_replays.execs) == 0
    assert len(drv.destroyed) == 2 and len(drv_mm.destroyed) == 1
    with pytest.raises(gpumsg.InvalidMessage, match="no descriptor"):
        launch(stream)
    # made again under the same id (new descriptor, maybe the same workspace address): its
    # own graph, never the old one
    h.create(ref, 0x100, 0x200, 0x300)
    spmv_calls = lib.count("cusparseSpMV")
    for _ in range(3):
        launch(stream)
    assert lib.count("cusparseSpMV") == spmv_calls + 3 and h.spmv_replays.captures == 3
    h.close()
    assert h.raw_handle == 0


def test_a_recorded_graph_gets_no_scratch_product(monkeypatch) -> None:
    """A new SpMV workspace takes a scratch product first (CusparseHandle._scratch_spmv), except
    while a graph is recorded: the recording holds the caller's SpMV alone."""
    import types

    from gpumsg.libs.cusparse._handle import CusparseHandle

    monkeypatch.setenv("GPUMSG_SPARSE_REPLAY", "0")  # no driver here
    for capture, products in ((None, 2), (object(), 1)):
        lib = _FakeCusparse()
        ctx = types.SimpleNamespace(memory=_FakeMemory(), capture=capture,
                                    compute=types.SimpleNamespace(obj=77))
        h = CusparseHandle(ctx, lib=lib)
        ref = types.SimpleNamespace(id=5, format="csr", shape=(8, 6), nnz=10, block=1,
                                    dtype="f32", index_dtype="i32")
        h.create(ref, 0x100, 0x200, 0x300)
        h.spmv(77, 5, "N", 1.0, 0x5000, 0.0, 0x6000, 6, 8)
        assert lib.count("cusparseSpMV") == products
        assert len(ctx.memory.freed) == products - 1
