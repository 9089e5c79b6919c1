"""Merge request behaviour: diff refs, merge status, close, reopen, merge, JSON."""

from __future__ import annotations

from typing import Any

from tests.fakes.gitlab.api import message_error
from tests.fakes.gitlab.diffs import tree_diff
from tests.fakes.gitlab.state import (
    GitLabState,
    MergeRequest,
    Note,
    Pipeline,
    Project,
    User,
    now_iso,
)


class MergeRequestLifecycle(GitLabState):
    """What happens to an MR, whichever way it is asked (API or test controls)."""

    def _check_branches(
        self,
        project: Project,
        mr: MergeRequest | None,
        *,
        source: str,
        target: str,
        opened: bool,
    ) -> None:
        """GitLab's MergeRequest#validate_branches for `mr` (None: a new one) about to be
        saved with these branches and state: 422 when source and target are the same
        branch; 409 when it would be open beside another open MR with the same source and
        target branches (checked on create, reopen, retarget, any save of an open MR)."""
        if source == target:
            raise message_error(422, ["You can't use same project/branch for source and target"])
        if not opened:
            return
        for other in sorted(project.merge_requests.values(), key=lambda o: o.iid):
            if (
                other is not mr
                and other.state == "opened"
                and other.source_branch == source
                and other.target_branch == target
            ):
                raise message_error(
                    409,
                    [f"Another open merge request already exists for this source branch: "
                     f"!{other.iid}"],
                )  # fmt: skip

    def _refresh_mr(self, project: Project, mr: MergeRequest) -> None:
        """Keep an open MR's diff refs in step with its branches (GitLab does on push)."""
        if mr.state != "opened":
            return
        source = project.branches.get(mr.source_branch)
        target = project.branches.get(mr.target_branch)
        if source is None or target is None:
            return
        mr.sha = source
        mr.start_sha = target
        mr.base_sha = project.merge_base(target, source)

    def _mr_diffs(self, project: Project, mr: MergeRequest) -> list[dict[str, Any]]:
        self._refresh_mr(project, mr)
        if mr.sha is None:
            return []
        base = project.commits[mr.base_sha].tree if mr.base_sha else {}
        return tree_diff(base, project.commits[mr.sha].tree)

    def _conflicts(self, project: Project, mr: MergeRequest) -> list[str]:
        source = project.branches.get(mr.source_branch)
        target = project.branches.get(mr.target_branch)
        if mr.state != "opened" or source is None or target is None:
            return []
        return self._merge_trees(project, target, source)[1]

    def _detailed_status(self, project: Project, mr: MergeRequest) -> str:
        if mr.state != "opened":
            return "not_open"
        if mr.merge_status_override is not None:
            return mr.merge_status_override
        if mr.source_branch not in project.branches or mr.target_branch not in project.branches:
            return "broken_status"
        if mr.draft:
            return "draft_status"
        if self._conflicts(project, mr):
            return "conflict"
        return "mergeable"

    def _head_pipeline(self, project: Project, mr: MergeRequest) -> Pipeline | None:
        self._refresh_mr(project, mr)
        refs = {mr.source_branch, f"refs/merge-requests/{mr.iid}/head"}
        candidates = [
            pipeline
            for pipeline in project.pipelines.values()
            if pipeline.ref in refs and pipeline.sha == mr.sha
        ]
        return max(candidates, key=lambda pipeline: pipeline.id) if candidates else None

    def _system_note(self, mr: MergeRequest, body: str, author: User) -> None:
        now = now_iso()
        note_id = next(self._counters["note"])
        mr.notes.append(Note(note_id, body, author, False, True, now, now))

    def _apply_mr_fields(self, mr: MergeRequest, changes: dict[str, Any], actor: User) -> None:
        for key, value in changes.items():
            if key == "title" and value != mr.title:
                self._system_note(mr, f"changed title from **{mr.title}** to **{value}**", actor)
            elif key == "description" and value != mr.description:
                self._system_note(mr, "changed the description", actor)
            if not hasattr(mr, key):
                raise AttributeError(key)
            setattr(mr, key, value)
        if changes:
            mr.updated_at = now_iso()

    def _close(self, mr: MergeRequest, actor: User) -> None:
        if mr.state != "opened":
            return
        mr.state = "closed"
        mr.closed_at = mr.updated_at = now_iso()
        mr.closed_by = actor
        mr.merge_when_pipeline_succeeds = False
        self._system_note(mr, "closed", actor)

    def _reopenable(self, project: Project, mr: MergeRequest) -> bool:
        """MergeRequest#reopenable?: closed, and its source branch still exists."""
        return mr.state == "closed" and mr.source_branch in project.branches

    def _reopen(self, mr: MergeRequest, actor: User) -> None:
        if mr.state != "closed":
            return
        mr.state = "opened"
        mr.closed_at = None
        mr.closed_by = None
        mr.updated_at = now_iso()
        self._system_note(mr, "reopened", actor)

    def _merge(
        self,
        project: Project,
        mr: MergeRequest,
        actor: User,
        *,
        remove_source: bool | None,
    ) -> None:
        self._refresh_mr(project, mr)
        target = project.branches[mr.target_branch]
        source = project.branches[mr.source_branch]
        tree, conflicts = self._merge_trees(project, target, source)
        if conflicts:
            raise message_error(422, "Branch cannot be merged")
        message = (
            f"Merge branch '{mr.source_branch}' into '{mr.target_branch}'\n\n{mr.title}\n\n"
            f"See merge request {project.path}!{mr.iid}"
        )
        commit = self._new_commit(project, [target, source], tree, message, actor)
        self._set_branch(project, mr.target_branch, commit.id)
        mr.state = "merged"
        mr.merged_at = mr.updated_at = now_iso()
        mr.merged_by = actor
        mr.merge_commit_sha = commit.id
        mr.merge_when_pipeline_succeeds = False
        self._system_note(mr, f"merged\n\n{commit.id[:8]}", actor)
        remove = mr.force_remove_source_branch if remove_source is None else remove_source
        if remove:
            self._delete_branch(project, mr.source_branch)

    def _mr_json(self, project: Project, mr: MergeRequest, *, basic: bool = False) -> dict:
        self._refresh_mr(project, mr)
        status = self._detailed_status(project, mr)
        legacy = {
            "mergeable": "can_be_merged",
            "conflict": "cannot_be_merged",
            "checking": "checking",
            "unchecked": "unchecked",
        }.get(status, "cannot_be_merged" if status == "broken_status" else "can_be_merged")
        reference = f"!{mr.iid}"
        data: dict[str, Any] = {
            "id": mr.id,
            "iid": mr.iid,
            "project_id": project.id,
            "title": mr.title,
            "description": mr.description,
            "state": mr.state,
            "created_at": mr.created_at,
            "updated_at": mr.updated_at,
            "merged_by": self._user_json(mr.merged_by),
            "merge_user": self._user_json(mr.merged_by),
            "merged_at": mr.merged_at,
            "closed_by": self._user_json(mr.closed_by),
            "closed_at": mr.closed_at,
            "target_branch": mr.target_branch,
            "source_branch": mr.source_branch,
            "user_notes_count": len(mr.user_notes()),
            "upvotes": 0,
            "downvotes": 0,
            "author": self._user_json(mr.author),
            "assignees": [],
            "assignee": None,
            "reviewers": [],
            "source_project_id": project.id,
            "target_project_id": project.id,
            "labels": sorted(mr.labels),
            "draft": mr.draft,
            "imported": False,
            "imported_from": "none",
            "work_in_progress": mr.draft,
            "milestone": None,
            "merge_when_pipeline_succeeds": mr.merge_when_pipeline_succeeds,
            "merge_status": legacy,
            "detailed_merge_status": status,
            "merge_after": None,
            "sha": mr.sha,
            "merge_commit_sha": mr.merge_commit_sha,
            "squash_commit_sha": None,
            "discussion_locked": None,
            "should_remove_source_branch": mr.should_remove_source_branch,
            "force_remove_source_branch": mr.force_remove_source_branch,
            "prepared_at": mr.created_at,
            "reference": reference,
            "references": {
                "short": reference,
                "relative": reference,
                "full": f"{project.path}{reference}",
            },
            "web_url": f"{self._web(project)}/-/merge_requests/{mr.iid}",
            "time_stats": {
                "time_estimate": 0,
                "total_time_spent": 0,
                "human_time_estimate": None,
                "human_total_time_spent": None,
            },
            "squash": mr.squash,
            "squash_on_merge": mr.squash,
            "task_completion_status": {"count": 0, "completed_count": 0},
            "has_conflicts": bool(self._conflicts(project, mr)),
            "blocking_discussions_resolved": True,
            "approvals_before_merge": None,
        }
        if basic:
            return data
        head = self._head_pipeline(project, mr)
        data.update(
            {
                "subscribed": True,
                "changes_count": str(len(self._mr_diffs(project, mr))),
                "latest_build_started_at": None,
                "latest_build_finished_at": None,
                "first_deployed_to_production_at": None,
                "pipeline": self._pipeline_json(project, head) if head else None,
                "head_pipeline": self._pipeline_json(project, head, detail=True) if head else None,
                "diff_refs": {
                    "base_sha": mr.base_sha,
                    "head_sha": mr.sha,
                    "start_sha": mr.start_sha,
                },
                "merge_error": None,
                "first_contribution": False,
                "user": {"can_merge": True},
            }
        )
        return data
