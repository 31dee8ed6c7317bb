"""Kernels on a process-isolated device: the modules a device loaded (user kernels and the array
layer's generated ones) are loaded by every new worker, so a kernel compiled before a fault
launches after it; and a simulator's worker runs kernels whose NumPy versions were registered
in the client after it started (they travel in the module's image)."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
import gpumsg.array_api as xp
from gpumsg.libs.nvrtc import Recipe, sim_kernel

SCALE = r"""
extern "C" __global__ void restart_scale(double a, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * y[i];
}
"""


def _scale_version(offset: float):  # a factory: its result is a closure, which does not pickle
    def run(launch, a, y, n) -> None:
        y[:n] = a * y[:n] + offset

    return run


# registered after the worker's fork server started: it reaches the worker in the image
sim_kernel("restart_scale")(Recipe(_scale_version, 0.0))


@pytest.fixture
def pdev(backend: str):
    d = gpumsg.open_device(0, backend=backend, isolation="process", allow_fault_injection=True,
                           watchdog=2.0, max_restarts=5)
    yield d
    d.close(timeout=60)


@pytest.mark.parametrize("fault", ["exit", "illegal_address"])
def test_a_kernel_compiled_before_a_fault_launches_after_it(pdev, rng, fault: str) -> None:
    kernel = pdev.nvrtc.compile(SCALE, "restart_scale").result(timeout=60)
    host = rng.standard_normal(300)
    y = pdev.to_device(host)
    pdev.nvrtc.launch(kernel, grid=(2,), block=(256,), args=(3.0, y, 300)).result(timeout=60)
    np.testing.assert_allclose(pdev.copy_to_host(y).result(timeout=60), 3.0 * host)
    watch = pdev.watch_generation()
    with pytest.raises(gpumsg.ContextPoisoned):
        pdev.inject_fault(fault).result(timeout=60)
    assert watch.result(timeout=60) == 1  # a new worker
    y2 = pdev.to_device(host)  # the old buffer is stale; the kernel is not
    pdev.nvrtc.launch(kernel, grid=(2,), block=(256,), args=(-2.0, y2, 300)).result(timeout=60)
    np.testing.assert_allclose(pdev.copy_to_host(y2).result(timeout=60), -2.0 * host)


def test_array_operations_before_and_after_a_fault(pdev, rng) -> None:
    """Generated kernels, the reduction workspace and the checked gathers' index flag, before
    a fault and on the new worker after it."""
    host = rng.standard_normal((40, 7))
    long = rng.standard_normal(50_000)  # a sum split over blocks: it uses the workspace
    x = xp.asarray(host, device=pdev)
    np.testing.assert_allclose(np.asarray(xp.sum(xp.sin(x) * 2.0 + x, axis=0)),
                               (np.sin(host) * 2.0 + host).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(float(xp.sum(xp.asarray(long, device=pdev))), long.sum(),
                               rtol=1e-12)
    idx = np.array([3, -1, 0, 39])
    np.testing.assert_array_equal(np.asarray(x[xp.asarray(idx, device=pdev)]), host[idx])
    with pytest.raises(gpumsg.ContextPoisoned):
        pdev.inject_fault("exit").result(timeout=60)
    x = xp.asarray(host, device=pdev)  # the same generated kernels, on the new worker
    np.testing.assert_allclose(np.asarray(xp.sum(xp.sin(x) * 2.0 + x, axis=0)),
                               (np.sin(host) * 2.0 + host).sum(axis=0), rtol=1e-12)
    # the old worker's workspace is stale: the device's next split reduction makes a new one
    np.testing.assert_allclose(float(xp.sum(xp.asarray(long, device=pdev))), long.sum(),
                               rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(xp.sort(x, axis=0)), np.sort(host, axis=0))
    # the old worker's index flag is stale too: the thread's next checked gather makes one
    np.testing.assert_array_equal(np.asarray(x[xp.asarray(idx, device=pdev)]), host[idx])
    with pytest.raises(gpumsg.IndexOutOfRange):
        np.asarray(x[xp.asarray(np.array([1, 40]), device=pdev)])
