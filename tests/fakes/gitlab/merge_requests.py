"""Merge requests API: list, create, get, update, merge, changes, diffs, pipelines."""

from __future__ import annotations

from typing import Any

from tests.fakes.gitlab.api import Ctx, Response, message_error, ok, param_error, route
from tests.fakes.gitlab.state import (
    ACTIVE_JOB_STATUSES,
    GitLabState,
    MergeRequest,
    now_iso,
    parse_labels,
)


class MergeRequestsMixin(GitLabState):
    """The Merge requests API."""

    def _mr(self, ctx: Ctx) -> MergeRequest:
        iid = ctx.arg_int("iid")
        mr = ctx.proj.merge_requests.get(iid)
        if mr is None:
            raise message_error(404, "404 Not found")
        return mr

    @route("GET", "projects/:project/merge_requests")
    def _list_mrs(self, ctx: Ctx) -> Response:
        project = ctx.proj
        state = ctx.get("state", "all")
        if state not in ("opened", "closed", "locked", "merged", "all"):
            raise param_error("state does not have a valid value")
        wanted = parse_labels(ctx.get("labels"))
        iids = ctx.get("iids")
        iid_set = {int(i) for i in (iids if isinstance(iids, list) else [iids])} if iids else None
        wip = ctx.get("wip")
        search = str(ctx.get("search", "")).lower()
        selected = []
        for mr in project.merge_requests.values():
            if state != "all" and mr.state != state:
                continue
            if ctx.get("source_branch") not in (None, mr.source_branch):
                continue
            if ctx.get("target_branch") not in (None, mr.target_branch):
                continue
            if iid_set is not None and mr.iid not in iid_set:
                continue
            if wip in ("yes", "no") and mr.draft != (wip == "yes"):
                continue
            if search and search not in mr.title.lower() and search not in mr.description.lower():
                continue
            if wanted == ["None"] and mr.labels:
                continue
            if wanted == ["Any"] and not mr.labels:
                continue
            if wanted not in (["None"], ["Any"]) and not set(wanted) <= set(mr.labels):
                continue
            selected.append(mr)
        order_by = ctx.get("order_by", "created_at")
        if order_by not in ("created_at", "updated_at", "title", "merged_at"):
            raise param_error("order_by does not have a valid value")
        ascending = ctx.get("sort", "desc") == "asc"
        selected.sort(key=lambda mr: (getattr(mr, order_by) or "", mr.id), reverse=not ascending)
        return self._paginate(ctx, [self._mr_json(project, mr, basic=True) for mr in selected])

    @route("POST", "projects/:project/merge_requests")
    def _create_mr(self, ctx: Ctx) -> Response:
        project = ctx.proj
        source = ctx.require("source_branch")
        target = ctx.require("target_branch")
        title = ctx.require("title")
        if source == target:
            raise message_error(422, ["You can't use same project/branch for source and target"])
        if source not in project.branches:
            raise message_error(400, {"source_branch": ["does not exist"]})
        if target not in project.branches:
            raise message_error(400, {"target_branch": ["does not exist"]})
        self._check_branches(project, None, source=source, target=target, opened=True)
        now = now_iso()
        iid = max(project.merge_requests, default=0) + 1
        mr = MergeRequest(
            id=next(self._counters["mr"]),
            iid=iid,
            title=title,
            description=ctx.get("description", ""),
            source_branch=source,
            target_branch=target,
            author=ctx.token.user,
            labels=parse_labels(ctx.get("labels")),
            created_at=now,
            updated_at=now,
            force_remove_source_branch=bool(ctx.flag("remove_source_branch", False)),
            squash=bool(ctx.flag("squash", False)),
        )
        project.merge_requests[iid] = mr
        self._refresh_mr(project, mr)
        return ok(self._mr_json(project, mr), 201)

    @route("GET", "projects/:project/merge_requests/:iid")
    def _get_mr(self, ctx: Ctx) -> Response:
        return ok(self._mr_json(ctx.proj, self._mr(ctx)))

    @route("PUT", "projects/:project/merge_requests/:iid")
    def _update_mr(self, ctx: Ctx) -> Response:
        project = ctx.proj
        mr = self._mr(ctx)
        known = (
            "title", "description", "labels", "add_labels", "remove_labels", "state_event",
            "target_branch", "remove_source_branch", "squash", "assignee_id", "assignee_ids",
            "reviewer_ids", "milestone_id", "discussion_locked", "allow_collaboration",
            "allow_maintainer_to_push",
        )  # fmt: skip
        if not any(ctx.params.get(key) is not None for key in known):
            raise param_error(
                ", ".join(known) + " are missing, at least one parameter must be provided"
            )
        state_event = ctx.get("state_event")
        if state_event not in (None, "close", "reopen"):
            raise param_error("state_event does not have a valid value")
        target = ctx.get("target_branch")
        if target is not None and target not in project.branches:
            raise message_error(400, {"target_branch": ["does not exist"]})
        changes: dict[str, Any] = {}
        for key in ("title", "description", "target_branch"):
            if ctx.get(key) is not None:
                changes[key] = ctx.get(key)
        if ctx.params.get("labels") is not None:
            labels = parse_labels(ctx.params["labels"])
        else:
            labels = list(mr.labels)
        labels += [label for label in parse_labels(ctx.get("add_labels")) if label not in labels]
        removed = set(parse_labels(ctx.get("remove_labels")))
        labels = [label for label in labels if label not in removed]
        if labels != mr.labels:
            changes["labels"] = labels
        if ctx.flag("remove_source_branch") is not None:
            changes["force_remove_source_branch"] = ctx.flag("remove_source_branch")
        if ctx.flag("squash") is not None:
            changes["squash"] = ctx.flag("squash")
        # GitLab's ReopenService is a silent no-op unless the MR is reopenable (closed, with
        # its source branch); the validation of the saved MR answers 422/409 before any
        # change is kept.
        reopening = state_event == "reopen" and self._reopenable(project, mr)
        opened_after = state_event != "close" and (mr.state == "opened" or reopening)
        self._check_branches(
            project,
            mr,
            source=mr.source_branch,
            target=changes.get("target_branch", mr.target_branch),
            opened=opened_after,
        )
        self._apply_mr_fields(mr, changes, ctx.token.user)
        if state_event == "close":
            self._close(mr, ctx.token.user)
        elif reopening:
            self._reopen(mr, ctx.token.user)
        return ok(self._mr_json(project, mr))

    @route("PUT", "projects/:project/merge_requests/:iid/merge")
    def _merge_mr(self, ctx: Ctx) -> Response:
        project = ctx.proj
        mr = self._mr(ctx)
        self._refresh_mr(project, mr)
        if mr.state != "opened":
            raise message_error(405, "405 Method Not Allowed")
        head = self._head_pipeline(project, mr)
        pipeline_active = head is not None and self._pipeline_status(project, head) in (
            ACTIVE_JOB_STATUSES | {"running"}
        )
        auto = bool(
            ctx.flag("merge_when_pipeline_succeeds", False) or ctx.flag("auto_merge", False)
        )
        if auto and pipeline_active and not mr.draft:
            if ctx.get("sha") not in (None, mr.sha):
                raise message_error(409, f"SHA does not match HEAD of source branch: {mr.sha}")
            mr.merge_when_pipeline_succeeds = True
            if ctx.flag("should_remove_source_branch") is not None:
                mr.should_remove_source_branch = ctx.flag("should_remove_source_branch")
            mr.updated_at = now_iso()
            return ok(self._mr_json(project, mr))
        status = self._detailed_status(project, mr)
        if mr.draft or status not in ("mergeable", "conflict"):
            raise message_error(405, "405 Method Not Allowed")
        if status == "conflict":
            raise message_error(422, "Branch cannot be merged")
        if ctx.get("sha") not in (None, mr.sha):
            raise message_error(409, f"SHA does not match HEAD of source branch: {mr.sha}")
        remove = ctx.flag("should_remove_source_branch")
        if remove is not None:
            mr.should_remove_source_branch = remove
        self._merge(project, mr, ctx.token.user, remove_source=remove)
        return ok(self._mr_json(project, mr))

    @route("GET", "projects/:project/merge_requests/:iid/changes")
    def _mr_changes(self, ctx: Ctx) -> Response:
        mr = self._mr(ctx)
        data = self._mr_json(ctx.proj, mr)
        data["changes"] = self._mr_diffs(ctx.proj, mr)
        data["overflow"] = False
        return ok(data)

    @route("GET", "projects/:project/merge_requests/:iid/diffs")
    def _mr_diffs_endpoint(self, ctx: Ctx) -> Response:
        return self._paginate(ctx, self._mr_diffs(ctx.proj, self._mr(ctx)))

    @route("GET", "projects/:project/merge_requests/:iid/pipelines")
    def _mr_pipelines(self, ctx: Ctx) -> Response:
        project = ctx.proj
        mr = self._mr(ctx)
        refs = {mr.source_branch, f"refs/merge-requests/{mr.iid}/head"}
        pipelines = sorted(
            (p for p in project.pipelines.values() if p.ref in refs),
            key=lambda p: p.id,
            reverse=True,
        )
        return self._paginate(ctx, [self._pipeline_json(project, p) for p in pipelines])
