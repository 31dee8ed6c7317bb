"""Every option does what it says or is refused: isolation-only options, ordinals, the
simulated device count, missing drivers, the command line, the ``__main__`` guard."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpumsg
from gpumsg.backends.sim._device import SIM_DEVICES
from tests.conftest import CUDA_OK, ROOT, run_python


@pytest.mark.parametrize("option,value", [("watchdog", 1.0), ("max_restarts", 5),
                                          ("restart_window", 10.0), ("standby", False)])
def test_supervisor_options_need_process_isolation(option: str, value) -> None:
    with pytest.raises(gpumsg.InvalidMessage, match="isolation='process'") as info:
        gpumsg.open_device(0, backend="sim", **{option: value})
    assert info.value.field == option


@pytest.mark.parametrize("option,value", [("allow_fault_injection", "no"),
                                          ("standby", np.array([True, False]))])
def test_flag_options_take_true_or_false(option: str, value) -> None:
    with pytest.raises(gpumsg.InvalidMessage, match="expected True or False") as info:
        gpumsg.open_device(0, backend="sim", **{option: value})
    assert info.value.field == option


def test_ordinal_must_name_a_present_device(backend: str) -> None:
    count = len(gpumsg.devices(backend))
    for ordinal in (count, 1000):
        with pytest.raises(gpumsg.InvalidMessage, match="requested") as info:
            gpumsg.open_device(ordinal, backend=backend)
        assert info.value.field == "ordinal"
    with gpumsg.open_device(count - 1, backend=backend) as dev:
        assert dev.ordinal == count - 1


def test_sim_device_count_is_configured(monkeypatch) -> None:
    assert len(gpumsg.devices("sim")) == SIM_DEVICES
    monkeypatch.setenv("GPUMSG_SIM_DEVICES", "2")
    assert [d["ordinal"] for d in gpumsg.devices("sim")] == [0, 1]
    with pytest.raises(gpumsg.InvalidMessage, match="GPUMSG_SIM_DEVICES"):
        gpumsg.open_device(2, backend="sim")
    monkeypatch.setenv("GPUMSG_SIM_DEVICES", "zero")
    with pytest.raises(gpumsg.InvalidMessage, match="GPUMSG_SIM_DEVICES"):
        gpumsg.devices("sim")


def test_devices_and_open_devices_agree(backend: str, monkeypatch) -> None:
    monkeypatch.setenv("GPUMSG_SIM_DEVICES", "3")
    listed = gpumsg.devices(backend)
    with gpumsg.open_devices(backend=backend) as group:
        assert [d.ordinal for d in group.devices] == [d["ordinal"] for d in listed]
        assert {d.backend for d in group.devices} == {backend}


def test_devices_refuses_unknown_backend() -> None:
    with pytest.raises(gpumsg.InvalidMessage) as info:
        gpumsg.devices("opencl")
    assert info.value.field == "backend"


@pytest.mark.skipif(CUDA_OK, reason="a GPU is present here")
def test_cuda_without_driver_says_what_to_install() -> None:
    with pytest.raises(gpumsg.DriverNotFound, match="pip install"):
        gpumsg.open_device(0, backend="cuda")
    with pytest.raises(gpumsg.DriverNotFound):
        gpumsg.open_device(0, backend="cuda", isolation="process")
    assert gpumsg.devices("cuda") == []


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_python(f"from gpumsg.__main__ import main; raise SystemExit(main({list(args)!r}))")


@pytest.mark.skipif(CUDA_OK, reason="a GPU is present here")
def test_cli_reports_a_refusal_without_traceback() -> None:
    proc = _cli("demo", "--backend", "cuda")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "DriverNotFound" in proc.stderr and "pip install" in proc.stderr
    proc = _cli("info", "--backend", "cuda")
    assert proc.returncode == 1
    assert "backend (cuda): cuda: not usable here" in proc.stdout
    assert "[sim]" not in proc.stdout


def test_cli_honours_backend_and_device_flags() -> None:
    proc = _cli("info", "--backend", "sim")
    assert proc.returncode == 0, proc.stderr
    assert "backend (sim): sim" in proc.stdout
    assert proc.stdout.count("[sim]") == SIM_DEVICES
    proc = _cli("demo", "--backend", "sim", "--device", "1000")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ordinal" in proc.stderr


def _script(tmp_path, body: str) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)


def test_missing_main_guard_is_explained(tmp_path) -> None:
    proc = _script(tmp_path, """
        import gpumsg
        dev = gpumsg.open_device(0, backend="sim", isolation="process", standby=False)
        dev.close()
    """)
    assert proc.returncode != 0
    assert 'if __name__ == "__main__":' in proc.stderr
    assert "script.py, line 3" in proc.stderr
    assert "leaked" not in proc.stderr and "WorkerDied" not in proc.stderr


def test_guarded_main_opens_a_worker(tmp_path) -> None:
    proc = _script(tmp_path, """
        import numpy as np
        import gpumsg

        def main():
            with gpumsg.open_device(0, backend="sim", isolation="process", standby=False) as d:
                x = np.arange(6.0)
                print("OK", d.copy_to_host(d.to_device(x)).result().tolist() == x.tolist())

        if __name__ == "__main__":
            main()
    """)
    assert "OK True" in proc.stdout, proc.stdout + proc.stderr
