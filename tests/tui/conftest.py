"""TUI fixtures: one real daemon on loopback (SQLite) per module, and the app's pilot helpers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from textual.pilot import Pilot

from tests.cli.daemon import RunningDaemon, running_daemon
from wq.client.api import ApiClient
from wq.client.credentials import Credentials

DEADLINE = 30.0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """A `wq daemon` subprocess (the TUI's views do not depend on the database)."""
    root = tmp_path_factory.mktemp("tui-daemon")
    with running_daemon(root, f"sqlite:///{root / 'wq.db'}", "sqlite") as running:
        yield running


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
