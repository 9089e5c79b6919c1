"""Cell formatting shared by the views: bars, ages and dimension marks."""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Any

from rich.cells import cell_len, get_character_cell_size

from wq.cli.output import age, parse_time

HANDLED, NEEDED, DEFERRED = "✓", "●", "⏲"
BAR_WIDTH = 10


def bar(used: int, capacity: int, width: int = BAR_WIDTH) -> str:
    """`█████░░░░░ 5/10`: usage against capacity (a full bar when capacity is 0 and used);
    `5/10` alone for a width of 0."""
    if width <= 0:
        return f"{used}/{capacity}"
    if capacity <= 0:
        filled = width if used > 0 else 0
    else:
        filled = min(width, round(width * used / capacity))
    return f"{'█' * filled}{'░' * (width - filled)} {used}/{capacity}"


def dimension_mark(dimension: dict[str, Any], now: datetime | None = None) -> str:
    """✓ handled, ● needed, ⏲ deferred with the time left."""
    until = parse_time(dimension.get("pending_until"))
    now = now or datetime.now(UTC)
    if until is not None and until > now:
        return f"{DEFERRED} {age((until - now).total_seconds())}"
    return HANDLED if dimension.get("status") == "false" else NEEDED


def dimension_label(dimension: dict[str, Any]) -> str:
    """`name` or `name:variant`."""
    variant = dimension.get("variant") or ""
    return f"{dimension['dimension']}:{variant}" if variant else str(dimension["dimension"])


def dimension_header(label: str) -> str:
    """A column header for a dimension: every dimension is a `needs_*`, so drop that."""
    return label.removeprefix("needs_")


def short_id(item_id: str) -> str:
    """The first block of a UUID, as lists show it (actions and `y` use the whole id)."""
    return item_id[:8]


def moment(value: str | None) -> str:
    """`2026-12-01 07:34:18` from an API timestamp (UTC, to the second), or `-`."""
    parsed = parse_time(value)
    return f"{parsed.astimezone(UTC):%Y-%m-%d %H:%M:%S}" if parsed else "-"


def compact(value: Any) -> str:
    """One-line JSON, keys sorted; `-` for null."""
    if value is None:
        return "-"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def state_change(old: Any, new: Any) -> str:
    """What an audit entry changed, on one line: `phase: failed → active, attempts: 3 → 0`."""
    return ", ".join(changes(old, new))


def changes(old: Any, new: Any) -> list[str]:
    """What an audit entry changed, a line each: `phase: failed → active`.

    Two documents show only the keys whose values differ; anything else (a creation,
    a state that is not a document) shows whole, `old → new`.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        changed = [
            f"{key}: {compact(old.get(key))} → {compact(new.get(key))}"
            for key in sorted(old.keys() | new.keys())
            if old.get(key) != new.get(key)
        ]
        return changed or ["no change"]
    return [f"{compact(old)} → {compact(new)}"]


def short(text: str | None, width: int) -> str:
    """One line of at most `width` cells (a wide character, CJK or emoji, takes two)."""
    if not text:
        return "-"
    line = " ".join(str(text).split())
    return line if cell_len(line) <= width else _head(line, width - 1) + "…"


def short_middle(text: str, width: int) -> str:
    """At most `width` cells, the middle cut: both ends of a path tell it apart."""
    if cell_len(text) <= width:
        return text
    head = (width - 1) // 3
    return f"{_head(text, head)}…{_tail(text, width - 1 - head)}"


def _head(text: str, width: int) -> str:
    """The longest start of `text` within `width` cells (a letter keeps its accents:
    they take no cell)."""
    used = end = 0
    for index, char in enumerate(text):
        used += get_character_cell_size(char)
        if used > width:
            break
        end = index + 1
    return text[:end]


def _tail(text: str, width: int) -> str:
    """The longest end of `text` within `width` cells, not starting with an accent
    whose letter was cut off."""
    used, start = 0, len(text)
    for index in range(len(text) - 1, -1, -1):
        used += get_character_cell_size(text[index])
        if used > width:
            break
        start = index
    while start < len(text) and unicodedata.combining(text[start]):
        start += 1
    return text[start:]


def last_line(text: str | None) -> str | None:
    """The last line that is not blank: a traceback's or a log's conclusion."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else None


__all__ = [
    "age",
    "bar",
    "compact",
    "dimension_header",
    "dimension_label",
    "dimension_mark",
    "moment",
    "short",
    "short_id",
    "state_change",
]
