"""The API's answers are written by orjson (`wq.daemon.schemas.answer`), byte for byte
as pydantic writes them for the route's model: any item document, with any details,
dimension details and timestamps a type may hold, gives the same JSON either way."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from wq.daemon.schemas import (
    DimensionPublic,
    WorkItemPage,
    WorkItemPublic,
    answer,
    dimension_document,
    item_document,
)

ZONES = st.sampled_from(
    [
        None,
        UTC,
        timezone(timedelta(0)),
        timezone(timedelta(hours=1)),
        timezone(-timedelta(hours=5, minutes=30)),
    ]
)
TIMES = st.datetimes(timezones=ZONES)
# Any text the database holds (UTF-8: no lone surrogates).
TEXT = st.text() | st.sampled_from(["\x00", "é€😀", "\u2028"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT | TIMES | st.uuids()
# What a type's details or a dimension's detail may hold: JSON-like values, with dates.
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(TEXT | st.integers(), inner, max_size=3)
    ),
    max_leaves=12,
)


def in_order(model: type[BaseModel], fields: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Documents of `model` with its fields in its order, as the API builds them."""
    return st.fixed_dictionaries(fields).map(
        lambda document: {name: document[name] for name in model.model_fields}
    )


def dimensions() -> st.SearchStrategy[dict[str, Any]]:
    return in_order(
        DimensionPublic,
        {
            "dimension": TEXT,
            "variant": TEXT,
            "status": TEXT,
            "detail": VALUES,
            "pending_until": st.none() | TIMES,
            "updated_at": TIMES,
        },
    )


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


ITEMS = in_order(
    WorkItemPublic,
    {
        "id": st.uuids(),
        "type": TEXT,
        "project": TEXT,
        "phase": st.sampled_from(["active", "completed", "failed", "cancelled"]),
        "attempts": st.integers(0, 2**31),
        "error": optional(TEXT),
        "admission": st.sampled_from(["queued", "admitted", "idle", "done"]),
        "lane": st.sampled_from(["alert", "normal"]),
        "seq": optional(st.integers(0, 2**62)),
        "autonomous": st.booleans(),
        "dedup_key": optional(TEXT),
        "idempotency_key": optional(TEXT),
        "leased_until": optional(TIMES),
        "lease_owner": optional(TEXT),
        "run_after": optional(TIMES),
        "last_event_at": optional(TIMES),
        "queued_at": optional(TIMES),
        "admitted_at": optional(TIMES),
        "created_at": TIMES,
        "updated_at": TIMES,
        "details": st.dictionaries(TEXT, VALUES, max_size=4),
        "dimensions": st.lists(dimensions(), max_size=3),
    },
)


def by_pydantic(model: type[BaseModel], document: dict[str, Any]) -> bytes:
    return model.model_validate(document).model_dump_json().encode()


@settings(max_examples=300, deadline=None)
@given(ITEMS)
def test_an_item_is_written_as_its_model_writes_it(document: dict[str, Any]) -> None:
    assert answer(WorkItemPublic, document).body == by_pydantic(WorkItemPublic, document)


@settings(max_examples=50, deadline=None)
@given(st.lists(ITEMS, max_size=4), optional(TEXT))
def test_a_page_is_written_as_its_model_writes_it(items: list[Any], cursor: str | None) -> None:
    page = {"items": items, "next_cursor": cursor}
    assert answer(WorkItemPage, page).body == by_pydantic(WorkItemPage, page)


def test_what_orjson_does_not_write_goes_through_the_model() -> None:
    document = {"items": [], "next_cursor": None, "extra": 2**70}  # beyond 64 bits
    written = answer(WorkItemPage, document)
    assert written.body == b'{"items":[],"next_cursor":null}'  # the model's fields only
    assert written.media_type == "application/json"


def test_documents_are_built_in_their_models_order() -> None:
    # orjson keeps a document's order, pydantic writes its model's: they agree on what
    # the API builds.
    row = SimpleNamespace(
        **dict.fromkeys([*WorkItemPublic.model_fields, *DimensionPublic.model_fields])
    )
    assert list(item_document(row, [], details={})) == list(WorkItemPublic.model_fields)
    assert list(dimension_document(row)) == list(DimensionPublic.model_fields)
