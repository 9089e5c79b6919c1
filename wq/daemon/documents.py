"""The JSON documents a request stores, checked at the door.

Every field of a body may be kept (a task's payload, an MR's fields, a webhook's
body) and later written back in every list that shows it. A document the API
cannot write back (nested deeper than the serialisers go, `NaN`, `1e999`, an unpaired
surrogate escape, megabytes in one field) would break those lists for every caller, so
it is refused (422, naming the field and the limit) before any route runs, and nothing
is written; so is a body that gives a key twice in one object (400).
"""

from __future__ import annotations

import json
from typing import Any

from wq.client.strict_json import STRICT_JSON_HOOKS, NotAJsonNumber, RepeatedKey, depth
from wq.client.utf8 import is_utf8


class NotJson(ValueError):
    """The body cannot be decoded as JSON (400)."""


class DocumentRefused(ValueError):
    """A decodable document over a limit, or with a value JSON has not (422)."""


# A JSON `\ud800` escape can spell half of a UTF-16 pair alone: a string no
# database or JSON writer takes.
_UNPAIRED = "holds text that is not valid Unicode (an unpaired surrogate escape)"


def _size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / (1024 * 1024):.1f} MB"
    if count >= 1024:
        return f"{count // 1024} KiB"
    return f"{count} bytes"


# Fields a body's object may have: no route takes more than a few dozen, and FastAPI
# validates each one of a body on the event loop (a million keys held it for seconds).
MAX_BODY_FIELDS = 1000


def check_body(
    body: bytes, *, max_depth: int, max_bytes: int, self_bounded: frozenset[str] = frozenset()
) -> Any:
    """The document of `body`; NotJson or DocumentRefused unless every field is storable.

    Fields named in `self_bounded` are not held to `max_bytes` (the route's schema
    bounds them, and no list writes them back); every other check applies to them."""
    try:
        # A key given twice: the last would win here, and a proxy in front may have
        # read the first.
        document = json.loads(body, **STRICT_JSON_HOOKS)
    except RepeatedKey as repeated:
        raise NotJson(f"the body gives the key {repeated.key!r} twice in one object") from None
    except NotAJsonNumber as refused:
        raise DocumentRefused(f"body: {refused}") from None
    except RecursionError:
        raise DocumentRefused(f"body: nested deeper than {max_depth} levels") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError
        raise NotJson(f"the body is not valid JSON: {error}") from None
    if isinstance(document, dict) and len(document) > MAX_BODY_FIELDS:
        raise DocumentRefused(f"body: {len(document):,} fields, at most {MAX_BODY_FIELDS:,}")
    fields = document.items() if isinstance(document, dict) else [("body", document)]
    for name, value in fields:
        if not is_utf8(name):
            raise DocumentRefused(f"body: a field's name {_UNPAIRED}")
        check_field(
            name,
            value,
            max_depth=max_depth,
            max_bytes=None if name in self_bounded else max_bytes,
        )
    return document


def check_field(name: str, value: Any, *, max_depth: int, max_bytes: int | None) -> None:
    """DocumentRefused, naming `name`, unless `value` can be stored and written back
    (nested at most `max_depth` levels, at most `max_bytes` once encoded)."""
    # The body itself is one level: a field may nest max_depth levels below it.
    if depth(value) > max_depth:
        raise DocumentRefused(f"{name}: nested deeper than {max_depth} levels")
    try:
        size = len(json.dumps(value, ensure_ascii=False).encode())
    except UnicodeEncodeError:
        raise DocumentRefused(f"{name}: {_UNPAIRED}") from None
    if max_bytes is not None and size > max_bytes:
        shown, limit = _size(size), _size(max_bytes)
        if shown == limit:  # just over: `256 KiB, at most 256 KiB` says nothing
            shown, limit = f"{size:,} bytes", f"{max_bytes:,} bytes"
        raise DocumentRefused(f"{name}: {shown}, at most {limit}")
