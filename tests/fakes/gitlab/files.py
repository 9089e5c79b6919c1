"""Repository files API (get, raw, create, update, delete) and the tree listing."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from tests.fakes.gitlab.api import Ctx, Response, not_found, ok, param_error, route
from tests.fakes.gitlab.diffs import blob_sha
from tests.fakes.gitlab.rules import check_url_file_path
from tests.fakes.gitlab.state import Commit, GitLabState


class FilesMixin(GitLabState):
    """The Repository files and tree APIs."""

    def _file(self, ctx: Ctx, ref: str | None, *, raw: bool = False) -> tuple[Commit, str, bytes]:
        project = ctx.proj
        # Grape validates the parameters in order: file_path first, then ref.
        check_url_file_path(ctx.args["file_path"], allow_absolute=raw)
        if ref is None:
            raise param_error("ref is missing")
        sha = project.resolve(ref)
        if sha is None:
            raise not_found("Commit")
        path = ctx.args["file_path"]
        content = project.commits[sha].tree.get(path)
        if content is None:
            raise not_found("File")
        return project.commits[sha], path, content

    def _file_headers(self, ctx: Ctx, commit: Commit, path: str, content: bytes, ref: str):
        return {
            "X-Gitlab-File-Name": path.rsplit("/", 1)[-1],
            "X-Gitlab-File-Path": path,
            "X-Gitlab-Size": str(len(content)),
            "X-Gitlab-Encoding": "base64",
            "X-Gitlab-Blob-Id": blob_sha(content),
            "X-Gitlab-Commit-Id": commit.id,
            "X-Gitlab-Last-Commit-Id": ctx.proj.last_commit_touching(commit.id, path),
            "X-Gitlab-Content-Sha256": hashlib.sha256(content).hexdigest(),
            "X-Gitlab-Ref": ref,
            "X-Gitlab-Execute-Filemode": "false",
        }

    @route("GET", "projects/:project/repository/files/:file_path")
    def _get_file(self, ctx: Ctx) -> Response:
        ref = ctx.get("ref")
        commit, path, content = self._file(ctx, ref)
        headers = self._file_headers(ctx, commit, path, content, ref)
        if ctx.method == "HEAD":
            return ok(b"", 200, headers)
        body = {
            "file_name": path.rsplit("/", 1)[-1],
            "file_path": path,
            "size": len(content),
            "encoding": "base64",
            "content_sha256": headers["X-Gitlab-Content-Sha256"],
            "ref": ref,
            "blob_id": headers["X-Gitlab-Blob-Id"],
            "commit_id": commit.id,
            "last_commit_id": headers["X-Gitlab-Last-Commit-Id"],
            "execute_filemode": False,
            "content": base64.b64encode(content).decode(),
        }
        return ok(body, 200, headers)

    @route("GET", "projects/:project/repository/files/:file_path/raw")
    def _get_raw_file(self, ctx: Ctx) -> Response:
        ref = ctx.get("ref", ctx.proj.default_branch)
        commit, path, content = self._file(ctx, ref, raw=True)
        headers = self._file_headers(ctx, commit, path, content, ref)
        headers["Content-Type"] = "text/plain; charset=utf-8"
        return ok(content, 200, headers)

    def _file_write(self, ctx: Ctx, action: str) -> Commit:
        check_url_file_path(ctx.args["file_path"])
        entry: dict[str, Any] = {"action": action, "file_path": ctx.args["file_path"]}
        if action != "delete":
            entry["content"] = ctx.require("content")
            entry["encoding"] = ctx.get("encoding", "text")
        ctx.params["actions"] = [entry]
        return self._commit_actions(ctx, ctx.token.user)

    @route("POST", "projects/:project/repository/files/:file_path")
    def _create_file(self, ctx: Ctx) -> Response:
        self._file_write(ctx, "create")
        return ok({"file_path": ctx.args["file_path"], "branch": ctx.params["branch"]}, 201)

    @route("PUT", "projects/:project/repository/files/:file_path")
    def _update_file(self, ctx: Ctx) -> Response:
        self._file_write(ctx, "update")
        return ok({"file_path": ctx.args["file_path"], "branch": ctx.params["branch"]})

    @route("DELETE", "projects/:project/repository/files/:file_path")
    def _delete_file(self, ctx: Ctx) -> Response:
        self._file_write(ctx, "delete")
        return ok(b"", 204)

    @route("GET", "projects/:project/repository/tree")
    def _get_tree(self, ctx: Ctx) -> Response:
        project = ctx.proj
        tree = project.tree(ctx.get("ref", project.default_branch))
        if tree is None:
            raise not_found("Tree")
        prefix = str(ctx.get("path", "")).strip("/")
        recursive = bool(ctx.flag("recursive", False))
        if prefix and not any(path.startswith(prefix + "/") for path in tree):
            raise not_found("Tree")
        entries: dict[str, dict[str, Any]] = {}
        for path, content in tree.items():
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1 :] if prefix else path
            parts = rest.split("/")
            depth = len(parts) if recursive else 1
            for level in range(min(depth, len(parts))):
                sub = "/".join(filter(None, [prefix, *parts[: level + 1]]))
                is_blob = level == len(parts) - 1
                entries.setdefault(
                    sub,
                    {
                        "id": blob_sha(content)
                        if is_blob
                        else hashlib.sha1(sub.encode(), usedforsecurity=False).hexdigest(),
                        "name": parts[level],
                        "type": "blob" if is_blob else "tree",
                        "path": sub,
                        "mode": "100644" if is_blob else "040000",
                    },
                )
        ordered = sorted(entries.values(), key=lambda e: (e["type"] != "tree", e["path"]))
        return self._paginate(ctx, ordered)
