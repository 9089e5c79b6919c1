"""The CLI's modules import each other in one direction: no module reaches back into
one that imports it, even from inside a function (where a cycle hides until the
function runs), so that each can be read and loaded on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import wq.cli

CLI = Path(wq.cli.__file__).parent


def _imports(path: Path) -> set[str]:
    """The `wq.cli` modules a module imports anywhere in its body."""
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
            if (CLI / f"{name.split('.')[-1]}.py").exists() and name.startswith("wq.cli.")
        )
    return {name.removeprefix("wq.cli.") for name in found} - {path.stem}


def test_the_cli_modules_import_each_other_without_a_cycle() -> None:
    graph = {path.stem: _imports(path) for path in CLI.glob("*.py")}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            cycle = " -> ".join((*path[path.index(module) :], module))
            raise AssertionError(f"an import cycle: {cycle}")
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
