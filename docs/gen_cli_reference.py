"""Write docs/reference/cli.md from the `wq` command itself: every command, argument
and option with its default, as the program has them (a test checks it is current).

    python docs/gen_cli_reference.py            # rewrite the page
    python docs/gen_cli_reference.py --check    # exit 1 when the page is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from wq.cli.main import app

PAGE = Path(__file__).resolve().parent / "reference" / "cli.md"
HEADER = """# CLI reference

Every `wq` command with its arguments and options, generated from the program
(`python docs/gen_cli_reference.py`); `wq COMMAND --help` says the same. The
[guide](../cli.md) says how they fit together.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def command_section(path: list[str], command: Any, context: Any) -> list[str]:
    """One command's heading, help, usage and parameters, as its --help has them."""
    name = " ".join(path)
    lines = [f"## `{name}`", ""]
    help_text = (command.help or "").strip()
    if help_text:
        lines += [" ".join(help_text.split()), ""]
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    # The usage line as `--help` prints it (click's own pieces, e.g. `[OPTIONS] [ids]...`).
    usage = " ".join([name, *command.collect_usage_pieces(context)])
    lines += [f"`{usage}`", ""]
    records = [(p, p.get_help_record(context)) for p in [*arguments, *options]]
    rows = [(p, record) for p, record in records if record is not None]
    if rows:
        lines += ["| argument or option | help |", "|---|---|"]
        for param, (names, help_of) in rows:
            if param.param_type_name == "argument" and param.metavar is None:
                names = param.name.upper() + names[len(param.name) :]
            lines.append(f"| `{_cell(names)}` | {_cell(help_of)} |")
        lines.append("")
    return lines


def render() -> str:
    """The whole page."""
    root = typer.main.get_command(app)
    out = [HEADER]

    def walk(path: list[str], command: Any, parent: Any) -> None:
        context = type(command).context_class(command, info_name=path[-1], parent=parent)
        subcommands = getattr(command, "commands", None)
        if subcommands is None or len(path) == 1:
            # A command, or the root with its own options (--version, completion).
            out.extend(command_section(path, command, context))
            if subcommands is None:
                return
        else:
            out.extend([f"## `{' '.join(path)}`", "", " ".join((command.help or "").split()), ""])
        for name in command.list_commands(context):
            child = command.get_command(context, name)
            if child is not None and not child.hidden:
                walk([*path, name], child, context)

    walk(["wq"], root, None)
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    """Rewrite the page, or with --check say whether it is current."""
    page = render()
    if "--check" in sys.argv[1:]:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(f"{PAGE} is out of date: python docs/gen_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
