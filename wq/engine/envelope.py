"""Decoding queue messages into events: SNS envelopes, raw delivery, gzip+base64 bodies.

Every message is untrusted input. Decoding is bounded: at most one gzip layer per
message, decompressed incrementally up to a byte cap, strict JSON (no NaN or Infinity)
of limited depth. Anything else — including the interpreter's own `RecursionError`,
`MemoryError` or an over-long integer — is an `UndecodableMessage`, so one bad message
can never take its batch down with it.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

# Well above GitLab's largest events (a pipeline event lists its jobs), far below what
# could hurt the daemon.
DEFAULT_MAX_DECODED_BYTES = 4 * 1024 * 1024
# GitLab's payloads nest a handful of levels; deeper documents are not events.
MAX_DEPTH = 32
GZIP_MAGIC = b"\x1f\x8b"
# What replaces NUL in stored text: PostgreSQL cannot hold NUL in text or JSON.
NUL_REPLACEMENT = "\ufffd"


class UndecodableMessage(ValueError):
    """A message that is not an event wq can read."""


@dataclass(frozen=True)
class Event:
    """One decoded event: its kind (GitLab's `object_kind`) and its JSON payload."""

    event_type: str
    payload: dict[str, Any]


def _reject_constant(name: str) -> Any:
    raise UndecodableMessage(f"{name} is not a JSON number")


def _finite_number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: infinity, which JSON cannot write back
        raise UndecodableMessage("a number beyond the range of a JSON number")
    return value


# The escape of half a UTF-16 pair: only where one is can a lone surrogate be.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
# One decoder for every document (`json.loads` with hooks builds one per call), reading
# text as `json.loads` does (bytes in the encoding their first bytes show).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_number)


def parse_json(data: str | bytes) -> Any:
    """Strict JSON of bounded depth; every failure is an `UndecodableMessage`."""
    try:
        text = (
            data
            if isinstance(data, str)
            else data.decode(json.detect_encoding(data), "surrogatepass")
        )
        document = _DECODER.decode(text)
    except UndecodableMessage:
        raise
    except RecursionError:
        raise UndecodableMessage("the JSON is nested too deeply") from None
    except MemoryError:
        raise UndecodableMessage("the JSON is too large to parse") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise UndecodableMessage(f"not valid JSON ({type(err).__name__})") from None
    # Fewer opening brackets than the bound cannot nest deeper (a scan in C, where the
    # walk is Python per node).
    if text.count("{") + text.count("[") > MAX_DEPTH and _depth(document) > MAX_DEPTH:
        raise UndecodableMessage(f"the JSON nests deeper than {MAX_DEPTH} levels")
    if isinstance(data, str):
        escaped = _SURROGATE_ESCAPE.search(data) is not None
    else:
        escaped = _SURROGATE_ESCAPE_BYTES.search(data) is not None
    if escaped and not _is_unicode(document):
        raise UndecodableMessage("the JSON holds an unpaired surrogate escape (not Unicode)")
    return document


def _is_unicode(document: Any) -> bool:
    """Whether every text of `document` can be written as UTF-8 (no lone surrogate)."""
    try:
        json.dumps(document, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _depth(document: Any) -> int:
    """Nesting depth of a parsed document (iteratively: no recursion on hostile input)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth
            stack.extend((child, depth + 1) for child in node)
    return deepest


def may_spell_nul(text: str | bytes) -> bool:
    """False when the JSON text `text` cannot decode to a NUL character: strict JSON
    spells one only as the escape `\\u0000`, and holds zero bytes only when written in
    UTF-16 or UTF-32. True says look (`contains_nul`): the escape may be a literal
    backslash's, the zero bytes another character's."""
    if isinstance(text, bytes):
        return b"\\u0000" in text or b"\x00" in text
    return "\\u0000" in text or "\x00" in text


def contains_nul(document: Any) -> bool:
    """True when any string (or key) of a parsed document holds a NUL character."""
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def gunzip_bounded(raw: bytes, limit: int) -> bytes:
    """Decompress gzip data incrementally, refusing output beyond `limit` bytes."""
    out = bytearray()
    data = raw
    while True:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            # max_length bounds this call's output; +1 tells "exactly full" from "more".
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error:
            raise UndecodableMessage("broken gzip data") from None
        if len(out) > limit or inflater.unconsumed_tail:
            raise UndecodableMessage(f"decompressed data exceeds {limit} bytes")
        if not inflater.eof:
            raise UndecodableMessage("truncated gzip data")
        data = inflater.unused_data
        if not data:
            return bytes(out)
        if data[:2] != GZIP_MAGIC:  # concatenated members are gzip; anything else is not
            raise UndecodableMessage("trailing data after the gzip stream")


class _Budget:
    """What one message may still cost: decoded bytes and compression layers."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.layers_left = 1


def _json_or_packed(text: str, budget: _Budget) -> Any:
    """JSON text, or gzip-compressed JSON in base64 (as the event forwarder sends it)."""
    if len(text) > budget.max_bytes:
        raise UndecodableMessage(f"the message exceeds {budget.max_bytes} bytes")
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        return parse_json(stripped)
    try:
        raw = base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        raise UndecodableMessage("neither JSON nor base64") from None
    if raw[:2] == GZIP_MAGIC:
        if budget.layers_left < 1:
            raise UndecodableMessage("more than one compression layer")
        budget.layers_left -= 1
        raw = gunzip_bounded(raw, budget.max_bytes)
    return parse_json(raw)


def decode_message(body: str, *, max_bytes: int = DEFAULT_MAX_DECODED_BYTES) -> Event:
    """An SQS message body (SNS-wrapped or raw delivery) as an event."""
    if not isinstance(body, str):
        raise UndecodableMessage("the message has no text body")
    budget = _Budget(max_bytes)
    document = _json_or_packed(body, budget)
    if isinstance(document, dict) and document.get("Type") == "Notification":
        message = document.get("Message")
        if not isinstance(message, str):
            raise UndecodableMessage("an SNS notification without a Message")
        document = _json_or_packed(message, budget)
    return event_from_payload(document)


def event_from_payload(document: Any, header_kind: str | None = None) -> Event:
    """A GitLab webhook payload as an event (kind from `object_kind` or the header)."""
    if not isinstance(document, dict):
        raise UndecodableMessage("the event is not a JSON object")
    kind = document.get("object_kind") or document.get("event_type") or header_kind
    if not isinstance(kind, str) or not kind or len(kind) > 128 or "\x00" in kind:
        raise UndecodableMessage("the event has no usable object_kind")
    return Event(kind, document)
