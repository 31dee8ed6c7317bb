"""Fixtures shared by the suite. Device-generic tests take the ``backend`` fixture: they run on
the simulator always and on the GPU (marked ``gpu``) where one is present."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib

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
def one_stream_dev(backend: str, monkeypatch: pytest.MonkeyPatch):
    """``dev`` with one compute stream whatever ``GPUMSG_STREAMS`` says, for tests of what a
    device keeps per stream (launcher memos, plan and algorithm caches) or of work queued
    behind a busy compute stream (a pool would run it beside)."""
    monkeypatch.setenv("GPUMSG_STREAMS", "1")
    d = gpumsg.open_device(0, backend=backend, allow_fault_injection=True)
    yield d
    d.close()


@pytest.fixture
def posted():
    """``posted(dev, *types)``: the list of the messages of those types that ``dev`` puts in
    its mailbox from then on (every send path ends in ``dev._post``), until the test ends. A
    message of those types that an ``AllocThen`` carries (a call answering a new buffer) counts
    as posted, unless ``AllocThen`` is one of the types."""
    undo = []

    def record(d, *types: type) -> list:
        seen: list = []
        real = d._post
        alloc_then = gpumsg.messages.AllocThen

        def post(msg, reply) -> None:
            if isinstance(msg, types):
                seen.append(msg)
            elif type(msg) is alloc_then and isinstance(msg.then, types):
                seen.append(msg.then)
            real(msg, reply)

        d._post = post
        undo.append((d, real))
        return seen

    yield record
    for d, real in reversed(undo):
        d._post = real


#: the environment variable that fixes the suite's random seed (``--seed`` does the same)
SEED_ENV = "GPUMSG_TEST_SEED"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--seed", action="store", default=None, type=int,
                     help=f"the seed of the rng fixture (default: ${SEED_ENV}, else fresh)")


def pytest_configure(config: pytest.Config) -> None:
    # fresh inputs on every run (the code must compute the function on any valid input), but
    # from one logged seed, so that a failing run can be repeated exactly
    seed = config.getoption("--seed")
    if seed is None and os.environ.get(SEED_ENV):
        seed = int(os.environ[SEED_ENV])
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (1 << 63))
    config.stash[_SEED_KEY] = seed
    config.addinivalue_line("markers", "mutation: plants known bugs in a copy of the tree and "
                            "checks the suite catches each (slow; GPUMSG_MUTATION=1 runs it)")


_SEED_KEY = pytest.StashKey[int]()


def suite_seed(config: pytest.Config) -> int:
    """The seed every ``rng`` fixture of this run derives from."""
    return config.stash[_SEED_KEY]


def pytest_report_header(config: pytest.Config) -> str:
    seed = suite_seed(config)
    return f"random seed: {seed} (repeat with {SEED_ENV}={seed} or --seed {seed})"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and "rng" in getattr(item, "fixturenames", ()):
        seed = suite_seed(item.config)
        report.sections.append(("random seed", f"{SEED_ENV}={seed} pytest '{item.nodeid}'"))
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("GPUMSG_MUTATION") == "1":
        return
    skip = pytest.mark.skip(reason="mutation check: set GPUMSG_MUTATION=1 to run it")
    for item in items:
        if "mutation" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the run's logged seed and the test's id: each test draws its
    own reproducible stream, whatever else runs (``--seed`` / $GPUMSG_TEST_SEED repeat it)."""
    test_key = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng([suite_seed(request.config), test_key])


def gpu_count() -> int:
    """How many CUDA devices this machine has (0 without a driver): multi-GPU tests skip below
    the count they need."""
    try:
        return len([d for d in gpumsg.devices("cuda") if d["backend"] == "cuda"])
    except Exception:  # noqa: BLE001 - no driver, no bindings: no GPU
        return 0


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


class HostCapsule:
    """A DLPack producer handing out one ready-made capsule as host memory (kDLCPU): lets
    ``np.from_dlpack`` take a capsule of the simulator's (NumPy passes ``stream=None``)."""

    def __init__(self, cap) -> None:
        self.cap = cap

    def __dlpack__(self, **kwargs):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


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
