"""The layers of the package import only downwards, and no modules import each other in a
circle:

    errors, dtypes  <-  messages, memory  <-  backends  <-  service  <-  libs  <-  client
    <-  supervision, multi  <-  gpumsg/__init__, __main__

Every import counts (module level and inside functions), except those under
``if TYPE_CHECKING:``, which never run. Reads the source; imports nothing."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpumsg")

#: top-level part of the package -> its layer; a part may import its own layer and lower ones
LAYER = {
    "errors": 0, "dtypes": 0, "config": 0,
    "messages": 1, "memory": 1,
    "backends": 2,
    "service": 3,
    "libs": 4,
    "client": 5,
    "supervision": 6, "multi": 6, "ray": 6, "array_api": 6,
    "__init__": 7, "__main__": 7,
}


def _modules() -> dict[str, str]:
    """Dotted module name -> file path for every module of the package."""
    out = {}
    for folder, _dirs, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: str, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported gpumsg module, line, at module level) for every import that runs."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found: list[tuple[str, int, bool]] = []

    def resolve(name: str) -> str | None:
        # the longest known module that ``name`` starts with
        while name:
            if name in known:
                return name
            if "." not in name:
                return None
            name = name.rsplit(".", 1)[0]
        return None

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, top)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = resolve(alias.name)
                    if target:
                        found.append((target, child.lineno, top))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[:len(base) - (child.level - 1)]
                    stem = ".".join(base + ([child.module] if child.module else []))
                else:
                    stem = child.module or ""
                for alias in child.names:
                    target = resolve(f"{stem}.{alias.name}") or resolve(stem)
                    if target:
                        found.append((target, child.lineno, top))
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.Lambda))
            visit(child, inner)

    visit(tree, True)
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = _modules()
EDGES = {m: _imports(m, p, set(MODULES)) for m, p in MODULES.items()}


def test_every_part_has_a_layer() -> None:
    missing = sorted({_part(m) for m in MODULES} - set(LAYER))
    assert not missing, f"give these parts of gpumsg a layer in LAYER: {missing}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_down(module: str) -> None:
    mine = LAYER[_part(module)]
    bad = [f"line {line}: {target} (layer {LAYER[_part(target)]})"
           for target, line, _top in EDGES[module]
           if _part(target) != "__init__" and LAYER[_part(target)] > mine]
    assert not bad, f"{module} (layer {mine}) imports upwards: {bad}"


def test_service_imports_no_library() -> None:
    bad = [(m, t) for m, edges in EDGES.items() if _part(m) == "service"
           for t, _line, _top in edges if _part(t) == "libs"]
    assert not bad


def test_no_import_cycles() -> None:
    """No circle among module-level imports (a package counts as importing its own
    ``__init__``, which is what ``from .x import y`` runs first)."""
    graph = {m: {t for t, _line, top in edges if top and t != m} for m, edges in EDGES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # importing a package's own submodule from its __init__ is not a circle
            if node.startswith(nxt + ".") or nxt.startswith(node + ".") and \
                    MODULES[node].endswith("__init__.py"):
                continue
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = dfs(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = dfs(m)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checker_sees_an_upward_import(tmp_path) -> None:
    """A test that cannot fail is a defect: an upward import planted in a copy is found."""
    path = tmp_path / "bad.py"
    path.write_text("from ..client._device import Device\n")
    found = _imports("gpumsg.service.bad", str(path), set(MODULES))
    assert ("gpumsg.client._device", 1, True) in found
    assert LAYER[_part("gpumsg.client._device")] > LAYER["service"]
