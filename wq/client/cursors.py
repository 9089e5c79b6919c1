"""The item list's keyset position of an item, as the API's cursors spell it.

`GET /api/work-items` lists items newest first in (`created_at`, `id`) order, and its
OpenAPI schema documents the cursor: the creation time in microseconds since
1970-01-01 UTC, `-`, the id as 32 lowercase hex digits, meaning "the items after this
one". Since the position belongs to the item, a client can ask for the items after any
item it holds (not only after the last of a page), which is how the TUI refreshes the
rows on screen without reloading the ones above them.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

ItemKey = tuple[int, str]


def item_key(item: dict[str, Any]) -> ItemKey:
    """(creation microseconds, id hex): larger is newer, the list's order descending."""
    created = datetime.fromisoformat(item["created_at"])
    if created.tzinfo is None:  # the API says UTC; be lenient with a naive time
        created = created.replace(tzinfo=UTC)
    micros = (created - EPOCH) // timedelta(microseconds=1)
    return micros, uuid.UUID(str(item["id"])).hex


def cursor_of(key: ItemKey) -> str:
    """The `cursor` that lists the items after the item with this key."""
    micros, hex_id = key
    return f"{micros}-{hex_id}"


def item_cursor(item: dict[str, Any]) -> str:
    """The `cursor` that lists the items after `item`."""
    return cursor_of(item_key(item))
