"""Fixtures for the `task` type's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from wq.types.task.runners.command import CommandRunner
from wq.types.task.settings import CommandRunnerConfig


@pytest.fixture(autouse=True)
def no_run_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """Cancel the runs a test left going. A run outlives its daemon by design (a new
    one follows it), so a test that ends with a long run still going left its process
    behind for the run's whole timeout."""
    yield
    for started in tmp_path.glob("**/spec.json"):  # written before the run starts
        run_dir = started.parent
        if not (run_dir / "exit.json").exists():
            runner = CommandRunner(CommandRunnerConfig(kill_grace_seconds=1), run_dir.parent, 0)
            runner.cancel(run_dir.name)
