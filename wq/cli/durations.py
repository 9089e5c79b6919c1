"""Durations as people type them on the command line: `90s`, `30m`, `2h`, `7d`."""

from __future__ import annotations

import re

from wq.cli.common import usage_error

DURATION = re.compile(r"([1-9][0-9]*)([smhd])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_seconds(option: str, value: str) -> int:
    """`value` in seconds; a usage error naming `option` when it is not a duration."""
    match = DURATION.fullmatch(value)
    if match is None:
        if re.fullmatch(r"0+[smhd]", value):
            usage_error(f"{option}: must be longer than 0; got {value!r}")
        usage_error(f"{option}: a number and a unit (s, m, h, d), e.g. 1h; got {value!r}")
    return int(match.group(1)) * UNITS[match.group(2)]
