"""Decoding queue messages into events: SNS envelopes, raw delivery, gzip+base64 bodies."""

from __future__ import annotations

import base64
import binascii
import gzip
import json
from dataclasses import dataclass
from typing import Any


class UndecodableMessage(ValueError):
    """A message that is not an event wq can read."""


@dataclass(frozen=True)
class Event:
    """One decoded event: its kind (GitLab's `object_kind`) and its JSON payload."""

    event_type: str
    payload: dict[str, Any]


def _json_or_packed(text: str) -> Any:
    """JSON text, or gzip-compressed JSON in base64 (as the event forwarder sends it)."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        return json.loads(stripped)
    try:
        raw = base64.b64decode(stripped, validate=True)
    except (binascii.Error, ValueError):
        raise UndecodableMessage("neither JSON nor base64") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError):
            raise UndecodableMessage("broken gzip data") from None
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UndecodableMessage("the decoded body is not JSON") from None


def decode_message(body: str) -> Event:
    """An SQS message body (SNS-wrapped or raw delivery) as an event."""
    try:
        document = _json_or_packed(body)
    except json.JSONDecodeError:
        raise UndecodableMessage("the body is not JSON") from None
    if isinstance(document, dict) and document.get("Type") == "Notification":
        message = document.get("Message")
        if not isinstance(message, str):
            raise UndecodableMessage("an SNS notification without a Message")
        try:
            document = _json_or_packed(message)
        except json.JSONDecodeError:
            raise UndecodableMessage("the SNS Message is not JSON") from None
    return event_from_payload(document)


def event_from_payload(document: Any, header_kind: str | None = None) -> Event:
    """A GitLab webhook payload as an event (kind from `object_kind` or the header)."""
    if not isinstance(document, dict):
        raise UndecodableMessage("the event is not a JSON object")
    kind = document.get("object_kind") or document.get("event_type") or header_kind
    if not isinstance(kind, str) or not kind:
        raise UndecodableMessage("the event has no object_kind")
    return Event(kind, document)
