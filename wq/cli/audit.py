"""`wq audit archive`: upload a time range of the audit log to the S3 archive again.

A deployer command like `wq db migrate`: it reads the configured database and writes
to the configured bucket itself (no daemon needed), importing the engine only when
it runs. Re-archiving is idempotent: an entry always gets the same key and bytes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from wq.cli.deployer import ConfigOption

audit_app = typer.Typer(help="The audit trail.", no_args_is_help=True, rich_markup_mode=None)

# ASCII digits only (`\d` takes any script's digits), few enough for `int` and `timedelta`.
_AGO = re.compile(r"^([0-9]{1,12})\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
TIME_HELP = "an ISO 8601 date or time (UTC unless it names a zone), or an age such as 2h or 7d"


def parse_time(value: str, *, now: datetime | None = None) -> datetime:
    """A point in time from ISO 8601 (naive means UTC) or an age (`90m`, `2h`, `7d`)."""
    value = value.strip()
    ago = _AGO.match(value)
    try:
        if ago:
            delta = timedelta(**{_UNITS[ago.group(2)]: int(ago.group(1))})
            return (now or datetime.now(UTC)) - delta
        parsed = datetime.fromisoformat(value)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:  # an age before the year 1, a zone that moves it out of range
        raise typer.BadParameter(f"{value!r} is too far from now") from None
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not {TIME_HELP}") from None


@audit_app.command("archive")
def archive(
    since: Annotated[
        str, typer.Option("--since", help=f"Archive entries from this time on: {TIME_HELP}")
    ],
    until: Annotated[
        str | None, typer.Option("--until", help="Up to this time (exclusive; default: now)")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Upload the audit entries of a time range to the S3 archive (again)."""
    start = parse_time(since)
    end = parse_time(until) if until is not None else None
    if start > datetime.now(UTC):
        # Nothing can be archived from there on ("archived 0 ... from 2027-01-01 to now").
        raise typer.BadParameter(f"{since!r} is in the future", param_hint="--since")
    if end is not None and end <= start:
        raise typer.BadParameter("--until must be later than --since", param_hint="--until")
    from wq.daemon import commands

    raise typer.Exit(commands.audit_archive(config, start, end))


def register(app: typer.Typer) -> None:
    """Add `wq audit`."""
    app.add_typer(audit_app, name="audit")
