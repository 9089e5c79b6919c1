"""The Items view's loaded list, refreshed a few spans at a time.

The list holds the items loaded so far, newest first in the API's keyset order, and
whether more exist below the last one. A refresh does not reload all of them: it plans
the spans of rows the user can notice (the first page, where new items arrive; the rows
on screen and around the cursor, with a margin; the next page when scrolling asked for
it), fetches each after the item just above it (the API's cursor is a keyset position,
see `wq.client.cursors`), and merges the answers in. An answer is exact for the keyset
range it covers, from the item above its span down to its last item (or to the end of
the list when the API says there is no more), so items that arrived, changed or left
inside that range show as they are now, and rows elsewhere stay as last seen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from wq.client.cursors import ItemKey, cursor_of, item_key

PAGE = 100  # rows loaded at a time, and the first page refreshed at every poll
MAX_PAGE = 500  # the API's largest page

Item = dict[str, Any]


@dataclass(frozen=True)
class Span:
    """Up to `limit` items after the item whose key is `after` (None: from the top)."""

    after: ItemKey | None
    limit: int

    @property
    def cursor(self) -> str | None:
        """The API cursor of this span's start."""
        return None if self.after is None else cursor_of(self.after)


@dataclass
class Answer:
    """What the API returned for a span (one or more pages followed to its limit)."""

    after: ItemKey | None
    items: list[Item]
    more: bool  # the API had a next page after the last of `items`


@dataclass
class ItemList:
    """Loaded items (newest first), their keys, and whether more exist below."""

    items: list[Item] = field(default_factory=list)
    keys: list[ItemKey] = field(default_factory=list)
    more: bool = False

    def plan(self, rows: Iterable[range], want: int) -> list[Span]:
        """The spans a refresh fetches: the first page, the `rows` given (indexes into
        `items`: what is on screen and around the cursor), and the rows up to `want`
        that are not loaded yet (empty: the first `max(PAGE, want)` rows).

        Overlapping or touching ranges become one span, so a refresh of a view at the
        top is a single request, and one deep in the list is two or three.
        """
        loaded = len(self.items)
        ranges = [range(0, PAGE)]
        ranges += [range(max(0, r.start), min(loaded, r.stop)) for r in rows]
        if self.more and want > loaded:
            ranges.append(range(loaded, want))
        if not loaded:
            ranges = [range(0, max(PAGE, want))]
        merged: list[list[int]] = []
        for r in sorted((r for r in ranges if r.stop > r.start), key=lambda r: r.start):
            if merged and r.start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], r.stop)
            else:
                merged.append([r.start, r.stop])
        return [
            Span(self.keys[start - 1] if start else None, stop - start) for start, stop in merged
        ]

    def merge(self, answers: Iterable[Answer]) -> set[str]:
        """Put the answers in their keyset ranges; the ids of the items they brought."""
        fresh: set[str] = set()
        for answer in answers:
            keys = [item_key(item) for item in answer.items]
            start = 0 if answer.after is None else _first_below(self.keys, answer.after)
            # Covered down to the last item returned (what lies below it is kept), or,
            # when the API has no more, to the end of the list.
            stop = _first_below(self.keys, keys[-1]) if answer.more and keys else len(self.keys)
            if stop == len(self.items):
                self.more = answer.more
            self.items[start:stop] = answer.items
            self.keys[start:stop] = keys
            fresh.update(str(item["id"]) for item in answer.items)
        return fresh


def _first_below(keys: list[ItemKey], bound: ItemKey) -> int:
    """The index of the first key below `bound` in a descending list (binary search)."""
    low, high = 0, len(keys)
    while low < high:
        middle = (low + high) // 2
        if keys[middle] < bound:
            high = middle
        else:
            low = middle + 1
    return low


def fetch_spans(spans: Iterable[Span], page: Any) -> list[Answer]:
    """Fetch each span with `page(limit=, cursor=)` (the client's `items_page` with the
    view's filters), following the API's cursor while a span needs more than a page."""
    answers = []
    for span in spans:
        items: list[Item] = []
        cursor, more = span.cursor, False
        while len(items) < span.limit:
            got = page(limit=min(MAX_PAGE, span.limit - len(items)), cursor=cursor)
            items += got["items"]
            cursor = got.get("next_cursor")
            more = bool(cursor)
            if not cursor or not got["items"]:
                break
        answers.append(Answer(span.after, items, more))
    return answers
