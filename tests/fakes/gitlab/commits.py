"""Commits API: list, get, create with actions, compare."""

from __future__ import annotations

from typing import Any

from tests.fakes.gitlab.api import Ctx, Response, not_found, ok, route
from tests.fakes.gitlab.diffs import line_stats, tree_diff
from tests.fakes.gitlab.state import Commit, GitLabState, Project


class CommitsMixin(GitLabState):
    """The Commits API."""

    def _commit_json(self, project: Project, commit: Commit) -> dict[str, Any]:
        return {
            "id": commit.id,
            "short_id": commit.id[:8],
            "created_at": commit.created_at,
            "parent_ids": list(commit.parent_ids),
            "title": commit.title,
            "message": commit.message,
            "author_name": commit.author_name,
            "author_email": commit.author_email,
            "authored_date": commit.created_at,
            "committer_name": commit.author_name,
            "committer_email": commit.author_email,
            "committed_date": commit.created_at,
            "trailers": {},
            "extended_trailers": {},
            "web_url": f"{self._web(project)}/-/commit/{commit.id}",
        }

    def _commit_detail_json(self, project: Project, commit: Commit) -> dict[str, Any]:
        parent = project.commits[commit.parent_ids[0]].tree if commit.parent_ids else {}
        additions = deletions = 0
        for entry in tree_diff(parent, commit.tree):
            added, removed = line_stats(entry["diff"])
            additions += added
            deletions += removed
        pipelines = [p for p in project.pipelines.values() if p.sha == commit.id]
        last = max(pipelines, key=lambda p: p.id) if pipelines else None
        data = self._commit_json(project, commit)
        data.update(
            {
                "stats": {
                    "additions": additions,
                    "deletions": deletions,
                    "total": additions + deletions,
                },
                "status": self._pipeline_status(project, last) if last else None,
                "project_id": project.id,
                "last_pipeline": self._pipeline_json(project, last) if last else None,
            }
        )
        return data

    @route("GET", "projects/:project/repository/commits")
    def _list_commits(self, ctx: Ctx) -> Response:
        project = ctx.proj
        sha = project.resolve(ctx.get("ref_name", project.default_branch))
        if sha is None:
            return self._paginate(ctx, [])
        commits = sorted(
            (project.commits[s] for s in project.ancestors(sha)),
            key=lambda commit: commit.seq,
            reverse=True,
        )
        path = ctx.get("path")
        if path:
            commits = [c for c in commits if _touches(project, c, path)]
        return self._paginate(ctx, [self._commit_json(project, c) for c in commits])

    @route("GET", "projects/:project/repository/commits/:sha")
    def _get_commit(self, ctx: Ctx) -> Response:
        sha = ctx.proj.resolve(ctx.args["sha"])
        if sha is None:
            raise not_found("Commit")
        return ok(self._commit_detail_json(ctx.proj, ctx.proj.commits[sha]))

    @route("POST", "projects/:project/repository/commits")
    def _create_commit(self, ctx: Ctx) -> Response:
        commit = self._commit_actions(ctx, ctx.token.user)
        return ok(self._commit_detail_json(ctx.proj, commit), 201)

    @route("GET", "projects/:project/repository/compare")
    def _compare(self, ctx: Ctx) -> Response:
        project = ctx.proj
        source = project.resolve(ctx.require("from"))
        head = project.resolve(ctx.require("to"))
        if source is None or head is None:
            raise not_found("Ref")
        straight = bool(ctx.flag("straight", False))
        base = source if straight else (project.merge_base(source, head) or source)
        commits = project.commits_between(source, head)
        same = source == head
        return ok(
            {
                "commit": self._commit_json(project, commits[-1]) if commits else None,
                "commits": [self._commit_json(project, commit) for commit in commits],
                "diffs": []
                if same
                else tree_diff(project.commits[base].tree, project.commits[head].tree),
                "compare_timeout": False,
                "compare_same_ref": same,
                "web_url": f"{self._web(project)}/-/compare/{source[:8]}...{head[:8]}",
            }
        )


def _touches(project: Project, commit: Commit, path: str) -> bool:
    parent = project.commits[commit.parent_ids[0]].tree if commit.parent_ids else {}
    return commit.tree.get(path) != parent.get(path)
