"""Cancelling a running task: what the item says afterwards is what happened to its run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.conftest import Store
from tests.engine.helpers import audit_types
from tests.types.task.helpers import KINDS, program, submit, task, task_daemon, wait
from wq.daemon.runtime import Runtime
from wq.engine.models import utcnow

# Ignores SIGTERM: a cancel has to wait out the kill grace and KILL it.
STUBBORN = {
    "scope": "project",
    "command": program(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('holding on', flush=True)\n"
        "time.sleep(600)\n"
    ),
}


@contextmanager
def stubborn_running(
    store: Store, tmp_path: Path
) -> Iterator[tuple[Runtime, TestClient, dict[str, Any]]]:
    """A daemon whose `stubborn` task is running, and the item."""
    with task_daemon(store, tmp_path / "runs", kinds={**KINDS, "stubborn": STUBBORN}) as (
        runtime,
        client,
    ):
        item = submit(client, "stubborn")
        run = wait(lambda: task(runtime, item["id"]).run_id, message="started")
        log = tmp_path / "runs" / run / "output.log"
        wait(lambda: log.exists() and "holding on" in log.read_text(), message="up")
        yield runtime, client, item


def test_a_cancel_that_comes_after_the_run_exited_0_leaves_it_completed(
    store: Store, tmp_path: Path
) -> None:
    # The run has ended, but its worker has not looked yet (the next check is far off):
    # the item ends as its run did, not `cancelled` (a caller would run it again).
    runs = tmp_path / "runs"
    with task_daemon(store, runs, poll_interval_seconds=30) as (runtime, client):
        item = submit(client, "echo", payload={"goal": "done already"})
        run = wait(lambda: task(runtime, item["id"]).run_id, message="started")
        wait(lambda: (runs / run / "exit.json").exists(), message="the run exited")
        response = client.post(f"/api/work-items/{item['id']}/cancel")
        assert response.status_code == 202, response.text
        ended = wait(
            lambda: (t := task(runtime, item["id"])).phase != "active" and t, message="ended"
        )
        assert ended.phase == "completed", ended.error
        assert ended.exit_status == 0 and ended.error is None
        assert "done already" in (ended.log_tail or "")


def test_asking_again_to_cancel_a_running_task_records_one_request(
    store: Store, tmp_path: Path
) -> None:
    with stubborn_running(store, tmp_path) as (runtime, client, item):
        answers = [client.post(f"/api/work-items/{item['id']}/cancel") for _ in range(3)]
        assert [answer.status_code for answer in answers] == [202, 202, 202]
        assert {answer.json()["action"] for answer in answers} == {"requested"}
        wait(lambda: task(runtime, item["id"]).phase == "cancelled", message="cancelled")
        trail = audit_types(runtime.sessions, task(runtime, item["id"]).id)
        assert trail.count("cancel_requested") == 1, trail


def test_a_cancelled_run_finished_when_it_ended_not_when_the_cancel_began(
    store: Store, tmp_path: Path
) -> None:
    with stubborn_running(store, tmp_path) as (runtime, client, item):
        # Both clocks read before the request: under load the cancel's answer itself
        # may take a second (SQLite's write lock), and that second counts as waiting.
        asked, started = utcnow(), time.monotonic()
        assert client.post(f"/api/work-items/{item['id']}/cancel").status_code == 202
        ended = wait(
            lambda: (t := task(runtime, item["id"])).phase == "cancelled" and t,
            message="cancelled",
        )
        took = time.monotonic() - started
        # TERM is ignored: the run ends when KILL comes, a kill grace (2 s) later.
        assert ended.exit_status == -9
        assert ended.finished_at is not None
        assert ended.finished_at - asked >= timedelta(seconds=1.5)
        assert ended.finished_at - asked <= timedelta(seconds=took + 1)
