"""Rendering: rich tables for people, complete JSON/YAML documents for scripts.

Machine formats print the server's documents unchanged (plus documented additions),
so they are stable; tables are for reading and may change.
"""

from __future__ import annotations

import copy
import enum
import functools
import io
import json
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

from wq.cli.terminal import printable

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.measure import Measurement


class Output(enum.StrEnum):
    """Output modes: human tables (`table`, `wide`, `plain`) or complete machine documents.

    `plain` is the table without decoration (no rule or blank lines, no trailing
    spaces), as every table is printed when stdout is not a terminal: for grep and awk.
    """

    table = "table"
    wide = "wide"
    plain = "plain"
    json = "json"
    yaml = "yaml"


MACHINE = (Output.json, Output.yaml)
# Wide enough that no row of a plain table is ever folded onto a second line.
PLAIN_WIDTH = 100_000


Renderer = Callable[[Any, bool], "RenderableType"]
"""Builds the human view of a document; the flag asks for the wide variant."""


def console(stderr: bool = False, *, file: IO[str] | None = None) -> Console:
    """A rich console; a wide page when the output is not a terminal (no truncation).

    Every string it prints is plain text: no rich markup or emoji codes (a project or an
    error holding `[/x]` would otherwise be styled, or crash the rendering) and no
    control characters (see `printable`). With `file`, it writes there without colours,
    on a page as wide as any row (`plain_text`).
    """
    from rich.console import Console
    from rich.text import Text

    class PlainConsole(Console):
        def render_str(self, text: str, **options: Any) -> Text:
            return super().render_str(printable(text), **options)

    class OneLineConsole(PlainConsole):
        """Plain tables keep a row on one line (for grep and awk): a newline in a value
        (a multi-line error) is shown as `\\n`."""

        def render_str(self, text: str, **options: Any) -> Text:
            return super().render_str(text.replace("\n", "\\n"), **options)

    settings: dict[str, Any] = {"stderr": stderr, "highlight": False, "markup": False}
    if file is not None:
        return OneLineConsole(
            **settings, emoji=False, file=file, width=PLAIN_WIDTH, color_system=None
        )
    out = PlainConsole(**settings, emoji=False)
    if not out.is_terminal:
        out = PlainConsole(**settings, emoji=False, width=max(out.width, 200))
    return out


def plain_text(view: RenderableType) -> str:
    """A view as plain lines: no blank or rule lines, no trailing spaces, no common
    indent, no colours; empty for an empty view."""
    buffer = io.StringIO()
    console(file=buffer).print(view)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    kept = "\n".join(line for line in lines if line.strip(" \u2500"))
    return textwrap.dedent(kept) + "\n" if kept else ""


def is_plain(mode: Output) -> bool:
    """Whether a human view is printed plain: asked for, or stdout is not a terminal."""
    return mode is Output.plain or not console().is_terminal


def dump(data: Any, mode: Output) -> str:
    """A machine document as text."""
    if mode is Output.yaml:
        import yaml

        if isinstance(data, list):
            data = list(data)  # a list of its own kind (`Listing`) is a list here
        text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        return text
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def emit(data: Any, mode: Output, renderer: Renderer) -> None:
    """Print a document in the chosen mode on stdout."""
    if mode in MACHINE:
        sys.stdout.write(dump(data, mode))
        sys.stdout.flush()
        return
    view = renderer(data, mode is Output.wide)
    if is_plain(mode):
        note = _take_caption(view)
        sys.stdout.write(plain_text(view))
        sys.stdout.flush()
        if note:
            # A note for people (`no items`) is not a row: stdout stays data for awk.
            sys.stderr.write(f"{printable(note)}\n")
        return
    console().print(view)


def _take_caption(view: RenderableType) -> str | None:
    """The caption of a table view, taken off it; None for any other view (an item's
    parts keep theirs: `none` under its dimensions says nothing alone)."""
    from rich.table import Table

    if not isinstance(view, Table) or not isinstance(view.caption, str):
        return None
    caption, view.caption = view.caption, None
    return caption


# How many characters of an id a narrow table shows (the TUI's too); every command
# takes an id's first characters for the id (six at least).
SHORT_ID = 8


class ItemId:
    """An id cell: whole when its column has room, else its first `SHORT_ID`
    characters, never folded over two lines. A table too wide for the terminal
    narrows its widest columns first, which is the id's (36 characters of 80)."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __str__(self) -> str:
        return self.value

    def _shown(self, room: int) -> str:
        return self.value if room >= len(self.value) else self.value[:SHORT_ID]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as the id when there is room for it, else as the short id."""
        from rich.measure import Measurement

        width = len(self._shown(options.max_width))
        return Measurement(width, width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The whole id or its first characters (the text as every cell is printed)."""
        cell = console.render_str(self._shown(options.max_width))
        cell.no_wrap = True
        yield cell


class Fitted:
    """A cell whose text is made for the width it gets (a sparkline resampled): `make`
    takes the width, at most `widest`, at least `narrowest`."""

    def __init__(self, make: Callable[[int], str], widest: int, narrowest: int = 10) -> None:
        self.make = make
        self.widest = widest
        self.narrowest = min(narrowest, widest)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """From the narrowest to the widest it can be, as the room allows."""
        from rich.measure import Measurement

        widest = max(self.narrowest, min(self.widest, options.max_width))
        return Measurement(self.narrowest, widest)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The text made for the room given."""
        width = max(self.narrowest, min(self.widest, options.max_width))
        cell = console.render_str(self.make(width))
        cell.no_wrap = True
        yield cell


def table(*columns: str, title: str | None = None, leave_out: tuple[str, ...] = ()) -> Any:
    """A borderless rich table in the kubectl style.

    Cells fold at spaces; a word is split only when nothing else fits. Ids (`ItemId`)
    shorten instead of folding. On a terminal too narrow for every column, the columns
    named in `leave_out` are left out, in that order, until the others fit (a plain
    table keeps them all).
    """
    from rich import box

    result = _fitting_table()(
        box=box.SIMPLE_HEAD,
        title=title,
        title_justify="left",
        caption_justify="left",
        pad_edge=False,
        show_edge=False,  # flush left, as its title and caption
    )
    result.leave_out = leave_out
    for column in columns:
        # A header's words stay whole: `PROJ`/`ECT` over two lines read as two words.
        longest_word = max(len(word) for word in column.split()) if column.strip() else 1
        result.add_column(column, overflow="fold", min_width=longest_word)
    return result


@functools.cache
def _fitting_table() -> type[Any]:
    """The class of `table`'s tables (made on first use: rich is imported late)."""
    from rich.table import Table

    class FittingTable(Table):
        """A table for the room it gets: while a row would not fit on one line, its
        `leave_out` columns go; then, if still too wide, headers wrap at their spaces
        before a cell folds."""

        leave_out: tuple[str, ...] = ()

        def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
            room = options.max_width
            columns = self.columns
            for header in self.leave_out:
                if _one_line_width(columns, console, options) <= room:
                    break
                columns = [column for column in columns if column.header != header]
            if (
                columns == self.columns
                and Table.__rich_measure__(self, console, options).maximum <= room
            ):
                yield from Table.__rich_console__(self, console, options)
                return
            view = copy.copy(self)
            view.columns, view.rows = [], []
            widths = [_one_line(column, console, options) for column in columns]
            pinned = _kept_whole(columns, widths, room)
            widths = _folding_widths(columns, widths, pinned, room)
            for column, width, whole in zip(columns, widths, pinned, strict=True):
                view.add_column(
                    column.header,
                    overflow=column.overflow,
                    min_width=width if whole else min(column.min_width or 0, width),
                    max_width=width,
                )
            for cells in zip(*(list(column.cells) for column in columns), strict=True):
                view.add_row(*cells)
            yield from Table.__rich_console__(view, console, options)

    return FittingTable


# The room between two columns of `table`'s tables: padding, divider, padding.
_BETWEEN_COLUMNS = 3


def _one_line(column: Any, console: Console, options: ConsoleOptions) -> int:
    """How wide a column of `table` is with each of its cells on one line (an id
    short, the header's words apart)."""
    from rich.cells import cell_len
    from rich.measure import Measurement

    def width(cell: Any) -> int:
        if isinstance(cell, ItemId):
            return min(len(cell.value), SHORT_ID)
        if isinstance(cell, str):
            return max((cell_len(line) for line in cell.splitlines()), default=0)
        return Measurement.get(console, options, cell).maximum

    return max([column.min_width or 0, *map(width, column.cells)])


def _kept_whole(columns: list[Any], widths: list[int], room: int) -> list[bool]:
    """Which columns keep their cells whole: those of single words (an id, a phase, a
    short project), narrowest first, as long as the others' narrowest still fit; the
    rest fold (an error at its spaces)."""
    whole = [False] * len(columns)
    used = sum(column.min_width or 0 for column in columns)
    used += _BETWEEN_COLUMNS * (len(columns) - 1)
    for index in sorted(range(len(columns)), key=widths.__getitem__):
        column = columns[index]
        if any(isinstance(cell, str) and len(cell.split()) > 1 for cell in column.cells):
            continue  # it can wrap at its spaces
        more = widths[index] - (column.min_width or 0)
        if used + more > room:
            break
        used += more
        whole[index] = True
    return whole


def _folding_widths(
    columns: list[Any], widths: list[int], pinned: list[bool], room: int
) -> list[int]:
    """The widths the folding columns get: their one-line widths while the room holds
    them, else shared out (the narrowest raised first, none below its header's longest
    word). The table is then as wide as the room: left to shrink a table itself, rich
    wraps a cell for one width and cuts it to a narrower one, and text is lost."""
    folding = [index for index, whole in enumerate(pinned) if not whole]
    given = list(widths)
    for index in folding:
        given[index] = columns[index].min_width or 1
    left = room - sum(given) - _BETWEEN_COLUMNS * (len(columns) - 1)
    folding.sort(key=widths.__getitem__)
    for done, index in enumerate(folding):
        share = max(left // (len(folding) - done), 0)
        more = min(widths[index] - given[index], share)
        given[index] += more
        left -= more
    return given


def _one_line_width(columns: list[Any], console: Console, options: ConsoleOptions) -> int:
    """How wide a table of `columns` is with each row on one line."""
    needed = sum(_one_line(column, console, options) for column in columns)
    return needed + _BETWEEN_COLUMNS * (len(columns) - 1)


def parse_time(value: str | None) -> datetime | None:
    """An ISO timestamp from the API."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def age(value: str | float | None, *, now: datetime | None = None) -> str:
    """A compact age (`42s`, `5m`, `3h`, `2d`) of a timestamp or a number of seconds."""
    if value is None:
        return "-"
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        moment = parse_time(value)
        if moment is None:
            return "-"
        seconds = ((now or datetime.now(UTC)) - moment).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)}{unit}"
            break
    else:
        text = f"{int(seconds)}s"
    return f"in {text}" if future else text


def text(value: Any) -> str:
    """A cell: `-` for nothing, JSON for structures."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return str(value)
