"""Work deferred to the root transaction's commit (audit rows, NOTIFY, log lines, wake-ups).

`before` handlers run just before the root commits, inside the transaction (so their
writes commit with it, in one statement per kind); `handler`s run after it committed.

SQLAlchemy also reports savepoint releases and rollbacks as commits and rollbacks;
here a savepoint's entries are dropped when it rolls back, and everything waits for
the outermost transaction to commit (or is dropped when it rolls back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session, SessionTransaction

_KEY = "wq_on_commit"
_INDEX_KEY = "wq_on_commit_index"  # `is_pending`'s sets, per kind
Handler = Callable[[Session, list[Any]], None]
_before: dict[str, Handler] = {}
_handlers: dict[str, Handler] = {}


def before(kind: str) -> Callable[[Handler], Handler]:
    """Register what to write for a kind of deferred value just before the root commits."""

    def register(function: Handler) -> Handler:
        _before[kind] = function
        return function

    return register


def handler(kind: str) -> Callable[[Handler], Handler]:
    """Register what to do with a kind of deferred value once the root commits."""

    def register(function: Handler) -> Handler:
        _handlers[kind] = function
        return function

    return register


def defer(session: Session, kind: str, value: Any) -> None:
    """Keep a value until the root transaction commits (dropped if its savepoint rolls back)."""
    if session.get_transaction() is None:
        # Tie the value to a transaction, begun now if need be; its connection comes
        # with its first statement (not here: this may run on the event loop).
        session.begin()
    entries: dict[str, list[tuple[Any, Any]]] = session.info.setdefault(_KEY, {})
    entries.setdefault(kind, []).append((session.get_nested_transaction(), value))


def is_pending(session: Session, kind: str, value: Any) -> bool:
    """Whether `value` (hashable) already waits for the commit among its kind's values.

    Answered from a set kept beside the kind's list (a batch asks once per item it
    releases; a scan of the list grew with the projects of the batch). The set follows
    the list while values are only appended to it; a list replaced (a savepoint rolled
    back, the values taken or committed) is indexed anew.
    """
    entries = session.info.get(_KEY, {}).get(kind)
    if not entries:
        return False
    indexes: dict[str, _Index] = session.info.setdefault(_INDEX_KEY, {})
    index = indexes.get(kind)
    if index is None or index.entries is not entries:
        index = indexes[kind] = _Index(entries)
    index.catch_up()
    return value in index.values


class _Index:
    """The values of one kind's list of deferred entries, as a set."""

    def __init__(self, entries: list[tuple[Any, Any]]) -> None:
        self.entries = entries
        self.values: set[Any] = set()
        self._seen = 0

    def catch_up(self) -> None:
        """Add the values appended since the last look."""
        for _, value in self.entries[self._seen :]:
            self.values.add(value)
        self._seen = len(self.entries)


def has_entries(session: Session) -> bool:
    """Whether anything waits for the session's commit."""
    return any(session.info.get(_KEY, {}).values())


def take(session: Session, kind: str) -> list[Any]:
    """Remove and return the values of one kind waiting for the commit, for a caller
    that writes them itself (none while a savepoint is open: its rollback must still
    drop them)."""
    if session.in_nested_transaction():
        return []
    return [value for _, value in session.info.get(_KEY, {}).pop(kind, [])]


def _within(marker: SessionTransaction | None, savepoint: SessionTransaction) -> bool:
    while marker is not None:
        if marker is savepoint:
            return True
        marker = marker.parent
    return False


@event.listens_for(Session, "before_commit")
def _committing(session: Session) -> None:
    if session.in_nested_transaction():
        return
    entries = session.info.get(_KEY, {})
    for kind, function in _before.items():
        if entries.get(kind):
            function(session, [value for _, value in entries[kind]])


@event.listens_for(Session, "after_commit")
def _committed(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint was released: its entries now belong to the enclosing one
    entries = session.info.pop(_KEY, {})
    session.info.pop(_INDEX_KEY, None)
    for kind, function in _handlers.items():
        if entries.get(kind):
            function(session, [value for _, value in entries[kind]])


@event.listens_for(Session, "after_soft_rollback")
def _rolled_back(session: Session, previous: SessionTransaction) -> None:
    entries = session.info.get(_KEY)
    if not entries:
        return
    if previous.nested:
        session.info[_KEY] = {
            kind: [entry for entry in values if not _within(entry[0], previous)]
            for kind, values in entries.items()
        }
    elif previous.parent is None:
        session.info.pop(_KEY, None)
        session.info.pop(_INDEX_KEY, None)
