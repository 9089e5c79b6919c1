"""`wq pools` in order of pressure (or name), `wq queue` of the most pressed project, and
items backing off shown as such."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

from sqlalchemy import update

from tests.cli.daemon import BLOCKED, RunningDaemon, cli_env, invoke
from wq.engine.db import make_engine
from wq.engine.models import WorkItem, utcnow


def env(daemon: RunningDaemon, cache_home: Path) -> dict[str, str | None]:
    return cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)


def projects_listed(stdout: str, mine: set[str]) -> list[str]:
    return [
        line.split()[0]
        for line in stdout.splitlines()
        if line.split()[:1] and line.split()[0] in mine
    ]


def test_pools_most_pressed_first_or_by_name(daemon: RunningDaemon, cache_home: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    calm, busy = f"{BLOCKED}/a-calm-{tag}", f"{BLOCKED}/z-busy-{tag}"
    daemon.submit(project=calm)
    for _ in range(3):
        daemon.submit(project=busy)
    by_pressure = invoke(["pools"], env(daemon, cache_home))
    assert by_pressure.code == 0, by_pressure
    assert projects_listed(by_pressure.stdout, {calm, busy}) == [busy, calm]
    by_name = invoke(["pools", "--sort", "name"], env(daemon, cache_home))
    assert projects_listed(by_name.stdout, {calm, busy}) == [calm, busy]
    bad = invoke(["pools", "--sort", "size"], env(daemon, cache_home))
    assert bad.code == 2 and "--sort: 'size' is not one of pressure, name" in bad.stderr

    queue = invoke(["queue", "-o", "json"], env(daemon, cache_home))
    assert queue.code == 0, queue
    first = by_pressure.stdout.splitlines()[1].split()[0]
    assert queue.stderr == f"the queue of {first}, the most pressed project\n"


def test_an_item_backing_off_is_shown_as_such(daemon: RunningDaemon, cache_home: Path) -> None:
    project = f"{BLOCKED}/backoff-{uuid.uuid4().hex[:6]}"
    waiting = daemon.submit(project=project)
    daemon.submit(project=project)
    engine = make_engine(daemon.database_url, pool_size=1)
    try:
        with engine.begin() as conn:
            conn.execute(
                update(WorkItem)
                .where(WorkItem.id == uuid.UUID(waiting["id"]))
                .values(attempts=3, run_after=utcnow() + timedelta(minutes=10))
            )
    finally:
        engine.dispose()
    (pool,) = json.loads(
        invoke(["pools", "--project", project, "-o", "json"], env(daemon, cache_home)).stdout
    )
    assert (pool["backing_off"], pool["failed"]) == (1, 0)
    table = invoke(["pools", "--project", project], env(daemon, cache_home)).stdout.splitlines()
    assert table[0].split()[-4:] == ["QUEUED", "BACKING", "OFF", "FAILED"]
    assert table[1].split()[-2:] == ["1", "0"]
    queue = invoke(["queue", "--project", project], env(daemon, cache_home))
    (line,) = [line for line in queue.stdout.splitlines() if waiting["id"] in line]
    assert "(backing off, 3 failed)" in line
    assert "in 9m" in line or "in 10m" in line
