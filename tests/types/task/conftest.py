"""Fixtures for the `task` type's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.runs import cancel_runs_under


@pytest.fixture(autouse=True)
def no_run_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """Cancel the runs a test left going. A run outlives its daemon by design (a new
    one follows it), so a test that ends with a long run still going left its process
    behind for the run's whole timeout."""
    yield
    cancel_runs_under(tmp_path)
