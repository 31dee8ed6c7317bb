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
from gpumsg.libs.cublas.bindings import WORKSPACE_BYTES

MiB = 1 << 20


def _blas(dev):
    return dev.cublas if hasattr(dev, "cublas") else dev.blas


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
