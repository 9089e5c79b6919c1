"""The `?` help says what the keys that are not in the footer do."""

from __future__ import annotations

from wq.tui.help import HELP


def lines_with(word: str) -> list[str]:
    return [line for line in HELP.splitlines() if line.lstrip().startswith(word)]


def test_help_names_tab_for_moving_between_the_queue_tables() -> None:
    (line,) = lines_with("tab")
    assert "shift+tab" in line
    assert "Queue" in HELP[HELP.index(line) :].split("\n\n")[0]
