"""The poisoning scenario, shared by the in-process (simulator) test and the subprocess (GPU)
test: a sticky fault fails pending work, bumps the generation, and refuses new work. The
device has one compute stream, so that the work sent after the fault is queued behind it
(with a pool, independent work may run, and be answered, on another stream first)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import gpumsg


@contextmanager
def _one_stream() -> Iterator[None]:
    """Devices opened inside have one compute stream, whatever ``GPUMSG_STREAMS`` says (the
    environment overrides a configured value; the pool size is read when a device opens)."""
    saved = os.environ.pop("GPUMSG_STREAMS", None)
    try:
        with gpumsg.config.configured(streams=1):
            yield
    finally:
        if saved is not None:
            os.environ["GPUMSG_STREAMS"] = saved


def check(backend) -> None:
    with _one_stream():
        dev = gpumsg.open_device(0, backend=backend, allow_fault_injection=True)
    watch = dev.watch_generation()
    x = np.arange(1000.0)
    buf = dev.to_device(x).result()
    before = dev.copy_to_host(buf).result()
    assert np.array_equal(before, x)
    dev.inject_fault("hang", seconds=0.3)  # keep compute busy: what follows stays pending
    fault = dev.inject_fault("illegal_address")
    pending = [dev.memset(buf, 1) for _ in range(5)] + [dev.copy_to_host(buf)]
    for f in [fault, *pending]:
        try:
            f.result(timeout=60)
        except gpumsg.ContextPoisoned as exc:
            assert exc.code == 700, exc.code
        else:
            raise AssertionError("pending work after the fault must fail")
    assert watch.result(timeout=10) == 1
    assert dev.generation == 1
    try:
        dev.stats()
    except gpumsg.ContextPoisoned as exc:
        assert "isolation='process'" in str(exc), str(exc)
    else:
        raise AssertionError("a poisoned device must refuse new work")
    assert buf.is_stale()
    try:
        _ = buf.ref
    except gpumsg.GpuRefStale:
        pass
    else:
        raise AssertionError("buffers of a poisoned device are stale")
    dev.close(timeout=30)


def check_pinned_copy(backend) -> None:
    """A copy into a pinned array, queued behind a sticky fault, fails with ContextPoisoned."""
    rng = np.random.default_rng()
    with _one_stream():
        dev = gpumsg.open_device(0, backend=backend, allow_fault_injection=True)
    with dev:
        pinned = dev.alloc_pinned((64,), np.float32).result()
        buf = dev.to_device(rng.standard_normal(64).astype(np.float32)).result()
        # keep compute busy, so that the fault is seen only after the copy was posted (else
        # the copy may be refused at the call, and the test would not cover its answer)
        dev.inject_fault("hang", seconds=0.3)
        fault = dev.inject_fault("illegal_address")
        dev.memset(buf, 0)  # behind the fault on the compute stream: the copy waits for it
        copied = dev.copy_to_host(buf, out=pinned.array)
        for f in (fault, copied):
            try:
                f.result(timeout=60)
            except gpumsg.ContextPoisoned:
                pass
            else:
                raise AssertionError("work behind a sticky fault must fail")
