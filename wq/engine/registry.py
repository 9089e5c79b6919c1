"""The work-item type registry: deciders, executors and event handlers per type.

A type registers everything it brings through one `register_type(...)` call; the
engine looks them up by the item's `type` and knows nothing else about it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from wq.engine.models import WorkItem

Decider = Callable[[WorkItem, datetime], str | None]


@dataclass
class ActionContext:
    """What an executor gets: the item, the session to change it through, the clock.

    Executors change state only through `session` (or the item's attributes) and
    never commit or roll back: the engine does, fenced by the item's lease.
    """

    session: Session
    item: WorkItem
    now: datetime
    settings: Mapping[str, Any]


@dataclass
class EventContext:
    """What an event handler gets: one stored event for one item."""

    session: Session
    item: WorkItem
    event_type: str
    payload: Any
    event_at: datetime | None
    now: datetime


Executor = Callable[[ActionContext], None]
EventHandler = Callable[[EventContext], None]


@dataclass(frozen=True)
class ItemType:
    """Everything the engine needs to drive items of one type."""

    name: str
    model: type[WorkItem]
    decider: Decider
    executors: Mapping[str, Executor]
    event_handler: EventHandler | None = None
    router: Any = None
    settings: Mapping[str, Any] = field(default_factory=dict)


class UnknownType(LookupError):
    """No type of that name is registered."""


class TypeRegistry:
    """The types one engine instance handles."""

    def __init__(self) -> None:
        self._types: dict[str, ItemType] = {}

    def register_type(self, item_type: ItemType) -> None:
        """Add a type; registering one name twice is a programming error."""
        if item_type.name in self._types:
            raise ValueError(f"work-item type {item_type.name!r} is already registered")
        self._types[item_type.name] = item_type

    def get(self, name: str) -> ItemType:
        """The registered type of that name."""
        try:
            return self._types[name]
        except KeyError:
            raise UnknownType(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._types

    @property
    def names(self) -> list[str]:
        """The handled type names, sorted."""
        return sorted(self._types)

    def executor(self, type_name: str, action: str) -> Executor:
        """The executor of one action of one type."""
        executors = self.get(type_name).executors
        if action not in executors:
            raise LookupError(f"type {type_name!r} has no executor for action {action!r}")
        return executors[action]
