"""The MR executors. Each looks before it acts (`ensure_*`), so running one again
after a lost lease or a retry changes nothing that is already right on GitLab.

Two kinds of commit meet here. A *git commit* is what `_push` makes on GitLab. A
*database commit* is the engine's, after an executor returns: until then nothing an
executor changed on the item is stored, so a crash between a GitLab call and the
database commit leaves GitLab ahead of the item (an MR it does not know; `_adopt`).
"""

from __future__ import annotations

import base64
import contextlib
import logging
from datetime import timedelta
from typing import Any, cast

from gitlab.exceptions import (
    GitlabCreateError,
    GitlabDeleteError,
    GitlabGetError,
    GitlabMRClosedError,
)
from sqlalchemy import select

from wq.engine.dimensions import set_dimension
from wq.engine.items import set_phase
from wq.engine.models import CANCELLED, COMPLETED
from wq.engine.registry import ActionContext, Executor, RetryLater
from wq.types.mr.ci_retry import retry_ci_jobs
from wq.types.mr.gitlab import client, describe, title_for, translated
from wq.types.mr.models import MrItem
from wq.types.mr.settings import MrSettings
from wq.types.mr.sync import sync_fields, take_over_labels, wanted_labels

log = logging.getLogger(__name__)
EMPTY_NOTE = (
    "Closing: the changes of this merge request are already on `{target}`, so its diff "
    "is empty. The work queue opened it and now closes it and deletes its branch."
)


def _unpack(ctx: ActionContext) -> tuple[MrItem, MrSettings]:
    return cast(MrItem, ctx.item), cast(MrSettings, ctx.settings)


def _decoded(action: dict[str, Any]) -> bytes:
    content = action.get("content") or ""
    if action.get("encoding") == "base64":
        return base64.b64decode(content)
    return content.encode()


def _file_on(project: Any, path: str, ref: str) -> bytes | None:
    try:
        return cast(bytes, project.files.get(file_path=path, ref=ref).decode())
    except GitlabGetError as err:
        if err.response_code == 404:
            return None
        raise


def _changes_anything(project: Any, ref: str, actions: list[dict[str, Any]]) -> bool:
    """Whether applying the actions to `ref` would change its tree."""
    for action in actions:
        current = _file_on(project, action["file_path"], ref)
        kind = action["action"]
        if kind == "delete" and current is None:
            continue
        if kind in ("create", "update") and current == _decoded(action):
            continue
        return True
    return False


def _branch_holds(project: Any, item: MrItem) -> bool:
    """Whether the source branch already is the target branch plus the item's actions.

    A rescued attempt (the worker died after GitLab accepted its git commit, before
    the database commit) finds its own push there: pushing it again would only start
    another CI pipeline. The branch holds it when every action's file is as asked and
    the branch differs from the target in no other file.
    """
    if _changes_anything(project, item.source_branch, item.file_actions):
        return False
    try:
        compare = project.repository_compare(item.target_branch, item.source_branch, straight=True)
    except GitlabGetError as err:
        if err.response_code == 404:  # no source branch yet
            return False
        raise
    touched = {action["file_path"] for action in item.file_actions}
    changed = {path for diff in compare["diffs"] for path in (diff["old_path"], diff["new_path"])}
    return changed <= touched


def _push(project: Any, item: MrItem) -> None:
    """Make the source branch the target branch plus the submitted actions: one git
    commit, force-pushed (GitLab's Commits API), unless the branch holds that already."""
    if _branch_holds(project, item):
        return
    project.commits.create(
        {
            "branch": item.source_branch,
            "start_branch": item.target_branch,
            "commit_message": item.commit_message,
            "actions": item.file_actions,
            "force": True,
        }
    )


def _diff_is_empty(project: Any, item: MrItem) -> bool:
    """Whether the source branch changes nothing against the target branch."""
    compare = project.repository_compare(item.target_branch, item.source_branch, straight=True)
    return not cast(dict[str, Any], compare)["diffs"]


def _close_empty(ctx: ActionContext, project: Any, mr: Any, item: MrItem) -> None:
    mr.notes.create({"body": EMPTY_NOTE.format(target=item.target_branch)})
    mr.state_event = "close"
    mr.save()
    with contextlib.suppress(GitlabDeleteError):  # already gone is fine
        project.branches.delete(item.source_branch)
    item.error = f"cancelled: the diff against {item.target_branch} became empty"
    _end(ctx, item, CANCELLED, "empty diff")


def _end(ctx: ActionContext, item: MrItem, phase: str, reason: str) -> None:
    """Move the item to a terminal phase from an executor, saying why."""
    set_phase(
        ctx.session, item, phase, actor=ctx.actor, trigger={"source": "worker", "reason": reason}
    )


def _schedule_checks(ctx: ActionContext, item: MrItem, settings: MrSettings) -> None:
    for dimension, seconds in (
        ("needs_empty_check", settings.empty_check_interval_seconds),
        ("needs_reconcile", settings.reconcile_interval_seconds),
    ):
        set_dimension(
            ctx.session, item, dimension, True, pending_until=ctx.now + timedelta(seconds=seconds)
        )


def ensure_mr(ctx: ActionContext) -> None:
    """The branch carries the submitted changes and an open MR proposes them."""
    item, settings = _unpack(ctx)
    with translated():
        project = client(settings, item.project).projects.get(item.project)
        opening = item.mr_iid is None
        mr = _open_mr(ctx, project, item) if opening else _update_mr(ctx, project, item)
    if mr is None:  # cancelled or ended: the item is terminal now
        return
    if _still_current(ctx, item):
        set_dimension(ctx.session, item, "needs_mr", False)
    _schedule_checks(ctx, item, settings)


def _open_mr(ctx: ActionContext, project: Any, item: MrItem) -> Any | None:
    """Open the item's MR, or take over the one already open for its branch."""
    found = _open_mr_for_branch(project, item)
    if found is not None:
        return _adopt(ctx, project, item, found, pushed=False)
    if not _changes_anything(project, item.target_branch, item.file_actions):
        item.error = f"cancelled: the changes are already on {item.target_branch}"
        set_dimension(ctx.session, item, "needs_mr", False)
        _end(ctx, item, CANCELLED, "empty diff")
        return None
    _push(project, item)
    try:
        mr = project.mergerequests.create(
            {
                "source_branch": item.source_branch,
                "target_branch": item.target_branch,
                "title": title_for(item.title, item.draft),
                "description": item.description,
                "labels": sorted(wanted_labels(item)),
                "remove_source_branch": True,
            }
        )
    except GitlabCreateError as err:
        if err.response_code != 409:
            raise
        # "Another open merge request already exists for this source branch": it was
        # opened since we looked (another replica, a person). Converge on it.
        found = _open_mr_for_branch(project, item)
        if found is None:  # closed again meanwhile: the next attempt opens one
            raise RetryLater(f"{describe(err)}, but no open MR was found for it") from None
        return _adopt(ctx, project, item, found, pushed=True)
    item.mr_iid, item.mr_url = mr.iid, mr.web_url
    item.applied_labels = sorted(wanted_labels(item))
    return mr


def _open_mr_for_branch(project: Any, item: MrItem) -> Any | None:
    """The open MR from the item's source branch (the one to its target first), if any."""
    found = project.mergerequests.list(
        source_branch=item.source_branch, state="opened", get_all=True
    )
    exact = [mr for mr in found if mr.target_branch == item.target_branch]
    return (exact or found or [None])[0]


def _adopt(ctx: ActionContext, project: Any, item: MrItem, mr: Any, *, pushed: bool) -> Any:
    """Take over an open MR the item did not record, and bring it to the item's state.

    It was opened by an attempt whose database commit was lost, or it is an earlier
    generation's MR reopened by hand: its branch and fields may be anything, so the
    item's content is pushed and its fields synced as an update does, and the item's
    `draft` applies (the item never opened an MR of its own).
    """
    item.mr_iid, item.mr_url = mr.iid, mr.web_url
    take_over_labels(item, mr)
    return _converge(ctx, project, item, mr, pushed=pushed, draft=item.draft)


def _update_mr(ctx: ActionContext, project: Any, item: MrItem) -> Any | None:
    """Force-push the item's content to its MR and sync the MR's fields."""
    mr = project.mergerequests.get(item.mr_iid)
    if _ended(ctx, item, mr):
        return None
    return _converge(ctx, project, item, mr, pushed=False, draft=None)


def _converge(
    ctx: ActionContext, project: Any, item: MrItem, mr: Any, *, pushed: bool, draft: bool | None
) -> Any | None:
    """Push (unless just done), sync the fields, close the MR if its diff is empty."""
    if not pushed:
        _push(project, item)
    sync_fields(mr, item, draft=draft)
    if _diff_is_empty(project, item):
        _close_empty(ctx, project, mr, item)
        return None
    return mr


def _still_current(ctx: ActionContext, item: MrItem) -> bool:
    """Whether the content just pushed is still the content asked for.

    A resubmission may have come in while GitLab was being called; then `needs_mr`
    stays as it set it and the next pass pushes the new content. The query begins the
    fenced database transaction, so the row is locked against the upsert from here on.
    """
    current = ctx.session.execute(
        select(MrItem.content_hash).where(MrItem.id == item.id)
    ).scalar_one()
    return bool(current == item.content_hash)


def _ended(ctx: ActionContext, item: MrItem, mr: Any) -> bool:
    """Follow GitLab when the MR was merged or closed behind our back."""
    phase = {"merged": COMPLETED, "closed": CANCELLED}.get(mr.state)
    if phase is None:
        return False
    _end(ctx, item, phase, f"merge request {mr.state} on GitLab")
    return True


def dashboard_url(settings: MrSettings, item: MrItem) -> str | None:
    """The dashboard link of an item, or None without a dashboard."""
    if not settings.dashboard_base_url:
        return None
    return f"{settings.dashboard_base_url.rstrip('/')}/work-items/{item.id}"


def ensure_dashboard_note(ctx: ActionContext) -> None:
    """An internal note on the MR links to the dashboard (nothing without a dashboard)."""
    item, settings = _unpack(ctx)
    url = dashboard_url(settings, item)
    if url is None or item.mr_iid is None:
        set_dimension(ctx.session, item, "needs_dashboard", False)
        return
    with translated():
        project = client(settings, item.project).projects.get(item.project, lazy=True)
        mr = project.mergerequests.get(item.mr_iid, lazy=True)
        note = next((n for n in mr.notes.list(get_all=True) if url in n.body), None)
        if note is None:
            note = mr.notes.create({"body": f"Work queue dashboard: {url}", "internal": True})
    set_dimension(
        ctx.session, item, "needs_dashboard", False, detail={"note_id": note.id, "url": url}
    )


def check_empty_diff(ctx: ActionContext) -> None:
    """Cancel the MR when its diff became empty (the target branch caught up)."""
    item, settings = _unpack(ctx)
    next_check = ctx.now + timedelta(seconds=settings.empty_check_interval_seconds)
    if item.mr_iid is not None:
        try:
            with translated():
                project = client(settings, item.project).projects.get(item.project)
                # First whether it was merged or closed meanwhile (an event missed): a
                # merge deletes the source branch, whose compare is then a 404.
                mr = project.mergerequests.get(item.mr_iid)
                if _ended(ctx, item, mr):
                    return
                if _diff_is_empty(project, item):
                    _close_empty(ctx, project, mr, item)
                    return
        except RetryLater as err:
            log.warning("work item %s: %s; checking again later", item.id, err)
    set_dimension(ctx.session, item, "needs_empty_check", True, pending_until=next_check)


def reconcile_mr(ctx: ActionContext) -> None:
    """Merge when GitLab says mergeable and auto-merge was asked; fix drifted fields.

    A transient GitLab error is retried with backoff for as long as it lasts: the MR is
    open, and an outage must not fail the items looking after it.
    """
    item, settings = _unpack(ctx)
    if item.mr_iid is not None:
        with translated(keep_trying=True):
            project = client(settings, item.project).projects.get(item.project, lazy=True)
            mr = project.mergerequests.get(item.mr_iid)
            if _ended(ctx, item, mr):
                return
            sync_fields(mr, item)
            pipeline = getattr(mr, "head_pipeline", None)
            if isinstance(pipeline, dict) and isinstance(pipeline.get("id"), int):
                # Forward only, as events move it: GitLab's answer may lag behind the
                # pipeline events already applied (pipeline ids only grow).
                head = item.head_pipeline_id
                if head is None or pipeline["id"] > head:
                    item.head_pipeline_id = pipeline["id"]
            if item.auto_merge and mr.detailed_merge_status == "mergeable":
                refusal = _merge(mr)
                if refusal is None:
                    _end(ctx, item, COMPLETED, "merged by the work queue")
                    return
                # GitLab's answer to a race (merged or closed meanwhile, a pipeline
                # started, the branch moved, a conflict): look again, do not fail.
                mr = project.mergerequests.get(item.mr_iid)
                if _ended(ctx, item, mr):
                    return
                log.info("work item %s: GitLab refused the merge for now: %s", item.id, refusal)
    set_dimension(
        ctx.session,
        item,
        "needs_reconcile",
        True,
        pending_until=ctx.now + timedelta(seconds=settings.reconcile_interval_seconds),
    )


# What GitLab answers a merge it will not do now: not mergeable (405), the branch
# cannot be merged (406, 422) or has moved (409).
MERGE_REFUSALS = frozenset({405, 406, 409, 422})


def _merge(mr: Any) -> str | None:
    """Merge the MR; None when merged, else why GitLab refused it for now.

    The merge names the commit GitLab said was mergeable: one pushed since is refused
    (409, the branch moved) instead of merged unchecked.
    """
    try:
        sha = getattr(mr, "sha", None)
        mr.merge(**({"sha": sha} if sha else {}))
    except GitlabMRClosedError as err:
        if err.response_code not in MERGE_REFUSALS:
            raise
        return describe(err)
    return None


EXECUTORS: dict[str, Executor] = {
    "ensure_mr": ensure_mr,
    "ensure_dashboard_note": ensure_dashboard_note,
    "check_empty_diff": check_empty_diff,
    "reconcile_mr": reconcile_mr,
    "retry_ci_jobs": retry_ci_jobs,
}
