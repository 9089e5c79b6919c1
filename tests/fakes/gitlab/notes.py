"""Merge request notes API."""

from __future__ import annotations

from typing import Any

from tests.fakes.gitlab.api import Ctx, Response, message_error, not_found, ok, route
from tests.fakes.gitlab.state import GitLabState, MergeRequest, Note, Project, now_iso


class NotesMixin(GitLabState):
    """The Notes API of merge requests."""

    def _note(self, ctx: Ctx, mr: MergeRequest) -> Note:
        note_id = ctx.arg_int("note_id")
        note = next((n for n in mr.notes if n.id == note_id), None)
        if note is None:
            raise not_found("Note")
        return note

    def _note_json(self, project: Project, mr: MergeRequest, note: Note) -> dict[str, Any]:
        return {
            "id": note.id,
            "type": None,
            "body": note.body,
            "author": self._user_json(note.author),
            "created_at": note.created_at,
            "updated_at": note.updated_at,
            "system": note.system,
            "noteable_id": mr.id,
            "noteable_type": "MergeRequest",
            "project_id": project.id,
            "resolvable": False,
            "confidential": note.internal,
            "internal": note.internal,
            "imported": False,
            "imported_from": "none",
            "noteable_iid": mr.iid,
            "commands_changes": {},
        }

    @route("GET", "projects/:project/merge_requests/:iid/notes")
    def _list_notes(self, ctx: Ctx) -> Response:
        mr = self._mr(ctx)
        order_by = ctx.get("order_by", "created_at")
        ascending = ctx.get("sort", "desc") == "asc"
        notes = sorted(
            mr.notes, key=lambda n: (getattr(n, order_by, n.created_at), n.id),
            reverse=not ascending,
        )  # fmt: skip
        return self._paginate(ctx, [self._note_json(ctx.proj, mr, note) for note in notes])

    @route("POST", "projects/:project/merge_requests/:iid/notes")
    def _create_note(self, ctx: Ctx) -> Response:
        mr = self._mr(ctx)
        body = ctx.require("body")
        internal = bool(ctx.flag("internal", False) or ctx.flag("confidential", False))
        now = now_iso()
        note = Note(next(self._counters["note"]), body, ctx.token.user, internal, False, now, now)
        mr.notes.append(note)
        return ok(self._note_json(ctx.proj, mr, note), 201)

    @route("GET", "projects/:project/merge_requests/:iid/notes/:note_id")
    def _get_note(self, ctx: Ctx) -> Response:
        mr = self._mr(ctx)
        return ok(self._note_json(ctx.proj, mr, self._note(ctx, mr)))

    @route("PUT", "projects/:project/merge_requests/:iid/notes/:note_id")
    def _update_note(self, ctx: Ctx) -> Response:
        mr = self._mr(ctx)
        note = self._note(ctx, mr)
        if note.system:
            raise message_error(403, "403 Forbidden")
        note.body = ctx.require("body")
        note.updated_at = now_iso()
        return ok(self._note_json(ctx.proj, mr, note))

    @route("DELETE", "projects/:project/merge_requests/:iid/notes/:note_id")
    def _delete_note(self, ctx: Ctx) -> Response:
        mr = self._mr(ctx)
        note = self._note(ctx, mr)
        mr.notes.remove(note)
        return ok(b"", 204)
