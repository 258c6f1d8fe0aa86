"""Small modal screens: a line of text, the check picker, the verdict chooser."""
from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList
from textual.widgets.option_list import Option

from console.ui.text import LiteralInput, LiteralOptionList, LiteralStatic, literal, printable
from console.ui import keys


class TextPrompt(ModalScreen[str | None]):
    """One line of text; enter submits, escape cancels (None)."""
    BINDINGS = keys.bindings("prompt")

    def __init__(self, title: str, *, placeholder: str = "", value: str = "", hint: str = "") -> None:
        super().__init__()
        self._title, self._placeholder, self._value, self._hint = title, placeholder, value, hint

    def compose(self) -> ComposeResult:
        with Vertical(classes="prompt"):
            yield LiteralStatic(literal(self._title, "bold"))
            if self._hint:
                yield LiteralStatic(literal(self._hint, "dim"))
            yield LiteralInput(value=self._value, placeholder=self._placeholder)

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class CheckPicker(ModalScreen[str | None]):
    """The named checks, each with what it answers."""
    BINDINGS = keys.bindings("prompt")

    def __init__(self, checks: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self._checks = checks

    def compose(self) -> ComposeResult:
        with Vertical(classes="prompt"):
            yield LiteralStatic(literal("Run a check (enter runs it, escape cancels)", "bold"))
            options = []
            for name, description in self._checks:
                label = Text(f"{printable(name, 16):<16}", style="bold")
                label.append(printable(description))
                options.append(Option(label, id=name))
            yield LiteralOptionList(*options)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class VerdictScreen(ModalScreen[str | None]):
    """Verdict on the open hypothesis: the suggestion is preselected (enter takes it);
    c, r and i always choose explicitly; escape cancels."""
    BINDINGS = keys.bindings("verdict")

    def __init__(self, hypothesis: str, suggested: str, why: str) -> None:
        super().__init__()
        self._hypothesis, self.suggested, self._why = hypothesis, suggested, why

    def compose(self) -> ComposeResult:
        body = Text()
        body.append("Verdict on the open hypothesis\n\n", style="bold")
        body.append(printable(self._hypothesis) + "\n\n", style="italic")
        body.append("suggested: ")
        body.append(printable(self.suggested), style="bold reverse")
        if self._why:
            body.append(f"  ({printable(self._why, 120)})", style="dim")
        body.append("\n\nenter: take the suggestion   c confirmed   r refuted   i inconclusive   escape: cancel")
        with Vertical(classes="prompt"):
            yield LiteralStatic(body)

    @property
    def text(self) -> str:
        """Everything the modal shows, as plain text."""
        from console.ui.pinned import text_of
        return text_of(self)

    def action_accept(self) -> None:
        self.dismiss(self.suggested)

    def action_choose(self, verdict: str) -> None:
        self.dismiss(verdict)

    def action_cancel(self) -> None:
        self.dismiss(None)
