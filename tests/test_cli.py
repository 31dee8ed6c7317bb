"""``python -m gpumsg info|demo|bench``."""

from __future__ import annotations

from tests.conftest import run_python


def test_info_lists_backend_and_libraries() -> None:
    proc = run_python("from gpumsg.__main__ import main; raise SystemExit(main(['info']))")
    assert proc.returncode == 0, proc.stderr
    assert "backend (auto):" in proc.stdout and "cublas" in proc.stdout


def test_demo_checks_its_result(backend) -> None:
    proc = run_python(f"from gpumsg.__main__ import main; "
                      f"raise SystemExit(main(['demo', '--backend', {backend!r}]))")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(ok)" in proc.stdout
