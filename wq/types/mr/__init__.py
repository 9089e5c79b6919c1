"""The `mr` work-item type: GitLab merge requests through their whole lifecycle."""

from __future__ import annotations

from typing import Any

from wq.engine.registry import ItemType, Submission, TypeRegistry

# Why the embedded default (no config file) leaves this type out: with no GitLab
# project configured it would refuse every submission.
NEEDS_CONFIG = "it needs GitLab projects and their tokens (handled_types.mr.projects)"


def register(registry: TypeRegistry, settings: dict[str, Any], *, source: str = "") -> None:
    """Register the `mr` type with its settings from `handled_types.mr`."""
    from wq.types.mr.decider import decide
    from wq.types.mr.events import ORDERED_EVENTS, handle, lookup, resolve
    from wq.types.mr.executors import EXECUTORS
    from wq.types.mr.models import MrItem
    from wq.types.mr.schemas import submission_schema
    from wq.types.mr.settings import parse_settings
    from wq.types.mr.upsert import retry_veto, submit_mr, unchanged_check

    parsed = parse_settings(settings, source=source)
    registry.register_type(
        ItemType(
            name="mr",
            model=MrItem,
            decider=decide,
            executors=EXECUTORS,
            event_handler=handle,
            event_resolver=resolve,
            event_query=lookup,
            ordered_events=ORDERED_EVENTS,
            submission=Submission(
                schema=submission_schema(parsed),
                project_of=lambda payload: payload.project,
                handle=lambda session, payload, ctx: submit_mr(session, payload, ctx, parsed),
                unchanged=unchanged_check(parsed),
                # Bounded per file and in count by the schema, never listed.
                self_bounded=frozenset({"file_actions"}),
            ),
            settings=parsed,
            retry_veto=retry_veto,
            # A git push GitLab still processes when the daemon exits must not meet
            # another replica's push: leases outlive the exit by this much.
            request_timeout_seconds=parsed.request_timeout_seconds,
        )
    )
