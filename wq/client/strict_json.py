"""The JSON documents wq accepts: those every reader can write back, and mean one thing.

Python's `json` reads `NaN` and `Infinity`, which JSON has not, `1e999` as infinity,
integers of any length, which other parsers take as infinity or refuse, and an object
that gives a key twice, keeping the last value where another reader may keep the first.
The API refuses such a document (`wq.daemon.documents`) and the CLI refuses it as a
usage error before sending it (`wq submit task --payload`): both read with
`STRICT_JSON_HOOKS` and measure nesting with `depth`.
"""

from __future__ import annotations

import math
from typing import Any


class RepeatedKey(ValueError):
    """An object of the document gives one key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} is given twice in one object")
        self.key = key


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


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook`: an object; RepeatedKey when it gives a key twice."""
    document = dict(pairs)
    if len(document) != len(pairs):  # rare: look for the key only then
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise RepeatedKey(key)
            seen.add(key)
    return document


STRICT_JSON_HOOKS: dict[str, Any] = {
    "object_pairs_hook": unique_keys,
    "parse_constant": refuse_constant,
    "parse_float": finite_float,
    "parse_int": bounded_int,
}
"""The keyword arguments of `json.loads` that read a document as above."""


def depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level + 1)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, level + 1) for child in children)
    return deepest


def _shown(text: str) -> str:
    return text if len(text) <= 24 else text[:24] + "..."
