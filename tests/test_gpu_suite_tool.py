"""``tools/gpu_suite.py``: its two waves hold every test file exactly once."""

from __future__ import annotations

import glob
import os
import sys

from tests.conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
import gpu_suite  # noqa: E402


def _covers(args: list[str], path: str) -> bool:
    """Whether a pytest command's paths, less its --ignore paths, take the file ``path``."""
    taken = ignored = False
    for a in args:
        if a.startswith("--ignore="):
            target = a.split("=", 1)[1]
            ignored |= path == target or path.startswith(target + "/")
        elif a.startswith("tests"):
            taken |= path == a or path.startswith(a + "/")
    return taken and not ignored


def test_the_two_waves_hold_every_test_file_once() -> None:
    files = sorted(os.path.relpath(f, ROOT)
                   for f in glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"),
                                      recursive=True))
    commands = [cmd for wave in (1, 2) for cmd in gpu_suite.shards(wave).values()
                if "pytest" in cmd]
    for f in files:
        holders = [cmd for cmd in commands if _covers(cmd, f)]
        assert len(holders) == 1, (f, len(holders))


def test_the_list_names_the_campaigns(capsys) -> None:
    assert gpu_suite.main(["--wave", "2", "--list"]) == 0
    listed = capsys.readouterr().out
    for name in ("arrays_0", "fuzz", "faults", "conformance"):
        assert f"{name}:" in listed


def test_skips_are_summed_by_reason() -> None:
    lines = ["....s", "SKIPPED [3] tests/a.py:4: Ray is not installed",
             "SKIPPED [2] tests/b.py:9: no CUDA GPU here (no driver)",
             "SKIPPED [4] tests/c.py:1: Ray is not installed",
             "SKIPPED [1] tests/d.py:2: the cuDNN frontend is not installed",
             "1 passed, 10 skipped"]
    assert gpu_suite.skip_reasons(lines) == [
        "7 x Ray is not installed", "2 x no CUDA GPU here (no driver)",
        "1 x the cuDNN frontend is not installed"]
    assert gpu_suite.skip_reasons(lines, most=1) == ["7 x Ray is not installed",
                                                     "3 x 2 other reasons"]
    assert gpu_suite.skip_reasons(["3 passed"]) == []
