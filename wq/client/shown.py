"""How an item's fields read to a person: the same in `wq status` and in the TUI."""

from __future__ import annotations

from typing import Any


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
