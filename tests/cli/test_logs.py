"""`wq logs` against a real embedded daemon: a running task's output as it is written,
`-f` to the run's end, `--tail`, and Ctrl-C that leaves the task running."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.test_daemon_process import (  # noqa: F401 - fixtures
    Daemon,
    clean_env,
    daemons,
    no_system_config,
    read_token,
    run_wq,
    start_daemon,
)
from tests.support.runs import cancel_runs_under
from tests.support.signals import default_sigint
from tests.support.waiting import wait_for
from wq.cli.logs import ServerNotes

LINE_DEADLINE = 60.0


@pytest.fixture(autouse=True)
def no_run_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """The counts these tests start outlive their daemon by design."""
    yield
    cancel_runs_under(tmp_path)


def embedded(started: list[Daemon], root: Path) -> tuple[Daemon, httpx.Client, dict[str, str]]:
    daemon = start_daemon(started, root, clean_env(root))
    daemon.wait_healthy()
    _, token = read_token(root, daemon.url)
    http = httpx.Client(
        base_url=daemon.url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0
    )
    return daemon, http, clean_env(root, WQ_URL=daemon.url, WQ_TOKEN=token)


def count(http: httpx.Client, to: int) -> dict[str, Any]:
    body = {"project": "demo", "kind": "count", "payload": {"to": to}}
    created = http.post("/api/work-items/task", json=body)
    assert created.status_code == 201, created.text
    item: dict[str, Any] = created.json()["item"]
    return item


def following(item_id: str, env: dict[str, str], root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "wq", "logs", "-f", item_id],
        env=env,
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,  # Ctrl-C answered even if the runner ignores it
    )


def test_logs_follow_prints_each_line_as_the_run_writes_it(
    daemons: list[Daemon],  # noqa: F811
    tmp_path: Path,
    no_system_config: None,  # noqa: F811
) -> None:
    _, http, env = embedded(daemons, tmp_path)
    item = count(http, 4)
    follower = following(item["id"][:8], env, tmp_path)
    assert follower.stdout is not None
    first = follower.stdout.readline()
    # The first line arrived while the task was still running (it counts for 3 s more).
    assert first == "1 of 4\n"
    assert http.get(f"/api/work-items/{item['id']}").json()["phase"] == "active"
    rest, errors = follower.communicate(timeout=LINE_DEADLINE)
    assert follower.returncode == 0, errors
    assert rest == "2 of 4\n3 of 4\n4 of 4\n"  # the fifth would be on stderr: same stream
    wait_for(
        lambda: http.get(f"/api/work-items/{item['id']}").json()["phase"] == "completed",
        timeout=LINE_DEADLINE,
        message="the task completed",
    )
    tail = run_wq("logs", item["id"], "--tail", "2", env=env, cwd=tmp_path)
    assert (tail.returncode, tail.stdout) == (0, "3 of 4\n4 of 4\n"), tail.stderr
    missing = run_wq("logs", "abcdef12", env=env, cwd=tmp_path)
    assert missing.returncode == 3
    assert missing.stderr == "wq: error: not found: no work item id starts with abcdef12\n"


def test_ctrl_c_stops_following_and_the_task_goes_on(
    daemons: list[Daemon],  # noqa: F811
    tmp_path: Path,
    no_system_config: None,  # noqa: F811
) -> None:
    _, http, env = embedded(daemons, tmp_path)
    item = count(http, 600)
    follower = following(item["id"], env, tmp_path)
    assert follower.stdout is not None
    assert follower.stdout.readline() == "1 of 600\n"
    follower.send_signal(signal.SIGINT)
    _, errors = follower.communicate(timeout=LINE_DEADLINE)
    assert follower.returncode == 130
    assert f"stopped following; the task goes on (`wq status --id {item['id'][:8]}`)" in errors
    assert "Traceback" not in errors
    time.sleep(1.5)  # the task still counts
    shown = http.get(f"/api/work-items/{item['id']}").json()
    assert (shown["phase"], shown["admission"]) == ("active", "admitted")
    later = run_wq("logs", item["id"], "--tail", "1", env=env, cwd=tmp_path)
    assert later.returncode == 0 and later.stdout not in ("", "1 of 600\n"), later
    assert http.post(f"/api/work-items/{item['id']}/cancel").status_code == 202


def test_a_stopping_daemon_ends_the_streams_instead_of_waiting_for_them(
    daemons: list[Daemon],  # noqa: F811
    tmp_path: Path,
    no_system_config: None,  # noqa: F811
) -> None:
    daemon, http, env = embedded(daemons, tmp_path)
    item = count(http, 60)
    follower = following(item["id"], env, tmp_path)
    assert follower.stdout is not None
    assert follower.stdout.readline() == "1 of 60\n"
    begun = time.monotonic()
    # The embedded daemon's grace is 30 s; uvicorn waits for open answers first.
    assert daemon.terminate(signal.SIGTERM, LINE_DEADLINE) == 0, daemon.log()
    assert time.monotonic() - begun < 10, daemon.log()
    rest, errors = follower.communicate(timeout=LINE_DEADLINE)
    # The output so far on stdout; why it stopped on stderr, with a failing exit (it
    # exited 0 with the note among the output, as though the run had ended).
    assert all(re.fullmatch(r"\d+ of 60", line) for line in rest.splitlines()), rest
    short = item["id"][:8]
    assert errors == (
        f"wq: the daemon is stopping; follow again to go on (`wq logs -f {short}`)\n"
    ), errors
    assert follower.returncode == 1, errors


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_a_closing_note_is_told_apart_from_the_output_however_it_is_cut(size: int) -> None:
    output = "1 of 3\nwq: the run's own line\n2 of 3\n\nwq: also the run's\nmore\n"
    note = "\nwq: the output stopped: the runner is gone\n"
    for stream, kept, said in (
        (output + note, output, "the output stopped: the runner is gone"),
        (output, output, None),
        (
            "wq: 8 output streams are open, the most allowed; try again shortly\n",
            "",
            "8 output streams are open, the most allowed; try again shortly",
        ),
        (output + "\nwq: no note after all", output + "\nwq: no note after all", None),
    ):
        notes, shown = ServerNotes(), ""
        for start in range(0, len(stream), size):
            shown += notes.passed(stream[start : start + size])
        assert (notes.final(), shown + notes.rest()) == (said, kept)
