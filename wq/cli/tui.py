"""`wq tui`: the live dashboard (Textual loads only when the command runs)."""

from __future__ import annotations

from typing import Annotated

import typer

from wq.cli.common import NoAuthOption, UrlOption, client, errors


def tui(
    refresh: Annotated[
        float, typer.Option("--refresh", min=0.2, help="Seconds between refreshes.")
    ] = 2.0,
    readonly: Annotated[
        bool, typer.Option("--readonly", help="Offer no action that changes state.")
    ] = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """A live dashboard of pools, items and their history (? inside for keys)."""
    with errors(), client(url, no_auth) as api:
        from wq.tui.app import WqApp

        app = WqApp(api, refresh=refresh, readonly=readonly)
        app.run()
    if app.return_code:  # the app died (Textual has printed why): say so to the caller
        raise typer.Exit(app.return_code)


def register(app: typer.Typer) -> None:
    """Add `wq tui`."""
    app.command("tui")(tui)
