"""The deployer commands: `wq daemon`, `wq db ...`, `wq config check`.

They import the engine lazily, inside the command, so `wq --help` stays fast.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from typer._click import exceptions as click  # typer ships its own click

db_app = typer.Typer(
    help="Database schema migrations.", no_args_is_help=True, rich_markup_mode=None
)
config_app = typer.Typer(help="Configuration files.", no_args_is_help=True, rich_markup_mode=None)


class LogFormat(StrEnum):
    """How `wq daemon` writes its log lines."""

    text = "text"
    json = "json"


ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        metavar="<path>",
        help="Config file (default: $WQ_CONFIG or $WORKQUEUE_SERVICE_CONFIG, "
        "then /etc/wq/config.yml, /etc/workqueue/config.yml)",
    ),
]


def daemon(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1)")] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Port (default 8080; 0: any free port)")
    ] = None,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            "--log-format",
            envvar="WQ_LOG_FORMAT",
            help="Log lines as text or JSON (one object a line)",
        ),
    ] = LogFormat.text,
) -> None:
    """Run the engine: HTTP API, processing, admission and sweep."""
    from wq.daemon import commands

    raise typer.Exit(commands.daemon(config, host, port, log_format.value))


@db_app.command("migrate")
def db_migrate(config: ConfigOption = None) -> None:
    """Upgrade the database schema to the newest revision."""
    from wq.daemon import commands

    raise typer.Exit(commands.db_migrate(config))


@db_app.command("current")
def db_current(config: ConfigOption = None) -> None:
    """Show the database's schema revision."""
    from wq.daemon import commands

    raise typer.Exit(commands.db_current(config))


@config_app.command("check")
def config_check(
    path: Annotated[
        str | None,
        typer.Argument(help="The config file to validate (or give it with -c)"),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config", "-c", metavar="<path>", help="The config file, as `wq daemon -c` takes it"
        ),
    ] = None,
    no_env: Annotated[
        bool,
        typer.Option(
            "--no-env", help="Check the structure only and list the variables a start needs"
        ),
    ] = False,
) -> None:
    """Validate a config file without starting anything."""
    if path is not None and config is not None and path != config:
        raise typer.BadParameter(
            "two config files named: give one, as the argument or with -c", param_hint="--config"
        )
    chosen = path if path is not None else config
    if chosen is None:
        raise click.MissingParameter(param_type="argument", param_hint="'path' (or -c FILE)")
    from wq.daemon import commands

    raise typer.Exit(commands.config_check(chosen, no_env=no_env))


def register(app: typer.Typer) -> None:
    """Add the deployer commands."""
    app.command("daemon")(daemon)
    app.add_typer(db_app, name="db")
    app.add_typer(config_app, name="config")
