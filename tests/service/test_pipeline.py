"""Pipelining: later calls take buffers (and their futures) before they resolve; a failed
producer fails its dependants with an error naming the cause."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from tests.conftest import rel_err


def test_chain_without_intermediate_waits(dev, rng) -> None:
    a_host = rng.standard_normal((128, 64)).astype(np.float32, order="F")
    b_host = rng.standard_normal((64, 32)).astype(np.float32, order="F")
    a = dev.to_device(a_host)
    b = dev.to_device(b_host)
    c = dev.alloc((128, 32), np.float32)
    # the stream is busy: nothing below can finish yet (two seconds: on a host loaded by
    # other test processes, issuing the calls below has taken more than half a second)
    dev.inject_fault("hang", seconds=2.0)
    # several dependent GEMMs: C = A B, then D = A^T C ... all issued before any result
    g1 = dev.sgemm(a, b, c, 128, 32, 64)
    d = dev.alloc((64, 32), np.float32)
    g2 = dev.sgemm(a, c, d, 64, 32, 128, transa="T")
    out = dev.copy_to_host(d)
    # every call returned without waiting for its inputs: the chain is still pending
    assert not any(f.done() for f in (g1, g2, out)), "a call waited for an earlier result"
    ref_c = a_host.astype(np.float64) @ b_host
    ref_d = a_host.astype(np.float64).T @ ref_c
    assert rel_err(out.result(), ref_d) < 1e-4
    assert g1.result() is None and g2.result() is None
    assert isinstance(c.result(), gpumsg.GpuBuffer)


def test_failed_producer_fails_dependants_with_cause(dev, rng) -> None:
    dev.inject_fault("oom", count=2).result()  # two refusals: past the trim-and-retry
    a = dev.alloc((64, 64), np.float32)  # this allocation fails
    b = dev.to_device(rng.standard_normal((64, 64)).astype(np.float32))
    c = dev.alloc((64, 64), np.float32)
    g = dev.sgemm(a, b, c, 64, 64, 64)
    back = dev.copy_to_host(c)
    with pytest.raises(gpumsg.OutOfMemory):
        a.result()
    with pytest.raises(gpumsg.DependencyFailed, match="OutOfMemory") as info:
        g.result()
    assert isinstance(info.value.__cause__, gpumsg.OutOfMemory)
    # C's producer failed, so reading C fails too, naming the GEMM's failure
    with pytest.raises(gpumsg.DependencyFailed, match="DependencyFailed"):
        back.result()
    # everything else keeps working, and a successful write clears C's failure
    dev.memset(c, 0).result()
    assert not dev.copy_to_host(c).result().any()


def test_to_device_future_resolves_after_data_arrives(dev, rng) -> None:
    host = rng.standard_normal(1 << 16)
    buf = dev.to_device(host).result()
    assert buf.raw_device_ptr() != 0
    np.testing.assert_array_equal(dev.copy_to_host(buf).result(), host)


def test_one_driver_refusal_is_absorbed_by_trim_and_retry(dev) -> None:
    dev.inject_fault("oom", count=1).result()
    buf = dev.alloc((1024,), np.float32).result()
    assert buf.raw_device_ptr() != 0
