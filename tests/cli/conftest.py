"""CLI fixtures: one real daemon per database for each test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.daemon import RunningDaemon, running_daemon
from tests.conftest import throwaway_pg_database


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDaemon]:
    """A `wq daemon` subprocess on loopback, on SQLite and on PostgreSQL."""
    root = tmp_path_factory.mktemp(f"daemon-{request.param}")
    if request.param == "sqlite":
        with running_daemon(root, f"sqlite:///{root / 'wq.db'}", "sqlite") as running:
            yield running
        return
    with (
        throwaway_pg_database("wq_cli") as url,
        running_daemon(root, url, "postgresql") as running,
    ):
        yield running


@pytest.fixture
def cache_home(tmp_path: Path) -> Path:
    """The CLI's private XDG cache home for one test."""
    return tmp_path / "cli-cache"
