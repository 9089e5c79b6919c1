"""The numbers a JSON document may hold in wq: those every reader can write back.

Python's `json` reads `NaN` and `Infinity`, which JSON has not, `1e999` as infinity,
and integers of any length, which other parsers take as infinity or refuse. The API
refuses such a document (`wq.daemon.documents`) and the CLI refuses it as a usage
error before sending it (`wq submit task --payload`): both read with these hooks.
"""

from __future__ import annotations

import math
from typing import Any


class NotAJsonNumber(ValueError):
    """A number JSON has not, or one beyond the range of a double; the message says which."""


def refuse_constant(name: str) -> Any:
    """`parse_constant`: `NaN`, `Infinity` and `-Infinity` are refused."""
    raise NotAJsonNumber(f"{name} is not a JSON number")


def finite_float(text: str) -> float:
    """`parse_float`: a number too large for a double (`1e999`) is refused."""
    value = float(text)
    if not math.isfinite(value):
        raise NotAJsonNumber(f"{_shown(text)} is out of the range of a JSON number")
    return value


def bounded_int(text: str) -> int:
    """`parse_int`: an integer beyond the range of a double is refused, as `1e999` is."""
    if len(text.lstrip("-")) > 308:  # 1.8e308 has 309 digits: only those are looked at
        try:
            float(int(text))
        except (OverflowError, ValueError):  # ValueError: past Python's 4,300 digits
            raise NotAJsonNumber(f"{_shown(text)} is out of the range of a JSON number") from None
    return int(text)


JSON_NUMBER_HOOKS: dict[str, Any] = {
    "parse_constant": refuse_constant,
    "parse_float": finite_float,
    "parse_int": bounded_int,
}
"""The keyword arguments of `json.loads` that read numbers as above."""


def _shown(text: str) -> str:
    return text if len(text) <= 24 else text[:24] + "..."
