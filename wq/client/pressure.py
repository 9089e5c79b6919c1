"""Which project is the most pressed: the order of `wq pools`, the TUI's Pools view, and
the project `wq queue` and the Queue view show when none is named."""

from __future__ import annotations

from typing import Any


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


def most_pressed(pools: list[dict[str, Any]]) -> str | None:
    """The project of the most pressed pool, None when no project has work."""
    return str(min(pools, key=pressure)["project"]) if pools else None
