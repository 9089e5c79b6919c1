"""Item ids as people type them: a whole id, or a short id (a prefix of at least 6 hex
digits; the TUI shows 8), which the server resolves (`GET /api/work-items?id_prefix=`).

A short id that names no item the caller may read is not found (exit 3), as a whole
id would be; one that names several is a usage error listing them (exit 2).
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING

from wq.client.errors import NotFound, UsageError

if TYPE_CHECKING:
    from wq.client.api import ApiClient

MIN_PREFIX = 6
ID_DIGITS = 32
CANDIDATES_SHOWN = 10
_HEX_AND_DASHES = re.compile(r"^[0-9a-fA-F-]+$")


class AmbiguousId(UsageError):
    """A short id that starts the ids of several items."""


# An id given is repeated in an error up to this many characters (not a pasted page).
SHOWN_CHARACTERS = 40


def checked(value: str) -> str:
    """A whole id (canonical, with dashes) or a short id (lowercase hex digits).

    Raises `UsageError` for anything else: an empty value, other characters, fewer
    than `MIN_PREFIX` or more than 32 hex digits.
    """
    if not value:
        raise UsageError("an empty id is not an item id")
    shown = repr(value) if len(value) <= SHOWN_CHARACTERS else f"{value[:SHOWN_CHARACTERS]!r}…"
    if not _HEX_AND_DASHES.match(value):
        raise UsageError(f"{shown} is not an item id (hex digits and dashes)")
    digits = value.replace("-", "").lower()
    if len(digits) == ID_DIGITS:
        return str(uuid.UUID(hex=digits))
    if len(digits) > ID_DIGITS:
        raise UsageError(
            f"{shown} is not an item id: {len(digits)} hex digits, an id has {ID_DIGITS}"
        )
    if len(digits) < MIN_PREFIX:
        raise UsageError(
            f"{shown} is not an item id: give the whole id or at least "
            f"{MIN_PREFIX} of its first hex digits"
        )
    return digits


def is_whole(checked_id: str) -> bool:
    """Whether a `checked` id is a whole id (else a short one)."""
    return len(checked_id) > ID_DIGITS


def resolve(api: ApiClient, value: str) -> str:
    """The whole id that `value` names; a short id is looked up on the server."""
    wanted = checked(value)
    if is_whole(wanted):
        return wanted
    page = api.items_page(limit=CANDIDATES_SHOWN + 1, id_prefix=wanted)
    found = [item["id"] for item in page["items"]]
    if not found:
        raise NotFound(f"not found: no work item id starts with {wanted}")
    if len(found) == 1:
        return str(found[0])
    count = f"more than {CANDIDATES_SHOWN}" if len(found) > CANDIDATES_SHOWN else len(found)
    raise AmbiguousId(
        f"id {wanted} matches {count} items: {', '.join(found[:CANDIDATES_SHOWN])}",
        hint="give more of the id's digits",
    )
