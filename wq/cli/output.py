"""Rendering: rich tables for people, complete JSON/YAML documents for scripts.

Machine formats print the server's documents unchanged (plus documented additions),
so they are stable; tables are for reading and may change.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from wq.cli.terminal import printable

if TYPE_CHECKING:
    from rich.console import Console, RenderableType


class Output(enum.StrEnum):
    """Output modes: human tables (`table`, `wide`) or complete machine documents."""

    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


Renderer = Callable[[Any, bool], "RenderableType"]
"""Builds the human view of a document; the flag asks for the wide variant."""


def console(stderr: bool = False) -> Console:
    """A rich console; a wide page when the output is not a terminal (no truncation).

    Every string it prints is plain text: no rich markup or emoji codes (a project or an
    error holding `[/x]` would otherwise be styled, or crash the rendering) and no
    control characters (see `printable`).
    """
    from rich.console import Console
    from rich.text import Text

    class PlainConsole(Console):
        def render_str(self, text: str, **options: Any) -> Text:
            return super().render_str(printable(text), **options)

    settings: dict[str, Any] = {"stderr": stderr, "highlight": False, "markup": False}
    out = PlainConsole(**settings, emoji=False)
    if not out.is_terminal:
        out = PlainConsole(**settings, emoji=False, width=max(out.width, 200))
    return out


def dump(data: Any, mode: Output) -> str:
    """A machine document as text."""
    if mode is Output.yaml:
        import yaml

        text: str = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        return text
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def emit(data: Any, mode: Output, renderer: Renderer) -> None:
    """Print a document in the chosen mode on stdout."""
    if mode in (Output.json, Output.yaml):
        sys.stdout.write(dump(data, mode))
        sys.stdout.flush()
        return
    console().print(renderer(data, mode is Output.wide))


def table(*columns: str, title: str | None = None) -> Any:
    """A borderless rich table in the kubectl style."""
    from rich import box
    from rich.table import Table

    result = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    for column in columns:
        result.add_column(column, overflow="fold")
    return result


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
