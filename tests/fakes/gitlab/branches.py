"""Branches API: list, get, create, delete."""

from __future__ import annotations

from typing import Any

from tests.fakes.gitlab.api import Ctx, Response, message_error, not_found, ok, route
from tests.fakes.gitlab.rules import (
    DF_CONFLICT_MESSAGE,
    HEX_BRANCH_MESSAGE,
    branch_conflicts,
    branch_name_error,
)
from tests.fakes.gitlab.state import GitLabState, Project


class BranchesMixin(GitLabState):
    """The Branches API."""

    def _branch_json(self, project: Project, name: str) -> dict[str, Any]:
        sha = project.branches[name]
        default_head = project.branches.get(project.default_branch)
        merged = (
            name != project.default_branch
            and default_head is not None
            and sha in project.ancestors(default_head)
        )
        return {
            "name": name,
            "commit": self._commit_json(project, project.commits[sha]),
            "merged": merged,
            "protected": name == project.default_branch,
            "developers_can_push": False,
            "developers_can_merge": False,
            "can_push": True,
            "default": name == project.default_branch,
            "web_url": f"{self._web(project)}/-/tree/{name}",
        }

    @route("GET", "projects/:project/repository/branches")
    def _list_branches(self, ctx: Ctx) -> Response:
        search = str(ctx.get("search", "")).lower()
        names = sorted(name for name in ctx.proj.branches if search in name.lower())
        return self._paginate(ctx, [self._branch_json(ctx.proj, name) for name in names])

    @route("GET", "projects/:project/repository/branches/:branch")
    def _get_branch(self, ctx: Ctx) -> Response:
        if ctx.args["branch"] not in ctx.proj.branches:
            raise not_found("Branch")
        return ok(self._branch_json(ctx.proj, ctx.args["branch"]))

    @route("POST", "projects/:project/repository/branches")
    def _create_branch(self, ctx: Ctx) -> Response:
        project = ctx.proj
        name = ctx.require("branch")
        ref = ctx.require("ref")
        # Branches::CreateService's order: the name, existence, the ref, then the write
        # (the push hook refuses 40-hex names; git refuses a file/directory clash).
        error = branch_name_error(name)
        if error == "Branch name is invalid":
            raise message_error(400, error)
        if name in project.branches:
            raise message_error(400, "Branch already exists")
        sha = project.resolve(ref)
        if sha is None:
            raise message_error(
                400, f"Failed to create branch '{name}': invalid reference name '{ref}'"
            )
        if error == HEX_BRANCH_MESSAGE:
            raise message_error(400, error)
        if branch_conflicts(project.branches, name):
            raise message_error(400, f"Failed to create branch '{name}': {DF_CONFLICT_MESSAGE}")
        self._set_branch(project, name, sha)
        return ok(self._branch_json(project, name), 201)

    @route("DELETE", "projects/:project/repository/branches/:branch")
    def _delete_branch_endpoint(self, ctx: Ctx) -> Response:
        project = ctx.proj
        name = ctx.args["branch"]
        if name not in project.branches:
            raise not_found("Branch")
        if name == project.default_branch:
            raise message_error(405, "Cannot remove HEAD branch")
        self._delete_branch(project, name)
        return ok(b"", 204)
