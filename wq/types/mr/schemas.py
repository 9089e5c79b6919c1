"""The `mr` submission payload and the content hash of its file actions.

Every limit the server enforces is declared here, so that the OpenAPI document says
it: lengths match the columns, and `project` is short enough that the idempotency key
`mr:{project}:{source_branch}:{generation}` fits its 512 characters. The per-item
limits that an operator can configure (file actions, bytes per file, labels) are added
by `submission_schema` from the settings.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    create_model,
    model_validator,
)

from wq.types.mr.settings import MrSettings
from wq.types.mr.validation import (
    BRANCH_SCHEMA,
    LABEL_SCHEMA,
    MAX_LABEL_LENGTH,
    MAX_PATH_LENGTH,
    MAX_REF_LENGTH,
    PATH_SCHEMA,
    branch_problem,
    label_problem,
    path_problem,
)
from wq.types.project import SEGMENT_PATTERN, ProjectPath

# A JSON string with no NUL: PostgreSQL can store none in text or JSONB.
NO_NUL = r"^[^\x00]*$"
MAX_PROJECT_LENGTH = 240  # 3 + 240 + 1 + 255 + 1 + 10 digits of generation <= 512
MAX_TITLE_LENGTH = 248  # GitLab's 255, less room for the "Draft: " prefix
MAX_TEXT_LENGTH = 1_048_576  # GitLab's limit on an MR description
# Whole 4-character groups, the last one padded: exactly what `size` counts right.
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL (\\u0000)")
    return value


def _checked(problem: Callable[[str], str | None]) -> Callable[[str], str]:
    def check(value: str) -> str:
        reason = problem(value)
        if reason:
            raise ValueError(reason)
        return value

    return check


def _text(max_length: int, min_length: int = 0) -> Any:
    return Field(
        min_length=min_length, max_length=max_length, json_schema_extra={"pattern": NO_NUL}
    )


NoNul = AfterValidator(_no_nul)
Title = Annotated[str, _text(MAX_TITLE_LENGTH, 1), NoNul]
LongText = Annotated[str, _text(MAX_TEXT_LENGTH), NoNul]
CommitMessage = Annotated[str, _text(MAX_TEXT_LENGTH, 1), NoNul]
Name = Annotated[str, _text(255), NoNul]  # package, source: mr_details columns
ChangeKind = Annotated[str, _text(64), NoNul]


RepoPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH_LENGTH,
        description="a path relative to the repository root: no leading /, no empty, "
        "'.' or '..' segments, no backslash, no control characters, no .git segment",
        json_schema_extra=PATH_SCHEMA,
    ),
    AfterValidator(_checked(path_problem)),
]
Branch = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_REF_LENGTH,
        description="a branch name as git check-ref-format --branch accepts it (no .., "
        "no space, control character or any of ~^:?*[\\, no leading - or /, no part "
        "starting with . or ending in .lock, no @{, not HEAD) and without a refs/ prefix",
        json_schema_extra=BRANCH_SCHEMA,
    ),
    AfterValidator(_checked(branch_problem)),
]
Label = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_LABEL_LENGTH,
        description="a GitLab label: not blank, no comma, no control characters",
        json_schema_extra=LABEL_SCHEMA,
    ),
    AfterValidator(_checked(label_problem)),
]
Project = Annotated[
    ProjectPath,
    Field(
        min_length=1,
        max_length=MAX_PROJECT_LENGTH,
        description="the GitLab project path, e.g. group/subgroup/project",
    ),
]


def _no_nul_in_content(content: str) -> str:
    if "\x00" in content:
        raise ValueError("must not contain NUL (\\u0000); send binary content as base64")
    return content


Content = Annotated[
    str,
    Field(
        description="the file's new content; text must not contain NUL: send binary "
        "content base64-encoded (encoding: base64), padded to whole groups of 4",
        json_schema_extra={"pattern": NO_NUL},
    ),
    AfterValidator(_no_nul_in_content),
]


class _FileActionBase(BaseModel):
    """What every file action has: the path, and how its content is encoded."""

    model_config = ConfigDict(extra="forbid", strict=True)

    file_path: RepoPath
    encoding: Literal["text", "base64"] = "text"

    @model_validator(mode="after")
    def _decodable(self) -> _FileActionBase:
        content = getattr(self, "content", None)
        # The pattern the document states (b64decode alone would also take "AAAA=").
        if self.encoding == "base64" and content is not None and not re.fullmatch(BASE64, content):
            raise ValueError("content is not valid base64")
        return self

    def size(self) -> int:
        """The number of bytes the file will have (0 without content)."""
        content: str | None = getattr(self, "content", None)
        if content is None:
            return 0
        if self.encoding == "base64":
            return len(content) * 3 // 4 - content[-2:].count("=")
        return len(content.encode())

    def gitlab(self) -> dict[str, Any]:
        """The action as the Commits API wants it."""
        return self.model_dump(exclude_none=True)


# In the document: base64 content must match `BASE64` (the `_decodable` check).
_BASE64_CONTENT = ConfigDict(
    json_schema_extra={
        "if": {"properties": {"encoding": {"const": "base64"}}, "required": ["encoding"]},
        "then": {"properties": {"content": {"pattern": BASE64}}},
    }
)


class CreateAction(_FileActionBase):
    """Create a file that does not exist yet."""

    model_config = _BASE64_CONTENT

    action: Literal["create"]
    content: Content
    previous_path: None = None  # only a move has one; null is accepted for absent


class UpdateAction(_FileActionBase):
    """Replace the content of an existing file."""

    model_config = _BASE64_CONTENT

    action: Literal["update"]
    content: Content
    previous_path: None = None


class DeleteAction(_FileActionBase):
    """Delete a file (no content)."""

    action: Literal["delete"]
    content: None = None
    previous_path: None = None


class MoveAction(_FileActionBase):
    """Move a file from `previous_path`, optionally with new content."""

    model_config = _BASE64_CONTENT

    action: Literal["move"]
    previous_path: Annotated[
        RepoPath, Field(description="the path the file moves from (not its file_path)")
    ]
    content: Content | None = None

    @model_validator(mode="after")
    def _moves_somewhere(self) -> MoveAction:
        # No change a commit can hold: refused now, not left to GitLab once the item runs.
        if self.previous_path == self.file_path:
            raise ValueError(f"{self.file_path} is moved to itself (previous_path = file_path)")
        return self


# One change to one file, as GitLab's Commits API takes it; `action` says which, and
# the schema says what each one needs (so the OpenAPI document states the rules).
FileAction = Annotated[
    CreateAction | UpdateAction | DeleteAction | MoveAction, Field(discriminator="action")
]


class MrCreate(BaseModel):
    """The desired state of a merge request; submit it again whenever it changes.

    `source_branch` and `target_branch` must differ (a rule between two fields, which
    the schema cannot state).
    """

    # Strict: `"draft": "yes"` is a mistake to report, not a truthy value to guess at.
    model_config = ConfigDict(extra="forbid", strict=True)

    project: Project
    source_branch: Branch
    target_branch: Branch = "main"
    title: Title
    description: LongText = ""
    commit_message: CommitMessage
    file_actions: Annotated[list[FileAction], Field(min_length=1)]
    labels: list[Label] = Field(default_factory=list)
    package: Name | None = None
    source: Name | None = None
    change_kind: ChangeKind | None = None
    draft: StrictBool = False
    auto_merge: StrictBool = False

    @model_validator(mode="after")
    def _distinct_branches(self) -> MrCreate:
        if self.source_branch == self.target_branch:
            raise ValueError("source_branch and target_branch must differ")
        return self


def _escaped(text: str) -> str:
    """`text` as a literal in any JSON Schema regex (only what a project key may hold)."""
    return "".join(f"\\{char}" if char in ".^$*+?()[]{}|\\" else char for char in text)


def _configured_projects(keys: list[str]) -> dict[str, Any] | None:
    """The pattern of the projects `MrSettings.entry_for` finds: a key, or a path below one."""
    if not keys:
        return None  # nothing can be submitted; the 422 says so
    alternatives = "|".join(_escaped(key) for key in keys)
    return {"pattern": f"^(?:{alternatives})(?:/{SEGMENT_PATTERN})*$"}


def submission_schema(settings: MrSettings) -> type[MrCreate]:
    """`MrCreate` with the configured per-item limits, as the API enforces and documents."""
    max_bytes = settings.max_file_bytes

    def file_sizes(actions: list[FileAction]) -> list[FileAction]:
        named: set[str] = set()
        for action in actions:
            if action.size() > max_bytes:
                raise ValueError(
                    f"{action.file_path} has {action.size()} bytes, over the limit of "
                    f"{max_bytes} bytes per file (handled_types.mr.max_file_bytes)"
                )
            if action.file_path in named:
                # GitLab refuses the commit (400) once the item runs: said now instead.
                raise ValueError(f"{action.file_path} is the file_path of two actions")
            named.add(action.file_path)
        return actions

    file_actions = Annotated[
        list[FileAction],
        Field(
            min_length=1,
            max_length=settings.max_file_actions,
            description=f"at most {settings.max_file_actions} actions "
            "(handled_types.mr.max_file_actions), each file at most "
            f"{max_bytes} bytes (max_file_bytes), no two on one file_path",
        ),
        AfterValidator(file_sizes),
    ]
    labels = Annotated[
        list[Label],
        Field(
            max_length=settings.max_labels,
            description=f"at most {settings.max_labels} labels (max_labels); "
            "managed-by::workqueue is always added",
        ),
    ]
    project = Annotated[
        Project,
        Field(
            description="a project of handled_types.mr.projects, or one below a group "
            f"there: {', '.join(sorted(settings.projects)) or 'none is configured'}",
            json_schema_extra=_configured_projects(sorted(settings.projects)),
        ),
    ]
    # Same name as the base, so the OpenAPI component keeps the house name `MrCreate`.
    schema: type[MrCreate] = create_model(
        "MrCreate",
        __base__=MrCreate,
        __doc__=MrCreate.__doc__,
        project=(project, ...),
        file_actions=(file_actions, ...),
        labels=(labels, Field(default_factory=list)),
    )
    return schema


def normalized_actions(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """File actions in canonical order: by file path, then action."""
    return sorted(actions, key=lambda action: (action["file_path"], action["action"]))


def content_hash(actions: list[dict[str, Any]]) -> str:
    """SHA-256 of the normalized actions: sorted, sorted keys, compact separators."""
    text = json.dumps(normalized_actions(actions), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
