"""Tasks through the daemon: run to completion or failure, hold the slot, cancel, GC."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from tests.conftest import Store
from tests.engine.helpers import audit_types
from tests.types.task.helpers import KINDS, program, submit, task, task_daemon, wait
from wq.client.shown import attempts as attempts_shown
from wq.daemon.runtime import Runtime
from wq.engine.models import utcnow
from wq.types.task import TaskRuntime
from wq.types.task.gc import collect
from wq.types.task.models import TaskItem


def starts(tmp_path: Path) -> int:
    path = tmp_path / "starts.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_exit_zero_completes_with_the_output_tail(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs") as (runtime, client):
        item = submit(client, "echo", payload={"goal": "say hello"})
        assert item["details"]["kind"] == "echo" and item["admission"] == "queued"
        done = wait(
            lambda: (t := task(runtime, item["id"])).phase == "completed" and t,
            message="completed",
        )
        assert done.exit_status == 0 and done.error is None
        assert '"goal": "say hello"' in (done.log_tail or "")
        assert done.admission == "done" and done.finished_at is not None
        trail = audit_types(runtime.sessions, done.id)
        assert trail[:3] == ["created", "queued", "admitted"]
        assert "phase_changed" in trail and trail.count("released") == 1


def test_a_long_log_tail_leaves_its_last_line_in_error(store: Store, tmp_path: Path) -> None:
    """With `log_tail_bytes` above the error's 4,000 characters, the error keeps the end
    of the tail: its last line most often says why the run failed."""
    noisy = {
        "scope": "project",
        "command": program(
            "print(('progress line' + chr(10)) * 500)\n"
            "print('the real reason')\n"
            "raise SystemExit(2)\n"
        ),
    }
    kinds = {**KINDS, "noisy": noisy}
    with task_daemon(store, tmp_path / "runs", kinds=kinds, log_tail_bytes=20_000) as (
        runtime,
        client,
    ):
        item = submit(client, "noisy")
        failed = wait(
            lambda: (t := task(runtime, item["id"])).phase == "failed" and t, message="failed"
        )
        assert failed.error is not None and len(failed.error) <= 4000
        assert failed.error.startswith("exit status 2")
        assert failed.error.endswith("the real reason")


def test_non_zero_exit_fails_with_the_log_tail_in_error(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs") as (runtime, client):
        item = submit(client, "fail")
        failed = wait(
            lambda: (t := task(runtime, item["id"])).phase == "failed" and t, message="failed"
        )
        assert failed.exit_status == 3
        assert failed.error is not None
        assert "exit status 3" in failed.error and "something broke" in failed.error
        # The run started once and failed: `attempts` (failures in a row of one action)
        # is 0, and the API says how many runs there were, as `wq status` shows them.
        shown = client.get(f"/api/work-items/{item['id']}").json()
        assert (shown["attempts"], shown["details"]["runs"]) == (0, 1)
        assert attempts_shown(shown) == "1"


def test_output_with_nul_bytes_is_kept_with_a_stand_in(store: Store, tmp_path: Path) -> None:
    # On PostgreSQL (text cannot hold NUL) the finish failed on every attempt: the task
    # held its pool place for over a minute, then ended failed with a database error,
    # a run that exited 0 included, its exit status and output lost.
    kinds = {
        **KINDS,
        "binary": {
            "scope": "project",
            "command": program("import sys; sys.stdout.buffer.write(b'hello\\x00world\\xff\\n')"),
        },
        "binary-fail": {
            "scope": "project",
            "command": program(
                "import sys; sys.stdout.buffer.write(b'broke\\x00here\\n'); raise SystemExit(3)"
            ),
        },
    }
    with task_daemon(store, tmp_path / "runs", kinds=kinds) as (runtime, client):
        passed, failed = submit(client, "binary"), submit(client, "binary-fail")
        done = wait(
            lambda: (t := task(runtime, passed["id"])).phase in ("completed", "failed") and t,
            message="the binary task ended",
        )
        assert (done.phase, done.exit_status) == ("completed", 0), done.error
        assert done.log_tail == "hello\N{SYMBOL FOR NULL}world\N{REPLACEMENT CHARACTER}\n"
        ended = wait(
            lambda: (t := task(runtime, failed["id"])).phase == "failed" and t,
            message="the failing binary task ended",
        )
        assert ended.exit_status == 3
        assert ended.error == "exit status 3\nbroke\N{SYMBOL FOR NULL}here"


def test_argv_template_takes_project_and_payload_without_a_shell(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(store, tmp_path / "runs") as (runtime, client):
        item = submit(client, "args", project="g/p", payload={"n": "; rm -rf / #"})
        done = wait(
            lambda: (t := task(runtime, item["id"])).phase != "active" and t, message="finished"
        )
        assert done.phase == "completed", done.error
        assert "['g/p', '; rm -rf / #']" in (done.log_tail or "")
        # An object or a list goes as JSON (it was Python's repr: {'a': [1, True]}).
        nested = submit(client, "args", project="g/p", payload={"n": {"a": [1, True]}})
        done = wait(
            lambda: (t := task(runtime, nested["id"])).phase != "active" and t, message="ran"
        )
        assert done.phase == "completed", done.error
        assert """['g/p', '{"a": [1, true]}']""" in (done.log_tail or ""), done.log_tail
        missing = submit(client, "args", payload={})
        failed = wait(
            lambda: (t := task(runtime, missing["id"])).phase != "active" and t, message="ended"
        )
        assert failed.phase == "failed" and "no 'n'" in (failed.error or "")


def test_a_running_task_holds_its_slot_until_it_is_terminal(store: Store, tmp_path: Path) -> None:
    pools = {"default": {"capacity": 1}}
    with task_daemon(store, tmp_path / "runs", pools=pools) as (runtime, client):
        first = submit(client, "sleep", payload={"seconds": 600})
        second = submit(client, "echo")
        wait(lambda: "sleeping" in _output(tmp_path, runtime, first["id"]), message="up")
        # Checked several times; all that time the second waits in the queue.
        checks = task(runtime, first["id"]).next_check_at
        wait(lambda: task(runtime, first["id"]).next_check_at != checks, message="a later check")
        assert task(runtime, first["id"]).admission == "admitted"
        assert task(runtime, second["id"]).admission == "queued"
        cancel = client.post(f"/api/work-items/{first['id']}/cancel")
        assert cancel.status_code == 202, cancel.text
        assert cancel.json()["action"] == "requested"
        wait(lambda: task(runtime, first["id"]).phase == "cancelled", message="cancelled")
        wait(lambda: task(runtime, second["id"]).phase == "completed", message="second ran")
        assert starts(tmp_path) == 1


def test_cancel_stops_the_run_and_a_queued_task_is_cancelled_at_once(
    store: Store, tmp_path: Path
) -> None:
    pools = {"default": {"capacity": 1}}
    with task_daemon(store, tmp_path / "runs", pools=pools) as (runtime, client):
        running = submit(client, "sleep", payload={"seconds": 600})
        queued = submit(client, "sleep", payload={"seconds": 600})
        wait(lambda: "sleeping" in _output(tmp_path, runtime, running["id"]), message="up")
        response = client.post(f"/api/work-items/{queued['id']}/cancel")
        assert response.status_code == 200 and response.json()["action"] == "cancelled"
        assert response.json()["item"]["admission"] == "done"
        response = client.post(f"/api/work-items/{running['id']}/cancel")
        assert response.status_code == 202
        ended = wait(
            lambda: (t := task(runtime, running["id"])).phase == "cancelled" and t,
            message="cancelled",
        )
        assert ended.exit_status == -signal.SIGTERM
        again = client.post(f"/api/work-items/{running['id']}/cancel")
        assert again.status_code == 409 and "already cancelled" in again.json()["error"]
        assert client.post(f"/api/work-items/{os.urandom(16).hex()}/cancel").status_code in (
            404,
            422,
        )
        assert starts(tmp_path) == 1


def test_checking_a_running_task_records_nothing_until_it_changes(
    store: Store, tmp_path: Path
) -> None:
    with task_daemon(store, tmp_path / "runs") as (runtime, client):
        item = submit(client, "sleep", payload={"seconds": 1.5})
        wait(lambda: "sleeping" in _output(tmp_path, runtime, item["id"]), message="up")
        running = task(runtime, item["id"])
        trail = audit_types(runtime.sessions, running.id)
        # Checked every 0.1 s: several checks go by, and none of them is a state change.
        seen = {running.next_check_at}

        def checked_three_more_times() -> bool:
            seen.add(task(runtime, item["id"]).next_check_at)
            return len(seen) >= 4

        wait(checked_three_more_times, message="three more checks")
        still = task(runtime, item["id"])
        assert still.phase == "active"
        assert audit_types(runtime.sessions, running.id) == trail
        # Its age is the time in its state: checks and leases do not make it younger.
        assert still.updated_at == running.updated_at
        done = wait(
            lambda: (t := task(runtime, item["id"])).phase == "completed" and t,
            message="completed",
        )
        after = audit_types(runtime.sessions, done.id)
        assert after[: len(trail)] == trail
        # The check that saw the run end is recorded, with the phase change it made.
        assert after[len(trail) :].count("action_completed") == 1, after
        assert "phase_changed" in after[len(trail) :] and done.updated_at > running.updated_at


def _output(tmp_path: Path, runtime: object, item_id: str) -> str:
    run_id = task(runtime, item_id).run_id  # type: ignore[arg-type]
    if run_id is None:
        return ""
    log = tmp_path / "runs" / run_id / "output.log"
    return log.read_text() if log.exists() else ""


def test_timeout_kills_the_whole_process_group(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs") as (runtime, client):
        item = submit(client, "slow")
        failed = wait(
            lambda: (t := task(runtime, item["id"])).phase == "failed" and t,
            timeout=30,
            message="timed out",
        )
        assert "timed out after 4 s" in (failed.error or "")
        assert "starting a helper" in (failed.error or "")
        helper = int(wait(lambda: _read(tmp_path / "helper.pid"), message="helper pid"))
        wait(lambda: not _alive(helper), message="the helper of the run is gone too")


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (nobody reaps a grandchild of a dead supervisor).
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_start_failure_requeues_with_backoff_without_taking_a_slot(
    store: Store, tmp_path: Path
) -> None:
    pools = {"default": {"capacity": 1}}
    with task_daemon(store, tmp_path / "runs", pools=pools) as (runtime, client):
        broken = submit(client, "missing")
        wait(
            lambda: "command not found" in (task(runtime, broken["id"]).error or ""),
            message="start failed",
        )
        # The broken head waits out its backoff in the queue; the slot serves others.
        behind = submit(client, "echo")
        wait(lambda: task(runtime, behind["id"]).phase == "completed", message="echo ran")
        again = task(runtime, broken["id"])
        assert again.phase == "active" and again.run_id is None
        assert again.admission in ("queued", "admitted")
        assert again.attempts >= 1
        assert "requeued" in audit_types(runtime.sessions, again.id)


def test_a_task_that_cannot_start_fails_after_max_start_failures(
    store: Store, tmp_path: Path
) -> None:
    # Its program is missing: it must not wait in the queue for ever, looking like work.
    with task_daemon(store, tmp_path / "runs", max_start_failures=3) as (runtime, client):
        broken = submit(client, "missing")
        failed = wait(
            lambda: (t := task(runtime, broken["id"])).phase == "failed" and t,
            message="the task failed",
        )
        assert failed.error is not None
        assert "could not start (3 times in a row)" in failed.error
        assert "command not found" in failed.error
        assert failed.admission == "done"
        assert audit_types(runtime.sessions, failed.id).count("requeued") == 2


def test_finished_tasks_are_collected_after_their_ttl(store: Store, tmp_path: Path) -> None:
    with task_daemon(store, tmp_path / "runs") as (runtime, client):
        old = submit(client, "echo")
        wait(lambda: task(runtime, old["id"]).phase == "completed", message="completed")
        active = submit(client, "sleep", payload={"seconds": 600})
        wait(lambda: task(runtime, active["id"]).run_id is not None, message="running")
        run_id = task(runtime, old["id"]).run_id
        assert run_id is not None and (tmp_path / "runs" / run_id).is_dir()
        bundle = runtime.registry.get("task").settings
        assert isinstance(bundle, TaskRuntime)
        ttl = timedelta(hours=1)
        assert collect(runtime.sessions, bundle.runners, ttl=ttl, now=utcnow()) == 0
        later = utcnow() + timedelta(hours=2)
        assert collect(runtime.sessions, bundle.runners, ttl=ttl, now=later) == 1
        assert client.get(f"/api/work-items/{old['id']}").status_code == 404
        assert client.get(f"/api/work-items/{active['id']}").status_code == 200
        assert not (tmp_path / "runs" / run_id).exists()
        trail = audit_types(runtime.sessions, task(runtime, active["id"]).id)
        assert trail  # the active one keeps everything
        import uuid

        history = audit_types(runtime.sessions, uuid.UUID(old["id"]))
        assert history[0] == "created" and history[-1] == "garbage_collected"


def test_collection_removes_the_directory_of_every_run_a_task_had(
    store: Store, tmp_path: Path
) -> None:
    """A retried task has a run directory per run (its spec holds the kind's env): all
    of them go with the task, not only the last."""
    with task_daemon(store, tmp_path / "runs") as (runtime, client):
        item = submit(client, "fail")
        wait(lambda: task(runtime, item["id"]).phase == "failed", message="first run failed")
        assert client.post(f"/api/work-items/{item['id']}/retry").status_code == 200
        wait(
            lambda: (t := task(runtime, item["id"])).phase == "failed" and t.run_generation == 2,
            message="second run failed",
        )
        runs = sorted(path.name for path in (tmp_path / "runs").iterdir())
        assert runs == [f"wq-{item['id']}-1", f"wq-{item['id']}-2"]
        bundle = runtime.registry.get("task").settings
        assert isinstance(bundle, TaskRuntime)
        later = utcnow() + timedelta(hours=2)
        assert collect(runtime.sessions, bundle.runners, ttl=timedelta(hours=1), now=later) == 1
        assert list((tmp_path / "runs").iterdir()) == []


@contextlib.contextmanager
def two_replicas(
    store: Store, tmp_path: Path, *, max_start_failures: int
) -> Iterator[tuple[Runtime, Runtime, TestClient]]:
    """A replica with every kind (not processing yet, its client) and one without `echo`
    (processing): replicas in the middle of a rolling update that adds `echo`."""
    others = {name: kind for name, kind in KINDS.items() if name != "echo"}
    with (
        task_daemon(store, tmp_path / "runs", start=False) as (with_kind, client),
        task_daemon(
            store, tmp_path / "runs-b", kinds=others, max_start_failures=max_start_failures
        ) as (without, _),
    ):
        yield with_kind, without, client


def test_a_replica_without_the_kind_leaves_the_task_to_one_that_has_it(
    store: Store, tmp_path: Path
) -> None:
    """Replicas differ for a while in a rolling update that adds a kind: one without it
    gives the task back (a start that could not happen) instead of failing it for good."""
    with two_replicas(store, tmp_path, max_start_failures=50) as (with_kind, without, client):
        item = submit(client, "echo")
        wait(
            lambda: (
                "task kind 'echo' is not configured here" in (task(without, item["id"]).error or "")
            ),
            message="the replica without the kind gave it back",
        )
        assert task(without, item["id"]).phase == "active"
        assert without.manager is not None
        without.manager.stop(grace=2)
        with_kind.start_processing()
        done = wait(
            lambda: (t := task(with_kind, item["id"])).phase != "active" and t,
            message="ran on the replica with the kind",
        )
        assert done.phase == "completed", done.error
        assert "requeued" in audit_types(with_kind.sessions, done.id)


def test_a_kind_no_replica_has_fails_after_max_start_failures(store: Store, tmp_path: Path) -> None:
    with two_replicas(store, tmp_path, max_start_failures=2) as (_, without, client):
        item = submit(client, "echo")
        failed = wait(
            lambda: (t := task(without, item["id"])).phase == "failed" and t,
            message="failed",
        )
        assert "could not start (2 times in a row)" in (failed.error or "")
        assert "task kind 'echo' is not configured here" in (failed.error or "")


def test_a_run_lost_from_another_process_says_replicas_must_share_the_runs_dir(
    store: Store, tmp_path: Path
) -> None:
    """A replica with a runs_dir of its own cannot see the runs another one started:
    their tasks failed with `no run directory`, which read like a crash."""
    runs, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    elsewhere.mkdir()
    with task_daemon(store, runs) as (runtime, client):
        ours, theirs = (submit(client, "sleep", payload={"seconds": 60}) for _ in range(2))
        for item in (ours, theirs):
            wait(
                lambda item=item: "sleeping" in _output(tmp_path, runtime, item["id"]), message="up"
            )
        with runtime.sessions.begin() as session:
            session.get(TaskItem, uuid.UUID(theirs["id"])).started_by = "other-host:7/worker-3"
        run_dirs = [runs / str(task(runtime, item["id"]).run_id) for item in (ours, theirs)]
        for run_dir in run_dirs:  # out of this replica's sight; the runs go on
            run_dir.rename(elsewhere / run_dir.name)
        try:
            for item in (ours, theirs):
                wait(lambda item=item: task(runtime, item["id"]).phase == "failed", message="lost")
        finally:
            for run_dir in run_dirs:
                pids = json.loads((elsewhere / run_dir.name / "pid.json").read_text())
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(pids["pgid"]), signal.SIGKILL)
        lost = task(runtime, theirs["id"]).error or ""
        assert lost.startswith(f"the run was lost: no run directory {run_dirs[1]}")
        assert (
            "started by other-host:7, another process: replicas on one machine must share" in lost
        )
        assert "handled_types.task.runners.command.runs_dir" in lost
        # A run this process started and lost is said to be lost, nothing more.
        assert "replicas" not in (task(runtime, ours["id"]).error or "")
