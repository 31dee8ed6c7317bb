"""Every bad argument gets a typed error at the call site, and the device keeps serving."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg


def serving(dev) -> bool:
    x = np.arange(10, dtype=np.int64)
    return bool(np.array_equal(dev.copy_to_host(dev.to_device(x)).result(), x))


CASES = [
    ("negative shape", lambda d: d.alloc((4, -1)), gpumsg.InvalidMessage),
    ("float shape", lambda d: d.alloc((4.0, 2)), gpumsg.InvalidMessage),
    ("bad dtype", lambda d: d.alloc((4,), "float128"), gpumsg.InvalidMessage),
    ("object dtype", lambda d: d.to_device(np.array([object()])), gpumsg.InvalidMessage),
    ("bad order", lambda d: d.alloc((4,), order="K"), gpumsg.InvalidMessage),
    ("absurd size", lambda d: d.alloc((1 << 40, 1 << 20), np.float64), gpumsg.OutOfMemory),
    ("copy dtype mismatch",
     lambda d: d.copy_from_host(d.alloc((4,), np.float32), np.ones(4)), gpumsg.InvalidMessage),
    ("copy shape mismatch",
     lambda d: d.copy_from_host(d.alloc((4, 4), np.float32), np.ones((2, 8), np.float32)),
     gpumsg.InvalidMessage),
    ("copy too long",
     lambda d: d.copy_from_host(d.alloc((4,), np.float32), np.ones(5, np.float32)),
     gpumsg.InvalidMessage),
    ("negative offset",
     lambda d: d.copy_from_host(d.alloc((4,), np.float32), np.ones(1, np.float32), -1),
     gpumsg.InvalidMessage),
    ("out wrong shape",
     lambda d: d.copy_to_host(d.alloc((4, 4), np.float32), out=np.empty((16,), np.float32)),
     gpumsg.InvalidMessage),
    ("out wrong order",
     lambda d: d.copy_to_host(d.alloc((4, 3), np.float32),
                              out=np.empty((4, 3), np.float32, order="F")),
     gpumsg.InvalidMessage),
    ("out not array", lambda d: d.copy_to_host(d.alloc((4,), np.float32), out=[0] * 4),
     gpumsg.InvalidMessage),
    ("memset value", lambda d: d.memset(d.alloc((4,), np.uint8), 256), gpumsg.InvalidMessage),
    ("sgemm k too big",
     lambda d: d.sgemm(d.alloc((4, 4)), d.alloc((4, 4)), d.alloc((4, 4)), 4, 4, 5),
     gpumsg.InvalidMessage),
    ("sgemm not a buffer",
     lambda d: d.sgemm(np.ones((4, 4), np.float32), d.alloc((4, 4)), d.alloc((4, 4)), 4, 4, 4),
     gpumsg.InvalidMessage),
    ("send non-message", lambda d: d.send("Stats"), gpumsg.InvalidMessage),
    ("fault kind", lambda d: d.inject_fault("meltdown"), gpumsg.InvalidMessage),
    ("exit in thread mode", lambda d: d.inject_fault("exit").result(), gpumsg.InvalidMessage),
    ("stream name", lambda d: d.snapshot_stream("copy"), gpumsg.InvalidMessage),
    ("free non-buffer", lambda d: d.free(np.ones(3)), gpumsg.InvalidMessage),
]


@pytest.mark.parametrize("what,call,error", CASES, ids=[c[0] for c in CASES])
def test_bad_argument(dev, what: str, call, error) -> None:
    with pytest.raises(error):
        call(dev)
    assert serving(dev)


def test_bad_open_arguments() -> None:
    with pytest.raises(gpumsg.InvalidMessage):
        gpumsg.open_device(-1, backend="sim")
    with pytest.raises(gpumsg.InvalidMessage):
        gpumsg.open_device(0, backend="opencl")
    with pytest.raises(gpumsg.InvalidMessage):
        gpumsg.open_device(0, backend="sim", isolation="fiber")
    with pytest.raises(gpumsg.InvalidMessage):
        gpumsg.open_device(0, backend="sim", memory="arena")


def test_fault_injection_needs_opt_in(backend) -> None:
    with gpumsg.open_device(0, backend=backend) as dev:
        with pytest.raises(gpumsg.FaultInjectionDisabled):
            dev.inject_fault("illegal_address").result()
        assert serving(dev)


def test_closed_device_refuses_at_call_site(backend) -> None:
    dev = gpumsg.open_device(0, backend=backend)
    dev.close()
    for call in (lambda: dev.alloc((4,)), lambda: dev.stats(), lambda: dev.to_device(np.ones(3)),
                 lambda: dev.synchronize()):
        with pytest.raises(gpumsg.DeviceClosed):
            call()
