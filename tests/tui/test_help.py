"""The `?` help says what the keys that are not in the footer do, at any width."""

from __future__ import annotations

import pytest
from rich.console import Console

from wq.tui.help import SECTIONS, help_text


def entry(key: str) -> str:
    """The help's description of `key`."""
    return next(text for _, entries in SECTIONS for keys, text in entries if keys == key)


def test_help_names_tab_for_moving_between_the_queue_tables() -> None:
    line = entry("tab  shift+tab")
    assert "previous table" in line and "Queue" in line


def test_help_says_space_moves_to_the_next_row() -> None:
    assert "next row" in entry("space")


@pytest.mark.parametrize("width", [54, 74, 120])
def test_help_wraps_each_description_in_its_own_column(width: int) -> None:
    """It was text laid out for 90 columns: at 80 and 60 its lines wrapped back to the
    left edge, under the keys (`the` alone on a line)."""
    console = Console(width=width, record=True, force_terminal=False)
    console.print(help_text())
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= width
    column = lines[3].index("the first view")
    described = [line for line in lines if line.startswith("  ")]
    for line in described:
        description = line[column:]
        assert description.strip() and not description.startswith(" "), line
    # Each entry's first line holds its key; the lines under it start in the column.
    keys = [line[:column].strip() for line in described if line[:column].strip()]
    assert keys == [key.strip() for _, entries in SECTIONS for key, _ in entries]
