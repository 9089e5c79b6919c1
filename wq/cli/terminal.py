"""Text from a server made safe to print on a terminal.

Item errors, project names and a run's output are free text: printed as they are they
could move the cursor, rewrite the screen or the clipboard, or set the window title.
Both the error lines (`wq.cli.common`) and the views (`wq.cli.output`) print through
`printable`, so it sits below both.
"""

from __future__ import annotations

import re

# C0 and C1 control characters but newline and tab, and the bidirectional marks,
# overrides and isolates (which could show a name reversed).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: str) -> str:
    """Text from a server made safe for a terminal: control characters shown as `\\x1b`."""
    return _CONTROL.sub(_escaped, value)
