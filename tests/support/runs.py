"""Runs of the `command` runner that a test left going: they outlive their daemon by
design (a new one follows them), so a test that ends with one running must stop it."""

from __future__ import annotations

from pathlib import Path

from wq.types.task.runners.command import CommandRunner
from wq.types.task.settings import CommandRunnerConfig


def cancel_runs_under(root: Path) -> None:
    """Cancel every unfinished run whose directory lies under `root`."""
    for started in root.glob("**/spec.json"):  # written before the run starts
        run_dir = started.parent
        if not (run_dir / "exit.json").exists():
            runner = CommandRunner(CommandRunnerConfig(kill_grace_seconds=1), run_dir.parent, 0)
            runner.cancel(run_dir.name)
