"""Cross-stream safety: a copy-in (h2d stream) -> GEMM (compute stream) -> copy-out (d2h stream)
chain that reuses its buffers is never reordered. On the simulator every stream operation is
delayed at random, which turns any missing wait into wrong results; the second test removes the
waits and checks that the first test would then fail."""

from __future__ import annotations

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.sim import SimBackend


def run_chain(dev, rng, n: int, rounds: int) -> list[bool]:
    """Reuse one input and one output buffer for every round, issue everything, then check."""
    src = dev.alloc((n, n), np.float32)
    out = dev.alloc((n, n), np.float32)
    eye = dev.to_device(np.eye(n, dtype=np.float32, order="F"))
    expected, results = [], []
    for _ in range(rounds):
        x = rng.standard_normal((n, n)).astype(np.float32, order="F")
        expected.append(x)
        dev.copy_from_host(src, x)  # h2d: must wait for the previous GEMM's read of src
        dev.sgemm(src, eye, out, n, n, n)  # compute: must wait for the copy, and for the
        results.append(dev.copy_to_host(out))  # previous copy-out's read of out
    return [np.array_equal(f.result(timeout=120), x) for f, x in zip(results, expected)]


def open_for_race(backend: str):
    if backend == "sim":
        return gpumsg.open_device(0, backend=SimBackend(jitter=2e-3))
    return gpumsg.open_device(0, backend=backend)


def test_copy_compute_copy_chain_keeps_order(backend, rng) -> None:
    with open_for_race(backend) as dev:
        n, rounds = (48, 30) if backend == "sim" else (1024, 40)
        ok = run_chain(dev, rng, n, rounds)
        assert all(ok), f"{ok.count(False)} of {rounds} rounds read reordered data"


def test_chain_test_detects_missing_waits(rng) -> None:
    # the same chain with the cross-stream waits switched off must go wrong
    with open_for_race("sim") as dev:
        dev._worker.ctx._wait = lambda *args: None
        ok = run_chain(dev, rng, 48, 30)
        assert not all(ok), "without waits the chain should have been reordered"


@pytest.mark.parametrize("resource", ["pool", "direct"])
def test_free_waits_for_other_streams(resource, rng) -> None:
    # a buffer dropped right after a copy-out was issued must not be freed (and reused) before
    # that copy has read it
    with gpumsg.open_device(0, backend=SimBackend(jitter=1e-3), memory=resource) as dev:
        futures, expect = [], []
        for _ in range(20):
            x = rng.standard_normal(2048)
            buf = dev.to_device(x)
            futures.append(dev.copy_to_host(buf))
            expect.append(x)
            del buf  # Free is posted now, behind the copy-out
        for f, x in zip(futures, expect):
            np.testing.assert_array_equal(f.result(timeout=60), x)
