"""`wq submit` and `wq submit mr` against a real daemon and a fake GitLab."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import typer

from tests.cli.daemon import BLOCKED, PROJECT, RunningDaemon, base_env, cli_env, free_port, invoke
from tests.support.signals import default_sigint
from tests.support.waiting import wait_for
from wq.cli.output import Output
from wq.cli.submit import report
from wq.cli.submit_mr import file_actions


def env(daemon: RunningDaemon, cache_home: Path) -> dict[str, str | None]:
    return cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)


def mr_args(branch: str, *extra: str, project: str = PROJECT) -> list[str]:
    return [
        "submit", "mr", "--project", project, "--source-branch", branch,
        "--title", "Sync sources", "--commit-message", "Sync sources from upstream",
        *extra,
    ]  # fmt: skip


def test_submit_lists_the_types(daemon: RunningDaemon, cache_home: Path) -> None:
    result = invoke(["submit", "--json"], cli_env(cache_home, WQ_URL=daemon.url))
    assert result.code == 0, result
    assert [entry["type"] for entry in result.json()] == ["mr"]
    table = invoke(["submit"], cli_env(cache_home, WQ_URL=daemon.url))
    assert "mr" in table.stdout and "POST /api/work-items/mr" in table.stdout


def test_submit_mr_with_every_file_flag_and_wait(
    daemon: RunningDaemon, cache_home: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "sources.spec"
    spec.write_text("Version: 2\n", encoding="utf-8")
    blob = tmp_path / "logo.bin"
    blob.write_bytes(bytes(range(256)))  # not UTF-8: goes as base64
    branch = f"wq/cli-{uuid.uuid4().hex[:8]}"
    args = mr_args(
        branch,
        "--file", f"{spec}:sources",
        "--create", f"{blob}:logo.bin",
        "--delete", "old.txt",
        "--move", "a.txt:b.txt",
        "--label", "sync", "--label", "kernel",
        "--package", "kernel", "--change-kind", "sync", "--source", "cli-test",
        "--description", "From the CLI", "--draft", "--wait", "--json",
    )  # fmt: skip
    result = invoke(args, env(daemon, cache_home))
    assert result.code == 0, result
    document = result.json()
    assert document["action"] == "created"
    details = document["item"]["details"]
    assert details["mr_url"] and details["draft"] is True
    assert details["labels"] == ["sync", "kernel"] and details["package"] == "kernel"

    project = daemon.gitlab.project(PROJECT)
    assert project.file(branch, "sources") == b"Version: 2\n"
    assert project.file(branch, "logo.bin") == bytes(range(256))
    assert project.file(branch, "old.txt") is None
    assert project.file(branch, "b.txt") == b"moved\n" and project.file(branch, "a.txt") is None
    mr = daemon.gitlab.merge_request(PROJECT, details["mr_iid"])
    assert mr.draft and "sync" in mr.labels

    # The same content again is unchanged; new content is an update.
    again = invoke(args[:-2], env(daemon, cache_home))  # without --wait --json
    assert again.code == 0, again
    assert again.stdout.startswith(f"unchanged mr item {document['item']['id']}")
    spec.write_text("Version: 3\n", encoding="utf-8")
    updated = invoke([*args[:-2], "-o", "yaml"], env(daemon, cache_home))
    assert updated.code == 0 and "action: updated" in updated.stdout, updated


def test_submit_mr_wait_prints_the_merge_request(
    daemon: RunningDaemon, cache_home: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "sources"
    spec.write_text("v9\n", encoding="utf-8")
    result = invoke(
        mr_args(f"wq/cli-{uuid.uuid4().hex[:8]}", "--file", f"{spec}:sources", "--wait"),
        env(daemon, cache_home),
    )
    assert result.code == 0, result
    first, last = result.stdout.splitlines()[0], result.stdout.splitlines()[-1]
    assert first.startswith("created mr item ")
    assert last.startswith("merge request: ") and "/merge_requests/" in last


def test_submit_mr_usage_errors(daemon: RunningDaemon, cache_home: Path, tmp_path: Path) -> None:
    branch = "wq/never"
    for args in (
        mr_args(branch),  # no file action
        mr_args(branch, "--file", "no-colon"),
        mr_args(branch, "--file", f"{tmp_path / 'missing'}:x"),
        ["submit", "mr", "--project", PROJECT, "--file", "a:b"],  # required flags missing
        mr_args(branch, "--delete", "x", "--target-branch", branch),  # the server says no
    ):
        result = invoke(args, env(daemon, cache_home))
        assert result.code == 2, result
        assert result.stdout == "" and result.stderr and "Traceback" not in result.stderr
    with daemon.api() as http:
        page = http.get("/api/work-items", params={"project": PROJECT, "limit": 500}).json()
    assert all(item["details"]["source_branch"] != branch for item in page["items"])


def test_submit_mr_wait_gives_up_after_the_timeout(daemon: RunningDaemon, cache_home: Path) -> None:
    args = mr_args(
        f"wq/cli-{uuid.uuid4().hex[:8]}", "--delete", "x", "--wait", "--wait-timeout", "1",
        project=BLOCKED,
    )  # fmt: skip
    result = invoke(args, env(daemon, cache_home))
    assert result.code == 1, result
    assert "still waiting after 1s" in result.stderr
    assert result.stdout.startswith("created mr item ")


def test_submit_task_with_a_too_deep_payload_is_one_error_line(
    daemon: RunningDaemon, cache_home: Path, tmp_path: Path
) -> None:
    # Deeper than the server takes (32 by default), not than any server could take.
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 60 + "]" * 60 + "}", encoding="utf-8")
    args = ["submit", "task", "--project", "demo", "--kind", "echo", "--payload", f"@{deep}"]
    result = invoke(args, env(daemon, cache_home))
    assert result.code != 0, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wq: error:"), result
    assert lines[0] == "wq: error: invalid request: payload: nested deeper than 32 levels", result


def test_submit_task_with_a_key_given_twice_is_refused_not_guessed(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    # The API refuses such a body (which value is meant?): the CLI must not keep one.
    payload = '{"goal": "keep", "goal": "drop"}'
    args = ["submit", "task", "--project", "demo", "--kind", "echo", "--payload", payload]
    result = invoke(args, env(daemon, cache_home))
    assert result.code == 2 and result.stdout == "", result
    assert result.stderr.startswith("wq: error: --payload: the key 'goal' is given twice\n"), result


def test_a_too_long_project_is_said_in_characters(daemon: RunningDaemon, cache_home: Path) -> None:
    project = "group/" + "p" * 300
    args = mr_args("wq/long", "--delete", "old.txt", project=project)
    result = invoke(args, env(daemon, cache_home))
    assert result.code == 2 and result.stdout == "", result
    assert result.stderr.startswith(
        "wq: error: invalid request: project: at most 240 characters (got 306)"
    ), result
    assert "items" not in result.stderr, result


def test_submit_wait_shows_the_queue_position_and_ctrl_c_says_how_to_follow(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    ahead = daemon.submit(project=BLOCKED)
    args = mr_args(f"wq/cli-{uuid.uuid4().hex[:8]}", "--delete", "x", "--wait", project=BLOCKED)
    env = base_env(tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)
    with daemon.api() as http:
        queue = http.get("/api/queue", params={"project": BLOCKED}).json()
    position = [entry["id"] for entry in queue].index(ahead["id"]) + 2
    err = tmp_path / "wait.err"
    with err.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wq", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=sink,
            preexec_fn=default_sigint,
        )
    try:
        said = f"queued at position {position} in the normal lane of {BLOCKED}"
        wait_for(lambda: said.encode() in err.read_bytes(), timeout=60, message="the position")
        time.sleep(1.5)  # a few polls more: nothing changed, nothing more is said
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130
    item_id = stdout.decode().split()[3].rstrip(":")  # "created mr item ID: ..."
    lines = err.read_text().splitlines()
    assert len(lines) == 2 and lines[0].endswith(f"] {said}"), lines
    assert lines[1] == (
        f"wq: interrupted; item {item_id} keeps going: "
        f"follow it with wq status --id {item_id} --watch"
    )


def test_an_item_shown_by_id_and_phase_only_is_one_line(capsys: Any) -> None:
    """A caller without `read` on the type is answered the item's id and phase alone."""
    item_id = str(uuid.uuid4())
    result = {"action": "dedup", "item": {"id": item_id, "phase": "active"}}
    report(None, result, Output.table, wait=False, wait_timeout=1.0, done=lambda _: None)
    assert capsys.readouterr().out == f"dedup item {item_id}: active\n"


def test_a_file_with_nul_bytes_goes_as_base64(tmp_path: Path) -> None:
    """NUL is valid UTF-8, but the server refuses it in text: such a file (binary data,
    UTF-16 text) was sent as text and refused."""
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\x00\x01binary")
    text = tmp_path / "notes.txt"
    text.write_text("héllo\n", encoding="utf-8")
    actions = file_actions([f"{binary}:data/bin.dat", f"{text}:notes.txt"], [], [], [])
    assert [(a["file_path"], a["encoding"]) for a in actions] == [
        ("data/bin.dat", "base64"),
        ("notes.txt", "text"),
    ]
    assert base64.b64decode(actions[0]["content"]) == b"\x00\x01binary"


def test_options_before_the_type_are_the_types_own(daemon: RunningDaemon, cache_home: Path) -> None:
    # `wq submit --no-auth` was "no such option", while `wq submit mr --no-auth` was not;
    # `--url` and `--json` before the type were accepted and silently dropped.
    change = ["--delete", "old.txt"]
    listed = invoke(["submit", "--no-auth", "--json"], env(daemon, cache_home))
    assert (listed.code, [entry["type"] for entry in listed.json()]) == (0, ["mr"]), listed
    unsent = invoke(
        ["submit", "--no-auth", *mr_args("wq/no-auth", *change)[1:]], env(daemon, cache_home)
    )
    assert unsent.code == 4 and "requires authentication" in unsent.stderr, unsent
    elsewhere = f"http://127.0.0.1:{free_port()}"
    unsent = invoke(
        ["submit", "--url", elsewhere, *mr_args("wq/url", *change)[1:]], env(daemon, cache_home)
    )
    assert unsent.code == 1 and f"cannot connect to {elsewhere}" in unsent.stderr, unsent
    branch = f"wq/json-{uuid.uuid4().hex[:8]}"
    sent = invoke(["submit", "--json", *mr_args(branch, *change)[1:]], env(daemon, cache_home))
    assert sent.code == 0 and sent.json()["item"]["details"]["source_branch"] == branch, sent
    # The type's own option still wins.
    mine = [*mr_args(branch, *change)[1:], "--url", daemon.url]
    here = invoke(["submit", "--url", elsewhere, *mine], env(daemon, cache_home))
    assert here.code == 0 and here.stdout.startswith("unchanged mr item"), here


def test_waiting_on_an_item_cancelled_without_an_error_says_only_that(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # It read "ended cancelled: no error".
    item = {
        "id": "6c2e1d9f-9d66-4b66-8e54-72f1d6e2d8b2", "type": "task", "project": "demo",
        "phase": "cancelled", "admission": "done", "lane": "normal", "error": None,
    }  # fmt: skip
    with pytest.raises(typer.Exit) as exited:
        report(None, {"action": "created", "item": item}, Output.table, wait=True,
               wait_timeout=5, done=lambda _: None)  # fmt: skip
    assert exited.value.exit_code == 1
    assert capsys.readouterr().err == f"wq: error: item {item['id']} ended cancelled\n"
