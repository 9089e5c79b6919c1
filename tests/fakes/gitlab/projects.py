"""Version, current user and project endpoints."""

from __future__ import annotations

import zlib
from typing import Any

from tests.fakes.gitlab.api import Ctx, Response, ok, route
from tests.fakes.gitlab.state import GitLabState, Project, Token


class ProjectsMixin(GitLabState):
    """Version, user and project."""

    def _project_json(self, project: Project, token: Token) -> dict[str, Any]:
        web = self._web(project)
        namespace = project.namespace
        return {
            "id": project.id,
            "description": None,
            "name": project.name,
            "name_with_namespace": project.path.replace("/", " / "),
            "path": project.name,
            "path_with_namespace": project.path,
            "created_at": project.created_at,
            "default_branch": project.default_branch if project.branches else None,
            "tag_list": [],
            "topics": [],
            "ssh_url_to_repo": f"git@127.0.0.1:{project.path}.git",
            "http_url_to_repo": f"{web}.git",
            "web_url": web,
            "readme_url": None,
            "forks_count": 0,
            "avatar_url": None,
            "star_count": 0,
            "last_activity_at": project.created_at,
            "namespace": {
                "id": zlib.crc32(namespace.encode()) % 10_000,
                "name": namespace.rsplit("/", 1)[-1],
                "path": namespace.rsplit("/", 1)[-1],
                "kind": "group",
                "full_path": namespace,
                "parent_id": None,
                "avatar_url": None,
                "web_url": f"{self.url}/groups/{namespace}",
            },
            "empty_repo": not project.branches,
            "archived": False,
            "visibility": "private",
            "merge_method": "merge",
            "squash_option": "default_off",
            "only_allow_merge_if_pipeline_succeeds": False,
            "remove_source_branch_after_merge": True,
            "permissions": {
                "project_access": {
                    "access_level": 40 if token.access == "write" else 20,
                    "notification_level": 3,
                },
                "group_access": None,
            },
        }

    @route("GET", "version")
    def _get_version(self, ctx: Ctx) -> Response:
        return ok({"version": "17.11.0", "revision": "fake0000", "enterprise": False})

    @route("GET", "user")
    def _get_user(self, ctx: Ctx) -> Response:
        data = self._user_json(ctx.token.user)
        assert data is not None
        data.update({"email": f"{ctx.token.user.username}@example.com", "bot": True})
        return ok(data)

    @route("GET", "projects/:project")
    def _get_project(self, ctx: Ctx) -> Response:
        return ok(self._project_json(ctx.proj, ctx.token))
