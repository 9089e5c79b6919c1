"""The statement shape that loads items of any registered type with their details.

A work item's details live in its type's own table (joined inheritance) and its
readiness dimensions in `work_item_statuses`. The claims, a worker's reads and the
event drain all load items whose types they do not know in advance: they select the
polymorphic entity built here, so that one statement brings each item, its details
and its dimensions.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import joinedload, with_polymorphic

from wq.engine.models import WorkItem
from wq.engine.registry import TypeRegistry


def item_entity(registry: TypeRegistry) -> Any:
    """`WorkItem` with the models of every registered type, to load an item of any type
    with its details in one statement."""
    models = [
        model
        for model in (registry.get(name).model for name in registry.names)
        if model is not WorkItem
    ]
    return with_polymorphic(WorkItem, models) if models else WorkItem


def item_query(registry: TypeRegistry) -> Select[Any]:
    """One query for items of any registered type, with their details and dimensions.

    Its `item_ids` parameter (expanding) names the items.
    """
    entity = item_entity(registry)
    return (
        select(entity)
        .where(entity.id.in_(bindparam("item_ids", expanding=True)))
        .options(joinedload(entity.statuses))
    )
