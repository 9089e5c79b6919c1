"""Column widths for a table that must fit the terminal: some columns give way.

Numbers and short words are never cut; a long text column (a project, an error) is
given what the others leave, between its header's width and its longest value, and
its values are shortened with `…` to that width, as `gh` and `kubectl` do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.cells import cell_len
from textual.widgets import DataTable

# A DataTable pads each cell with one space on either side.
PADDING = 2


def widest(cells: Iterable[str], header: str = "") -> int:
    """The width a column needs for these cells and its header (each header line)."""
    return max((cell_len(line) for line in (*header.splitlines(), *cells)), default=0)


# When a table is too wide however narrow its text columns, they keep this much.
COMFORTABLE = 24


def give_way(room: int, fixed: Iterable[int], flexible: Sequence[tuple[int, int]]) -> list[int]:
    """The widths of the `flexible` columns, each given as (least, most).

    `room` is the table's width and `fixed` the content widths of the other columns.
    Each flexible column gets at least `least`; what is left is shared out evenly, one
    cell at a time, up to each one's `most` (so a short project leaves the rest to a
    long error). When even the least widths do not fit, the table scrolls sideways
    anyway: then cutting them to the least would only make them unreadable, and each
    keeps up to `COMFORTABLE` cells.
    """
    count = len(flexible)
    spare = room - sum(width + PADDING for width in fixed) - count * PADDING
    widths = [min(least, most) for least, most in flexible]
    if sum(widths) > spare:
        return [min(most, max(least, COMFORTABLE)) for least, most in flexible]
    spare -= sum(widths)
    while spare > 0:
        growing = [n for n, (_, most) in enumerate(flexible) if widths[n] < most]
        if not growing:
            break
        for n in growing[:spare]:
            widths[n] += 1
        spare -= min(spare, len(growing))
    return widths


def room(table: DataTable[Any], rows: int) -> int:
    """The cells a table has across for `rows` rows: its width, less the vertical
    scrollbar that this many rows will need."""
    width = table.size.width or table.app.size.width
    height = table.size.height or table.app.size.height
    if rows + table.header_height > height:
        width -= table.styles.scrollbar_size_vertical
    return width
