"""The views' footer: when its keys do not fit the width, the least needed are left out.

Textual's footer cuts whatever passes the right edge, which is `? Help` and `q Quit`
first, the keys a new user looks for. This one leaves keys out in a fixed order instead
(the command palette's, `:`, copy, the view keys, sort, mark) until the rest fit whole;
`?` still lists every key of the view, and every key still works.
"""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey, FooterLabel, KeyGroup


def _action_name(action: str) -> str:
    """`switch_mode('pools')` -> `switch_mode`; `app.command` -> `command`."""
    return action.split("(", 1)[0].rsplit(".", 1)[-1]


class FittingFooter(Footer):
    """A footer that leaves out its least needed keys, in order, until the rest fit."""

    # Actions whose keys go first when the footer is too narrow, in that order.
    LEAVE_OUT: ClassVar[tuple[str, ...]] = (
        "command_palette",
        "command",
        "copy",
        "switch_mode",
        "sort",
        "mark",
    )

    async def recompose(self) -> None:
        """Make the keys anew (the bindings changed), then fit them."""
        await super().recompose()
        self.call_after_refresh(self._fit)

    def on_resize(self, event: events.Resize) -> None:
        """A new width: start again from every key."""
        for child in self.query("FooterKey, FooterLabel, KeyGroup"):
            child.display = True
        self.call_after_refresh(self._fit)

    def _fit(self) -> None:
        """Leave out the next key in `LEAVE_OUT` order while any shown one is cut."""
        if not self.is_attached or not self._overflows():
            return
        for name in self.LEAVE_OUT:
            shown = [widget for widget in self._entries(name) if widget.display]
            if shown:
                for widget in shown:
                    widget.display = False
                self.call_after_refresh(self._fit)
                return

    def _entries(self, name: str) -> list[Widget]:
        """The widgets that show the keys of action `name`: a key, or a group of keys
        with its label."""
        found: list[Widget] = []
        for key in self.query(FooterKey):
            if _action_name(key.action) != name:
                continue
            group = key.parent
            if isinstance(group, KeyGroup):
                found.append(group)
                children = list(self.children)
                after = children[children.index(group) + 1 :]  # Textual yields its label next
                if after and isinstance(after[0], FooterLabel):
                    found.append(after[0])
            else:
                found.append(key)
        return list(dict.fromkeys(found))

    def _overflows(self) -> bool:
        """Whether a shown key or label passes the right edge or the palette's key."""
        entries = [*self.query(FooterKey), *self.query(FooterLabel)]
        palette = [e for e in entries if e.has_class("-command-palette") and e.display]
        right = min([self.region.right, *(key.region.x for key in palette)])
        return any(
            entry.display and entry.region.right > right
            for entry in entries
            if entry not in palette and not _hidden_in_group(entry)
        )


def _hidden_in_group(widget: Widget) -> bool:
    """A key whose group is left out (its own `display` stays true)."""
    parent = widget.parent
    return isinstance(parent, KeyGroup) and not parent.display
