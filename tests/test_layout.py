"""Each package's modules import each other in one direction: no module reaches back
into one that imports it, even from inside a function (where a cycle hides until the
function runs), so that each can be read and loaded on its own."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = ["wq.cli", "wq.client", "wq.tui", "wq.engine"]


def _imports(package: str, folder: Path, path: Path) -> set[str]:
    """The modules of `package` a module imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(
            name
            for name in names
            if name.startswith(f"{package}.") and (folder / f"{name.split('.')[-1]}.py").exists()
        )
    return {name.removeprefix(f"{package}.") for name in found} - {path.stem}


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_import_each_other_without_a_cycle(package: str) -> None:
    module_file = importlib.import_module(package).__file__
    assert module_file is not None
    folder = Path(module_file).parent
    graph = {path.stem: _imports(package, folder, path) for path in folder.glob("*.py")}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            cycle = " -> ".join((*path[path.index(module) :], module))
            raise AssertionError(f"an import cycle in {package}: {cycle}")
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
