"""On a fresh machine: `wq daemon` with no config runs demo tasks from `wq submit task`."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.daemon.test_daemon_process import (  # noqa: F401 (fixtures)
    Daemon,
    clean_env,
    daemons,
    no_system_config,
    run_wq,
    start_daemon,
)
from tests.types.task.helpers import wait


@pytest.mark.usefixtures("no_system_config")
def test_submit_task_and_cancel_against_the_embedded_daemon(
    tmp_path: Path,
    daemons: list[Daemon],  # noqa: F811
) -> None:
    env = clean_env(tmp_path)
    daemon = start_daemon(daemons, tmp_path, env)
    daemon.wait_healthy()
    cli = {**env, "WQ_URL": daemon.url}

    listed = run_wq("submit", "--json", env=cli, cwd=tmp_path)
    # Only what can be submitted: mr needs GitLab projects from a config file.
    assert {entry["type"] for entry in json.loads(listed.stdout)} == {"task"}

    payload = tmp_path / "payload.json"
    payload.write_text('{"goal": "hello from a file"}')
    echo = run_wq(
        "submit", "task", "--project", "demo", "--kind", "echo", "--payload", f"@{payload}",
        "--wait", "--json", env=cli, cwd=tmp_path,
    )  # fmt: skip
    assert echo.returncode == 0, echo.stderr
    document = json.loads(echo.stdout)
    assert document["action"] == "created" and document["item"]["phase"] == "completed"
    assert "hello from a file" in document["item"]["details"]["log_tail"]

    # --wait says on stderr where the item is, one line each time that changes.
    short = run_wq(
        "submit", "task", "--project", "demo", "--kind", "sleep",
        "--payload", '{"seconds": 3}', "--wait", env=cli, cwd=tmp_path,
    )  # fmt: skip
    assert short.returncode == 0, short.stderr
    states = [line.split("] ", 1)[1] for line in short.stderr.splitlines()]
    assert all(line.startswith("[") for line in short.stderr.splitlines()), short.stderr
    assert states[-1] == "running", short.stderr
    assert all(a != b for a, b in itertools.pairwise(states)), short.stderr
    # Queued only for a moment, if at all (admitted before its position was asked).
    expected = {"queued at position 1 in the normal lane of demo", "queued", "admitted"}
    assert set(states) <= {*expected, "running"}, short.stderr
    # The end is said once, on stdout (it was a progress line on stderr too).
    assert short.stdout.splitlines()[1].startswith("completed"), short.stdout

    sleep = run_wq(
        "submit", "task", "--project", "demo", "--kind", "sleep",
        "--payload", '{"seconds": 600}', "--json", env=cli, cwd=tmp_path,
    )  # fmt: skip
    assert sleep.returncode == 0, sleep.stderr
    item_id = json.loads(sleep.stdout)["item"]["id"]

    def running() -> bool:
        status = run_wq("status", "--id", item_id, "--json", env=cli, cwd=tmp_path)
        return bool(json.loads(status.stdout)["details"]["run_id"])

    wait(running, message="the sleep is running")
    cancelled = run_wq("cancel", "--id", item_id, env=cli, cwd=tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"requested {item_id}")

    def phase() -> str:
        status = run_wq("status", "--id", item_id, "--json", env=cli, cwd=tmp_path)
        return str(json.loads(status.stdout)["phase"])

    wait(lambda: phase() == "cancelled", message="cancelled")

    unknown = run_wq("submit", "task", "--project", "demo", "--kind", "nope", env=cli, cwd=tmp_path)
    assert unknown.returncode != 0 and "Traceback" not in unknown.stderr
    assert "unknown task kind 'nope' (known: count, echo, sleep)" in unknown.stderr
    bad = run_wq(
        "submit", "task", "--project", "demo", "--kind", "echo", "--payload", "{", env=cli,
        cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and "--payload: not JSON" in bad.stderr
