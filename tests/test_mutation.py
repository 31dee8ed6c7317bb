"""The mutation check (tools/mutation_check.py): each known wrong-number bug, planted in a copy
of the simulator, is caught by the tests that guard it. Slow (a minute or two): marked
``mutation`` and run only with GPUMSG_MUTATION=1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.mutation
def test_every_planted_bug_is_caught() -> None:
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "mutation_check.py")],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    caught, total = int(last.split()[1]), int(last.split()[3])
    assert caught == total > 0, last
