"""The `task` submission payload."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from typing_extensions import TypeAliasType

from wq.engine.envelope import contains_nul
from wq.types.project import ProjectPath

NO_NUL = r"^[^\x00]*$"
NonEmpty = Annotated[str, Field(min_length=1, max_length=512, pattern=NO_NUL)]
# The payload as the document states it: JSON whose strings and keys hold no NUL
# (PostgreSQL cannot store it). Documented through these types; checked by
# `_json_without_nul`, whose one message reads better than a union's per-member errors.
NoNulText = Annotated[str, Field(pattern=NO_NUL)]
# patternProperties alone would let any other key through: say that there is none.
JsonObject = Annotated[
    dict[NoNulText, "JsonValue"], Field(json_schema_extra={"additionalProperties": False})
]
JsonValue = TypeAliasType(
    "JsonValue", "NoNulText | int | float | bool | list[JsonValue] | JsonObject | None"
)


def _json_without_nul(document: Any) -> Any:
    if contains_nul(document):
        raise ValueError("must not contain NUL (\\u0000) in any key or string")
    return document


Payload = Annotated[
    dict[str, Any], BeforeValidator(_json_without_nul, json_schema_input_type=JsonObject)
]


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


def submission_schema(
    scopes: Mapping[str, str], payload_schemas: Mapping[str, dict[str, Any]] | None = None
) -> type[TaskCreate]:
    """`TaskCreate` as this daemon's kinds make it, for the API to validate and document.

    `scopes` maps each configured kind to its scope (`project` or `repository`). The
    document names the kinds (an enum) and says that a repository-scoped kind needs a
    `repository` and any other kind takes none (if/then/else), and that a kind with a
    `payload_schema` takes only payloads it allows. The checks themselves stay in
    `submit.validate`, whose messages name the known kinds, the scope and the payload.
    """
    kinds = sorted(scopes)
    repository_kinds = [kind for kind in kinds if scopes[kind] == "repository"]

    needs_repository: dict[str, Any] = {
        "required": ["repository"],
        "properties": {"repository": {"type": "string"}},
    }
    takes_none: dict[str, Any] = {"properties": {"repository": {"type": "null"}}}
    if not repository_kinds:
        rule = takes_none
    elif len(repository_kinds) == len(kinds):
        rule = needs_repository
    else:
        when = {"properties": {"kind": {"enum": repository_kinds}}, "required": ["kind"]}
        rule = {"if": when, "then": needs_repository, "else": takes_none}

    payload_rules = [
        {
            "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
            "then": {"properties": {"payload": payload_schema}},
        }
        for kind, payload_schema in sorted((payload_schemas or {}).items())
    ]

    def document(schema: dict[str, Any]) -> None:
        if kinds:
            schema["properties"]["kind"]["enum"] = kinds
        schema["allOf"] = [rule, *payload_rules]

    # Same name as the base, so the OpenAPI component keeps the house name `TaskCreate`.
    return type(
        "TaskCreate",
        (TaskCreate,),
        {
            "__doc__": TaskCreate.__doc__,
            "__module__": __name__,
            "__annotations__": {"payload": Payload},
            "payload": Field(
                default_factory=dict,
                description="what the kind's program gets on stdin; no NUL (\\u0000) anywhere",
            ),
            # Strict: `"autonomous": 0` is a mistake to report, as the schema says boolean.
            "model_config": ConfigDict(extra="forbid", strict=True, json_schema_extra=document),
        },
    )
