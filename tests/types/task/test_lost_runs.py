"""A run that is lost: the reason given points at what happened, not at a setting."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from pathlib import Path

from tests.conftest import Store
from tests.types.task.helpers import submit, task, task_daemon, wait
from wq.types.task.models import TaskItem


def test_a_run_whose_supervisor_was_killed_is_not_blamed_on_the_runs_dir(
    store: Store, tmp_path: Path
) -> None:
    # Its directory is here (the replicas share it): the supervisor died, so the
    # hint that replicas must share runs_dir would send the operator the wrong way.
    runs = tmp_path / "runs"
    with task_daemon(store, runs) as (runtime, client):
        item = submit(client, "sleep", payload={"seconds": 60})
        run = wait(lambda: task(runtime, item["id"]).run_id, message="started")
        pid_file = runs / run / "pid.json"
        wait(pid_file.exists, message="announced")
        with runtime.sessions.begin() as session:
            session.get(TaskItem, uuid.UUID(item["id"])).started_by = "other-host:7/worker-3"
        pids = json.loads(pid_file.read_text())
        for kill in (
            lambda: os.kill(int(pids["supervisor"]), signal.SIGKILL),  # first: no exit.json
            lambda: os.killpg(int(pids["pgid"]), signal.SIGKILL),
        ):
            with contextlib.suppress(ProcessLookupError):
                kill()
        lost = wait(
            lambda: (t := task(runtime, item["id"])).phase == "failed" and t, message="lost"
        )
        assert "supervisor ended without an exit status" in (lost.error or ""), lost.error
        assert "runs_dir" not in (lost.error or ""), lost.error
