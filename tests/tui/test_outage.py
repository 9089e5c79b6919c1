"""An API outage: the status line says so, the last data stays, the view recovers alone."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from pathlib import Path

import pytest
from textual.widgets import DataTable

from tests.cli.daemon import (
    BLOCKED,
    GITLAB_TOKEN,
    GITLAB_TOKEN_ENV,
    RunningDaemon,
    base_env,
    running_daemon,
)
from tests.conftest import throwaway_pg_database
from tests.tui.conftest import api_for, until
from wq.tui.app import WqApp
from wq.tui.status import StatusLine


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_outage_is_shown_and_recovered(tmp_path: Path, dialect: str) -> None:
    with contextlib.ExitStack() as stack:
        if dialect == "sqlite":
            url = f"sqlite:///{tmp_path / 'wq.db'}"
        else:
            url = stack.enter_context(throwaway_pg_database("wq_tui_outage"))
        daemon = stack.enter_context(running_daemon(tmp_path, url, dialect))
        project = f"{BLOCKED}/outage-{uuid.uuid4().hex[:6]}"
        daemon.submit(project=project)
        asyncio.run(scenario(daemon, project))


async def scenario(daemon: RunningDaemon, project: str) -> None:
    with api_for(daemon) as api:
        app = WqApp(api, refresh=0.3, view="pools")
        async with app.run_test(size=(120, 36)) as pilot:
            table = app.screen.query_one("#pools", DataTable)
            status = app.screen.query_one(StatusLine)

            def has_pool() -> bool:
                return table.row_count > 0 and project in table.rows

            await until(pilot, has_pool, message="the pool")
            stop(daemon.proc)
            await until(pilot, lambda: status.message.startswith("error:"), message="the error")
            assert "cannot connect" in status.message
            assert "showing data from" in status.message
            assert has_pool()  # the last good data stays
            restarted = restart(daemon)
            try:
                await until(pilot, lambda: status.message.startswith("updated"), message="recovery")
                assert has_pool()
            finally:
                stop(restarted)


def restart(daemon: RunningDaemon) -> subprocess.Popen[bytes]:
    """The same daemon again, on the same port and database."""
    assert isinstance(daemon.proc.args, list)
    with (daemon.root / "daemon-2.log").open("wb") as log:
        return subprocess.Popen(
            daemon.proc.args,
            env=base_env(daemon.root, **{GITLAB_TOKEN_ENV: GITLAB_TOKEN}),
            cwd=daemon.root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


pytestmark = pytest.mark.timeout(240)
