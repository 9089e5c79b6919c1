"""`wq retry` and `wq cancel` with selectors against a real daemon: listed, confirmed, reported."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.cli.daemon import BLOCKED, RunningDaemon, base_env, cli_env, invoke
from tests.support.signals import default_sigint


def env(daemon: RunningDaemon, cache_home: Path) -> dict[str, str | None]:
    return cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)


def queued(daemon: RunningDaemon, count: int) -> list[str]:
    """Items in the blocked pool (they stay active and queued), each with its own label."""
    label = f"bulk-{uuid.uuid4().hex[:8]}"
    return [daemon.submit(project=BLOCKED, labels=[label])["id"] for _ in range(count)]


def phase(daemon: RunningDaemon, item_id: str) -> str:
    with daemon.api() as http:
        return str(http.get(f"/api/work-items/{item_id}").json()["phase"])


def test_cancel_then_retry_by_selector(daemon: RunningDaemon, cache_home: Path) -> None:
    before = invoke(
        ["cancel", "--project", BLOCKED, "--dry-run", "-o", "json"], env(daemon, cache_home)
    )
    assert before.code == 0, before
    ids = queued(daemon, 2)

    listed = invoke(["cancel", "--project", BLOCKED, "--dry-run"], env(daemon, cache_home))
    assert listed.code == 0, listed
    for item_id in ids:
        assert f"would cancel {item_id} (mr)" in listed.stdout
    assert [phase(daemon, item_id) for item_id in ids] == ["active", "active"]

    cancelled = invoke(["cancel", "--project", BLOCKED, "--yes"], env(daemon, cache_home))
    assert cancelled.code == 0, cancelled
    for item_id in ids:
        assert f"cancelled {item_id}" in cancelled.stdout
        assert item_id in cancelled.stderr  # the list shown before acting
    assert [phase(daemon, item_id) for item_id in ids] == ["cancelled", "cancelled"]

    retried = invoke(
        [
            "retry",
            "--phase",
            "cancelled",
            "--project",
            BLOCKED,
            "--limit",
            "1",
            "--yes",
            "-o",
            "json",
        ],
        env(daemon, cache_home),
    )
    assert retried.code == 0, retried
    document = json.loads(retried.stdout)
    oldest = json.loads(before.stdout)["results"]
    expected = oldest[0]["id"] if oldest else ids[0]
    assert [(r["id"], r["outcome"]) for r in document["results"]] == [(expected, "retried")]
    assert "more items match" not in retried.stderr  # -o json: the document says `more`
    assert document["more"] is True


def test_without_a_terminal_a_selection_needs_yes(daemon: RunningDaemon, cache_home: Path) -> None:
    ids = queued(daemon, 1)
    result = invoke(["cancel", "--project", BLOCKED], env(daemon, cache_home))
    assert result.code == 2, result
    assert "needs --yes when nobody can answer" in result.stderr
    assert phase(daemon, ids[0]) == "active"


def test_nothing_matching_says_so(daemon: RunningDaemon, cache_home: Path) -> None:
    result = invoke(["retry", "--project", "group/none", "--yes"], env(daemon, cache_home))
    assert (result.code, result.stdout, result.stderr) == (0, "", "no items match\n")


def test_an_unknown_type_is_refused_not_reported_as_no_match(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    # "no items match" (exit 0) read as if there were nothing to retry of that type.
    for action in ("retry", "cancel"):
        result = invoke([action, "--type", "bogus", "--yes"], env(daemon, cache_home))
        assert result.code == 2, result
        assert result.stderr.splitlines()[0] == (
            "wq: error: --type: 'bogus' is not a type this server knows (mr)"
        )
    known = invoke(["retry", "--type", "mr", "--yes"], env(daemon, cache_home))
    assert (known.code, known.stderr) == (0, "no items match\n")


def test_a_kind_on_a_server_that_runs_no_tasks_is_refused(
    daemon: RunningDaemon, cache_home: Path
) -> None:
    # This daemon runs only `mr`: no kind names anything (the embedded one's kinds are
    # in test_kinds.py).
    result = invoke(["cancel", "--kind", "echo", "--yes"], env(daemon, cache_home))
    assert result.code == 2 and result.stdout == "", result
    assert result.stderr.splitlines()[0] == (
        "wq: error: --kind: 'echo' is not a task kind this server knows (it runs no tasks)"
    )


def test_names_and_selectors_are_not_mixed(daemon: RunningDaemon, cache_home: Path) -> None:
    for args, message in (
        (["retry"], "name at least one item (wq retry --id ID) or select them"),
        (["cancel", "--id", "a" * 8, "--project", "x"], "name items or select them, not both"),
        (["retry", "--phase", "active"], "--phase: retry takes failed or cancelled items"),
        (["retry", "--older-than", "soon"], "--older-than: a number and a unit"),
    ):
        result = invoke(args, env(daemon, cache_home))
        assert result.code == 2, (args, result)
        assert message in result.stderr.splitlines()[0], (args, result.stderr)


def test_ctrl_c_at_the_question_exits_130_and_changes_nothing(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    """Ctrl-C at `Cancel these N items? [y/N]` exited 1, where Ctrl-C in `--wait` and
    `logs -f` exits 130."""
    ids = queued(daemon, 1)
    env = base_env(tmp_path, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)
    controller, terminal = pty.openpty()  # a terminal: the question is asked
    proc = subprocess.Popen(
        [sys.executable, "-m", "wq", "cancel", "--project", BLOCKED],
        env=env,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        preexec_fn=default_sigint,
    )
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 60
    # "this item?" or "these N items?": other tests of the module may queue more.
    while b"? [y/N]" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 1)
        if ready:
            seen += os.read(controller, 4096)
    assert b"? [y/N]" in seen, seen
    # A SIGINT that lands after the question is written but before the line editor
    # waits for input is seen only at the next signal (CPython's readline): pressed
    # again, as a person would, until the process ends.
    for _ in range(15):
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
            break
    assert proc.wait(timeout=1) == 130, seen
    with contextlib.suppress(OSError):
        seen += os.read(controller, 4096)
    os.close(controller)
    assert b"wq: interrupted" in seen and b"Traceback" not in seen, seen
    assert phase(daemon, ids[0]) == "active"
