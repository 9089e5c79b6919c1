"""`wq tui`: the live dashboard (Textual loads only when the command runs)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from wq.cli.common import NoAuthOption, UrlOption, client, errors, fail, usage_error
from wq.client.errors import EXIT_USAGE

# The TUI's views (its modes), known here without importing Textual.
VIEWS = ("overview", "pools", "queue", "items")


def tui(
    refresh: Annotated[
        float, typer.Option("--refresh", min=0.2, max=3600, help="Seconds between refreshes.")
    ] = 2.0,
    readonly: Annotated[
        bool, typer.Option("--readonly", help="Offer no action that changes state.")
    ] = False,
    view: Annotated[
        str,
        typer.Option(
            "--view",
            help="The view shown first: overview, pools, queue or items.",
            autocompletion=lambda: list(VIEWS),
        ),
    ] = "overview",
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """A live dashboard: the overview, pools, queues, items and their history (? inside
    for keys)."""
    if view not in VIEWS:
        usage_error(f"--view: {view!r} is not one of {', '.join(VIEWS)}")
    if not on_a_terminal():
        fail("wq tui needs a terminal (stdin, stdout and stderr must be a TTY)", EXIT_USAGE)
    with errors(), client(url, no_auth) as api:
        from wq.tui.app import WqApp

        app = WqApp(api, refresh=refresh, readonly=readonly, view=view)
        app.run()
    if app.return_code:  # the app died (Textual has printed why): say so to the caller
        raise typer.Exit(app.return_code)


def on_a_terminal() -> bool:
    """Whether the dashboard can run here: keys come from stdin, and Textual draws on
    stderr (stdout on Windows). Without a terminal it does not stop: at the end of
    stdin its driver polls again and again, at full CPU, drawing into a pipe or a file.
    """
    streams = (sys.stdin, sys.stdout, sys.stderr)
    return all(stream is not None and stream.isatty() for stream in streams)


def register(app: typer.Typer) -> None:
    """Add `wq tui`."""
    app.command("tui")(tui)
