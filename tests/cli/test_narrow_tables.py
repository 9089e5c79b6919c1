"""Tables on narrow terminals: columns that matter least go before a row is folded."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from wq.cli.admission import pools_view
from wq.cli.items import list_view
from wq.cli.replicas import replicas_view

ITEM = {
    "id": "008e33c6-e040-4e3c-a7f1-f5f1446f738d",
    "type": "task",
    "project": "group/application",
    "phase": "completed",
    "admission": "done",
    "attempts": 1,
    "updated_at": None,
}
POOL = {
    "project": "group/application",
    "normal": {"in_flight": 3, "capacity": 10, "queued": 12},
    "alert": {"in_flight": 0, "capacity": 1, "queued": 0},
    "oldest_queued_age_seconds": 75,
    "backing_off": 2,
    "failed": 1,
}
REPLICA = {
    "id": "host-1:4242",
    "state": "alive",
    "being_rescued": 0,
    "heartbeat_age_seconds": 2,
    "workers_busy": 3,
    "workers_total": 10,
    "leases_held": 3,
    "consumes_events": False,
    "last_event_at": None,
    "db_round_trip_ms": 0.6,
    "started_at": None,
}


def shown(view: Any, width: int) -> list[str]:
    """The view as a terminal `width` columns wide shows it."""
    console = Console(width=width, record=True, force_terminal=False)
    console.print(view)
    return console.export_text().splitlines()


def test_status_at_60_columns_leaves_out_attempts_then_type_and_folds_nothing() -> None:
    # Before, at 60 columns `completed` was folded into `comple`/`ted`, the project cut
    # and the header `UPDATED` shown as `U`.
    lines = shown(list_view([{**ITEM, "project": "group/app"}] * 2, False), 60)
    assert max(map(len, lines)) <= 60
    assert lines[0].split() == ["ID", "PROJECT", "PHASE", "ADMISSION", "UPDATED"]
    assert lines[2].split() == ["008e33c6", "group/app", "completed", "done", "-"]
    assert len(lines) == 4  # the header, the rule and one line a row

    at_80 = shown(list_view([ITEM], False), 80)
    assert " ".join(at_80[0].split()) == "ID TYPE PROJECT PHASE ADMISSION ATTEMPTS UPDATED"
    assert " ".join(at_80[2].split()) == "008e33c6 task group/application completed done 1 -"


def test_a_row_too_long_for_any_choice_still_folds_within_the_width() -> None:
    long_project = {**ITEM, "project": "group/" + "sub/" * 12 + "app"}
    lines = shown(list_view([long_project], False), 60)
    assert max(map(len, lines)) <= 60
    assert lines[0].split() == ["ID", "PROJECT", "PHASE", "ADMISSION", "UPDATED"]
    assert "".join(line[11:].split(" ")[0] for line in lines[2:]).startswith("group/sub/sub/")


def test_pools_at_60_columns_keep_the_project_and_the_queue_on_one_line() -> None:
    lines = shown(pools_view([POOL], False), 60)
    assert max(map(len, lines)) <= 60
    row = [line for line in lines if line.startswith("group/")]
    assert row[0].split() == ["group/application", "3/10", "12", "1m", "2"]
    header = " ".join(" ".join(lines[:2]).split())
    for word in ("PROJECT", "NORMAL", "QUEUED", "OLDEST", "BACKING", "OFF"):
        assert word in header.split(), header
    assert "ALERT" not in header and "FAILED" not in header
    wide = shown(pools_view([POOL], False), 120)
    assert " ".join(wide[0].split()) == (
        "PROJECT NORMAL QUEUED ALERT ALERT QUEUED OLDEST QUEUED BACKING OFF FAILED"
    )


def test_replicas_at_60_columns_leave_out_up_and_the_round_trip() -> None:
    lines = shown(replicas_view([REPLICA], False), 60)
    assert max(map(len, lines)) <= 60
    assert lines[0].split() == ["REPLICA", "STATE", "HEARTBEAT", "WORKERS", "LEASES", "EVENTS"]
    assert lines[2].split()[:2] == ["host-1:4242", "alive"]
    assert len(lines) == 3


def test_wide_status_at_60_and_80_columns_keeps_the_detail_and_error_and_8_digit_ids() -> None:
    """`-o wide` at 60 columns showed ids of 5 characters (which no command takes) and
    left DETAIL and ERROR, what wide is asked for, off the edge."""
    wide = {**ITEM, "project": "group/app", "lane": "normal", "seq": 15}
    wide |= {"details": {"kind": "echo"}, "error": "exit status 1"}
    at_60 = shown(list_view([{**wide, "project": "demo", "error": None}], True), 60)
    assert max(map(len, at_60)) <= 60
    assert at_60[0].split() == ["ID", "PROJECT", "PHASE", "ADMISSION", "DETAIL", "ERROR"]
    assert at_60[2].split() == ["008e33c6", "demo", "completed", "done", "echo", "-"]
    at_80 = shown(list_view([wide], True), 80)
    assert " ".join(at_80[0].split()) == "ID PROJECT PHASE ADMISSION UPDATED DETAIL ERROR"
    assert " ".join(at_80[2].split()) == ("008e33c6 group/app completed done - echo exit status 1")


def test_a_multi_line_error_folds_at_60_columns_and_loses_no_character() -> None:
    """It read `cancel` / `sleepi` / `100 s`: rich wrapped the cell wider than it then
    cut it."""
    wide = {**ITEM, "project": "waitp", "phase": "cancelled", "lane": "normal", "seq": 15}
    wide |= {"details": {"kind": "sleep"}, "error": "cancelled\nsleeping 100 s"}
    for width in (60, 64, 70):
        lines = shown(list_view([wide], True), width)
        assert max(map(len, lines)) <= width
        start = lines[0].index("ERROR")
        error = "".join(line[start:].strip() for line in lines[2:])
        assert error.replace(" ", "") == "cancelledsleeping100s", (width, lines)
