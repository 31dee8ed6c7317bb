"""The per-message fast paths keep every guarantee: completion answered on the device thread or
by a watcher, in issue order, without holding the device thread behind running work; memoized
messages still check every argument; generated message constructors behave as dataclasses'."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import threading
import time
from typing import Any

import numpy as np
import pytest

import gpumsg
from gpumsg import messages
from gpumsg.messages._base import BufRef, HostRef


def test_device_thread_serves_while_long_work_runs(dev) -> None:
    buf = dev.alloc(64, np.uint8).result()
    hang = dev.inject_fault("hang", seconds=2.0)  # a kernel spins on the compute stream
    behind = dev.memset(buf, 7)  # queued on the compute stream behind the spinning kernel
    t0 = time.perf_counter()
    for _ in range(20):  # the device thread answers these at once: it is not waiting
        dev.stats().result(timeout=5)
    assert time.perf_counter() - t0 < 0.5
    assert not behind.done()
    behind.result(timeout=30)
    assert hang.done()
    assert np.array_equal(dev.copy_to_host(buf).result(), np.full(64, 7, np.uint8))
    assert dev.synchronize().result() is None
    assert dev.stats().result().ops_in_flight == 0


def test_the_device_thread_waits_for_running_work_up_to_its_settle(dev) -> None:
    """``settle_seconds`` decides who answers work that completes after the mailbox ran dry:
    the device thread itself within it, a completion thread after it (a worker process waits
    longer than a thread-isolated device: supervision/worker.py)."""
    ctx = dev._worker.ctx
    try:
        for settle, want in ((5.0, "gpumsg-device-"), (0.0, "-completion")):
            ctx.settle_seconds = settle
            names: list[str] = []
            noted = threading.Event()

            def note(_f: Any, names: list[str] = names, noted: threading.Event = noted) -> None:
                names.append(threading.current_thread().name)
                noted.set()

            f = dev.inject_fault("hang", seconds=0.1)  # done well after the batch was issued
            f.add_done_callback(note)
            f.result(timeout=30)
            assert noted.wait(30)
            assert want in names[0], (settle, names)
    finally:
        ctx.settle_seconds = gpumsg.service._context.SETTLE_SECONDS


def test_completions_answer_in_issue_order(one_stream_dev, rng) -> None:
    # one compute stream: the fills queue behind the slow batch (with a pool they would run
    # beside it, and be answered first, as they should)
    _answer_in_issue_order(one_stream_dev, rng)


def _answer_in_issue_order(dev, rng) -> None:
    buf = dev.alloc(256, np.uint8).result()
    for _ in range(3):
        order: list[int] = []
        futures = []
        stop = threading.Event()

        def busy(stop: threading.Event = stop) -> None:
            while not stop.is_set():  # keeps the device thread between batches, reaping
                dev.stats().result()

        # a slow batch, handed to the watcher once the device thread idles: the batches after it
        # must follow it there, though the device thread could answer them itself
        f = dev.inject_fault("hang", seconds=0.05)
        # a future wakes result() before it runs its callbacks: count the callbacks themselves
        appended = threading.Semaphore(0)

        def note(i: int, order: list[int] = order,
                 appended: threading.Semaphore = appended) -> None:
            order.append(i)
            appended.release()

        f.add_done_callback(lambda _f: note(0))
        futures.append(f)
        time.sleep(0.01)
        spinner = threading.Thread(target=busy)
        spinner.start()
        try:
            for i in range(1, 200):
                f = dev.memset(buf, int(rng.integers(1, 255)))
                f.add_done_callback(lambda _f, i=i: note(i))
                futures.append(f)
            for f in futures:
                f.result(timeout=60)
        finally:
            stop.set()
            spinner.join()
        assert all(appended.acquire(timeout=30) for _ in range(200))
        assert order == sorted(order) and len(order) == 200
    load = dev.stats().result()
    assert load.ops_in_flight == 0 and load.ops_completed >= 600


def test_repeated_sgemm_keeps_every_check(dev, rng) -> None:
    host = [rng.standard_normal((16, 16)).astype(np.float32, order="F") for _ in range(2)]
    a, b = (dev.to_device(h) for h in host)
    c = dev.alloc((16, 16), np.float32)
    d = dev.alloc((16, 16), np.float32)
    ref = host[0].astype(np.float64) @ host[1]
    for _ in range(3):  # the same call again: the memoized message
        dev.sgemm(a, b, c, 16, 16, 16).result()
    with pytest.raises(gpumsg.InvalidMessage, match="m"):
        dev.sgemm(a, b, c, True, 16, 16)  # equal to 1 as a key, still refused
    with pytest.raises(gpumsg.InvalidMessage, match="alpha"):
        dev.sgemm(a, b, c, 16, 16, 16, alpha=float("nan"))
    with pytest.raises(gpumsg.InvalidMessage, match="alias"):
        dev.sgemm(a, b, a, 16, 16, 16)
    dev.sgemm(a, b, d, 16, 16, 16, alpha=2.0).result()  # another output, another scale
    np.testing.assert_allclose(dev.copy_to_host(c).result(), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dev.copy_to_host(d).result(), 2 * ref, rtol=1e-4, atol=1e-4)
    c.result().free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.sgemm(a, b, c, 16, 16, 16)
    assert dev.stats().result().generation == dev.generation  # the device still serves


def test_repeated_gemms_reuse_their_message_and_keep_every_check(dev, rng, posted) -> None:
    """dev.cublas.gemm / gemm_strided_batched through MessageMemo: the same call sends the same
    message; a float where an int belongs, a bool, a freed buffer are still refused at the call
    even after the int-typed call was memoized."""
    batch, s = 3, 8
    host = [rng.standard_normal((batch, s, s)).astype(np.float32) for _ in range(2)]
    a, b = (dev.to_device(h).result() for h in host)
    c = dev.alloc((batch, s, s), np.float32, order="C").result()
    sent = posted(dev, messages.GemmStridedBatched, messages.Gemm)
    for _ in range(3):
        dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s).result()
    assert sent[0] is sent[1] is sent[2]
    with pytest.raises(gpumsg.InvalidMessage, match="m"):
        dev.cublas.gemm_strided_batched(b, a, c, float(s), s, s, batch, s * s, s * s, s * s)
    with pytest.raises(gpumsg.InvalidMessage, match="batch"):
        dev.cublas.gemm_strided_batched(b, a, c, s, s, s, True, s * s, s * s, s * s)
    dev.cublas.gemm_strided_batched(b, a, c, s, s, s, batch, s * s, s * s, s * s,
                                    alpha=2.0).result()
    assert sent[-1] is not sent[0] and sent[-1].alpha == 2.0
    ref = 2 * np.einsum("bij,bjk->bik", host[0].astype(np.float64), host[1])
    np.testing.assert_allclose(dev.copy_to_host(c).result(), ref, rtol=1e-4, atol=1e-4)
    m = host[0][0].astype(np.float32, order="F")
    g = dev.to_device(m).result()
    out = dev.alloc((s, s), np.float32).result()
    for _ in range(2):
        dev.cublas.gemm(g, g, out, s, s, s).result()
    assert sent[-1] is sent[-2]
    np.testing.assert_allclose(dev.copy_to_host(out).result(), m.astype(np.float64) @ m,
                               rtol=1e-4, atol=1e-4)
    out.free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cublas.gemm(g, g, out, s, s, s)
    assert dev.stats().result().generation == dev.generation  # the device still serves


def test_a_repeated_call_skips_the_screening_but_not_a_refusal(dev, backend, rng,
                                                               posted) -> None:
    """Device._send_entry: a memoized message screened once at this generation goes straight to
    the mailbox on later calls; one that failed its screening (a buffer of another device) is
    screened, and refused, at every call; so is every call while a graph records."""
    xh, yh = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    x, y = dev.to_device(xh).result(), dev.to_device(yh).result()
    screened = []
    real_screen = dev._screen
    dev._screen = lambda msg: screened.append(msg) or real_screen(msg)  # type: ignore[method-assign]
    try:
        sent = posted(dev, messages.Dot)
        got = [dev.cublas.dot(x, y).result() for _ in range(3)]
        assert len(sent) == 3 and sent[0] is sent[1] is sent[2]
        assert len(screened) == 1
        ref = float(np.dot(xh.astype(np.float64), yh))
        assert all(abs(g - ref) < 1e-4 * np.sqrt(xh.size) for g in got)
        with gpumsg.open_device(0, backend=backend) as other:
            z = other.to_device(yh).result()
            for _ in range(2):
                with pytest.raises(gpumsg.InvalidMessage, match="another device"):
                    dev.cublas.dot(x, z)
        assert len(screened) == 3
        w = dev.to_device(yh).result()
        dev.cublas.axpy(x, w, 0.5).result()  # kept, screened
        with dev.graph() as g:
            dev.cublas.axpy(x, w, 0.5)
        assert [type(m).__name__ for m in screened].count("Axpy") == 2  # and when recorded
        g.launch().result()
        g.close()
        np.testing.assert_allclose(dev.copy_to_host(w).result(), yh + xh.astype(np.float64),
                                   rtol=1e-5, atol=1e-5)
    finally:
        del dev._screen
    assert abs(dev.cublas.dot(x, y).result() - ref) < 1e-4 * np.sqrt(xh.size)


def test_repeated_lt_matmuls_reuse_their_message_and_keep_every_check(dev, rng, posted) -> None:
    """dev.cublaslt.matmul through MessageMemo.entry with a build (its buffers are not Matmul's
    leading fields): the same call sends the same message; another bias buffer, another
    epilogue or a freed bias is a message of its own or refused at the call."""
    m, n, k = 12, 10, 8
    ha, hb = (rng.standard_normal(s).astype(np.float32, order="F") for s in ((k, m), (k, n)))
    hbias = [rng.standard_normal(m).astype(np.float32) for _ in range(2)]
    a, b = dev.to_device(ha).result(), dev.to_device(hb).result()
    bias = [dev.to_device(h).result() for h in hbias]
    d = dev.alloc((m, n), np.float32, order="F").result()
    sent = posted(dev, messages.Matmul)
    for _ in range(3):
        dev.cublaslt.matmul(a, b, d, m, n, k, transa="T", epilogue="bias",
                            bias=bias[0]).result()
    assert sent[0] is sent[1] is sent[2]
    ref = ha.T.astype(np.float64) @ hb
    np.testing.assert_allclose(dev.copy_to_host(d).result(), ref + hbias[0][:, None],
                               rtol=1e-4, atol=1e-4)
    dev.cublaslt.matmul(a, b, d, m, n, k, transa="T", epilogue="relu_bias",
                        bias=bias[1]).result()
    assert sent[-1] is not sent[0] and sent[-1].bias is bias[1].ref
    np.testing.assert_allclose(dev.copy_to_host(d).result(),
                               np.maximum(ref + hbias[1][:, None], 0), rtol=1e-4, atol=1e-4)
    with pytest.raises(gpumsg.InvalidMessage, match="m"):
        dev.cublaslt.matmul(a, b, d, float(m), n, k, transa="T", epilogue="bias",
                            bias=bias[0])
    bias[0].free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.cublaslt.matmul(a, b, d, m, n, k, transa="T", epilogue="bias", bias=bias[0])
    assert dev.stats().result().generation == dev.generation  # the device still serves


def test_the_memo_keys_on_argument_types_and_buffer_identity() -> None:
    from gpumsg.messages._memo import MessageMemo

    built = []

    @dataclasses.dataclass(frozen=True)
    class Probe(messages.Message):
        a: Any
        n: Any

        def __post_init__(self) -> None:
            built.append(self)

    memo = MessageMemo(size=2)
    ref = BufRef(1, 2, 0, "f32", (3,), "C", 12)
    other = BufRef(1, 3, 0, "f32", (3,), "C", 12)
    first = memo.message(Probe, (ref,), (1,))
    assert memo.message(Probe, (ref,), (1,)) is first
    assert memo.message(Probe, (ref,), (1.0,)) is not first  # 1 == 1.0, but not the same call
    assert memo.message(Probe, (other,), (1,)) is not first
    assert len(built) == 3
    true = memo.message(Probe, (ref,), (True,))  # True == 1, but not the same call
    assert true is not first and memo.message(Probe, (ref,), (True,)) is true
    assert len(built) == 4
    memo.message(Probe, (ref,), ((1, 2),))
    kept = built[-1]
    assert memo.message(Probe, (ref,), ((1, 2),)) is kept and len(built) == 5
    # (1.0, 2) == (1, 2), but the key writes each item with its type: another call
    assert memo.message(Probe, (ref,), ((1.0, 2),)) is not kept and len(built) == 6
    memo.message(Probe, (ref,), ([1, 2],))  # a list: built every time, never kept
    memo.message(Probe, (ref,), ([1, 2],))
    assert len(built) == 8
    zero = memo.message(Probe, (ref,), (0.0,))
    assert memo.message(Probe, (ref,), (0.0,)) is zero
    assert memo.message(Probe, (ref,), (-0.0,)) is not zero  # -0.0 == 0.0, another call
    assert len(built) == 10
    for odd in (np.float64(0.0), np.int64(1), object()):  # not plain: built every time
        memo.message(Probe, (ref,), (odd,))
        memo.message(Probe, (ref,), (odd,))
    assert len(built) == 16
    c = memo.message(Probe, (ref,), (1 + 0j,))  # complex scalars key by value and type
    assert memo.message(Probe, (ref,), (1 + 0j,)) is c and len(built) == 17
    assert memo.message(Probe, (ref,), (1.0,)) is not c  # 1.0 == 1+0j, another call
    assert memo.message(Probe, (ref,), (complex(1, -0.0),)) is not c  # nor is 1-0j
    assert len(built) == 19
    assert len(memo._memo) <= 2  # bounded


def test_the_memo_keeps_only_messages_that_hold_their_references() -> None:
    """A message that replaces a buffer field is never kept: its key's ids could be reused."""
    from gpumsg.messages._memo import MessageMemo

    built = []

    @dataclasses.dataclass(frozen=True)
    class Copying(messages.Message):
        a: Any
        n: Any

        def __post_init__(self) -> None:
            object.__setattr__(self, "a", dataclasses.replace(self.a))
            built.append(self)

    memo = MessageMemo()
    ref = BufRef(1, 2, 0, "f32", (3,), "C", 12)
    memo.message(Copying, (ref,), (1,))
    memo.message(Copying, (ref,), (1,))
    assert len(built) == 2 and not memo._memo


def _message_classes() -> list[type]:
    out = [BufRef, HostRef]
    for name in dir(messages):
        cls = getattr(messages, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            out.append(cls)
    return out


@pytest.mark.parametrize("cls", _message_classes(), ids=lambda c: c.__name__)
def test_generated_constructor_has_the_dataclass_signature(cls: type) -> None:
    fields = [f for f in dataclasses.fields(cls) if f.init]
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields):
        expected = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == expected or (p.default is expected)


def test_generated_constructor_validates_and_pickles() -> None:
    ref = BufRef(1, 2, 0, "f32", (3, 4), "F", 48)
    assert ref.size == 12 and BufRef(owner=1, id=2, generation=0, dtype="f32", shape=(3, 4),
                                     order="F", nbytes=48) == ref
    assert pickle.loads(pickle.dumps(ref)) == ref
    with pytest.raises(gpumsg.InvalidMessage, match="pool"):
        HostRef("elsewhere", 1, 0, 8)
    msg = messages.Sgemm(ref, BufRef(1, 3, 0, "f32", (4, 5), "F", 80),
                         BufRef(1, 4, 0, "f32", (3, 5), "F", 60), 3, 5, 4, beta=1)
    assert msg.lda == 3 and msg.beta == 1.0 and type(msg.beta) is float
    assert pickle.loads(pickle.dumps(msg)) == msg
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.m = 7  # type: ignore[misc]


def test_reduction_slots_are_given_back_once() -> None:
    with gpumsg.open_device(0, backend="sim") as dev:
        x = dev.to_device(np.arange(1.0, 65.0, dtype=np.float32)).result()
        for _ in range(5):
            assert dev.cublas.dot(x, x).result() == float(np.sum(np.arange(1.0, 65.0) ** 2))
        scratch = dev._worker.ctx.scratch
        free = list(scratch._free)
        assert len({id(s) for s in free}) == len(free)
        n = len(free)
        assert dev.cublas.nrm2(x).result() == pytest.approx(np.linalg.norm(np.arange(1.0, 65.0)))
        dev.synchronize().result()
        assert len(scratch._free) == n


def test_empty_and_small_downloads(dev, rng) -> None:
    empty = dev.alloc(0, np.float32).result()
    out = dev.copy_to_host(empty).result()
    assert out.shape == (0,) and out.dtype == np.float32
    x = rng.standard_normal(256).astype(np.float32)
    buf = dev.to_device(x).result()
    for _ in range(3):
        got = dev.copy_to_host(buf).result()
        assert np.array_equal(got, x)


def test_posts_racing_close_are_answered_or_refused() -> None:
    for _ in range(5):
        dev = gpumsg.open_device(0, backend="sim")
        put = dev._put

        def slow_put(item: tuple, put=put) -> None:  # widens the window between check and put
            time.sleep(0.002)
            put(item)

        dev._put = slow_put
        futures: list = []
        refused = [0]
        go = threading.Event()

        def client(futures: list = futures, refused: list = refused, go=go, dev=dev) -> None:
            go.wait()
            while True:
                try:
                    futures.append(dev.stats())
                except gpumsg.DeviceClosed:
                    refused[0] += 1
                    return

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        go.set()
        time.sleep(0.02)
        dev.close()
        for t in threads:
            t.join(timeout=30)
        assert refused[0] == 4
        for f in futures:  # none is left unanswered behind the STOP message
            try:
                assert f.result(timeout=10).total_bytes > 0
            except gpumsg.DeviceClosed:
                pass


def test_the_device_memo_keys_on_message_identity_and_stamp() -> None:
    """DerivedMemo (service/derived.py): a value is built once per message object and stamp; an
    equal but distinct message, or another stamp, builds anew; it stays bounded. ``by_value``
    keys by plain values; ``once`` builds without keeping."""
    from gpumsg.service._derived import DerivedMemo

    memo, built = DerivedMemo(size=4), []

    def build(tag: str) -> Any:
        built.append(tag)
        return object()

    ref = BufRef(1, 2, 0, "f32", (3,), "C", 12)
    one, same = messages.Free(ref), messages.Free(ref)
    assert one == same and one is not same
    kept = memo.get(one, (1, 2), lambda: build("a"))
    assert memo.get(one, (1, 2), lambda: build("b")) is kept and built == ["a"]
    assert memo.get(same, (1, 2), lambda: build("c")) is not kept  # another object
    assert memo.get(one, (1, 3), lambda: build("d")) is not kept  # another stamp
    assert built == ["a", "c", "d"]
    for i in range(10):
        memo.get(messages.Free(ref), i, lambda: build("e"))
    assert len(memo) <= 4
    # by value: the same key finds what the first built, whatever the message; bounded too
    built.clear()
    first = memo.by_value(("t", 1, 2.0), lambda: build("f"))
    assert memo.by_value(("t", 1, 2.0), lambda: build("g")) is first and built == ["f"]
    assert memo.by_value(("t", 1, 3.0), lambda: build("h")) is not first
    for i in range(10):
        memo.by_value(("t", i), lambda: build("i"))
    assert len(memo._values) <= 4
    # a message that is never sent again (an AllocThen's): built every time, nothing kept
    built.clear()
    memo.once = True
    size = len(memo)
    fresh = messages.Free(ref)
    assert memo.get(fresh, 0, lambda: build("j")) is not memo.get(fresh, 0, lambda: build("k"))
    assert built == ["j", "k"] and len(memo) == size


def test_repeated_copies_and_fills_reuse_their_message_and_keep_every_check(dev, backend, rng,
                                                                             posted) -> None:
    """dev.copy and dev.memset go through the device's memo: a repeated call posts the same
    message; other offsets or values build their own; a freed buffer, a buffer of another
    device and a closed device are refused at the call."""
    h = rng.standard_normal(1024).astype(np.float32)
    src, dst = dev.to_device(h).result(), dev.alloc(1024, np.float32).result()
    sent = posted(dev, messages.CopyDevice, messages.Memset)
    for _ in range(2):
        dev.memset(dst, 0xFF).result()
        dev.copy_bytes(dst, src, 2048).result()
    assert sent[0] is sent[2] and sent[1] is sent[3] and sent[0] is not sent[1]
    got = dev.copy_to_host(dst).result()
    np.testing.assert_array_equal(got[:512], h[:512])
    assert np.all(got[512:].view(np.uint32) == 0xFFFFFFFF)
    dev.copy_bytes(dst, src, 2048, dst_offset=2048).result()
    dev.memset(dst, 0, nbytes=1024).result()
    assert len({id(m) for m in sent}) == 4
    got = dev.copy_to_host(dst).result()
    assert np.all(got[:256] == 0)
    np.testing.assert_array_equal(got[256:512], h[256:512])
    np.testing.assert_array_equal(got[512:], h[:512])
    with pytest.raises(gpumsg.InvalidMessage, match="dst_offset"):
        dev.copy_bytes(dst, src, 2048, dst_offset=4096)  # past the end, refused at the call
    with gpumsg.open_device(0, backend=backend) as other:
        far = other.to_device(h).result()
        for _ in range(2):
            with pytest.raises(gpumsg.InvalidMessage, match="another device"):
                dev.copy_bytes(dst, far, 2048)
    src.free().result()
    with pytest.raises(gpumsg.GpuRefStale):
        dev.copy_bytes(dst, src, 2048)
    with gpumsg.open_device(0, backend=backend) as short:
        a = short.alloc(16, np.float32).result()
        short.memset(a, 1).result()
    with pytest.raises(gpumsg.DeviceClosed):
        short.memset(a, 1)
    assert dev.stats().result().generation == dev.generation  # the device still serves


def test_repeated_copies_are_replayed_with_fresh_data(dev, backend, rng) -> None:
    """On the GPU a repeated copy is captured as a CUDA graph the second time and launched
    after (DeviceContext.driver_bound); fills are issued as they are. Fresh data goes into
    the source before every round and the destination is checked each time, so a replay that
    copied stale bytes, or to another place, fails. A zero-byte copy issues nothing and is
    answered; so is a zero-byte fill."""
    src, dst = dev.alloc(2048, np.float32).result(), dev.alloc(2048, np.float32).result()
    for rnd in range(5):
        h = rng.standard_normal(2048).astype(np.float32)
        dev.copy_from_host(src, h)
        dev.memset(dst, 0x7F, nbytes=4096)
        dev.copy_bytes(dst, src, 4096, dst_offset=4096, src_offset=4096)
        got = dev.copy_to_host(dst).result()
        assert np.all(got[:1024].view(np.uint32) == 0x7F7F7F7F), rnd
        np.testing.assert_array_equal(got[1024:], h[1024:], err_msg=str(rnd))
    dev.copy_bytes(dst, src, 0).result()
    dev.memset(dst, 0, nbytes=0).result()
    np.testing.assert_array_equal(dev.copy_to_host(dst).result()[1024:], h[1024:])
    dev.synchronize().result()
    info = dev._worker.ctx.driver_replay_info()  # read while the device thread is idle
    if backend == "sim":
        assert info == {"enabled": False}
        return
    # the copy: round 1 as usual, round 2 captured and launched, 3-5 launched (fills are
    # issued as they are)
    assert info["enabled"] and info["refused"] == "", info
    assert info["captures"] == 1 and info["launches"] == 4, info
    assert info["with_memory_nodes"] == 0, info
