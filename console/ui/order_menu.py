"""The order menu (htop's F6): the process panel's orders (console/output/rows.py SORTS), each
flat order also reversed ("-memory": the least GPU memory first)."""
from __future__ import annotations

from rich.text import Text
from textual.widgets.option_list import Option

from console.output.rows import order_words, orders
from console.ui import keys
from console.ui.option_menu import OptionMenu


class OrderMenu(OptionMenu):
    """Dismisses with the chosen order ("memory", "-pid", "tree"), or None."""
    BINDINGS = keys.bindings("order-menu")
    menu_id = "orders"

    def __init__(self, current: str) -> None:
        super().__init__()
        self._current = current

    def heading(self) -> str:
        return "Order the processes"

    def hint_text(self) -> str:
        return "enter chooses, escape cancels (the cursor stays on its process)"

    def options(self) -> list[Option]:
        return [Option(Text(("● " if order == self._current else "  ") + order_words(order)), id=order)
                for order in orders()]

    def start(self) -> int:
        return orders().index(self._current) if self._current in orders() else 0
