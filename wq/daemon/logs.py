"""Log output of the deployer commands: text lines, or JSON lines for log collectors.

In JSON mode each record is one object per line: `time` (UTC, ISO 8601), `level`,
`logger`, `message`, and, for audit entries, the entry itself under `audit` (so a
collector indexes its fields instead of parsing the message), plus `exc_info` text
when an exception is logged.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime
from typing import IO, Any

from wq.engine import jsontext

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record; structured `audit` entries are kept as objects."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry = getattr(record, "audit", None)
        if entry is not None:
            line["audit"] = entry
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        # orjson: a JSON line costs a fraction of json.dumps's (compact, UTF-8 as is).
        return jsontext.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, its time written once per second rather than once per line."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._second = -1
        self._second_text = ""

    def format(self, record: logging.LogRecord) -> str:
        """The record's line, as `logging.Formatter(TEXT_FORMAT)` writes it."""
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        # `TEXT_FORMAT` written out: logging's generic path (its style object, the
        # record's whole dict as format values) was a third of an audit line's cost.
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        return f"{record.asctime} {record.levelname} {record.name}: {record.message}"

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """The local time as logging's default writes it (`2026-12-04 04:30:15,123`)."""
        # Formatted under the handler's lock: one record at a time.
        second = int(record.created)
        if second != self._second:
            self._second_text = time.strftime("%Y-%m-%d %H:%M:%S", self.converter(second))
            self._second = second
        return f"{self._second_text},{int(record.msecs):03d}"


class LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that flushes once for the lines of one commit's audit rows
    (records marked `wq_more` are followed by another), not once per line."""

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line; flush unless more of the same commit follow."""
        try:
            self.stream.write(self.format(record) + self.terminator)
            if not getattr(record, "wq_more", False):
                self.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def setup_logging(log_format: str = "text", stream: IO[str] | None = None) -> None:
    """Log INFO and above to stderr (or `stream`) in the given format ("text" or "json")."""
    handler = LineHandler(stream or sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLineFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # Alembic announces its dialect, its plugins and each step at INFO on every start:
    # noise for operators. The daemon says in one line what a migration changed.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # httpx (the Kubernetes runner's client) logs every request at INFO: a line per poll.
    logging.getLogger("httpx").setLevel(logging.WARNING)
