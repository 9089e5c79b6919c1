"""The `wq` command: assembles the command groups, one module each.

Operator commands (`status`, `submit`, `whoami`, ...) talk HTTP through `wq.client`
and never import the engine; deployer commands (`daemon`, `db`, `config`) import it
lazily. Heavy modules (httpx, rich tables, yaml) load inside the commands that use
them, so `wq --help` and `wq status --help` start fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

import wq
from wq.cli import admission, audit, cancel, ci_retry, deployer, identity, items, submit, tui

app = typer.Typer(
    name="wq",
    help="wq: a work-queue engine and the tools to operate it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rich's help formatter alone costs more start-up than httpx.
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"wq {wq.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", help="Print the version.", callback=_version, is_eager=True)
    ] = False,
) -> None:
    """wq: a work-queue engine and the tools to operate it."""


submit.register(app)
items.register(app)
cancel.register(app)
admission.register(app)
identity.register(app)
deployer.register(app)
audit.register(app)
tui.register(app)
ci_retry.register(app)


def main() -> None:
    """Entry point of the `wq` console script."""
    app()
