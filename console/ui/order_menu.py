"""The order menu (htop's F6): the process panel's orders (console/output/rows.py SORTS), each
flat order also reversed ("-memory": the least GPU memory first)."""
from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from console.output.rows import order_words, orders
from console.ui import keys
from console.ui.text import LiteralOptionList, LiteralStatic, literal


class OrderMenu(ModalScreen[str | None]):
    """Dismisses with the chosen order ("memory", "-pid", "tree"), or None."""
    BINDINGS = keys.bindings("order-menu")

    def __init__(self, current: str) -> None:
        super().__init__()
        self._current = current

    def compose(self) -> ComposeResult:
        with Vertical(classes="prompt"):
            yield LiteralStatic(literal("Order the processes", "bold"))
            yield LiteralStatic(literal("enter chooses, escape cancels (the cursor stays on its process)", "dim"))
            options = []
            for order in orders():
                label = Text(("● " if order == self._current else "  ") + order_words(order))
                options.append(Option(label, id=order))
            yield LiteralOptionList(*options, id="orders")

    def on_mount(self) -> None:
        menu = self.query_one("#orders", OptionList)
        menu.highlighted = orders().index(self._current) if self._current in orders() else 0
        menu.focus()

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
