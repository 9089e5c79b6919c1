"""The Items view's list model: which spans a refresh fetches, and how answers merge."""

from __future__ import annotations

from typing import Any

from tests.tui.canned import CannedServer, item
from wq.client.cursors import item_key
from wq.tui.itemlist import PAGE, Answer, ItemList, fetch_spans


def loaded(items: list[Any], more: bool = True) -> ItemList:
    found = ItemList()
    found.merge([Answer(None, list(items), more)])
    return found


def fetcher(server: CannedServer) -> Any:
    import httpx

    def page(limit: int, cursor: str | None) -> Any:
        params = {"limit": str(limit)} | ({"cursor": cursor} if cursor else {})
        return server.items_page(httpx.QueryParams(params))

    return page


def ids(items: list[Any]) -> list[str]:
    return [i["id"] for i in items]


def test_a_refresh_deep_in_the_list_fetches_the_top_and_the_rows_on_screen() -> None:
    items = [item(n) for n in range(2000, 0, -1)]
    found = loaded(items[:1500])
    spans = found.plan([range(1200, 1260)], want=1500)
    assert [(span.after, span.limit) for span in spans] == [
        (None, PAGE),
        (item_key(items[1199]), 60),
    ]
    # At the top, one request covers the first page and the rows on screen.
    assert [(s.after, s.limit) for s in found.plan([range(30, 160)], want=1500)] == [(None, 160)]
    # Asked for more rows than loaded: the next ones, after the last loaded item.
    spans = found.plan([range(1450, 1500)], want=1600)
    assert [(s.after, s.limit) for s in spans] == [(None, PAGE), (item_key(items[1449]), 150)]


def test_answers_replace_exactly_the_ranges_they_cover() -> None:
    items = [item(n) for n in range(2000, 0, -1)]
    found = loaded(items[:1500])
    server_items = [item(2001), *items]  # one new item at the top
    del server_items[1 + 1230]  # and one on screen left the list
    server_items[1 + 1210] = {**server_items[1 + 1210], "phase": "failed"}
    spans = found.plan([range(1200, 1260)], want=1500)
    fresh = found.merge(fetch_spans(spans, fetcher(CannedServer(items=server_items))))
    assert len(fresh) == PAGE + 60
    assert found.items[0]["id"] == item(2001)["id"]
    assert items[1230]["id"] not in ids(found.items)
    assert found.items[1 + 1210]["phase"] == "failed"
    # Nothing lost or doubled: the old first page's last row stays, below the new top.
    assert ids(found.items) == ids([item(2001), *items[:1230], *items[1231:1500]])
    assert found.keys == sorted(found.keys, reverse=True) and found.more


def test_the_end_of_the_list_is_known_from_an_answer_that_reaches_it() -> None:
    items = [item(n) for n in range(250, 0, -1)]
    found = loaded(items[:100])
    spans = found.plan([], want=300)
    found.merge(fetch_spans(spans, fetcher(CannedServer(items=items))))
    assert ids(found.items) == ids(items) and not found.more
