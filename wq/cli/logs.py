"""`wq logs`: a task's output, as `kubectl logs` prints a pod's; `-f` follows it."""

from __future__ import annotations

import re
import sys
from typing import Annotated

import typer

from wq.cli.common import (
    NoAuthOption,
    UrlOption,
    checked_item_id,
    client,
    errors,
    printable,
)
from wq.cli.completion import complete_id


def logs(
    item_id: Annotated[
        str,
        typer.Argument(
            help="The task's id (or 6+ of its first hex digits).", autocompletion=complete_id
        ),
    ],
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep printing what the run writes until it ends."),
    ] = False,
    tail: Annotated[
        int | None,
        typer.Option("--tail", min=0, max=1_000_000, help="Only the last N lines at first."),
    ] = None,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Print a task's output: what its run wrote (stdout and stderr as they came), or,
    after it ended, what the runner or the task kept. Ctrl-C stops following; the task
    goes on."""
    from wq.client.ids import resolve

    wanted = checked_item_id(item_id)
    # A terminal gets the run's text with its control characters shown, not obeyed.
    shown = printable if sys.stdout.isatty() else str
    with errors(), client(url, no_auth) as api:
        whole = resolve(api, wanted)
        notes = ServerNotes()
        try:
            for chunk in api.logs(whole, tail=tail, follow=follow):
                sys.stdout.write(shown(notes.passed(chunk)))
                sys.stdout.flush()
        except KeyboardInterrupt:
            sys.stderr.write(
                f"\nwq: stopped following; the task goes on (`wq status --id {whole[:8]}`)\n"
            )
            raise typer.Exit(130) from None
        note = notes.final()
        if note is not None:
            sys.stderr.write(f"wq: {note} (`wq logs -f {whole[:8]}`)\n")
            raise typer.Exit(1)
        sys.stdout.write(shown(notes.rest()))


# The lines a server ends an output stream with when it ends before the run does (the
# daemon stops, the output cannot be read, every stream slot is taken).
_NOTE = re.compile(
    r"\n?wq: (the daemon is stopping; .*|the output stopped: .*|\d+ output streams are open.*)\n"
)
_HELD_AT_MOST = 4096


class ServerNotes:
    """Holds back what may be the server's closing note, so that the note goes to
    stderr with a non-zero exit instead of to stdout among the run's output.

    A note is a last line starting `wq: `. What follows a newline and may still
    become one is held until it cannot; a newline itself is never held alone, so that
    each line of the run is shown as soon as it ends."""

    MARK = "wq: "

    def __init__(self) -> None:
        self._held = ""  # begins a line
        self._line_start = True  # what was shown ends a line (or nothing was)

    def passed(self, chunk: str) -> str:
        """What of the text so far is the run's for sure; the rest is held."""
        text = self._held + chunk
        begins_line = bool(self._held) or self._line_start
        cut = text.rfind("\n" + self.MARK)
        if cut == -1 and begins_line and text.startswith(self.MARK):
            cut = 0
        if cut == -1:  # the last line, unfinished, may still become a note
            last = text.rfind("\n") + 1 if "\n" in text else (0 if begins_line else len(text))
            cut = last if self.MARK.startswith(text[last:]) else len(text)
        if len(text) - cut > _HELD_AT_MOST:
            cut = len(text)
        shown, self._held = text[:cut], text[cut:]
        if shown:
            self._line_start = shown.endswith("\n")
        return shown

    def rest(self) -> str:
        """What is held once the stream has ended without a note: the run's too."""
        held, self._held = self._held, ""
        return held

    def final(self) -> str | None:
        """The server's note, if the stream ended with one (then nothing is held)."""
        found = _NOTE.fullmatch(self._held)
        if found is None:
            return None
        self._held = ""
        return found.group(1)


def register(app: typer.Typer) -> None:
    """Add `wq logs`."""
    app.command("logs")(logs)
