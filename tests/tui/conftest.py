"""TUI fixtures: a real daemon on loopback per module and database, and pilot helpers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.cells import cell_len
from sqlalchemy.orm import Session
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import DataTable

from tests.cli.daemon import RunningDaemon, running_daemon
from tests.conftest import throwaway_pg_database
from wq.client.api import ApiClient
from wq.client.credentials import Credentials
from wq.engine.db import make_engine

DEADLINE = 30.0


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDaemon]:
    """A `wq daemon` subprocess on loopback, on SQLite and on PostgreSQL.

    `extra["database_url"]` lets a test seed what no API creates (an alert-lane `mr`
    item, an event not applied yet) straight into the daemon's database.
    """
    root = tmp_path_factory.mktemp(f"tui-daemon-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'wq.db'}"
        with running_daemon(root, url, "sqlite") as running:
            running.extra["database_url"] = url
            yield running
        return
    with throwaway_pg_database("wq_tui") as url, running_daemon(root, url, "postgresql") as running:
        running.extra["database_url"] = url
        yield running


@contextlib.contextmanager
def database(daemon: RunningDaemon) -> Iterator[Session]:
    """A session on the daemon's own database (committed on exit)."""
    engine = make_engine(daemon.extra["database_url"], pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            yield session
    finally:
        engine.dispose()


def api_for(daemon: RunningDaemon, token: str | None = None) -> ApiClient:
    """The TUI's client, with a token from the environment only (no cache, no login)."""
    credentials = Credentials(daemon.url, environ={"WQ_TOKEN": token or daemon.admin}, login=None)
    return ApiClient(daemon.url, credentials=credentials, timeout=5.0)


async def until(
    pilot: Pilot[None], predicate: Callable[[], object], *, message: str, timeout: float = DEADLINE
) -> None:
    """Let the app run until `predicate()` is true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        await pilot.pause(0.05)


async def table_on_screen(app: App[None], pilot: Pilot[None], selector: str) -> DataTable[Any]:
    """The current screen's table `selector`, once that screen has composed it."""
    await until(pilot, lambda: app.screen.query(selector), message=f"the table {selector}")
    return app.screen.query_one(selector, DataTable)


def measuring(table: DataTable[Any]) -> bool:
    """Whether the table still has rows or cells whose widths it has not taken into
    account (it sizes its columns on the next idle: a frame before has old widths)."""
    if table._require_update_dimensions or table._new_rows or table._updated_cells:
        return True
    for index, column in enumerate(table.ordered_columns):
        widest = max(
            (
                cell_len(str(table.get_row_at(row)[index]))
                for row in range(min(table.row_count, 50))
            ),
            default=0,
        )
        if column.auto_width and column.content_width < widest:
            return True
    return False


async def measured(pilot: Pilot[None], table: DataTable[Any]) -> None:
    """Wait until `table` has sized its columns for what it holds, then for the paint."""
    await until(pilot, lambda: not measuring(table), message="the table's column widths")
    await pilot.pause()
