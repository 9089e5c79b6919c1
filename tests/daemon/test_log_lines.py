"""The daemon's log lines: the text format as logging writes it, an audit row a line,
and one flush for the rows of one commit rather than one per line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from wq.daemon.logs import TEXT_FORMAT, LineHandler, TextFormatter, setup_logging
from wq.engine.audit import AuditRecord, announce_committed


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
