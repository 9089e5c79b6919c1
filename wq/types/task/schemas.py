"""The `task` submission payload."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from wq.types.project import ProjectPath

NonEmpty = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^\x00]*$")]


class TaskCreate(BaseModel):
    """A task to run: a configured kind for a project (and a repository, per kind)."""

    model_config = ConfigDict(extra="forbid")

    project: Annotated[
        ProjectPath,
        Field(min_length=1, max_length=512, description="the project, e.g. group/project"),
    ]
    kind: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00]*$")]
    repository: (
        Annotated[
            ProjectPath,
            Field(min_length=1, max_length=512, description="a repository, e.g. group/repo"),
        ]
        | None
    ) = None
    payload: dict[str, Any] = Field(default_factory=dict)
    lane: Literal["normal", "alert"] | None = Field(
        default=None, description="the kind's default lane when absent"
    )
    autonomous: bool = False
    dedup_key: NonEmpty | None = Field(
        default=None, description="an active task with this key makes this a dedup hit"
    )
