"""The `wq` command: assembles the command groups, one module each.

Operator commands (`status`, `submit`, `whoami`, ...) talk HTTP through `wq.client`
and never import the engine; deployer commands (`daemon`, `db`, `config`) import it
lazily. Heavy modules (httpx, rich tables, yaml) load inside the commands that use
them, so `wq --help` and `wq status --help` start fast.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any, NoReturn

import typer
from typer._click import exceptions as click  # typer ships its own click
from typer.core import TyperGroup

import wq
from wq.cli import (
    admission,
    audit,
    cancel,
    ci_retry,
    deployer,
    identity,
    items,
    logs,
    replicas,
    retry,
    stats,
    submit,
    tui,
)


def usage_message(err: click.UsageError) -> str:
    """What click found wrong, in the CLI's words: `--interval: must be a number`."""
    if isinstance(err, click.MissingParameter):
        return err.format_message().rstrip(".").lower()
    if isinstance(err, click.BadParameter) and err.param is not None:
        param = err.param
        option = param.param_type_name == "option"
        name = param.opts[0] if option else (param.name or "").upper()
        # typer validates with pydantic, whose custom errors start "Value error, ".
        message = err.message.removeprefix("Value error, ").replace("Input should be", "must be")
        return f"{name}: {message[:1].lower()}{message[1:].rstrip('.')}"
    message = err.format_message().rstrip(".")
    return message[:1].lower() + message[1:]


def _usage_error(err: click.UsageError) -> NoReturn:
    if isinstance(err, click.NoArgsIsHelpError):
        err.show()  # `wq db` alone: the group's help, as before
        sys.exit(err.exit_code)
    command = err.ctx.command_path if err.ctx is not None else "wq"
    sys.stderr.write(f"wq: error: {usage_message(err)}\nhint: see {command} --help\n")
    sys.exit(err.exit_code)


class WqGroup(TyperGroup):
    """The root command: click's usage errors become `wq: error:` and `hint:` lines.

    Click would print its own "Usage: ... Error: ..." box; every other error of the
    CLI is one `wq: error:` line, so these are too (exit 2 still).
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command; in standalone mode, format usage errors and exit."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        if isinstance(sys.stdout, io.TextIOWrapper):
            # An output whose encoding cannot show a character (PYTHONIOENCODING=ascii, a
            # sparkline's blocks, a project's accents) shows `?` for it, not a traceback.
            sys.stdout.reconfigure(errors="replace")
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click.UsageError as err:
            _usage_error(err)
        except click.ClickException as err:
            err.show()
            sys.exit(err.exit_code)
        except typer.Abort as err:
            # Click's prompts abort on Ctrl-C (exit 130, as everywhere else) and on the
            # end of input (no answer: 1).
            sys.stderr.write("wq: interrupted\n")
            sys.exit(130 if isinstance(err.__context__, KeyboardInterrupt) else 1)
        except OSError as err:
            # Most often the output cannot be written (a full disk, a closed pipe): one
            # line, and nothing left in stdout's buffer to fail again at exit.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if isinstance(err, BrokenPipeError):
                sys.exit(0)  # `wq ... | head`: the reader left
            sys.stderr.write(f"wq: error: {err.strerror or err}\n")
            sys.exit(1)
        # Not standalone, click returns the command's value, or the exit code of an Exit.
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="wq",
    cls=WqGroup,
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
retry.register(app)
cancel.register(app)
logs.register(app)
replicas.register(app)
admission.register(app)
stats.register(app)
identity.register(app)
deployer.register(app)
audit.register(app)
tui.register(app)
ci_retry.register(app)


def main() -> None:
    """Entry point of the `wq` console script."""
    app()
