"""Two real daemons on one PostgreSQL database: each lists both as alive; one killed
shows as lost within three heartbeats; one stopped cleanly removes its row; and
`wq replicas` prints them."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.conftest import throwaway_pg_database
from tests.daemon.test_daemon_process import (  # noqa: F401 - fixtures
    Daemon,
    clean_env,
    daemons,
    read_token,
    run_wq,
    start_daemon,
    write,
)
from tests.support.waiting import wait_for
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.models import Replica

HEARTBEAT = 0.5
DEADLINE = 60.0


@pytest.fixture
def pg_url() -> Iterator[str]:
    with throwaway_pg_database("wq_replicas") as url:
        yield url


def start(started: list[Daemon], root: Path, url: str) -> tuple[Daemon, dict[str, str]]:
    config = write(
        root / "wq.yml",
        f"processing:\n  workers: 2\n  replica_heartbeat_seconds: {HEARTBEAT}\n"
        "  shutdown_grace_seconds: 2\n",
    )
    env = clean_env(root, WQ_DATABASE_URL=url)
    daemon = start_daemon(started, root, env, "--config", str(config))
    daemon.wait_healthy()
    _, token = read_token(root, daemon.url)
    return daemon, clean_env(root, WQ_URL=daemon.url, WQ_TOKEN=token)


def listed(env: dict[str, str]) -> dict[str, Any]:
    answer = httpx.get(
        f"{env['WQ_URL']}/api/replicas",
        headers={"Authorization": f"Bearer {env['WQ_TOKEN']}"},
        timeout=10.0,
    )
    assert answer.status_code == 200, answer.text
    return {replica["pid"]: replica for replica in answer.json()}


def test_replicas_alive_lost_after_a_kill_and_gone_after_a_clean_stop(
    daemons: list[Daemon],  # noqa: F811
    tmp_path: Path,
    pg_url: str,
) -> None:
    run_wq("db", "migrate", env=clean_env(tmp_path, WQ_DATABASE_URL=pg_url), cwd=tmp_path)
    first, _ = start(daemons, tmp_path / "a", pg_url)
    second, second_env = start(daemons, tmp_path / "b", pg_url)
    pids = {first.proc.pid, second.proc.pid}
    both = wait_for(
        lambda: (found := listed(second_env)).keys() >= pids and found,
        timeout=DEADLINE,
        message="both replicas listed",
    )
    for pid in pids:
        assert both[pid]["state"] == "alive"
        assert both[pid]["workers_total"] == 2
        assert both[pid]["heartbeat_seconds"] == HEARTBEAT
    table = run_wq("replicas", env=second_env, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split()[:3] == ["REPLICA", "STATE", "HEARTBEAT"]
    assert sum(" alive " in line for line in table.stdout.splitlines()) == 2

    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=DEADLINE)
    lost = wait_for(
        lambda: listed(second_env)[first.proc.pid]["state"] == "lost",
        timeout=DEADLINE,
        message="the killed replica shown lost",
    )
    assert lost
    shown = run_wq("replicas", "-o", "json", env=second_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert '"state": "lost"' in shown.stdout

    assert second.terminate(signal.SIGTERM, DEADLINE) == 0, second.log()
    engine = make_engine(pg_url, pool_size=1)
    try:
        with make_sessionmaker(engine)() as session:
            left = set(session.scalars(select(Replica.pid)))
    finally:
        engine.dispose()
    assert left == {first.proc.pid}  # the clean stop removed its row, the killed one stays
