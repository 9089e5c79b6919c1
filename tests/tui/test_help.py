"""The `?` help says what the keys that are not in the footer do."""

from __future__ import annotations

from wq.tui.help import HELP


def entry(key: str) -> str:
    """The help's entry for `key`: its first line and the indented lines under it."""
    lines = HELP.splitlines()
    first = next(n for n, line in enumerate(lines) if line.lstrip().startswith(f"{key} "))
    indent = len(lines[first]) - len(lines[first].lstrip())
    more = []
    for line in lines[first + 1 :]:
        if len(line) - len(line.lstrip()) <= indent + 3:  # the next key, or a blank line
            break
        more.append(line.strip())
    return " ".join([lines[first].strip(), *more])


def test_help_names_tab_for_moving_between_the_queue_tables() -> None:
    line = entry("tab")
    assert "shift+tab" in line and "Queue" in line


def test_help_says_space_moves_to_the_next_row() -> None:
    assert "next row" in entry("space")
