"""Bring an open MR's fields to what its item asks for.

Title, description, target branch and labels follow the item. Labels are merged: the
service adds the ones asked for (always with `managed-by::workqueue`) and removes only
the ones it applied itself earlier that are no longer asked for, so a label a person
added stays. The Draft/Ready state belongs to GitLab once the item's MR exists; only
when an item takes over an MR it did not record (adoption) is its `draft` applied.
"""

from __future__ import annotations

from typing import Any

from wq.types.mr.gitlab import is_draft_title, title_for
from wq.types.mr.models import MrItem
from wq.types.mr.settings import MANAGED_LABEL


def wanted_labels(item: MrItem) -> set[str]:
    """The labels the item's MR must carry."""
    return {*item.labels, MANAGED_LABEL}


def take_over_labels(item: MrItem, mr: Any) -> None:
    """Count as the service's own the labels it applied to an MR it adopts.

    An MR that carries `managed-by::workqueue` was opened by this service (an attempt
    whose database commit was lost, or an earlier generation of the branch): the labels
    it asked for then are there because the service put them there. The labels an
    earlier generation applied come with the item from the upsert.
    """
    owned = set(item.applied_labels or ())
    if MANAGED_LABEL in mr.labels:
        owned |= wanted_labels(item) & set(mr.labels)
    if sorted(owned) != item.applied_labels:
        item.applied_labels = sorted(owned)


def sync_fields(mr: Any, item: MrItem, *, draft: bool | None = None) -> None:
    """Make the MR's title, description, target branch and labels the item's.

    `draft=None` keeps GitLab's Draft/Ready state (an update); True or False sets it
    (an adoption, where the item's initial setting has not been applied yet).
    """
    changes: dict[str, Any] = {}
    title = title_for(item.title, is_draft_title(mr.title) if draft is None else draft)
    if mr.title != title:
        changes["title"] = title
    if (mr.description or "") != item.description:
        changes["description"] = item.description
    if mr.target_branch != item.target_branch:
        changes["target_branch"] = item.target_branch  # retarget
    current, wanted = set(mr.labels), wanted_labels(item)
    owned = set(item.applied_labels or ())
    added = wanted - current
    removed = (owned - wanted) & current
    # add_labels/remove_labels rather than the whole list: a label someone adds
    # meanwhile is not overwritten by our stale copy.
    if added:
        changes["add_labels"] = ",".join(sorted(added))
    if removed:
        changes["remove_labels"] = ",".join(sorted(removed))
    applied = sorted((owned & wanted) | added)
    if applied != item.applied_labels:
        item.applied_labels = applied
    if changes:
        for key, value in changes.items():
            setattr(mr, key, value)
        mr.save()
