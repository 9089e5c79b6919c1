"""`wq whoami`, `wq login`, `wq logout`."""

from __future__ import annotations

import sys
from typing import Any

import typer

from wq.cli.common import (
    JsonOption,
    NoAuthOption,
    Output,
    OutputOption,
    UrlOption,
    client,
    errors,
    fail,
    output_mode,
)
from wq.cli.output import emit, table, text

# How long `wq logout` waits for the local daemon to say whether it still runs.
LIVENESS_TIMEOUT = 3.0


def identity_of(document: dict[str, Any]) -> str:
    """The caller's name in a whoami document."""
    return str(document.get("authentication", {}).get("identity", ""))


def _whoami_view(document: dict[str, Any], wide: bool) -> Any:
    authentication = document.get("authentication", {})
    permissions = document.get("authorization", {}).get("effective_permissions", {})
    view = table("IDENTITY", "TIER", "GROUPS", "PERMISSIONS")
    view.add_row(
        identity_of(document),
        text(authentication.get("tier")),
        ", ".join(authentication.get("groups") or []) or "-",
        "; ".join(f"{kind}: {', '.join(perms)}" for kind, perms in permissions.items()) or "none",
    )
    return view


def whoami(
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
    url: UrlOption = None,
    no_auth: NoAuthOption = False,
) -> None:
    """Who the server thinks you are (-o json: the full identity and permissions)."""
    mode = output_mode(output, json_flag)
    with errors(), client(url, no_auth) as api:
        document = api.whoami()
        if mode in (Output.table, Output.plain):
            typer.echo(identity_of(document))  # the name alone; no need to load rich
            return
        emit(document, mode, _whoami_view)


def login(
    url: UrlOption = None,
    output: OutputOption = Output.table,
    json_flag: JsonOption = False,
) -> None:
    """Log in with your Kerberos ticket and cache the token for this server."""
    from wq.client.settings import env_token

    with errors(), client(url, False) as api:
        api.credentials.login()
        document = api.whoami()
        mode = output_mode(output, json_flag)
        if mode in (Output.json, Output.yaml):
            emit(document, mode, _whoami_view)
        else:
            typer.echo(f"Logged in to {api.url} as {identity_of(document)}")
        found = env_token()
        if found is not None:
            sys.stderr.write(f"note: {found[0]} is set and is used instead of this login\n")


def logout(url: UrlOption = None) -> None:
    """Remove the cached token for this server (not the local daemon's own)."""
    from wq.client.errors import EXIT_CONFLICT
    from wq.client.settings import resolve_url
    from wq.client.token_cache import TokenCache

    with errors():
        server = resolve_url(url)
    cache = TokenCache()
    entry = cache.load(server)
    if entry is not None and entry.local and _local_daemon_gone(server, entry.token):
        # Its daemon was killed (it removes its token when it stops): nothing uses it.
        cache.forget(server)
        typer.echo(f"Removed the token of the local daemon that ran at {server}")
        return
    if entry is not None and entry.local:
        # Removing it would lock every command out of the running daemon until it
        # restarts: the daemon writes it at start and removes it when it stops.
        fail(
            f"that is the local daemon's own token for {server}; it is removed when the "
            "daemon stops",
            EXIT_CONFLICT,  # refused, as the documented codes say: nothing failed
            hint="to send no credentials, use --no-auth",
        )
    if entry is None and not cache.path_for(server).exists():
        typer.echo(f"Not logged in to {server}")
        return
    cache.forget(server)
    typer.echo(f"Logged out of {server}")


def _local_daemon_gone(server: str, token: str) -> bool:
    """Whether nothing at `server` takes the local daemon's token: nothing listens
    there, or another server does. A server that does not answer in time may be the
    daemon, busy: its token stays."""
    from wq.client.api import ApiClient
    from wq.client.errors import ServerUnreachable

    try:
        with ApiClient(server, no_auth=True, timeout=LIVENESS_TIMEOUT) as api:
            return not api.accepts(token)
    except ServerUnreachable as err:
        return "connection refused" in str(err)


def register(app: typer.Typer) -> None:
    """Add the identity commands."""
    app.command("whoami")(whoami)
    app.command("login")(login)
    app.command("logout")(logout)
