"""Repository internals: commits as full trees, branch moves, commit actions, merges."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from tests.fakes.gitlab.api import Ctx, message_error, param_error
from tests.fakes.gitlab.diffs import blob_sha
from tests.fakes.gitlab.rules import (
    DF_CONFLICT_MESSAGE,
    HEX_BRANCH_MESSAGE,
    branch_conflicts,
    branch_name_error,
    check_creatable,
    clean_path,
)
from tests.fakes.gitlab.state import Commit, GitLabState, Project, User, now_iso, to_bytes


class RepositoryMixin(GitLabState):
    """Commits, branches and the commit-actions write path."""

    def _new_commit(
        self,
        project: Project,
        parents: list[str],
        tree: dict[str, bytes],
        message: str,
        author: User | None,
    ) -> Commit:
        seq = next(self._counters["seq"])
        digest = hashlib.sha1(usedforsecurity=False)
        for part in (project.path, *parents, message, str(seq)):
            digest.update(part.encode() + b"\0")
        for path in sorted(tree):
            digest.update(path.encode() + b"\0" + blob_sha(tree[path]).encode())
        name = author.name if author else "Administrator"
        email = f"{author.username}@example.com" if author else "admin@example.com"
        commit = Commit(digest.hexdigest(), parents, tree, message, name, email, now_iso(), seq)
        project.commits[commit.id] = commit
        return commit

    def _set_branch(self, project: Project, branch: str, sha: str) -> None:
        """Move a branch and refresh the open MRs it is the source of, like a push."""
        old = project.branches.get(branch)
        project.branches[branch] = sha
        if old == sha:
            return
        for mr in project.merge_requests.values():
            if mr.state != "opened" or mr.source_branch != branch:
                continue
            # Like GitLab's refresh: the commits now in the MR's diff that were not before
            # (so a force push onto a moved target branch adds 1 commit, not the target's).
            target = project.branches.get(mr.target_branch)
            before = project.ancestors(old) if old else set()
            added = [c for c in project.commits_between(target, sha) if c.id not in before]
            mr.sha = sha
            mr.updated_at = now_iso()
            count = len(added)
            items = "".join(f"<li>{c.id[:8]} - {c.title}</li>" for c in added)
            body = f"added {count} commit{'s' if count != 1 else ''}\n\n<ul>{items}</ul>"
            self._system_note(mr, body, mr.author)

    def _delete_branch(self, project: Project, branch: str) -> None:
        project.branches.pop(branch, None)

    def _apply_actions(self, tree: dict[str, bytes], actions: Any) -> dict[str, bytes]:
        if not isinstance(actions, list):
            raise param_error("actions is invalid")
        tree = dict(tree)
        for index, action in enumerate(actions):
            if not isinstance(action, dict):
                raise param_error(f"actions[{index}] is invalid")
            kind = action.get("action")
            if kind not in ("create", "update", "delete", "move", "chmod"):
                raise param_error(f"actions[{index}][action] does not have a valid value")
            if not isinstance(action.get("file_path"), str):
                raise param_error(f"actions[{index}][file_path] is missing")
            path = clean_path(action["file_path"])
            encoding = action.get("encoding") or "text"
            if encoding not in ("text", "base64"):
                raise param_error(f"actions[{index}][encoding] does not have a valid value")
            raw = action.get("content")
            content: bytes | None = None
            if raw is not None:
                try:
                    content = base64.b64decode(raw) if encoding == "base64" else to_bytes(raw)
                except (ValueError, TypeError):
                    raise message_error(400, "Invalid base64 content") from None
            if kind == "create":
                check_creatable(tree, path)
                tree[path] = content or b""
            elif kind == "update":
                if path not in tree:
                    raise message_error(400, "A file with this name doesn't exist")
                tree[path] = content or b""
            elif kind in ("delete", "chmod"):
                if path not in tree:
                    raise message_error(400, "A file with this name doesn't exist")
                if kind == "delete":
                    del tree[path]
            else:  # move
                if not isinstance(action.get("previous_path"), str):
                    raise param_error(f"actions[{index}][previous_path] is missing")
                previous = clean_path(action["previous_path"])
                if previous not in tree:
                    raise message_error(400, "A file with this name doesn't exist")
                moved = tree.pop(previous)
                check_creatable(tree, path)
                tree[path] = moved if content is None else content
        return tree

    def _commit_actions(self, ctx: Ctx, author: User) -> Commit:
        """The Commits API (and Files API) write path, with GitLab's branch rules."""
        project = ctx.proj
        branch = ctx.require("branch")
        message = ctx.require("commit_message")
        actions = ctx.require("actions")
        start_branch = ctx.get("start_branch")
        start_sha = ctx.get("start_sha")
        force = bool(ctx.flag("force", False))
        if start_branch and start_sha:
            raise param_error("start_branch, start_sha are mutually exclusive")
        empty_repo = not project.branches
        if start_sha:
            different_branch = True
        else:
            start_branch = start_branch or branch
            different_branch = start_branch != branch
        if not empty_repo and different_branch and branch in project.branches and not force:
            raise message_error(
                400,
                f"A branch called '{branch}' already exists. "
                "Switch to that branch in order to make changes",
            )
        new_branch = branch not in project.branches
        if new_branch and branch_name_error(branch) == "Branch name is invalid":
            raise message_error(
                400,
                f"Something went wrong when we tried to create '{branch}' for you: "
                "Branch name is invalid",
            )
        parent: str | None = None
        if start_sha:
            parent = None if start_sha in project.branches else project.resolve(start_sha)
            if parent is None:
                raise message_error(400, f"Cannot find start_sha '{start_sha}'")
        elif not empty_repo:
            if start_branch not in project.branches:
                raise message_error(
                    400, "You can only create or edit files when you are on a branch"
                )
            parent = project.branches[start_branch]
        base_tree = project.commits[parent].tree if parent else {}
        tree = self._apply_actions(base_tree, actions)
        if new_branch:
            # Refused only when the ref is written (Gitaly's hook and update-ref).
            if branch_name_error(branch) == HEX_BRANCH_MESSAGE:
                raise message_error(400, HEX_BRANCH_MESSAGE)
            if branch_conflicts(project.branches, branch):
                raise message_error(
                    400, f"Failed to create branch '{branch}': {DF_CONFLICT_MESSAGE}"
                )
        commit = self._new_commit(project, [parent] if parent else [], tree, message, author)
        self._set_branch(project, branch, commit.id)
        return commit

    def _merge_trees(self, project: Project, target: str, source: str) -> tuple[dict, list[str]]:
        base = project.merge_base(target, source)
        base_tree = project.commits[base].tree if base else {}
        target_tree = project.commits[target].tree
        source_tree = project.commits[source].tree
        merged = dict(target_tree)
        conflicts = []
        for path in set(base_tree) | set(source_tree):
            theirs = source_tree.get(path)
            original = base_tree.get(path)
            if theirs == original:
                continue
            ours = target_tree.get(path)
            if ours not in (original, theirs):
                conflicts.append(path)
            elif theirs is None:
                merged.pop(path, None)
            else:
                merged[path] = theirs
        return merged, sorted(conflicts)
