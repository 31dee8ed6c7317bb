"""A failure reaches every reader.

An operation whose failure is known only at completion (cuSOLVER's ``info``, a poisoned
stream) fails every operation that read what it wrote, whether the reader was queued before the
failure was seen or after, and a failed output never reaches the host as data."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.errors import (
    ContextPoisoned,
    DependencyFailed,
    GpuError,
    NotPositiveDefinite,
    SingularMatrix,
)
from tests.conftest import random_array


def _failed_cholesky(dev):
    """A Cholesky factor whose factorization fails (not positive definite) at completion."""
    return dev.linalg.cholesky(dev.to_device(-np.eye(3))), NotPositiveDefinite


def _failed_solve(dev):
    """The solution of a singular system: getrf's info says so only at completion."""
    return dev.linalg.solve(dev.to_device(np.ones((4, 4))), dev.to_device(np.ones(4))), \
        SingularMatrix


def _failed_cholesky_batched(dev):
    """A batched Cholesky whose second matrix is not positive definite (potrfBatched's info
    array, read at completion)."""
    stack = np.stack([np.eye(3) * 2.0, -np.eye(3), np.eye(3)])
    return dev.linalg.cholesky(dev.to_device(stack)), NotPositiveDefinite


PRODUCERS = {"cholesky": _failed_cholesky, "solve": _failed_solve,
             "cholesky_batched": _failed_cholesky_batched}


def _readers(dev, x, rng):
    """Operations of several libraries that read ``x``; each returns a future."""
    shape = x.shape
    square = len(shape) == 2 and shape[0] == shape[1]
    yield "copy_to_host", lambda: dev.copy_to_host(x)
    yield "copy", lambda: dev.copy(dev.alloc(shape, x.dtype), x)
    yield "chained copy_to_host", lambda: dev.copy_to_host(dev.copy(dev.alloc(shape, x.dtype),
                                                                     x).result())
    if len(shape) == 3:
        return
    if square:
        yield "matmul", lambda: dev.linalg.matmul(x, x)
        yield "matmul then host", lambda: dev.copy_to_host(dev.linalg.matmul(x, x))
        yield "cholesky", lambda: dev.linalg.cholesky(x)
        csr = dev.cusparse.csr(np.eye(shape[0]))
        yield "sparse spmm", lambda: dev.cusparse.spmm(csr, x)
    else:
        csr = dev.cusparse.csr(np.eye(shape[0]))
        yield "sparse spmv", lambda: dev.cusparse.spmv(csr, x)
        yield "sparse spmv then host", lambda: dev.copy_to_host(dev.cusparse.spmv(csr, x))
        yield "dot", lambda: dev.cublas.dot(x, x)


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.parametrize("when", ["pipelined", "after"])
def test_every_reader_of_a_failed_output_fails(dev, rng, producer: str, when: str) -> None:
    x, error = PRODUCERS[producer](dev)
    if when == "after":  # the failure has been seen before the readers are sent
        with pytest.raises(error):
            x.result()
    for name, read in _readers(dev, x, rng):
        with pytest.raises((DependencyFailed, error)) as info:
            fut = read()
            fut.result(timeout=60)
        exc = info.value
        # the message names the first failure of the chain, whatever the path
        assert error.__name__ in str(exc), (name, exc)
    with pytest.raises(error):
        x.result()
    # the device keeps serving
    a = random_array(rng, (3, 3), np.float64)
    out = dev.copy_to_host(dev.linalg.matmul(dev.to_device(a), dev.to_device(a))).result()
    np.testing.assert_allclose(out, a @ a, rtol=1e-12)


@pytest.mark.parametrize("when", ["pipelined", "after"])
def test_readers_of_a_reader_fail_too(dev, when: str) -> None:
    """The matmul queued behind a failed Cholesky produced nothing valid: its own readers fail,
    naming the first cause."""
    L, _ = _failed_cholesky(dev)
    m = dev.linalg.matmul(L, L)
    m2 = dev.linalg.matmul(m, m)
    if when == "after":
        with pytest.raises(DependencyFailed):
            m.result()
    host = dev.copy_to_host(m2)
    with pytest.raises(DependencyFailed, match="NotPositiveDefinite"):
        host.result(timeout=60)
    with pytest.raises(DependencyFailed, match="NotPositiveDefinite"):
        m2.result(timeout=60)


def test_rewritten_output_is_valid_again(dev, rng) -> None:
    """Writing the failed buffer afresh makes it readable: the failure belongs to its old
    contents."""
    L, _ = _failed_cholesky(dev)
    with pytest.raises(NotPositiveDefinite):
        L.result()
    a = random_array(rng, (3, 3), np.float64)
    dev.copy(L, dev.to_device(a)).result()
    np.testing.assert_array_equal(dev.copy_to_host(L).result(), a)


def test_success_is_not_gated_into_failure(dev, rng) -> None:
    """Readers queued behind a successful checked operation answer normally."""
    a = random_array(rng, (5, 5), np.float64)
    spd = a @ a.T + 5 * np.eye(5)
    L = dev.linalg.cholesky(dev.to_device(spd))
    m = dev.linalg.matmul(L, L)
    host = dev.copy_to_host(m).result(timeout=60)
    ref = np.linalg.cholesky(spd)
    np.testing.assert_allclose(host, ref @ ref, rtol=1e-10)


@pytest.mark.parametrize("when", ["pipelined", "after"])
def test_poisoned_stream_fails_queued_readers(when: str, rng, monkeypatch) -> None:
    """A failed launch (a sticky fault at completion) fails what was queued behind it and
    what comes after; nothing reaches the host as data. Simulator only: on a GPU the poisoned
    context ends the process's use of CUDA (tests/service/test_poison.py covers it in a
    subprocess). One compute stream: a pool may run the matmul beside the fault, and answer it
    (right) before the fault is seen (about one run in 150 with four streams)."""
    monkeypatch.setenv("GPUMSG_STREAMS", "1")
    dev = gpumsg.open_device(0, backend="sim", allow_fault_injection=True)
    try:
        a = dev.to_device(random_array(rng, (4, 4), np.float32)).result()
        # held a moment, so that the matmul and the copy are queued behind the fault before
        # the device thread issues it (else it may be poisoned before they are even called)
        dev.inject_fault("stall", seconds=0.2)
        fault = dev.inject_fault("illegal_address")
        m = dev.linalg.matmul(a, a)
        host = dev.copy_to_host(m)
        if when == "after":
            with pytest.raises(ContextPoisoned):
                fault.result(timeout=60)
        for fut in (m, host):
            with pytest.raises(GpuError):
                fut.result(timeout=60)
        with pytest.raises(GpuError):
            dev.copy_to_host(m.buffer).result(timeout=60)
    finally:
        dev.close()
