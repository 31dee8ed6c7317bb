"""Fail closed: a sticky CUDA error poisons the device (thread isolation)."""

from __future__ import annotations

import pytest

import gpumsg
from tests.conftest import CUDA_OK, run_python
from tests.service.poison_check import check


def test_sticky_fault_poisons_sim_device() -> None:
    check("sim")
    # other devices are untouched
    with gpumsg.open_device(0, backend="sim") as dev:
        assert dev.stats().result().generation == 0


@pytest.mark.gpu
def test_sticky_fault_poisons_gpu_device() -> None:
    if not CUDA_OK:
        pytest.skip("no CUDA GPU here")
    # in a subprocess: the poisoned context would break every later test of this process
    proc = run_python("""
        from tests.service.poison_check import check
        check("cuda")
        print("POISON-OK")
    """)
    assert "POISON-OK" in proc.stdout, proc.stdout + proc.stderr
