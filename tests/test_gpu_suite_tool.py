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
