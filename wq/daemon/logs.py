"""Log output of the deployer commands: text lines, or JSON lines for log collectors.

In JSON mode each record is one object per line: `time` (UTC, ISO 8601), `level`,
`logger`, `message`, and, for audit entries, the entry itself under `audit` (so a
collector indexes its fields instead of parsing the message), plus `exc_info` text
when an exception is logged.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

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
        return json.dumps(line, default=str)


def setup_logging(log_format: str = "text", stream: IO[str] | None = None) -> None:
    """Log INFO and above to stderr (or `stream`) in the given format ("text" or "json")."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLineFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # Alembic announces its dialect, its plugins and each step at INFO on every start:
    # noise for operators. The daemon says in one line what a migration changed.
    logging.getLogger("alembic").setLevel(logging.WARNING)
