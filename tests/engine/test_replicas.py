"""Two engine processes on one PostgreSQL: exactly-once actions, prompt wake-ups."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.conftest import Store, make_config
from tests.engine.helpers import count_by, load, submit, submit_many
from tests.support.chain import Behaviour, chain_registry, new_chain_item
from tests.support.waiting import wait_for
from tests.support.worker_process import spawn
from wq.engine import items
from wq.engine.models import WorkItem, utcnow


def _start_worker(url: str, log_file: Path, poll: float) -> subprocess.Popen[str]:
    return spawn(url, log_file, poll)


@pytest.fixture
def workers(postgres_store: Store, tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.terminate()
    for process in started:
        try:
            assert process.wait(timeout=15) == 0
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def test_two_processes_run_every_action_exactly_once(
    postgres_store: Store, workers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    store = postgres_store
    log_file = tmp_path / "executions.log"
    config = make_config(store.url, pools={"default": {"capacity": 1000}})
    registry = chain_registry(Behaviour())
    ids = submit_many(store.sessions, registry, config, [f"p/{n % 25}" for n in range(1000)])
    workers.extend(_start_worker(store.url, log_file, 0.5) for _ in range(2))
    wait_for(
        lambda: count_by(store.sessions, WorkItem.admission).get("idle") == 1000,
        timeout=240,
        interval=0.5,
        message="1000 items idle",
    )
    lines = log_file.read_text().split("\n")[:-1]
    counts = Counter(lines)
    assert len(counts) == 3000 and set(counts.values()) == {1}
    assert {line.split()[0] for line in lines} == {str(item_id) for item_id in ids}


def test_another_replicas_submission_is_picked_up_without_polling(
    postgres_store: Store, workers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    store = postgres_store
    # The worker polls only every 60 s: only NOTIFY can wake it in time.
    workers.append(_start_worker(store.url, tmp_path / "executions.log", 60.0))
    config = make_config(store.url)
    registry = chain_registry(Behaviour())
    started = time.monotonic()
    intake = submit(store.sessions, registry, config)
    assert intake.item is not None
    wait_for(
        lambda: load(store.sessions, intake.item.id).admission == "idle",  # type: ignore[union-attr]
        timeout=5,
        message="the other process to finish the item",
    )
    assert time.monotonic() - started < 3


def _listener_pids(store: Store) -> list[int]:
    with store.engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
                )
            ).scalars()
        )


def test_work_signalled_while_listen_was_down_is_picked_up_after_the_reconnect(
    postgres_store: Store, workers: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    store = postgres_store
    # The worker polls only every 60 s: only the listener can bring the item in time.
    workers.append(_start_worker(store.url, tmp_path / "executions.log", 60.0))
    (listener,) = _listener_pids(store)
    config = make_config(store.url)
    registry = chain_registry(Behaviour())
    with store.sessions.begin() as session:
        intake = items.submit(
            session,
            new_chain_item(),
            registry=registry,
            pool=config.pool_for("group/project"),
            now=utcnow(),
            actor="test",
            trigger={"source": "test"},
        )
        assert intake.item is not None
        item_id = intake.item.id
        # Drop the LISTEN connection before this commit sends its NOTIFY: nobody
        # hears it, and only the admission pass after the reconnect can find the item.
        session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": listener})
        wait_for(lambda: listener not in _listener_pids(store), message="LISTEN backend gone")
    wait_for(
        lambda: load(store.sessions, item_id).admission == "idle",
        timeout=20,
        message="the item picked up after LISTEN reconnected",
    )
    wait_for(
        lambda: len(pids := _listener_pids(store)) == 1 and listener not in pids,
        timeout=20,
        message="one new LISTEN connection",
    )
