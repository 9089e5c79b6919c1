"""Modal dialogs: a yes/no confirmation and a one-line prompt (`:` commands, `/` filter)."""

from __future__ import annotations

from typing import TypeVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

Answer = TypeVar("Answer")


class Dialog(ModalScreen[Answer]):
    """A modal screen that closes with its first answer: a key behind it in the same
    burst (enter or esc pressed twice) finds it closing and is dropped, where a second
    `dismiss` would pop the view under it (Textual's `ScreenStackError`, a crash)."""

    _answered = False

    def answer_once(self, answer: Answer | None) -> None:
        """Close with `answer`, unless an answer was given already."""
        if not self._answered:
            self._answered = True
            self.dismiss(answer)

    async def action_dismiss(self, result: Answer | None = None) -> None:
        """The `dismiss` of a key binding (esc, q): closes once, as `answer_once`."""
        self.answer_once(result)


class ConfirmScreen(Dialog[bool]):
    """Ask before anything that changes state; `y` or Yes confirms, `n`/`esc` declines."""

    BINDINGS = [  # noqa: RUF012
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Grid(id="confirm"):
            yield Label(self.question, id="question", markup=False)
            with Horizontal(id="buttons"):
                yield Button("Yes (y)", variant="warning", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.answer_once(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.answer_once(yes)


class PromptScreen(Dialog[str | None]):
    """One line of input at the bottom; enter returns it, esc returns None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]  # noqa: RUF012

    def __init__(self, prefix: str, value: str = "") -> None:
        super().__init__()
        self.prefix = prefix
        self.value = value

    def compose(self) -> ComposeResult:
        with Horizontal(id="prompt"):
            yield Label(self.prefix, id="prompt-prefix", markup=False)
            # The text given is there to be edited (`f` puts the filters in use): the
            # cursor after it, nothing selected for the first key to replace.
            yield Input(self.value, id="prompt-input", select_on_focus=False)

    def on_key(self, event: events.Key) -> None:
        """A key typed in one burst with the one that opened the prompt (a paste, a
        fast typist) comes before its line has the focus: it goes into the line all the
        same, and `enter` submits it."""
        line = next(self.query("#prompt-input").results(Input), None)
        if line is None or line.has_focus:
            return
        event.stop()
        if event.key == "enter":
            self.answer_once(line.value)
        elif event.is_printable and event.character:
            line.insert_text_at_cursor(event.character)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.answer_once(event.value)

    def action_cancel(self) -> None:
        """Close without an answer."""
        self.answer_once(None)
