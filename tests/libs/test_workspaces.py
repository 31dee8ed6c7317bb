"""Library workspaces degrade instead of failing: with the memory budget full, a call on
buffers that exist still runs (cuBLAS and cuBLASLt with a smaller workspace or none), and
Stats shows what each library's workspace holds. On both backends: the simulator's handles
take the same workspaces from the same memory resource."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg import MemoryConfig
from gpumsg.errors import OutOfBudget
from gpumsg.libs.cublas._bindings import WORKSPACE_BYTES

MiB = 1 << 20


def _blas(dev):
    return dev.cublas if hasattr(dev, "cublas") else dev.cublas


def _workspaces(dev) -> dict[str, int]:
    return dict(dev.stats().result(timeout=60).workspaces)


def _fill_budget(dev, keep: int) -> list:
    """Allocate until less than ``keep`` bytes of the budget are left; the buffers."""
    held = []
    for size in (64 * MiB, 16 * MiB, 4 * MiB, MiB, 256 << 10, 64 << 10, 4096):
        while True:
            load = dev.stats().result(timeout=60)
            left = load.budget_bytes - load.pool_used_bytes
            if left - size < keep:
                break
            try:
                held.append(dev.alloc((size,), np.uint8).result(timeout=60))
            except OutOfBudget:
                break
    return held


def test_full_workspace_when_memory_allows(dev, rng) -> None:
    x = rng.standard_normal(16).astype(np.float32) + 0.5
    buf = dev.to_device(x)
    _blas(dev).scal(buf, 2.0).result(timeout=60)
    np.testing.assert_array_equal(dev.copy_to_host(buf).result(timeout=60), x * 2)
    assert _workspaces(dev)["cublas"] == WORKSPACE_BYTES


@pytest.mark.parametrize("keep,expect", [(0, 0), (5 * MiB, 4 * MiB), (2 * MiB, MiB)])
def test_budget_full_degrades_the_cublas_workspace(backend, rng, keep: int, expect: int) -> None:
    with gpumsg.open_device(0, backend=backend, memory=MemoryConfig(budget=96 * MiB)) as dev:
        x = rng.standard_normal(1024).astype(np.float32) + 0.5
        buf = dev.to_device(x)
        held = _fill_budget(dev, keep)
        blas = _blas(dev)
        # the handle is made now, with what the budget still gives
        blas.scal(buf, 2.0).result(timeout=60)
        np.testing.assert_array_equal(dev.copy_to_host(buf).result(timeout=60), x * 2)
        assert _workspaces(dev)["cublas"] == expect
        # a GEMM runs with that workspace as well
        a = rng.standard_normal((64, 32)).astype(np.float32)
        b = rng.standard_normal((32, 48)).astype(np.float32)
        da, db = dev.to_device(np.asfortranarray(a)), dev.to_device(np.asfortranarray(b))
        c = dev.alloc((64, 48), np.float32, order="F").result(timeout=60) if keep else None
        if c is not None:
            blas.gemm(da, db, c, 64, 48, 32).result(timeout=60)
            ref = a.astype(np.float64) @ b.astype(np.float64)
            np.testing.assert_allclose(dev.copy_to_host(c).result(timeout=60), ref,
                                       rtol=1e-4, atol=1e-4)
        del held



def test_workspaces_cross_the_process_boundary() -> None:
    """A process-isolated device's Stats carries the workspaces too (the packed wire form
    gives way to a pickle for a load that names them)."""
    with gpumsg.open_device(0, backend="sim", isolation="process") as dev:
        buf = dev.to_device(np.ones(8, np.float32))
        _blas(dev).scal(buf, 3.0).result(timeout=60)
        assert _workspaces(dev) == {"cublas": WORKSPACE_BYTES}
        np.testing.assert_array_equal(dev.copy_to_host(buf).result(timeout=60), np.full(8, 3.0))


def test_fft_plan_work_area_evicts_idle_plans(backend, rng) -> None:
    """A cuFFT plan needs its work area (the minimum it asks for): with the budget full, the
    idle cached plans give theirs back first, and the transform runs. (The simulator's plans
    hold no work area: there the case does not arise.)"""
    with gpumsg.open_device(0, backend=backend, memory=MemoryConfig(budget=512 * MiB)) as dev:
        n1 = (1 << 20) + 3 * 5 * 7  # not a product of small primes: a large work area
        x1 = dev.to_device(np.ones(n1, np.complex64))
        dev.fft.fft(x1).result(timeout=60)
        del x1  # its memory goes back; the plan and its work area stay cached
        first = dev.cufft.cache_info().result(timeout=60)["workspace_bytes"]
        if not first:
            pytest.skip("this backend's FFT plans hold no work area")
        n2 = (1 << 18) + 3 * 5 * 7  # a smaller plan of its own
        x2 = (rng.standard_normal(n2) + 1j * rng.standard_normal(n2)).astype(np.complex64)
        d2 = dev.to_device(x2)
        # room for the output, not for a second work area: the first plan's must go
        held = _fill_budget(dev, n2 * 8 + (64 << 10))
        y2 = dev.fft.fft(d2).result(timeout=60)
        ref = np.fft.fft(x2.astype(np.complex128))
        got = dev.copy_to_host(y2).result(timeout=60)
        assert np.max(np.abs(got - ref)) <= 1e-4 * np.max(np.abs(ref))
        assert _workspaces(dev).get("cufft", 0) < first + n2 * 8
        del held
