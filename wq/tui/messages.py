"""Messages the workers post to the UI: small and typed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class Loaded(Message):
    """A poll finished with data for the view that asked."""

    data: Any


@dataclass
class Failed(Message):
    """A poll or an action failed; `error` is one readable line."""

    error: str


@dataclass
class Identified(Message):
    """The whoami document arrived."""

    whoami: dict[str, Any]


@dataclass
class Acted(Message):
    """A retry or cancel went through (`outcome`: retried, cancelled, requested) or failed."""

    action: str
    item_id: str
    outcome: str = ""
    error: str | None = None
