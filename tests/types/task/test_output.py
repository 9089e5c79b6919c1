"""`GET /api/work-items/{id}/logs`: a task's output while it runs, followed to its end,
after it ended (from the run, else the tail the task kept), and where there is none."""

from __future__ import annotations

import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import Store
from tests.types.task.helpers import program, submit, task, task_daemon, wait
from wq.daemon.streams import StreamSlots
from wq.engine.registry import NoOutput
from wq.types.task.models import TaskItem
from wq.types.task.output import make_output
from wq.types.task.runners.command import CommandRunner
from wq.types.task.settings import CommandRunnerConfig

# Three lines a third of a second apart, the middle one on stderr.
LINES = program(
    "import sys, time\n"
    "for n, stream in ((1, sys.stdout), (2, sys.stderr), (3, sys.stdout)):\n"
    "    print('line', n, file=stream, flush=True)\n"
    "    time.sleep(0.3)\n"
)
KINDS = {"lines": {"scope": "project", "command": LINES}}


def test_a_finished_tasks_whole_output_its_tail_and_the_kept_tail(
    store: Store, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    with task_daemon(store, runs, kinds=KINDS) as (runtime, client):
        item = submit(client, "lines")
        wait(lambda: task(runtime, item["id"]).phase == "completed", message="completed")
        whole = client.get(f"/api/work-items/{item['id']}/logs")
        assert whole.status_code == 200, whole.text
        assert whole.headers["content-type"] == "text/plain; charset=utf-8"
        assert whole.text == "line 1\nline 2\nline 3\n"
        assert client.get(f"/api/work-items/{item['id']}/logs?tail=1").text == "line 3\n"
        assert client.get(f"/api/work-items/{item['id']}/logs?tail=0").text == ""
        # The run's directory gone (another machine's, or collected): the kept tail.
        run_id = task(runtime, item["id"]).run_id
        assert run_id is not None
        shutil.rmtree(runs / run_id)
        kept = client.get(f"/api/work-items/{item['id']}/logs?tail=2")
        assert (kept.status_code, kept.text) == (200, "line 2\nline 3\n")


def test_following_a_running_task_ends_when_its_run_ends(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs", kinds=KINDS) as (runtime, client):
        item = submit(client, "lines")
        wait(lambda: task(runtime, item["id"]).run_id is not None, message="running")
        followed = client.get(f"/api/work-items/{item['id']}/logs?follow=true")
        assert followed.status_code == 200, followed.text
        # The answer ended with the run, all of it there; the task ends as it did.
        assert followed.text == "line 1\nline 2\nline 3\n"
        wait(lambda: task(runtime, item["id"]).phase == "completed", message="completed")


def test_following_a_queued_task_waits_for_its_run(store: Store, tmp_path: Path) -> None:
    pools = {"default": {"capacity": 1}}
    with task_daemon(store, tmp_path / "runs", kinds=KINDS, pools=pools) as (runtime, client):
        first = submit(client, "lines")
        second = submit(client, "lines")
        assert task(runtime, second["id"]).admission == "queued"
        refused = client.get(f"/api/work-items/{second['id']}/logs")
        assert refused.status_code == 409
        assert "has not started a run yet" in refused.json()["error"]
        followed = client.get(f"/api/work-items/{second['id']}/logs?follow=1")
        assert (followed.status_code, followed.text) == (200, "line 1\nline 2\nline 3\n")
        assert task(runtime, first["id"]).phase == "completed"


def test_no_output_to_show_is_a_409_and_bad_requests_are_refused(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(store, tmp_path / "runs", kinds=KINDS, start=False) as (_, client):
        item = submit(client, "lines")
        assert client.post(f"/api/work-items/{item['id']}/cancel").status_code == 200
        ended = client.get(f"/api/work-items/{item['id']}/logs?follow=1")
        assert ended.status_code == 409
        assert ended.json()["error"] == "the task ended cancelled without starting a run"
        assert client.get(f"/api/work-items/{uuid.uuid4()}/logs").status_code == 404
        assert client.get(f"/api/work-items/{item['id']}/logs?tail=-1").status_code == 422
        assert client.get(f"/api/work-items/{item['id']}/logs?follow=maybe").status_code == 422
        anonymous = client.get(f"/api/work-items/{item['id']}/logs", headers={"Authorization": ""})
        assert anonymous.status_code == 401


def test_a_run_on_another_machine_names_the_worker_that_started_it(tmp_path: Path) -> None:
    runner = CommandRunner(CommandRunnerConfig(), tmp_path / "runs", log_tail_bytes=100)
    output = make_output({"command": runner})
    elsewhere = TaskItem(
        id=uuid.uuid4(),
        type="task",
        phase="active",
        runner="command",
        run_id="wq-elsewhere-1",
        started_by="host-b:41/worker-3",
    )
    with pytest.raises(NoOutput, match="host-b:41/worker-3") as refused:
        output(None, elsewhere, None, True)  # type: ignore[arg-type]
    assert "shared runs_dir" in str(refused.value)


def test_output_streams_are_bounded_and_end_when_the_daemon_stops(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(store, tmp_path / "runs", kinds=KINDS) as (runtime, client):
        item = submit(client, "lines")
        wait(lambda: task(runtime, item["id"]).phase == "completed", message="completed")
        slots = runtime.output_streams
        taken = [slots.take() for _ in range(slots.limit)]  # by streams still open
        full = client.get(f"/api/work-items/{item['id']}/logs")
        assert full.status_code == 503 and full.headers["Retry-After"] == "5"
        assert "output streams are open, the most allowed" in full.json()["error"]
        for slot in taken:
            slot.give_back()
        assert client.get(f"/api/work-items/{item['id']}/logs").status_code == 200
        slots.close()  # what the daemon's stop signal does
        stopping = client.get(f"/api/work-items/{item['id']}/logs")
        assert (stopping.status_code, stopping.json()["error"]) == (503, "the daemon is stopping")


SLOW = {
    "slow": {
        "scope": "project",
        "command": program("import time\nprint('started', flush=True)\ntime.sleep(2)\n"),
    }
}


def test_followers_beyond_the_bound_at_once_each_get_a_503(store: Store, tmp_path: Path) -> None:
    """The bound was checked before the answer and a slot taken in the stream: requests
    arriving together all passed the check, and the late ones got a 200 whose only
    line said that every slot was taken."""
    with task_daemon(store, tmp_path / "runs", kinds=SLOW) as (runtime, client):
        runtime.output_streams = StreamSlots(2)
        item = submit(client, "slow")
        wait(lambda: task(runtime, item["id"]).run_id is not None, message="running")
        url = f"/api/work-items/{item['id']}/logs?follow=true"
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: client.get(url), range(8)))
        statuses = sorted(answer.status_code for answer in answers)
        assert set(statuses) <= {200, 503} and 1 <= statuses.count(200) <= 2, statuses
        for answer in answers:
            if answer.status_code == 200:
                assert answer.text.startswith("started\n"), answer.text
            else:
                assert answer.headers["Retry-After"] == "5"
        assert runtime.output_streams.open == 0  # every slot given back
