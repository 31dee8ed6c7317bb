"""The documentation's examples run as written.

Every ```python block of README.md and docs/libraries/*.md is one self-contained program; each
runs here on the simulator, and on the GPU where one is present (marked ``gpu``). The backend is
chosen by wrapping ``gpumsg.open_device`` / ``gpumsg.open_devices`` for the duration of the
example, so an example writes ``gpumsg.open_device()`` as a user would. A block whose first line
is ``# not run`` is shown, not run (use it sparingly: a fragment that cannot stand alone).

The pages' own shape is checked too: the README's length and its one API map, the length of
the architecture page, one page per library, and relative links that lead somewhere.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pytest

import gpumsg
from gpumsg.backends import cuda_available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARIES = ("cublas", "cublaslt", "cusolver", "cufft", "curand", "cusparse", "cudnn", "nvrtc",
             "nccl")
NOT_RUN = "# not run"
CUDA_OK, CUDA_WHY = cuda_available()

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    path: str  #: relative to the repository root
    line: int  #: of the opening fence
    code: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def runs(self) -> bool:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first.strip() != NOT_RUN


def doc_pages() -> list[str]:
    """README.md and every docs/libraries page, relative to the root."""
    pages = ["README.md"]
    lib_dir = os.path.join(ROOT, "docs", "libraries")
    if os.path.isdir(lib_dir):
        pages += sorted(f"docs/libraries/{n}" for n in os.listdir(lib_dir) if n.endswith(".md"))
    return pages


def examples(pages: list[str] | None = None) -> list[Example]:
    found = []
    for page in pages if pages is not None else doc_pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        for m in _FENCE.finditer(text):
            found.append(Example(page, text.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


ALL = examples()
RUN = [e for e in ALL if e.runs]


class _Opened:
    """Wraps gpumsg's openers so that an example's devices use ``backend`` and are closed
    after it, whatever it did."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.devices: list = []
        self.open_device = gpumsg.open_device
        self.open_devices = gpumsg.open_devices

    def device(self, ordinal: int = 0, backend: str = "auto", *args, **kw):
        d = self.open_device(ordinal, *args, backend=self.backend, **kw)
        self.devices.append(d)
        return d

    def group(self, ordinals=None, backend: str = "auto", *args, **kw):
        if self.backend == "cuda":
            found = [d for d in gpumsg.devices("cuda") if d["backend"] == "cuda"]
            if len(found) < 2 and (ordinals is None or len(ordinals) > len(found)):
                pytest.skip(f"the example needs two GPUs, {len(found)} here")
        g = self.open_devices(ordinals, *args, backend=self.backend, **kw)
        self.devices.append(g)
        return g

    def close(self) -> None:
        for d in reversed(self.devices):
            d.close()


@pytest.fixture(params=["sim", pytest.param("cuda", marks=pytest.mark.gpu)])
def example_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    if request.param == "cuda" and not CUDA_OK:
        pytest.skip(f"no CUDA GPU here ({CUDA_WHY})")
    opened = _Opened(request.param)
    monkeypatch.setattr(gpumsg, "open_device", opened.device)
    monkeypatch.setattr(gpumsg, "open_devices", opened.group)
    yield request.param
    opened.close()


@pytest.mark.parametrize("example", RUN, ids=[e.id for e in RUN])
def test_example_runs(example: Example, example_backend: str) -> None:
    code = compile(example.code, example.id, "exec")
    exec(code, {"__name__": "__main__", "__file__": os.path.join(ROOT, example.path)})


def test_examples_were_found() -> None:
    """Every library page and the README carry at least one example that runs; `# not run`
    stays the exception."""
    pages = {e.path for e in RUN}
    missing = [p for p in ["README.md"] + [f"docs/libraries/{n}.md" for n in LIBRARIES]
               if p not in pages]
    assert not missing, f"pages without a runnable example: {missing}"
    assert len(ALL) - len(RUN) <= max(2, len(ALL) // 10), "too many `# not run` blocks"


def test_extraction() -> None:
    """The fence parser finds blocks, their lines and the marker (so the test above is not
    vacuous)."""
    text = "intro\n```python\nx = 1\n```\n\n```sh\nmake\n```\n```python\n# not run\ny\n```\n"
    found = [Example("p", text.count("\n", 0, m.start()) + 1, m.group(1))
             for m in _FENCE.finditer(text)]
    assert [(e.line, e.code, e.runs) for e in found] == [(2, "x = 1\n", True),
                                                          (9, "# not run\ny\n", False)]


def _lines(path: str) -> list[str]:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read().splitlines()


def test_page_lengths_and_set() -> None:
    assert len(_lines("README.md")) <= 250
    assert len(_lines("docs/architecture.md")) <= 600
    for lib in LIBRARIES:
        assert os.path.isfile(os.path.join(ROOT, "docs", "libraries", f"{lib}.md")), lib


def test_readme_has_one_api_map() -> None:
    """One table maps each namespace to what it covers and its page; every library page is
    named there."""
    lines = _lines("README.md")
    headers = [ln for ln in lines if ln.startswith("| namespace")]
    assert len(headers) == 1, headers
    start = lines.index(headers[0])
    table = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        table.append(ln)
    body = "\n".join(table)
    for lib in LIBRARIES:
        assert f"docs/libraries/{lib}.md" in body, lib


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md"]
                         + [f"docs/libraries/{n}.md" for n in LIBRARIES])
def test_relative_links_resolve(page: str) -> None:
    base = os.path.dirname(os.path.join(ROOT, page))
    if not os.path.isfile(os.path.join(ROOT, page)):
        pytest.fail(f"{page} is missing")
    broken = []
    for no, line in enumerate(_lines(page), 1):
        for target in _LINK.findall(line):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not os.path.exists(os.path.normpath(os.path.join(base, target))):
                broken.append(f"{page}:{no}: {target}")
    assert not broken, "\n".join(broken)
