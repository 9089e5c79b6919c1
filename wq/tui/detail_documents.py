"""An item's detail made ready to show: its summary, its details document (a preview of
a big one) and its output's last lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from wq.cli.common import printable
from wq.client.shown import attempts as attempts_shown

SUMMARY = (
    "id",
    "type",
    "project",
    "phase",
    "admission",
    "lane",
    "seq",
    "attempts",
    "error",
    "created_at",
    "updated_at",
    "queued_at",
    "admitted_at",
    "run_after",
    "lease_owner",
)
LABEL_WIDTH = 12


# A details document is shown up to this much; `o` opens the whole of it in $PAGER.
PREVIEW_LINES = 200
PREVIEW_CHARS = 20_000
# Details whose value is a program's output: shown as text under its own title.
OUTPUT_KEYS = ("log_tail",)


def _summary_value(item: dict[str, Any], key: str) -> str:
    """A summary line's value; attempts as the Items view and `wq status` count them."""
    if key == "attempts":
        return attempts_shown(item)
    value = item.get(key)
    return "-" if value is None else str(value)


def summary(item: dict[str, Any]) -> Table:
    """The summary: the labels, and beside them the values, each wrapped within its own
    column (a long project or a traceback would otherwise go on under the labels)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(width=LABEL_WIDTH, justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for key in SUMMARY:
        grid.add_row(key, Text(printable(_summary_value(item, key))))
    return grid


def last_lines(text: str, count: int) -> str:
    """The last `count` lines of `text` (its end is what a reader of output wants)."""
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= count:
        return "\n".join(lines)
    return f"… {len(lines) - count} lines above (o opens the whole)\n" + "\n".join(lines[-count:])


@dataclass
class Details:
    """An item's details made ready to show (in the worker: a big one takes a while)."""

    text: str  # the whole document, pretty-printed, without the output
    preview: str  # what the pane shows: the start of `text`, with a note if cut
    output: str | None  # a task's output tail, as lines of text

    @classmethod
    def of(cls, details: dict[str, Any]) -> Details:
        """Pretty-print `details`, set its output apart and cut a preview."""
        output = next((details[key] for key in OUTPUT_KEYS if details.get(key)), None)
        shown = {key: value for key, value in details.items() if key not in OUTPUT_KEYS}
        # JSON escapes C0 controls only: C1 controls and bidi overrides stay, and the
        # pane and the pager would send them to the terminal.
        text = printable(json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True))
        return cls(text, _preview(text), printable(output) if isinstance(output, str) else None)


def _preview(text: str) -> str:
    """The start of `text`, at most PREVIEW_LINES lines and PREVIEW_CHARS characters."""
    cut = text[:PREVIEW_CHARS]
    lines = cut.split("\n")[:PREVIEW_LINES]
    kept = "\n".join(lines)
    if len(kept) == len(text):
        return text
    left = text.count("\n", len(kept)) + (0 if text.endswith("\n") else 1)
    return f"{kept}\n… {left:,} more lines ({len(text):,} characters): o opens it in $PAGER"
