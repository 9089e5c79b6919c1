"""The work-item type registry: deciders, executors and event handlers per type.

A type registers everything it brings through one `register_type(...)` call; the
engine looks them up by the item's `type` and knows nothing else about it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from pydantic import BaseModel
from sqlalchemy import CompoundSelect, Select
from sqlalchemy.orm import Session, sessionmaker

from wq.engine.config import Config, PoolConfig
from wq.engine.models import WorkItem


@dataclass(frozen=True)
class Wait:
    """A decision: nothing to do now, but keep the slot and ask again at `until`.

    For external work the item started and that is still running (a task's run):
    the item stays admitted, gives its worker back, and is claimed again at `until`.
    """

    until: datetime


# A decider answers one of three things: an action name to run now, `Wait(until)`
# (hold the slot, ask again later), or None (nothing to do: release the slot, go idle).
Decision = str | Wait | None
Decider = Callable[[WorkItem, datetime], Decision]


@dataclass
class ActionContext:
    """What an executor gets: the item, the session to change it through, the clock.

    Executors change state only through `session` (or the item's attributes) and
    never commit or roll back: the engine does, fenced by the item's lease.
    """

    session: Session
    item: WorkItem
    now: datetime
    settings: Any
    # Who runs the action (the worker's name): the audit actor of the changes it makes.
    actor: str = "system"
    # Set by `found_nothing_new`: the action's audit row is left out.
    quiet: bool = False

    def found_nothing_new(self) -> None:
        """Say that this action only looked (a running task's check) and found no change.

        The engine then writes no `action_completed` row (nor its log line) for it, as
        long as the item's audited state is indeed as it was: the audit trail records
        changes, and a long run is checked many times.
        """
        self.quiet = True


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
# Maps one event (kind, payload) to the items it concerns and the event's own time.
EventResolver = Callable[[Session, str, Any], tuple[list[uuid.UUID], datetime | None]]


@dataclass(frozen=True)
class EventLookup:
    """How to find the items one event concerns by a single read: `statement` selects
    their ids with `params` bound (None: the event concerns no item, nothing to read);
    `event_at` is the event's own time."""

    statement: Select[Any] | CompoundSelect[Any] | None
    params: Mapping[str, Any]
    event_at: datetime | None


NO_ITEMS = EventLookup(None, {}, None)
# An event resolver as a lookup built without the database: an intake can then run its
# statement wherever it likes (a webhook's, on the event loop, wq.daemon.loop_events).
EventQuery = Callable[[str, Any], EventLookup]


def query_resolver(query: EventQuery) -> EventResolver:
    """The `EventResolver` that runs `query`'s statement in the session given."""

    def resolve(
        session: Session, kind: str, payload: Any
    ) -> tuple[list[uuid.UUID], datetime | None]:
        lookup = query(kind, payload)
        if lookup.statement is None:
            return [], lookup.event_at
        return list(
            session.execute(lookup.statement, dict(lookup.params)).scalars()
        ), lookup.event_at

    return resolve


class RetryLater(Exception):
    """A transient failure: count the attempt and try again after a backoff.

    `retry_after` (seconds) is a lower bound the remote side asked for (HTTP 429).
    `keep_trying` is for a periodic look after something that exists (an open MR): its
    failures back off as any others, up to the longest backoff, but never fail the item
    at `max_attempts`, so that an outage of the remote side ends no item.
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, keep_trying: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.keep_trying = keep_trying


class Requeue(Exception):
    """The action could not even begin (a run that failed to start): give the slot back.

    The item goes back to `queued` at its old place in line and is not admitted again
    before `retry_after` seconds (or the engine's backoff) have passed.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SubmissionRejected(ValueError):
    """A submission that is well-formed but cannot be accepted (a 422 with this message)."""


class PermanentFailure(Exception):
    """A failure that retrying cannot fix: the item goes to `failed` at once."""


class NoOutput(Exception):
    """The item has no output to show from here; the message says why (and where it is)."""


# `output(sessions, item, tail_lines, follow)`: the text the item's external work
# writes (a task's run), as `Runner.output` yields it; raises `NoOutput`.
OutputReader = Callable[["sessionmaker[Session]", WorkItem, int | None, bool], Iterator[str]]


@dataclass(frozen=True)
class SubmitContext:
    """What a type's submission handler gets besides the session and the payload."""

    registry: TypeRegistry
    pool: PoolConfig
    actor: str
    now: datetime


@dataclass(frozen=True)
class SubmitResult:
    """What a submission did (created, unchanged, updated, retried, dedup, capped).

    `item` is the item concerned, loaded; None when nothing was enqueued (capped), or
    when the handler left an existing item as it was without loading it: then `row`
    holds it as read (its `work_items` columns and its type's `api_details_columns`,
    by name), which is all an answer shows but its dimensions.
    """

    outcome: str
    item: WorkItem | None
    row: Any = None

    @property
    def item_id(self) -> uuid.UUID | None:
        """The id of the item concerned, loaded or not; None when nothing was enqueued."""
        if self.item is not None:
            return self.item.id
        return None if self.row is None else cast(uuid.UUID, self.row.id)


@dataclass(frozen=True)
class UnchangedCheck:
    """How a type tells, from one row, that a submission leaves its item as it is.

    Callers send their desired state again and again, so most submissions change
    nothing; a type that can tell so from one statement lets the API answer them
    without a session (on PostgreSQL, on the event loop). `statement` reads the
    existing item, locked, as a `SubmitResult.row`, with the parameters
    `params(payload)` (which raises `SubmissionRejected` as `handle` would);
    `holds(row, payload)` says whether `handle` would answer "unchanged" for that row
    (None when there is none). When it does not hold, `handle` runs as usual.
    """

    statement: Select[Any]
    params: Callable[[Any], dict[str, Any]]
    holds: Callable[[Any, Any], bool]


@dataclass(frozen=True)
class Submission:
    """A type's submission API: its validated payload schema and the handler.

    `self_bounded` names body fields the API never writes back (a type's
    `api_unshown` columns) and that the schema bounds itself: the daemon holds them to
    the body's limit, not to the per-field `server.max_document_bytes` (an MR's files
    have a limit of their own, `max_file_bytes`).
    """

    schema: type[BaseModel]
    project_of: Callable[[Any], str]
    handle: Callable[[Session, Any, SubmitContext], SubmitResult]
    unchanged: UnchangedCheck | None = None
    self_bounded: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TickContext:
    """What a type's periodic work gets: sessions, the registry, the config, the clock."""

    sessions: sessionmaker[Session]
    registry: TypeRegistry
    config: Config
    now: datetime


@dataclass(frozen=True)
class Ticker:
    """Periodic work a type brings (schedules, clean-up): `run(context)` every interval.

    Runs on every replica; `run` must be safe against other replicas doing the same.
    """

    name: str
    interval_seconds: float
    run: Callable[[TickContext], None]


@dataclass(frozen=True)
class WebhookContext:
    """What a type's webhook handler gets besides the session and the JSON document.

    `check_document(name, value)` raises ValueError (a 422 naming `name`) unless a
    document the handler stores (a task's payload) is one the API would have taken
    from a caller: within the server's per-field depth and size.
    """

    registry: TypeRegistry
    pool_for: Callable[[str], PoolConfig]
    actor: str
    now: datetime
    check_document: Callable[[str, Any], None]


class BadWebhookPayload(ValueError):
    """A webhook body that is JSON but not what the endpoint takes (a 400)."""


@dataclass(frozen=True)
class Webhook:
    """An intake endpoint a type brings: `POST /api/webhooks/{name}`.

    Callers authenticate with a wq Bearer token that has `submit` on the type, or with
    `shared_secret` as the Bearer value (for senders that cannot get a token).
    `handle` returns the HTTP status and the JSON answer; the daemon commits.
    """

    name: str
    handle: Callable[[Session, Any, WebhookContext], tuple[int, dict[str, Any]]]
    shared_secret: str | None = None
    # The body it takes, for the OpenAPI document only (`handle` parses the JSON itself).
    schema: type[BaseModel] | None = None


@dataclass(frozen=True)
class ItemType:
    """Everything the engine needs to drive items of one type."""

    name: str
    model: type[WorkItem]
    decider: Decider
    executors: Mapping[str, Executor]
    event_handler: EventHandler | None = None
    event_resolver: EventResolver | None = None
    # The resolver as a lookup (`query_resolver(event_query)` is then the resolver):
    # events for types that all have one are stored without a session.
    event_query: EventQuery | None = None
    # The event kinds the resolver looks at (None: any); it is not asked about others.
    event_kinds: frozenset[str] | None = None
    submission: Submission | None = None
    # Why an item of this type may not be retried now (None: it may).
    retry_veto: Callable[[Session, WorkItem], str | None] | None = None
    # Asked when an admitted item is cancelled: True when the type must stop external
    # work first (its worker then ends the item), False to cancel it at once.
    cancel_requested: Callable[[Session, WorkItem, datetime], bool] | None = None
    tickers: tuple[Ticker, ...] = ()
    webhooks: tuple[Webhook, ...] = ()
    settings: Any = None
    # Event kinds the engine orders by `last_event_at` (None: every kind with a time);
    # the type's handler orders the others itself.
    ordered_events: frozenset[str] | None = None
    # Actions that make no external call and change the item only through the ORM
    # objects they are given: they run in a batch's transaction, on a batch thread,
    # without a worker (`wq.engine.batch`).
    cheap_actions: frozenset[str] = frozenset()
    # The longest one outbound call of its executors may take (their client's request
    # timeout; 0: none). Past the shutdown grace the leases of actions still running
    # are held at least this long, so that no replica takes an item over while the
    # exiting one's call may still be in flight.
    request_timeout_seconds: float = 0.0
    # The output of an item's external work, for `GET /api/work-items/{id}/logs`.
    output: OutputReader | None = None


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
