"""Git-like blob ids and GitLab-shaped diff entries between two file trees."""

from __future__ import annotations

import difflib
import hashlib
from typing import Any


def blob_sha(content: bytes) -> str:
    """The git blob id of `content`."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def _is_binary(content: bytes | None) -> bool:
    if not content:
        return False
    if b"\0" in content:
        return True
    try:
        content.decode()
    except UnicodeDecodeError:
        return True
    return False


def _diff_text(old: bytes | None, new: bytes | None) -> str:
    """A unified diff body as GitLab's API returns it (no ---/+++ header lines)."""
    if _is_binary(old) or _is_binary(new):
        return "Binary files differ\n"
    old_text = (old or b"").decode()
    new_text = (new or b"").decode()
    lines = list(
        difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), lineterm="", n=3)
    )[2:]
    if lines and new_text and not new_text.endswith("\n"):
        lines.append("\\ No newline at end of file")
    return "\n".join(lines) + "\n" if lines else ""


def line_stats(diff: str) -> tuple[int, int]:
    """Added and removed line counts of a diff body."""
    added = removed = 0
    for line in diff.splitlines():
        if line.startswith("+"):
            added += 1
        elif line.startswith("-"):
            removed += 1
    return added, removed


def tree_diff(old: dict[str, bytes], new: dict[str, bytes]) -> list[dict[str, Any]]:
    """GitLab's diff entries between two trees; exact renames are detected as renames."""
    removed = sorted(path for path in old if path not in new)
    added = sorted(path for path in new if path not in old)
    entries: list[dict[str, Any]] = []
    for path in list(added):
        source = next((p for p in removed if old[p] == new[path]), None)
        if source is not None:
            removed.remove(source)
            added.remove(path)
            entries.append(_diff_entry(source, path, old[source], new[path], renamed=True))
    entries.extend(_diff_entry(path, path, None, new[path], new_file=True) for path in added)
    entries.extend(_diff_entry(path, path, old[path], None, deleted=True) for path in removed)
    entries.extend(
        _diff_entry(path, path, old[path], new[path])
        for path in old
        if path in new and old[path] != new[path]
    )
    return sorted(entries, key=lambda entry: entry["new_path"])


def _diff_entry(
    old_path: str,
    new_path: str,
    old: bytes | None,
    new: bytes | None,
    *,
    new_file: bool = False,
    deleted: bool = False,
    renamed: bool = False,
) -> dict[str, Any]:
    return {
        "old_path": old_path,
        "new_path": new_path,
        "a_mode": "0" if new_file else "100644",
        "b_mode": "0" if deleted else "100644",
        "new_file": new_file,
        "renamed_file": renamed,
        "deleted_file": deleted,
        "generated_file": False,
        "diff": "" if renamed and old == new else _diff_text(old, new),
    }
