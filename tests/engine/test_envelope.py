"""Decoding queue messages: envelopes, bounded decompression, hostile bodies."""

from __future__ import annotations

import base64
import gzip
import json
import tracemalloc

import pytest

from tests.support.bombs import gzip_of_zeros, packed, poison_bodies, sns
from wq.engine.envelope import (
    MAX_DEPTH,
    UndecodableMessage,
    contains_nul,
    decode_message,
    gunzip_bounded,
    may_spell_nul,
    parse_json,
)
from wq.engine.events import storable

EVENT = {"object_kind": "merge_request", "object_attributes": {"iid": 1, "action": "merge"}}


def test_raw_sns_wrapped_and_gzip_base64_bodies_decode() -> None:
    raw = json.dumps(EVENT)
    packed_event = base64.b64encode(gzip.compress(raw.encode())).decode()
    for body in (raw, packed_event, sns(raw), sns(packed_event)):
        decoded = decode_message(body)
        assert decoded.event_type == "merge_request" and decoded.payload == EVENT


@pytest.mark.parametrize("kind", sorted(poison_bodies()))
def test_every_poison_kind_is_undecodable_never_another_error(kind: str) -> None:
    with pytest.raises(UndecodableMessage):
        decode_message(poison_bodies()[kind])


@pytest.mark.parametrize(
    "body",
    [
        packed(gzip_of_zeros(1024**3)),  # one layer: 1 GiB of zeros
        packed(gzip.compress(gzip_of_zeros(1024**3), 9)),  # two layers, a few KB
        sns(packed(gzip_of_zeros(1024**3))),
        packed(gzip_of_zeros(16 * 1024**2) * 64),  # 64 concatenated gzip members
    ],
    ids=["one_layer_1GiB", "two_layers_1GiB", "sns_1GiB", "concatenated_members"],
)
def test_decompression_bombs_stay_within_the_cap(body: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(UndecodableMessage):
            decode_message(body, max_bytes=4 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The body itself is ~1.4 MB; the cap 4 MiB. Unbounded, this would be GiBs.
    assert peak < 40 * 1024 * 1024, f"decoding peaked at {peak / 2**20:.0f} MiB"


def test_the_cap_is_exact_and_configurable() -> None:
    data = json.dumps({**EVENT, "pad": "x" * 10_000}).encode()
    assert gunzip_bounded(gzip.compress(data), len(data)) == data
    with pytest.raises(UndecodableMessage, match="exceeds"):
        gunzip_bounded(gzip.compress(data), len(data) - 1)
    body = packed(gzip.compress(data))
    assert decode_message(body, max_bytes=len(data)).payload["pad"] == "x" * 10_000
    with pytest.raises(UndecodableMessage):
        decode_message(body, max_bytes=len(data) - 1)


def test_only_one_compression_layer_per_message() -> None:
    inner = packed(gzip.compress(json.dumps(EVENT).encode()))
    with pytest.raises(UndecodableMessage, match="layer"):
        decode_message(packed(gzip.compress(sns(inner).encode())))


def test_truncated_and_trailing_gzip_data_is_refused() -> None:
    data = gzip.compress(json.dumps(EVENT).encode())
    for broken in (data[:-4], data + b"junk", data[:10]):
        with pytest.raises(UndecodableMessage):
            decode_message(packed(broken))


def test_nul_is_found_and_replaced_everywhere() -> None:
    document = {"a\x00": ["x\x00y", {"k": "\x00"}], "n": 1, "t": None}
    assert contains_nul(document)
    clean = storable(document)
    assert not contains_nul(clean)
    assert clean == {"a\ufffd": ["x\ufffdy", {"k": "\ufffd"}], "n": 1, "t": None}
    assert not contains_nul(EVENT)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-le", "utf-32"])
def test_a_text_that_decodes_to_nul_is_always_one_to_look_at(encoding: str) -> None:
    for document in ({"k\x00": 1}, {"k": ["a", "b\x00"]}):
        for text in (json.dumps(document), json.dumps(document, ensure_ascii=False)):
            raw = text.encode(encoding)
            assert contains_nul(parse_json(raw))
            assert may_spell_nul(raw) and may_spell_nul(raw.decode(encoding))


def test_a_backslash_before_u0000_is_text_not_nul() -> None:
    raw = json.dumps({"path": "C:\\u0000"}).encode()  # a backslash, then "u0000"
    assert may_spell_nul(raw)  # the cheap look cannot tell: the walk does
    assert not contains_nul(parse_json(raw))
    assert not may_spell_nul(json.dumps(EVENT).encode())


def test_the_depth_bound_counts_nesting_not_brackets_in_text() -> None:
    def nested(levels: int) -> str:
        return "[" * levels + "]" * levels

    assert parse_json(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))
    with pytest.raises(UndecodableMessage, match="deeper"):
        parse_json(nested(MAX_DEPTH + 1))
    many = json.dumps({"brackets": "[{" * 100, "flat": [[1], [2], {"a": [3]}] * 20})
    assert parse_json(many) == json.loads(many)
