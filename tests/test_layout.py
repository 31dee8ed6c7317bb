"""The tests are laid out as the package they test: each folder of tests/ is named after a
package of gpumsg/ (tests/client for gpumsg/client, tests/libs/cufft for gpumsg/libs/cufft, ...),
every library of gpumsg/libs/ has its folder of tests, the folders are packages (so that
modules in different folders may share a name), and no file is longer than 600 lines."""

from __future__ import annotations

import os

from tests.conftest import ROOT

MAX_LINES = 600
#: folders of tests/ that are not named after a package: the reliability campaigns, whose
#: modules the benchmarks import by their bare names (so the folder is not a package either)
OWN_FOLDERS = {"stress"}
#: folders of tests/ that are not packages: their modules import their helpers by bare name
#: (tests/array_api's ``from array_helpers import``), so pytest imports them by bare name too,
#: and no two of them may share a name
PLAIN_FOLDERS = OWN_FOLDERS | {"array_api"}


def _folders(path: str) -> set[str]:
    return {d for d in os.listdir(path)
            if os.path.isdir(os.path.join(path, d)) and not d.startswith((".", "_"))}


def _packages(path: str) -> set[str]:
    """The subpackages of the package at ``path``."""
    return {d for d in _folders(path) if os.path.isfile(os.path.join(path, d, "__init__.py"))}


def long_files(tests: str, limit: int = MAX_LINES) -> list[str]:
    """``path: N lines`` for every Python file under ``tests`` longer than ``limit`` lines."""
    out = []
    for base, dirs, files in os.walk(tests):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(base, name)
                with open(path, encoding="utf-8") as f:
                    n = len(f.read().splitlines())
                if n > limit:
                    out.append(f"{os.path.relpath(path, tests)}: {n} lines")
    return out


def unmatched_folders(tests: str, package: str) -> list[str]:
    """The folders under ``tests`` (outside :data:`OWN_FOLDERS`) not named after a package at
    the same place under ``package``, and the libraries of ``package``/libs without a folder of
    tests."""
    out = []

    def walk(rel: str) -> None:
        here, there = os.path.join(tests, rel), os.path.join(package, rel)
        wanted = _packages(there) if os.path.isdir(there) else set()
        for d in sorted(_folders(here)):
            sub = os.path.join(rel, d) if rel else d
            if not rel and d in OWN_FOLDERS:
                continue
            if d not in wanted:
                out.append(f"tests/{sub}: no package gpumsg/{sub}")
            else:
                walk(sub)

    walk("")
    libs = os.path.join(package, "libs")
    if os.path.isdir(libs):
        have = _folders(os.path.join(tests, "libs")) if os.path.isdir(
            os.path.join(tests, "libs")) else set()
        out += [f"gpumsg/libs/{lib}: no folder tests/libs/{lib}"
                for lib in sorted(_packages(libs) - have)]
    return out


def folders_without_init(tests: str) -> list[str]:
    """The folders under ``tests`` (outside :data:`PLAIN_FOLDERS`) that are not packages."""
    out = []
    for base, dirs, _ in os.walk(tests):
        rel = os.path.relpath(base, tests)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in PLAIN_FOLDERS]
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        if not os.path.isfile(os.path.join(base, "__init__.py")):
            out.append("tests" if rel == "." else f"tests/{rel}")
    return sorted(out)


def shared_plain_names(tests: str) -> list[str]:
    """The module names that two files of the :data:`PLAIN_FOLDERS` share."""
    seen: dict[str, str] = {}
    out = []
    for folder in sorted(PLAIN_FOLDERS):
        for base, dirs, files in os.walk(os.path.join(tests, folder)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            for name in sorted(files):
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(base, name), tests)
                    if name in seen:
                        out.append(f"tests/{rel} and tests/{seen[name]}")
                    seen.setdefault(name, rel)
    return out


def test_no_test_file_is_longer_than_600_lines() -> None:
    long = long_files(os.path.join(ROOT, "tests"))
    assert not long, "split these by topic:\n" + "\n".join(long)


def test_test_folders_mirror_the_package() -> None:
    bad = unmatched_folders(os.path.join(ROOT, "tests"), os.path.join(ROOT, "gpumsg"))
    assert not bad, "\n".join(bad)


def test_test_folders_are_packages() -> None:
    bad = folders_without_init(os.path.join(ROOT, "tests"))
    assert not bad, "add an __init__.py to:\n" + "\n".join(bad)


def test_modules_imported_by_bare_name_have_names_of_their_own() -> None:
    bad = shared_plain_names(os.path.join(ROOT, "tests"))
    assert not bad, "rename one of:\n" + "\n".join(bad)


def _tree(root, files: dict[str, str]) -> str:
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return str(root)


def test_the_checks_catch_what_they_should(tmp_path) -> None:
    """Each check finds its defect in a small made-up tree, and passes the same tree fixed."""
    package = {"pkg/__init__.py": "", "pkg/client/__init__.py": "", "pkg/array_api/__init__.py": "",
               "pkg/libs/__init__.py": "", "pkg/libs/cufft/__init__.py": "",
               "pkg/libs/curand/__init__.py": ""}
    good = {"t/__init__.py": "", "t/client/__init__.py": "", "t/libs/__init__.py": "",
            "t/libs/cufft/__init__.py": "", "t/libs/curand/__init__.py": "",
            "t/libs/cufft/test_a.py": "x = 1\n" * MAX_LINES, "t/libs/curand/test_c.py": "",
            "t/stress/fuzz.py": "", "t/array_api/test_fft.py": "", **package}
    root = _tree(tmp_path / "good", good)
    tests, pkg = os.path.join(root, "t"), os.path.join(root, "pkg")
    assert long_files(tests) == []
    assert unmatched_folders(tests, pkg) == []
    assert folders_without_init(tests) == []
    assert shared_plain_names(tests) == []

    bad = dict(good)
    bad["t/libs/cufft/test_a.py"] += "x = 2\n"  # one line too many
    bad["t/libs/cublas/test_b.py"] = ""  # no gpumsg/libs/cublas, and no __init__.py
    bad["t/stress/test_fft.py"] = ""  # the name of a module of tests/array_api
    del bad["t/libs/curand/__init__.py"]  # curand's folder no longer a package
    root = _tree(tmp_path / "bad", bad)
    tests, pkg = os.path.join(root, "t"), os.path.join(root, "pkg")
    assert long_files(tests) == [f"libs/cufft/test_a.py: {MAX_LINES + 1} lines"]
    assert unmatched_folders(tests, pkg) == ["tests/libs/cublas: no package gpumsg/libs/cublas"]
    assert folders_without_init(tests) == ["tests/libs/cublas", "tests/libs/curand"]
    assert shared_plain_names(tests) == ["tests/stress/test_fft.py and tests/array_api/test_fft.py"]
    os.rename(os.path.join(tests, "libs", "curand"), os.path.join(tests, "libs", "curand_old"))
    assert "gpumsg/libs/curand: no folder tests/libs/curand" in unmatched_folders(tests, pkg)
