"""The `mr` submission payload and the content hash of its file actions."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NonEmpty = Annotated[str, Field(min_length=1, pattern=r"^[^\x00]*$")]


class FileAction(BaseModel):
    """One change to one file, as GitLab's Commits API takes it."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["create", "update", "delete", "move"]
    file_path: NonEmpty
    content: str | None = None
    encoding: Literal["text", "base64"] = "text"
    previous_path: NonEmpty | None = None

    @model_validator(mode="after")
    def _consistent(self) -> FileAction:
        if self.file_path.startswith("/"):
            raise ValueError("file_path must be relative to the repository root")
        if self.action in ("create", "update") and self.content is None:
            raise ValueError(f"{self.action} needs content")
        if self.action == "delete" and self.content is not None:
            raise ValueError("delete takes no content")
        if self.action == "move" and not self.previous_path:
            raise ValueError("move needs previous_path")
        if self.action != "move" and self.previous_path is not None:
            raise ValueError("previous_path is only for move")
        if self.encoding == "base64" and self.content is not None:
            try:
                base64.b64decode(self.content, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("content is not valid base64") from None
        return self

    def gitlab(self) -> dict[str, Any]:
        """The action as the Commits API wants it."""
        return self.model_dump(exclude_none=True)


class MrCreate(BaseModel):
    """The desired state of a merge request; submit it again whenever it changes."""

    model_config = ConfigDict(extra="forbid")

    project: NonEmpty
    source_branch: NonEmpty
    target_branch: NonEmpty = "main"
    title: NonEmpty
    description: str = ""
    commit_message: NonEmpty
    file_actions: Annotated[list[FileAction], Field(min_length=1)]
    labels: list[NonEmpty] = Field(default_factory=list)
    package: str | None = None
    source: str | None = None
    change_kind: str | None = None
    draft: bool = False
    auto_merge: bool = False

    @model_validator(mode="after")
    def _distinct_branches(self) -> MrCreate:
        if self.source_branch == self.target_branch:
            raise ValueError("source_branch and target_branch must differ")
        return self


def normalized_actions(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """File actions in canonical order: by file path, then action."""
    return sorted(actions, key=lambda action: (action["file_path"], action["action"]))


def content_hash(actions: list[dict[str, Any]]) -> str:
    """SHA-256 of the normalized actions: sorted, sorted keys, compact separators."""
    text = json.dumps(normalized_actions(actions), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
