"""The whole programs of ``examples/``: each runs and agrees with NumPy float64 (small sizes on
the simulator, the full sizes on a GPU), and each one's check refuses a wrong answer."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from types import ModuleType

import numpy as np
import pytest

import gpumsg
from tests.conftest import ROOT

EXAMPLES = ["cg_poisson", "cg_device_scalars", "mlp_serving", "spectral_step",
            "mixed_step"]


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (the folder is scripts, not a package)."""
    key = f"_example_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, os.path.join(ROOT, "examples",
                                                                     f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_agrees_with_numpy(name: str, backend: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    size = "small" if backend == "sim" else "full"
    rc = load(name).main(["--backend", backend, "--size", size])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = [line for line in out.splitlines() if line.startswith(name)]
    assert lines and all("(ok)" in line for line in lines), out


def test_example_runs_as_a_script() -> None:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GPUMSG_EXAMPLES_SIZE="small")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "mixed_step.py"),
                           "--backend", "sim"], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mixed_step 16x16" in proc.stdout and "(ok)" in proc.stdout


def test_cg_check_refuses_an_iteration_short() -> None:
    cg = load("cg_poisson")
    with gpumsg.open_device(0, backend="sim") as dev:
        prob = cg.setup(dev, 16)
        history = cg.cg(dev, prob, 9)
        x = dev.copy_to_host(prob.x).result()
        prob.free()
    assert not cg.check(x, history + [history[-1]], prob.b_host, 16, 10)[0]
    assert cg.check(x, history, prob.b_host, 16, 9)[0]


def test_cg_device_scalars_follow_numpy_every_iteration() -> None:
    """The r.r the device-side loop records for each iteration is NumPy's, and running it again
    (the scalars and the iteration count reset) gives the same."""
    cg, dsc = load("cg_poisson"), load("cg_device_scalars")
    n, iters = 12, 15
    with gpumsg.open_device(0, backend="sim") as dev:
        prob = dsc.cg_poisson.setup(dev, n)
        ds = dsc.prepare(dev, iters)
        for _ in range(2):
            dsc.cg(dev, prob, ds)
            history = dev.copy_to_host(ds.history).result()
            _, want = cg.cg_numpy(prob.b_host, n, iters)
            np.testing.assert_allclose(history, want, rtol=1e-10)
        ds.free()
        prob.free()


def test_poisson_csr_is_the_stencil(rng: np.random.Generator) -> None:
    cg = load("cg_poisson")
    n = 7
    indptr, indices, data = cg.poisson_csr(n)
    x = rng.standard_normal(n * n)
    y = np.array([data[indptr[i]:indptr[i + 1]] @ x[indices[indptr[i]:indptr[i + 1]]]
                  for i in range(n * n)])
    np.testing.assert_allclose(y, cg.apply_laplacian(x, n), rtol=1e-13, atol=1e-13)
    assert indptr[-1] == 5 * n * n - 4 * n  # interior 5, edge 4, corner 3 entries


def test_spectral_check_refuses_a_step_short() -> None:
    sp = load("spectral_step")
    with gpumsg.open_device(0, backend="sim") as dev:
        s = sp.setup(dev, 16)
        u = dev.copy_to_host(sp.run(dev, s, 3).result()).result()
        s.free()
    assert sp.check(u, s, 3)[0]
    assert not sp.check(u, s, 4)[0]


def test_spectral_multiply_reaches_only_launched_threads() -> None:
    """The simulator's twin multiplies only what the launch covers, as the CUDA kernel does,
    so a grid too small for the spectrum gives a wrong field (and the check says so)."""
    sp = load("spectral_step")
    with gpumsg.open_device(0, backend="sim") as dev:
        s = sp.setup(dev, 16)
        spectrum = dev.fft.rfft2(s.u0)
        dev.launch(s.kernel, (1,), (32,), (spectrum, s.k, s.spectrum_size))
        got = dev.copy_to_host(spectrum).result().reshape(-1)
        s.free()
    want = np.fft.rfft2(s.u0_host.astype(np.float64)).reshape(-1)
    np.testing.assert_allclose(got[:32], want[:32] * s.k_host.reshape(-1)[:32], rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(got[32:], want[32:], rtol=1e-4, atol=1e-4)


def test_mlp_check_refuses_untransposed_weights(rng: np.random.Generator) -> None:
    """Weights uploaded as stored (not transposed) give a different model: the reference
    comparison flags it."""
    mlp = load("mlp_serving")
    with gpumsg.open_device(0, backend="sim") as dev:
        model = mlp.Model.random(32, 32).upload(dev)
        client = mlp.Client(dev, model, 4)
        x = rng.standard_normal((4, 32)).astype(np.float32)
        right = client.infer(x)
        for buf, w in zip(model.dev_ws, model.ws):
            dev.copy_from_host(buf, np.asfortranarray(w))  # W, not W^T
        wrong = client.infer(x)
        client.free()
        model.free()
    assert mlp.relative_error(right, model.reference(x)) < mlp.TOLERANCE
    assert mlp.relative_error(wrong, model.reference(x)) > 100 * mlp.TOLERANCE


def test_mlp_clients_report_a_failure() -> None:
    """A client whose request fails makes the run raise instead of reporting a rate."""
    mlp = load("mlp_serving")

    def good(x: np.ndarray) -> np.ndarray:
        return x

    def bad(x: np.ndarray) -> np.ndarray:
        raise ValueError("broken client")

    with pytest.raises(ValueError, match="broken client"):
        mlp.run_clients([good, bad, good], 2, 4, 3)


def test_examples_pick_small_sizes_on_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    small_sizes = load("mixed_step").small_sizes
    monkeypatch.delenv("GPUMSG_EXAMPLES_SIZE", raising=False)
    assert small_sizes("auto", "sim") and not small_sizes("auto", "cuda")
    assert small_sizes("small", "cuda") and not small_sizes("full", "sim")
    monkeypatch.setenv("GPUMSG_EXAMPLES_SIZE", "full")
    assert not small_sizes("auto", "sim") and small_sizes("small", "sim")
