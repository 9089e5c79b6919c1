"""Two engine processes on one PostgreSQL: exactly-once actions, prompt wake-ups."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Store, empty_postgres, make_config
from tests.engine.helpers import count_by, load, submit, submit_many
from tests.support.chain import Behaviour, chain_registry
from tests.support.waiting import wait_for
from wq.engine.db import make_engine, make_sessionmaker
from wq.engine.models import WorkItem

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def postgres_store(pg_database: str) -> Iterator[Store]:
    """Several processes share a database only on PostgreSQL: no SQLite variant."""
    engine = make_engine(pg_database, pool_size=5)
    empty_postgres(engine)
    yield Store(pg_database, engine, make_sessionmaker(engine), make_config(pg_database))
    engine.dispose()


def _start_worker(url: str, log_file: Path, poll: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.worker_process", url, str(log_file), str(poll)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


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
    time.sleep(0.5)  # let the listener's first wake-up pass go by
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
