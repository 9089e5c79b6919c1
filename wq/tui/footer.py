"""The views' footer: when its keys do not fit the width, the least needed are left out.

Textual's footer cuts whatever passes the right edge, which is `? Help` and `q Quit`
first, the keys a new user looks for. This one leaves keys out in a fixed order instead
(the command palette's, `:`, copy, the view keys, sort, mark, then the view's own from
the right) until the rest fit whole; `? Help` and `q Quit` always stay, `?` lists every
key of the view, and every key still works.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

from textual import events
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel, KeyGroup

# Looks for a laid-out footer at most this many refreshes in a row.
MAX_WAITS = 5


def _action_name(action: str) -> str:
    """`view('pools')` -> `view`; `app.command` -> `command`."""
    return action.split("(", 1)[0].rsplit(".", 1)[-1]


def _actions(entry: Widget) -> set[str]:
    """The actions a footer entry shows: a key's, or those of a group's keys."""
    keys = [entry] if isinstance(entry, FooterKey) else list(entry.query(FooterKey))
    return {_action_name(key.action) for key in keys if isinstance(key, FooterKey)}


class FittingFooter(Footer):
    """A footer that leaves out its least needed keys, in order, until the rest fit."""

    # Actions whose keys go first when the footer is too narrow, in that order.
    LEAVE_OUT: ClassVar[tuple[str, ...]] = (
        "command_palette",
        "command",
        "copy",
        "view",
        "sort",
        "mark",
    )
    # Actions whose keys always stay.
    KEEP: ClassVar[frozenset[str]] = frozenset({"help", "quit"})

    _fitting: object | None = None  # the fit under way; a newer one replaces it

    async def recompose(self) -> None:
        """Make the keys anew (the bindings changed), then fit them."""
        await super().recompose()
        self._refit()

    def on_resize(self, event: events.Resize) -> None:
        """A new width: fit again from every key."""
        self._refit()

    def _refit(self) -> None:
        """Show every entry, then, once they are laid out, leave out what does not fit."""
        for child in self.children:
            child.display = True
        self._fitting = fitting = object()
        self.call_after_refresh(self._fit, fitting)

    def _fit(self, fitting: object, waited: int = 0) -> None:
        """Leave out entries, in `LEAVE_OUT` order then from the right, until the shown
        ones end before the palette's key (or the edge, once it is left out)."""
        if fitting is not self._fitting or not self.is_attached:
            return  # a newer fit replaced this one (its entries' places are stale)
        entries = list(self.children)
        if any(not entry.region.width for entry in entries):
            if waited < MAX_WAITS:  # not laid out yet
                self.call_after_refresh(self._fit, fitting, waited + 1)
            return
        self._fitting = None
        palette = next((e for e in entries if e.has_class("-command-palette")), None)
        row = [entry for entry in entries if entry is not palette]
        if not row:
            return
        limit = palette.region.x if palette is not None else self.region.right
        end = row[-1].region.right
        # What leaving an entry out gains: from its start to the next one's.
        spans = {
            entry: following.region.x - entry.region.x
            for entry, following in itertools.pairwise(row)
        }
        spans[row[-1]] = row[-1].region.width
        for unit in self._leaving_order(entries):
            if end <= limit:
                return
            for entry in unit:
                entry.display = False
                if entry is palette:
                    limit = self.region.right
                else:
                    end -= spans[entry]

    def _leaving_order(self, entries: list[Widget]) -> list[list[Widget]]:
        """The shown entries in the order they are left out (`KEEP`'s never); a group
        of keys goes with its label, which Textual yields right after it."""
        keys = [entry for entry in entries if isinstance(entry, FooterKey | KeyGroup)]
        named = [e for name in self.LEAVE_OUT for e in keys if name in _actions(e)]
        rest = [e for e in reversed(keys) if e not in named and not _actions(e) & self.KEEP]
        units: list[list[Widget]] = []
        for entry in dict.fromkeys(named + rest):
            unit: list[Widget] = [entry]
            after = entries.index(entry) + 1
            if (
                isinstance(entry, KeyGroup)
                and after < len(entries)
                and isinstance(entries[after], FooterLabel)
            ):
                unit.append(entries[after])
            units.append(unit)
        return units
