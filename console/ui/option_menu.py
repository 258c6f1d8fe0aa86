"""A small modal menu of choices (the signal menu, F9; the order menu, F6): a title, a hint,
the options; enter dismisses with the chosen option's id, escape with None. Its key scope's
bindings come from the key table (console/ui/keys.py), as every screen's do."""
from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from console.ui.text import LiteralOptionList, LiteralStatic, literal


class OptionMenu(ModalScreen[str | None]):
    """Subclasses give ``heading``, ``hint_text``, ``options`` (with their ids), the option list's
    ``menu_id`` and which option is highlighted first (``start``)."""
    menu_id = "menu"

    def heading(self) -> str:
        raise NotImplementedError

    def hint_text(self) -> str:
        raise NotImplementedError

    def options(self) -> list[Option]:
        raise NotImplementedError

    def start(self) -> int:
        return 0

    def compose(self) -> ComposeResult:
        with Vertical(classes="prompt"):
            yield LiteralStatic(literal(self.heading(), "bold"))
            yield LiteralStatic(literal(self.hint_text(), "dim"))
            yield LiteralOptionList(*self.options(), id=self.menu_id)

    def on_mount(self) -> None:
        menu = self.query_one(f"#{self.menu_id}", OptionList)
        menu.highlighted = self.start()
        menu.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
