"""Cell formatting shared by the views: bars, ages and dimension marks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wq.cli.output import age, parse_time

HANDLED, NEEDED, DEFERRED = "✓", "●", "⏲"
BAR_WIDTH = 10


def bar(used: int, capacity: int, width: int = BAR_WIDTH) -> str:
    """`█████░░░░░ 5/10`: usage against capacity (a full bar when capacity is 0 and used)."""
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


def short(text: str | None, width: int) -> str:
    """One line of at most `width` characters."""
    if not text:
        return "-"
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 1] + "…"


def pressure(pool: dict[str, Any]) -> tuple[int, float, float, str]:
    """Sort key, most pressed first: alert work waiting, queued per slot, oldest age."""
    normal, alert = pool["normal"], pool["alert"]
    queued = normal["queued"] + alert["queued"]
    slots = max(1, normal["capacity"] + alert["capacity"])
    return (
        -int(alert["queued"] > 0),
        -queued / slots,
        -float(pool.get("oldest_queued_age_seconds") or 0.0),
        pool["project"],
    )


__all__ = ["age", "bar", "dimension_label", "dimension_mark", "pressure", "short"]
