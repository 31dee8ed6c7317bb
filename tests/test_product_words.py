"""The repository is the product: no tracked file speaks of how it was built.

Scans every file git tracks (text files; this file excluded, since it holds the patterns) for
words that belong to a work log rather than to the product: numbered work rounds, numbered
tickets and the word for a working period (the patterns are in PATTERNS below). File names are
checked for the same rounds and tickets. A failure lists every hit as ``path:line: text``.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = os.path.relpath(os.path.abspath(__file__), ROOT)

#: words about how the project was built, case-insensitive
PATTERNS = {
    "stop N": re.compile(r"\bstops? \d+", re.IGNORECASE),
    # "issue 4-29% more" is the verb: a number that reads as a percentage is not a ticket
    "issue N": re.compile(r"\bissues? \d+(?![\d.,\-]*%)", re.IGNORECASE),
    "session": re.compile(r"\bsessions?\b", re.IGNORECASE),
}

#: the same rounds and tickets in a file's name
NAME_PATTERN = re.compile(r"(?:^|[/_.\-])(?:stop|issue)_?\d+", re.IGNORECASE)

#: legitimate technical uses: (path regex, line regex) pairs a hit may match to be allowed.
#: Keep this short and explicit; a new entry needs a reason in its comment.
ALLOW: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = (
    # torch's profiler calls a recording span a "session"
    (re.compile(r"^tools/gemm_kernels\.py$"), re.compile(r"profiler session")),
)


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:  # not a git checkout (an sdist)
        pytest.skip(f"git ls-files failed: {e}")
    return [p for p in out.decode().split("\0") if p and not p.startswith(".git/")]


def _allowed(path: str, line: str) -> bool:
    return any(p.search(path) and l_.search(line) for p, l_ in ALLOW)


def find_hits(paths: list[str]) -> list[str]:
    """``path:line: text`` for every hit of :data:`PATTERNS` in the text files ``paths``
    (relative to the repository root), and ``path: file name`` for every name hit."""
    hits: list[str] = []
    for path in paths:
        if path == SELF:
            continue
        if NAME_PATTERN.search(path):
            hits.append(f"{path}: file name")
        full = os.path.join(ROOT, path)
        try:
            with open(full, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary, a submodule, or deleted in the work tree
        for no, line in enumerate(lines, 1):
            if any(p.search(line) for p in PATTERNS.values()) and not _allowed(path, line):
                hits.append(f"{path}:{no}: {line.strip()[:160]}")
    return hits


def test_patterns_catch_what_they_should() -> None:
    """The patterns are not dead: each finds its phrase and leaves ordinary prose alone."""
    assert PATTERNS["stop N"].search("measured in Stop 31")
    assert PATTERNS["stop N"].search("over stops 26-30")
    assert PATTERNS["issue N"].search("(issue 11, part 5)")
    assert PATTERNS["session"].search("over the Session")
    assert not any(p.search("the stream stops when 3 events fire; a non-issue")
                   for p in PATTERNS.values())
    assert not PATTERNS["issue N"].search("eight threads issue 4-29% more")
    assert NAME_PATTERN.search("benchmarks/results/ab_stop24_blas_base.md")
    assert not NAME_PATTERN.search("benchmarks/results/blas.md")


def test_no_build_history_in_tracked_files() -> None:
    hits = find_hits(_tracked())
    assert not hits, f"{len(hits)} mentions of how the project was built:\n" + "\n".join(hits)
