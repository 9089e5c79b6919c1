"""The `mr_details` table: what a merge request work item wants on GitLab."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from wq.engine.models import JsonDoc, WorkItem


class MrItem(WorkItem):
    """A merge request work item (joined-table inheritance on `work_items`)."""

    __tablename__ = "mr_details"

    id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("work_items.id", ondelete="CASCADE"), primary_key=True
    )
    package: Mapped[str | None] = mapped_column(String(255))
    source: Mapped[str | None] = mapped_column(String(255))
    change_kind: Mapped[str | None] = mapped_column(String(64))
    source_branch: Mapped[str] = mapped_column(String(255))
    target_branch: Mapped[str] = mapped_column(String(255))
    title: Mapped[str] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text, default="")
    labels: Mapped[list[str]] = mapped_column(JsonDoc)
    # The labels this service put on the MR and may take off again when the caller no
    # longer asks for them; a label someone else added is never ours to remove.
    applied_labels: Mapped[list[str]] = mapped_column(
        JsonDoc, default=list, server_default=text("'[]'")
    )
    commit_message: Mapped[str] = mapped_column(Text)
    file_actions: Mapped[list[dict[str, Any]]] = mapped_column(JsonDoc)
    content_hash: Mapped[str] = mapped_column(String(64))
    generation: Mapped[int] = mapped_column(Integer, default=0)
    draft: Mapped[bool] = mapped_column(Boolean, default=False)
    auto_merge: Mapped[bool] = mapped_column(Boolean, default=False)
    mr_iid: Mapped[int | None] = mapped_column(Integer)
    mr_url: Mapped[str | None] = mapped_column(Text)
    head_pipeline_id: Mapped[int | None] = mapped_column(BigInteger)

    # The file contents can be large; `details` shows none of these.
    api_unshown = ("description", "commit_message", "file_actions", "applied_labels")
    # What a submission asks for: when any of them changes, the MR is brought to it again.
    submitted_columns = (
        "content_hash",
        "target_branch",
        "title",
        "description",
        "commit_message",
        "labels",
        "package",
        "source",
        "change_kind",
        "auto_merge",
    )

    api_details_columns = (
        "package",
        "source",
        "change_kind",
        "source_branch",
        "target_branch",
        "title",
        "labels",
        "content_hash",
        "generation",
        "draft",
        "auto_merge",
        "mr_iid",
        "mr_url",
        "head_pipeline_id",
    )

    __mapper_args__ = {  # noqa: RUF012 (SQLAlchemy's declared attribute)
        "polymorphic_identity": "mr",
        "polymorphic_load": "selectin",
    }
    __table_args__ = (
        Index("ix_mr_details_branch", "source_branch"),
        Index("ix_mr_details_mr_iid", "mr_iid"),  # events resolve by (project, iid)
    )

    @classmethod
    def details_of(cls, source: Any) -> dict[str, Any]:
        """The `details` the API shows (from an item or a row of `api_details_columns`)."""
        return {
            "package": source.package,
            "source": source.source,
            "change_kind": source.change_kind,
            "source_branch": source.source_branch,
            "target_branch": source.target_branch,
            "title": source.title,
            "labels": source.labels,
            "content_hash": source.content_hash,
            "generation": source.generation,
            "draft": source.draft,
            "auto_merge": source.auto_merge,
            "mr_iid": source.mr_iid,
            "mr_url": source.mr_url,
            "head_pipeline_id": source.head_pipeline_id,
        }
