"""``tools/array_api_conformance.py``: its pass rate and what it prints when the suite cannot
run (a stand-in suite in a temporary folder, so that no test here depends on the real one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

TOOL = os.path.join(ROOT, "tools", "array_api_conformance.py")
#: the options the real suite's conftest adds, which the tool passes
CONFTEST = textwrap.dedent("""
    def pytest_addoption(parser):
        parser.addoption("--max-examples", default=None)
        parser.addoption("--disable-deadline", action="store_true")
""")


def _suite(tmp_path, tests: str) -> str:
    (tmp_path / "array_api_tests").mkdir()
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "array_api_tests" / "test_stand_in.py").write_text(textwrap.dedent(tests))
    return str(tmp_path)


def _run(suite: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, "--suite", suite, *args], capture_output=True,
                          text=True, timeout=300)


def test_the_pass_rate_is_held_to_the_floor(tmp_path) -> None:
    suite = _suite(tmp_path, """
        def test_a(): pass
        def test_b(): pass
        def test_c(): assert False
    """)
    proc = _run(suite, "--floor", "0.6")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed, 1 failed" in proc.stdout and "66.7%" in proc.stdout
    assert "FAILED" in proc.stdout  # the failures are named
    assert _run(suite, "--floor", "0.7").returncode == 1


def test_a_suite_that_does_not_collect_says_why(tmp_path) -> None:
    """Collection errors count as failures, and their report is printed: a run that only
    said '0 passed, 15 failed' left no clue (the GPU machine lacked a dependency)."""
    suite = _suite(tmp_path, """
        import a_module_nobody_has
        def test_a(): pass
    """)
    proc = _run(suite)
    assert proc.returncode == 1
    assert "0 passed, 1 failed" in proc.stdout
    assert "a_module_nobody_has" in proc.stdout


def test_failures_are_not_replayed_from_an_earlier_run(tmp_path) -> None:
    """Hypothesis keeps failing examples in a database and replays them first: kept in the
    suite's folder, one rare failing draw failed every later run and wrote into the shared
    checkout. Each run gets its own database, outside the suite's folder."""
    suite = _suite(tmp_path, """
        import os
        from hypothesis import given, strategies as st

        def test_where_the_database_is():
            where = os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY", "")
            assert where and not where.startswith(os.getcwd())

        @given(st.integers())
        def test_draws(n):
            assert n != 123456789
    """)
    for _ in range(2):
        proc = _run(suite)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "2 passed, 0 failed" in proc.stdout
    assert not os.path.exists(os.path.join(suite, ".hypothesis"))


def test_a_failure_prints_what_it_raised_and_for_which_input(tmp_path) -> None:
    """A run that comes back from a GPU must say why a case failed, not only its name."""
    suite = _suite(tmp_path, """
        def test_ok(): pass
        def test_refused():
            exc = BufferError("cannot export a buffer on (2, 0) without a copy")
            exc.add_note("x.__dlpack__ with copy_kw = {'copy': False}")
            raise exc
    """)
    proc = _run(suite, "--floor", "0.4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED array_api_tests/test_stand_in.py::test_refused" in proc.stdout
    assert "BufferError: cannot export a buffer on (2, 0) without a copy" in proc.stdout
    assert "x.__dlpack__ with copy_kw" in proc.stdout
