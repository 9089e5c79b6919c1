"""`wq logs`: a task's output, as `kubectl logs` prints a pod's; `-f` follows it."""

from __future__ import annotations

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
        try:
            for chunk in api.logs(whole, tail=tail, follow=follow):
                sys.stdout.write(shown(chunk))
                sys.stdout.flush()
        except KeyboardInterrupt:
            sys.stderr.write(
                f"\nwq: stopped following; the task goes on (`wq status --id {whole[:8]}`)\n"
            )
            raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Add `wq logs`."""
    app.command("logs")(logs)
