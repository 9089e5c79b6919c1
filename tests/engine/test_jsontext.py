"""JSON text the engine writes: what json.dumps accepted is still accepted, alike."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from wq.engine.jsontext import dumps


@pytest.mark.parametrize(
    "value",
    [
        {"project": "group/app", "seq": 3, "ok": True, "none": None, "ratio": 0.25},
        {"nested": {"list": [1, "two", [3.5]], "tuple": (1, 2)}},
        {"unicode": "é ✓ \u2028", "control": "a\x00b\x1b[31m"},
        {1: "int key", "big": 2**70},  # beyond orjson's 64 bits: json.dumps writes it
        "\ud800",  # a lone surrogate (orjson refuses it): written as json.dumps does
        [],
    ],
)
def test_reads_back_as_json_dumps_writes_it(value: object) -> None:
    assert json.loads(dumps(value)) == json.loads(json.dumps(value))


def test_sorted_keys_and_default() -> None:
    at = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    text = dumps({"b": at, "a": uuid.UUID(int=1)}, sort_keys=True, default=str)
    assert text == '{"a":"00000000-0000-0000-0000-000000000001","b":"2026-12-01 14:00:00+00:00"}'


def test_refuses_what_json_dumps_refuses() -> None:
    with pytest.raises(TypeError):
        dumps({"at": datetime(2026, 12, 1, tzinfo=UTC)})
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        dumps(loop)
