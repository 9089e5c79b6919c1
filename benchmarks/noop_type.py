"""The benchmark's own work-item type: `bench_noop`, whose one action does nothing.

Its decider asks for `noop` while the `needs_noop` dimension is actionable, and the
`noop` executor sets that dimension false, so every item goes through the whole
engine path once (queued, admitted, claimed, decided, executed, released) and ends idle.
"""

from __future__ import annotations

from datetime import datetime

from wq.engine.dimensions import first_actionable, set_dimension
from wq.engine.models import WorkItem
from wq.engine.registry import ActionContext, ItemType, TypeRegistry

TYPE_NAME = "bench_noop"
DIMENSION = "needs_noop"


class NoopItem(WorkItem):
    """The benchmark's item: the generic columns only (single-table inheritance)."""

    __mapper_args__ = {"polymorphic_identity": TYPE_NAME}  # noqa: RUF012

    def details_dict(self) -> dict[str, object]:
        """No type-specific fields: the type has no details table."""
        return {}


def decide(item: WorkItem, now: datetime) -> str | None:
    """`noop` while `needs_noop` is actionable (absent or true), then nothing."""
    return "noop" if first_actionable(item, [DIMENSION], now) else None


def run_noop(ctx: ActionContext) -> None:
    """The whole job: mark the dimension handled."""
    set_dimension(ctx.session, ctx.item, DIMENSION, False)


def noop_registry(cheap: bool = True) -> TypeRegistry:
    """A registry with only the no-op type (its action marked cheap unless told not to)."""
    registry = TypeRegistry()
    registry.register_type(
        ItemType(
            name=TYPE_NAME,
            model=NoopItem,
            decider=decide,
            executors={"noop": run_noop},
            cheap_actions=frozenset({"noop"}) if cheap else frozenset(),
        )
    )
    return registry
