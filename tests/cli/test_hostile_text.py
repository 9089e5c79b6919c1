"""Text from the server is printed as text: a project `…/a[/b]` is not rich markup (it
crashed `wq status` and `wq pools` for everyone while the item lived), and control
characters in an error or a task's output never reach the terminal as escape sequences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

from tests.cli.daemon import BLOCKED, RunningDaemon, cli_env, invoke
from wq.cli.common import Output, fail
from wq.cli.items import item_view, list_view
from wq.cli.output import emit
from wq.cli.submit_task import task_done

# Below the capacity-0 pool: the item stays queued, so pools and queue list it.
HOSTILE_PROJECT = f"{BLOCKED}/a[/b]"


def test_markup_in_a_project_is_printed_as_it_is(daemon: RunningDaemon, cache_home: Path) -> None:
    item = daemon.submit(project=HOSTILE_PROJECT)
    env = cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)
    for args, shown in (
        (["status"], HOSTILE_PROJECT),
        (["status", "-o", "wide"], HOSTILE_PROJECT),
        (["status", "--id", item["id"]], HOSTILE_PROJECT),
        (["pools"], HOSTILE_PROJECT),
        (["queue", "--project", HOSTILE_PROJECT], item["id"]),
    ):
        result = invoke(args, env)
        assert result.code == 0, (args, result)
        assert shown in result.stdout, args


ERROR = "exit status 3\n\x1b]0;owned\x07\x1b[2J[bold]loud[/bold] [/oops] :skull: \u202egnp.exe"


def failed_task(error: str, **fields: object) -> dict[str, object]:
    """A failed task as the API shows it."""
    return {
        "id": "5b1d0c8e-8c55-4a55-9d43-61e0c5d1c7a1",
        "type": "task",
        "project": "demo",
        "phase": "failed",
        "admission": "done",
        "attempts": 0,
        "lane": "normal",
        "seq": 7,
        "error": error,
        "created_at": "2026-12-01T08:00:00Z",
        "updated_at": "2026-12-01T08:00:00Z",
        "details": {},
        "dimensions": [],
        **fields,
    }


def test_control_characters_and_markup_in_an_error_are_inert(
    capsys: pytest.CaptureFixture[str],
) -> None:
    item = failed_task(ERROR, details={"log_tail": ERROR})
    emit(item, Output.table, item_view)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07\\x1b[2J[bold]loud[/bold] [/oops] :skull: \\u202egnp" in out

    done = task_done({**item, "phase": "completed"})
    assert done is not None and "\x1b" not in done and "\\x1b[2J" in done


@pytest.mark.parametrize("project", ["../work-items", "..", "group/./x", "group/x.y"])
def test_dot_segments_in_a_project_ask_for_that_project(
    daemon: RunningDaemon, cache_home: Path, project: str
) -> None:
    # `../work-items` was resolved to GET /api/work-items: a KeyError traceback.
    env = cli_env(cache_home, WQ_URL=daemon.url, WQ_TOKEN=daemon.admin)
    result = invoke(["pools", "--project", project, "-o", "json"], env)
    assert result.code in (0, 2), result
    if result.code == 0:
        assert json.loads(result.stdout)[0]["project"] == project


def test_an_error_line_shows_control_characters_as_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `wq submit task --wait` on a failing task: the error carries the run's output.
    with pytest.raises(typer.Exit):
        fail(f"item x ended failed: {ERROR}", 1, hint="\x1b[2J")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b]0;owned\\x07" in err and "hint: \\x1b[2J" in err


def test_a_plain_table_keeps_each_row_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Piped, `wq status -o wide` is a header and one line per row (for grep and awk): a
    multi-line error put its second line on a row of its own."""
    item = failed_task("exit status 3\nboom")
    emit([item, {**item, "id": "6c2e1d9f-9d66-4b66-8e54-72f1d6e2d8b2"}], Output.plain, wide_list)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3, lines
    assert all("exit status 3\\nboom" in line for line in lines[1:])


def wide_list(items: list[dict[str, object]], _: bool) -> object:
    return list_view(items, True)
