"""Run a diagnostic's measurement in fresh processes, one after the other, so that what a
process's placement on the host does shows as a spread between processes.

A tool calls :func:`child_main` first thing in its ``main()`` (a child prints its result as one
``RESULT <json>`` line) and :func:`in_fresh_processes` to run its children.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any


def child_main(measure: Callable[[int], Any]) -> bool:
    """In a child (``script --child N``): print ``measure(N)`` as the result line and return
    True; in the parent return False."""
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print("RESULT " + json.dumps(measure(int(sys.argv[2]))), flush=True)
        return True
    return False


def in_fresh_processes(script: str, count: int, arg: int, timeout: float) -> Iterator[Any]:
    """Run ``script --child arg`` ``count`` times, one process after the other; yield each
    child's result (a child without one has its output's tail printed and is skipped)."""
    for _ in range(count):
        run = subprocess.run([sys.executable, script, "--child", str(arg)], capture_output=True,
                             text=True, timeout=timeout)
        line = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            print(run.stdout[-2000:], run.stderr[-4000:], flush=True)
            continue
        yield json.loads(line[0][len("RESULT "):])
