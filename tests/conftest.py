"""Fixtures shared by the suite. Device-generic tests take the ``backend`` fixture: they run on
the simulator always and on the GPU (marked ``gpu``) where one is present."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpumsg
from gpumsg.backends import cuda_available

CUDA_OK, CUDA_WHY = cuda_available()
BACKENDS = ["sim", pytest.param("cuda", marks=pytest.mark.gpu)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def need_backend(name: str) -> None:
    if name == "cuda" and not CUDA_OK:
        pytest.skip(f"no CUDA GPU here ({CUDA_WHY})")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    need_backend(request.param)
    return request.param


@pytest.fixture
def dev(backend: str):
    d = gpumsg.open_device(0, backend=backend, allow_fault_injection=True)
    yield d
    d.close()


@pytest.fixture
def posted():
    """``posted(dev, *types)``: the list of the messages of those types that ``dev`` puts in
    its mailbox from then on (every send path ends in ``dev._post``), until the test ends."""
    undo = []

    def record(d, *types: type) -> list:
        seen: list = []
        real = d._post

        def post(msg, reply) -> None:
            if isinstance(msg, types):
                seen.append(msg)
            real(msg, reply)

        d._post = post
        undo.append((d, real))
        return seen

    yield record
    for d, real in reversed(undo):
        d._post = real


@pytest.fixture
def rng() -> np.random.Generator:
    # fresh inputs on every run: the code must compute the function on any valid input
    return np.random.default_rng()


def random_array(rng: np.random.Generator, shape, dtype, order: str = "C") -> np.ndarray:
    """Random, non-zero data of any gpumsg dtype."""
    dtype = gpumsg.as_dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        out = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        out[out == 0] = 1
    elif dtype.kind == "c":
        out = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    else:
        out = (rng.standard_normal(shape) + 0.1).astype(dtype)
    return np.asarray(out, order=order)


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.complex128 if np.iscomplexobj(ref) else np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (denom if denom else 1.0))


def run_python(code: str, timeout: float = 120,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the tree on sys.path (for tests that poison a
    process's CUDA context or exercise interpreter exit)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=e)


@pytest.fixture
def xp(dev):
    """``gpumsg.array_api`` with its default device set to ``dev`` (tests/array_api)."""
    import gpumsg.array_api as namespace

    old = namespace.set_default_device(dev)
    yield namespace
    namespace.set_default_device(old)
