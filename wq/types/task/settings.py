"""`handled_types.task`: kinds, runners, intake (Grafana, schedules, GitLab rules), GC.

With no `kinds` configured the type runs the built-in demo kinds `echo`, `sleep` and
`count` on the local `command` runner, so a fresh `wq daemon` has something real to run.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import sys
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator, SchemaError
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
)

from wq.engine import config as engine_config
from wq.engine.config import (
    ConfigError,
    Count,
    Seconds,
    SecondsOrZero,
    secret_problem,
    validation_reason,
)
from wq.types.project import ProjectPath
from wq.types.task.demo import MAX_COUNT, MAX_SECONDS
from wq.types.task.job_checks import resources_problems, template_problems
from wq.types.task.runners.supervise import DEFAULT_MAX_OUTPUT_BYTES
from wq.types.task.schema_refs import unresolvable_ref

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")]
# The environment a local run inherits by default: enough to find programs, no secrets.
DEFAULT_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")


# What an argv template may name: `{id}`, `{project}`, `{kind}`, `{repository}`, and the
# payload or a value in it (`{payload[key]}`, `{payload[key][0]}`).
TEMPLATE_FIELDS = ("id", "project", "kind", "repository", "payload")
_TEMPLATE_FIELD = re.compile(r"^(id|project|kind|repository|payload(\[[^\[\]]+\])*)$")


def check_argv_template(template: list[str] | None) -> None:
    """Refuse (ValueError, naming the element) an argv template that no task could fill:
    a placeholder that is not one of `TEMPLATE_FIELDS`, an attribute look-up, or a
    malformed format string. Caught here, not at the first task's start."""
    for index, part in enumerate(template or ()):
        try:
            fields = list(string.Formatter().parse(part))
        except ValueError as err:
            raise ValueError(f"[{index}] {part!r}: {err}") from None
        for _, name, spec, conversion in fields:
            if name is None:
                continue
            if conversion:
                raise ValueError(f"[{index}] {part!r}: no conversion (!{conversion}) is taken")
            if "{" in (spec or ""):
                raise ValueError(f"[{index}] {part!r}: a placeholder inside {{{name}:...}}")
            if not _TEMPLATE_FIELD.match(name):
                known = ", ".join(f"{{{field}}}" for field in TEMPLATE_FIELDS[:-1])
                raise ValueError(
                    f"[{index}] {part!r}: unknown placeholder {{{name}}}"
                    f" (known: {known}, {{payload[key]}})"
                )


def _check_environment(env: dict[str, str]) -> dict[str, str]:
    """Refuse variables no process can be given: a name with `=` or NUL, a NUL value."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{name!r}: not a variable name")
        if "\0" in value:
            raise ValueError(f"{name!r}: its value holds a NUL character")
    return env


Environment = Annotated[dict[str, str], AfterValidator(_check_environment)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KindConfig(_Strict):
    """One task kind: its scope, default lane, runner, timeout and dedup rule."""

    scope: Literal["project", "repository"]
    lane: Literal["normal", "alert"] = "normal"
    runner: Literal["command", "kubernetes"] = "command"
    timeout_seconds: Seconds = 3600.0
    # Fields whose values make the dedup key of a submission that brings none:
    # `project`, `repository`, or `payload.<key>`.
    dedup: list[str] | None = None
    # The command runner's argv template; placeholders {id}, {project}, {kind},
    # {repository} and {payload[key]} are filled in, no shell is involved.
    command: list[str] | None = None
    env: Environment = Field(default_factory=dict)
    # The kubernetes runner's Job template for this kind (overrides the runner's).
    job: dict[str, Any] | None = None
    # A JSON Schema (2020-12) the payload must satisfy: a submission that does not is
    # refused (422) rather than stored to fail when its program reads it.
    payload_schema: dict[str, Any] | None = None
    _payload_validator: Draft202012Validator | None = PrivateAttr(default=None)

    def model_post_init(self, _context: Any) -> None:
        """Build the payload schema's validator once, with the config."""
        if self.payload_schema is not None:
            self._payload_validator = Draft202012Validator(self.payload_schema)

    def payload_problems(self, payload: Any) -> list[str]:
        """What is wrong with `payload` by the kind's schema, path first (none: empty)."""
        if self._payload_validator is None:
            return []
        errors = sorted(self._payload_validator.iter_errors(payload), key=lambda e: e.path)
        return [
            ".".join(["payload", *(str(part) for part in error.path)]) + f": {error.message}"
            for error in errors
        ]

    @field_validator("payload_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as err:
                raise ValueError(f"not a JSON Schema: {err.message}") from None
            ref = unresolvable_ref(schema)
            if ref is not None:
                raise ValueError(
                    f"$ref {ref!r} does not resolve (wq fetches no schema: refer to"
                    " `$defs` in the schema itself)"
                )
        return schema

    @field_validator("command")
    @classmethod
    def _fillable(cls, command: list[str] | None) -> list[str] | None:
        check_argv_template(command)
        return command

    @field_validator("dedup")
    @classmethod
    def _known_fields(cls, fields: list[str] | None) -> list[str] | None:
        for name in fields or []:
            if name not in ("project", "repository") and not (
                name.startswith("payload.") and len(name) > len("payload.")
            ):
                raise ValueError(f"dedup field {name!r}: use project, repository or payload.<key>")
        return fields


class CommandRunnerConfig(_Strict):
    """The local `command` runner."""

    # Where runs keep their output and exit status (default: under the data dir).
    runs_dir: str | None = None
    env: Environment = Field(default_factory=dict)
    inherit_env: list[str] = Field(default_factory=lambda: list(DEFAULT_INHERITED_ENV))
    workdir: str | None = None
    kill_grace_seconds: Seconds = 5.0
    # A run's output.log keeps this much of the start and the last part of the rest.
    max_output_bytes: Annotated[int, Field(ge=1024)] = DEFAULT_MAX_OUTPUT_BYTES


class KubernetesRunnerConfig(_Strict):
    """The `kubernetes` runner: one batch/v1 Job per task."""

    namespace: str = "default"
    # A kubeconfig file; none: in-cluster config, then the default kubeconfig.
    kubeconfig: str | None = None
    image: str | None = None
    command: list[str] | None = None
    service_account: str | None = None
    resources: dict[str, Any] | None = None
    env: Environment = Field(default_factory=dict)
    ttl_seconds_after_finished: Annotated[int, Field(ge=0, le=engine_config.MAX_SECONDS)] = 3600
    job: dict[str, Any] | None = None

    @field_validator("command")
    @classmethod
    def _fillable(cls, command: list[str] | None) -> list[str] | None:
        check_argv_template(command)
        return command


class RunnersConfig(_Strict):
    """The runners' settings."""

    command: CommandRunnerConfig = CommandRunnerConfig()
    kubernetes: KubernetesRunnerConfig | None = None


class GrafanaConfig(_Strict):
    """`POST /api/webhooks/grafana`: firing alert groups become `incident` tasks."""

    kind: Name = "incident"
    project_label: str = "project"
    default_project: Annotated[ProjectPath, Field(max_length=512)] | None = None
    cooldown_seconds: SecondsOrZero = 600.0
    # An environment variable holding a shared secret Grafana sends as its Bearer token.
    secret_env: str | None = None


class ScheduleConfig(_Strict):
    """A cron schedule producing autonomous tasks of one kind for one project."""

    project: Annotated[ProjectPath, Field(max_length=512)]
    kind: Name
    cron: Annotated[str, Field(min_length=1)]
    repository: Annotated[ProjectPath, Field(max_length=512)] | None = None
    payload: dict[str, Any] = Field(default_factory=dict)

    @field_validator("payload")
    @classmethod
    def _keys_of_its_own(cls, payload: dict[str, Any]) -> dict[str, Any]:
        taken = sorted(SCHEDULE_KEYS & payload.keys())
        if taken:
            raise ValueError(f"{', '.join(taken)}: set by the schedule on each task it makes")
        return payload


# What a schedule adds to the payload of each task it makes.
SCHEDULE_KEYS = frozenset({"source", "tick"})


class IssueRule(_Strict):
    """A GitLab issue or note event mapped to a kind."""

    event: Literal["issue_label_added", "mr_note_mention"]
    kind: Name
    label: str | None = None
    handle: str | None = None
    # wq's project for the task; default: the repository's group.
    project: str | None = None


def _demo_kinds() -> dict[str, KindConfig]:
    demo = [sys.executable, "-m", "wq.types.task.demo"]
    return {
        "echo": KindConfig(scope="project", command=[*demo, "echo"], timeout_seconds=60),
        "sleep": KindConfig(
            scope="project",
            command=[*demo, "sleep"],
            timeout_seconds=3600,
            payload_schema={
                "type": "object",
                # Bounded: 1e308 passed, and the task failed with time.sleep's traceback.
                "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": MAX_SECONDS}},
            },
        ),
        "count": KindConfig(
            scope="project",
            command=[*demo, "count"],
            timeout_seconds=3600,
            payload_schema={
                "type": "object",
                "properties": {"to": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}},
            },
        ),
    }


class TaskSettings(_Strict):
    """Settings of the `task` type."""

    kinds: dict[Name, KindConfig] = Field(default_factory=_demo_kinds)
    runners: RunnersConfig = RunnersConfig()
    poll_interval_seconds: Seconds = 2.0
    log_tail_bytes: Annotated[int, Field(gt=0, le=1_000_000)] = 4000
    gc_after_seconds: Seconds = 86400.0
    gc_interval_seconds: Seconds = 60.0
    start_backoff_seconds: Seconds = 5.0
    # Starts that fail in a row (a program missing, a cluster refusing the Job) before
    # the task fails with the start error instead of waiting in the queue for ever.
    max_start_failures: Count = 5
    grafana: GrafanaConfig | None = None
    schedules: list[ScheduleConfig] = Field(default_factory=list)
    schedule_interval_seconds: Seconds = 30.0
    issue_rules: list[IssueRule] = Field(default_factory=list)

    def kind(self, name: str) -> KindConfig:
        """The configuration of a kind (KeyError when unknown)."""
        return self.kinds[name]


def _fail(prefix: str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{prefix}.{key}: {message}")


def _kubernetes_problems(
    kubernetes: KubernetesRunnerConfig, kinds: dict[str, KindConfig]
) -> Iterator[tuple[str, str]]:
    """(key, problem) for what the API server would refuse on every start of a Job."""
    if kubernetes.resources is not None:
        yield from resources_problems(kubernetes.resources, "runners.kubernetes.resources")
    templates = [("runners.kubernetes.job", kubernetes.job)]
    templates += [(f"kinds.{name}.job", kind.job) for name, kind in kinds.items()]
    for key, template in templates:
        if template:
            yield from template_problems(template, key, kubernetes.namespace)


def parse_settings(data: dict[str, Any], *, source: str = "") -> TaskSettings:
    """Validate `handled_types.task`; errors name the key at fault (fail closed)."""
    prefix = f"config {source}: handled_types.task"
    try:
        settings = TaskSettings.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"{prefix}.{key}: {validation_reason(first)}") from None
    for name, kind in settings.kinds.items():
        if kind.runner == "command" and not kind.command:
            raise _fail(prefix, f"kinds.{name}.command", "the command runner needs an argv")
        if kind.runner == "kubernetes":
            kubernetes = settings.runners.kubernetes
            if kubernetes is None:
                raise _fail(prefix, f"kinds.{name}.runner", "runners.kubernetes is not configured")
            # Without an image every start would fail and be retried for ever.
            if not kubernetes.image and not (kind.job or {}).get("image"):
                raise _fail(
                    prefix, f"kinds.{name}.job.image", "no image (nor runners.kubernetes.image)"
                )
    kubernetes = settings.runners.kubernetes
    if kubernetes is not None:
        refused = next(_kubernetes_problems(kubernetes, settings.kinds), None)
        if refused is not None:
            raise _fail(prefix, *refused)
    grafana = settings.grafana
    if grafana is not None:
        if grafana.kind not in settings.kinds:
            raise _fail(prefix, "grafana.kind", f"unknown kind {grafana.kind!r}")
        if settings.kinds[grafana.kind].scope != "project":
            raise _fail(prefix, "grafana.kind", "the incident kind must be project-scoped")
        problem = secret_problem(grafana.secret_env) if grafana.secret_env else None
        if problem:
            raise _fail(prefix, "grafana.secret_env", problem)
    for index, schedule in enumerate(settings.schedules):
        where = f"schedules.{index}"
        if schedule.kind not in settings.kinds:
            raise _fail(prefix, f"{where}.kind", f"unknown kind {schedule.kind!r}")
        scoped = settings.kinds[schedule.kind].scope == "repository"
        if scoped != (schedule.repository is not None):
            raise _fail(prefix, f"{where}.repository", scope_message(schedule.kind, scoped))
        from croniter import croniter

        if not croniter.is_valid(schedule.cron):
            raise _fail(prefix, f"{where}.cron", f"not a cron expression: {schedule.cron!r}")
        # Checked as each tick's task will be, with what the schedule adds to it.
        example = {**schedule.payload, "source": "schedule", "tick": "2026-01-01T00:00:00+00:00"}
        problems = settings.kinds[schedule.kind].payload_problems(example)
        if problems:
            reason = f"{problems[0]} (the kind's payload_schema, with `source` and `tick` added)"
            raise _fail(prefix, f"{where}.payload", reason)
    for index, rule in enumerate(settings.issue_rules):
        where = f"issue_rules.{index}"
        if rule.kind not in settings.kinds:
            raise _fail(prefix, f"{where}.kind", f"unknown kind {rule.kind!r}")
        if settings.kinds[rule.kind].scope != "repository":
            raise _fail(prefix, f"{where}.kind", "GitLab rules need a repository-scoped kind")
        if rule.event == "issue_label_added" and not rule.label:
            raise _fail(prefix, f"{where}.label", "issue_label_added needs a label")
        if rule.event == "mr_note_mention" and not rule.handle:
            raise _fail(prefix, f"{where}.handle", "mr_note_mention needs a handle")
    return settings


def missing_on_this_host(settings: TaskSettings) -> list[str]:
    """Warnings for what command-runner kinds need and this host lacks: their program, or
    the runner's `workdir` (a task of such a kind could never start here). A program named
    by a placeholder is not checked: it is only known per task."""
    found = []
    workdir = settings.runners.command.workdir
    runs_commands = any(kind.runner == "command" for kind in settings.kinds.values())
    if runs_commands and workdir is not None and not os.path.isdir(workdir):
        found.append(f"runners.command.workdir: directory {workdir!r} not found on this host")
    for name, kind in settings.kinds.items():
        if kind.runner != "command" or not kind.command or "{" in kind.command[0]:
            continue
        program = kind.command[0]
        if "/" in program:
            usable = os.path.isfile(program) and os.access(program, os.X_OK)
        else:
            usable = shutil.which(program) is not None
        if not usable:
            found.append(f"kinds.{name}.command: program {program!r} not found on this host")
    return found


def scope_message(kind: str, repository_scoped: bool) -> str:
    """Why a repository is required or refused for a kind."""
    if repository_scoped:
        return f"kind {kind!r} is repository-scoped: a repository is required"
    return f"kind {kind!r} is project-scoped: a repository must not be given"
