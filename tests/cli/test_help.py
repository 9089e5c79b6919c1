"""Every command's `--help`: the values it takes are named for people, not Python types."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from tests.cli.daemon import cli_env, invoke
from wq.cli.main import app


def command_paths() -> list[list[str]]:
    """Every command of `wq`, as the words that run it."""
    found: list[list[str]] = []

    def walk(path: list[str], command: Any) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            found.append(path)
            return
        for name, child in sorted(subcommands.items()):
            if not child.hidden:
                walk([*path, name], child)

    walk([], typer.main.get_command(app))
    return found


@pytest.mark.parametrize("path", command_paths(), ids=" ".join)
def test_help_names_no_python_list_type(path: list[str], cache_home: Path) -> None:
    # `wq cancel --help` said `--id <list[str]>` and `ids... <list[str]>`.
    result = invoke([*path, "--help"], cli_env(cache_home))
    assert result.code == 0, result
    assert "list[" not in result.stdout, result.stdout


def test_ids_are_named_id(cache_home: Path) -> None:
    for command in ("retry", "cancel"):
        shown = invoke([command, "--help"], cli_env(cache_home)).stdout
        assert f"Usage: wq {command} [OPTIONS] [ID]..." in shown
        assert "\n  ID  Item ids." in shown and "--id ID " in shown
