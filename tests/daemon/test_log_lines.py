"""The daemon's log lines: the text format as logging writes it, an audit row a line,
and one flush for the rows of one commit rather than one per line."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from wq.daemon.logs import TEXT_FORMAT, LineHandler, TextFormatter, setup_logging
from wq.engine.audit import AuditRecord, announce_committed, timestamp


class CountingStream(io.StringIO):
    """A stream that counts its flushes."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


@pytest.fixture
def logged() -> Iterator[CountingStream]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = CountingStream()
    setup_logging("text", stream)
    try:
        yield stream
    finally:
        root.handlers[:], root.level = handlers, level


def test_the_text_format_is_loggings_own_with_its_time_cached() -> None:
    plain = logging.Formatter(TEXT_FORMAT)
    fast = TextFormatter()
    for created in (1_764_820_000.0, 1_764_820_000.999, 1_764_820_001.5, 1_764_820_001.001):
        record = logging.LogRecord("wq.daemon", logging.INFO, __file__, 1, "hi %s", ("x",), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert fast.format(record) == plain.format(record)
    try:
        raise ValueError("broken")
    except ValueError:
        failed = logging.LogRecord(
            "wq.daemon", logging.ERROR, __file__, 1, "failed %d", (3,), sys.exc_info()
        )
    assert fast.format(failed) == plain.format(failed)
    assert "ValueError: broken" in fast.format(failed)


def test_an_entry_time_reads_the_same_from_any_zone() -> None:
    instant = datetime(2026, 12, 4, 4, 30, 0, 5, tzinfo=UTC)
    elsewhere = instant.astimezone(timezone(timedelta(hours=-5)))
    # Each formatted afresh (the last time formatted is kept: another one in between).
    assert timestamp(instant + timedelta(seconds=1)) == "2026-12-04T04:30:01.000005Z"
    assert timestamp(elsewhere) == "2026-12-04T04:30:00.000005Z"
    assert timestamp(instant + timedelta(seconds=1)) == "2026-12-04T04:30:01.000005Z"
    assert timestamp(instant) == "2026-12-04T04:30:00.000005Z"


def test_a_commits_audit_rows_are_a_line_each_and_one_flush(logged: CountingStream) -> None:
    at = datetime(2026, 12, 4, 4, 30, tzinfo=UTC)
    rows = [
        AuditRecord(event, "wq-1:7/worker-1", trigger={"source": "engine"}, at=at).row()
        for event in ("admitted", "action_completed", "released")
    ]
    before = logged.flushes
    announce_committed(rows)
    lines = logged.getvalue().splitlines()
    assert len(lines) == 3
    events = [json.loads(line.split(" audit ", 1)[1])["event_type"] for line in lines]
    assert events == ["admitted", "action_completed", "released"]
    assert all(" INFO wq.audit: audit {" in line for line in lines)
    assert logged.flushes - before == 1
    logging.getLogger("wq.daemon").info("listening")  # any other line flushes at once
    assert logged.flushes - before == 2


def test_a_handler_error_is_reported_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    handler = LineHandler(Broken())
    record = logging.LogRecord("wq.daemon", logging.INFO, __file__, 1, "hi", (), None)
    handler.emit(record)  # logging's own handleError: a note on stderr, no exception
    assert "disk full" in capsys.readouterr().err


def test_json_lines_carry_each_entry_as_an_object() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    setup_logging("json", stream)
    try:
        at = datetime(2026, 12, 4, 4, 30, tzinfo=UTC)
        announce_committed(
            [
                AuditRecord(event, "wq-1:7/worker-1", trigger={"source": "engine"}, at=at).row()
                for event in ("admitted", "released")
            ]
        )
    finally:
        root.handlers[:], root.level = handlers, level
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["audit"]["event_type"] for line in lines] == ["admitted", "released"]
    assert [line["message"] for line in lines] == [
        "audit " + json.dumps(line["audit"], sort_keys=True, separators=(",", ":"))
        for line in lines
    ]
    assert {line["logger"] for line in lines} == {"wq.audit"}
    assert lines[0]["audit"]["timestamp"] == "2026-12-04T04:30:00.000000Z"


def test_http_clients_do_not_log_a_line_per_request(logged: CountingStream) -> None:
    """The Kubernetes runner's client (httpx) logs every request at INFO: a line per
    poll of every running task, which buries the daemon's own lines."""
    logging.getLogger("httpx").info('HTTP Request: GET https://k8s/apis/batch/v1 "200 OK"')
    logging.getLogger("httpx").warning("a retry")
    assert "HTTP Request" not in logged.getvalue()
    assert "a retry" in logged.getvalue()
