"""Repeated cuFFT executions: a kept message sent again keeps every check (refused on a closed
device or a stale buffer), a repeated execution keeps its call and follows the plan cache's
evictions, and repeated executions replayed as CUDA graphs compute from fresh inputs."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.messages.cufft import FftExec, FftPlan, FftSpec
from tests.libs.cufft._helpers import CPLX, REAL, crand, host, reference
from tests.libs.harness import assert_close, device_still_serves, wide


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


def test_a_repeated_exec_keeps_its_call_and_follows_evictions(one_stream_dev, rng) -> None:
    """The device thread keeps one derived call per message (service/derived.py), counts a hit
    per repeat, and looks the plan up again after it left the cache: every result is checked,
    so a call kept for an evicted (destroyed) plan or the wrong buffers fails."""
    dev = one_stream_dev  # per-stream bookkeeping: one compute stream
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
