"""How an item's or a replica's fields read to a person: the same in the CLI and the TUI."""

from __future__ import annotations

from typing import Any


def counted(count: int | str, noun: str) -> str:
    """`1 item`, `3 items`, `2/5 items`: a count and its noun, singular for one."""
    return f"{count} {noun}" if str(count) == "1" else f"{count} {noun}s"


def attempts(item: dict[str, Any]) -> str:
    """The tries an item took: its failures in a row, or for a task the runs it started.

    `attempts` counts the failures in a row of one action and restarts at each success,
    so a task whose run started and then failed shows 0; its `runs` say how many times
    it really ran.
    """
    count = item.get("attempts") or 0
    runs = (item.get("details") or {}).get("runs")
    if isinstance(runs, int) and not isinstance(runs, bool):
        count = max(count, runs)
    return str(count)


def workers_and_leases(replica: dict[str, Any]) -> tuple[str, str]:
    """A replica's busy/total workers and the leases it holds.

    A lost replica's own last report is stale (its workers are gone, the others took
    over most of its items): no workers, and the leases the database still gives it.
    """
    if replica.get("state") == "lost":
        return "-", str(replica.get("being_rescued", 0))
    return f"{replica['workers_busy']}/{replica['workers_total']}", str(replica["leases_held"])
