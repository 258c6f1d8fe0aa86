"""The main screen's tables, each with the keys that act on it (console/ui/keys.py scopes):
t/k/space/F9 belong to the process panel, F/R/B to the GPU panel, x to the findings; Home/End
go to the first/last row in every table."""
from __future__ import annotations

from textual import events

from console.ui import keys
from console.ui.text import LiteralTable
from console.ui.virtual_table import VirtualTable


class PanelTable(LiteralTable):
    BINDINGS = keys.bindings("tables")


class NodeTable(PanelTable):
    """The node table. Until the operator moves its cursor, the console keeps it on the node
    in the most trouble (the first row); after that it stays on the node chosen."""

    user_moved = False

    def _moved(self) -> None:
        self.user_moved = True

    def action_cursor_up(self) -> None:
        self._moved()
        super().action_cursor_up()

    def action_cursor_down(self) -> None:
        self._moved()
        super().action_cursor_down()

    def action_page_up(self) -> None:
        self._moved()
        super().action_page_up()

    def action_page_down(self) -> None:
        self._moved()
        super().action_page_down()

    def action_scroll_top(self) -> None:
        self._moved()
        super().action_scroll_top()

    def action_scroll_bottom(self) -> None:
        self._moved()
        super().action_scroll_bottom()

    async def _on_click(self, event: events.Click) -> None:
        self._moved()
        await super()._on_click(event)


class GpuTable(PanelTable):
    BINDINGS = keys.bindings("gpus")

    def watch_scroll_y(self, old: float, new: float) -> None:
        """The memory chart beside it scrolls with it (its rows line up with the table's)."""
        super().watch_scroll_y(old, new)
        for chart in self.app.query("#gpu-chart"):
            chart.scroll_to_row(round(new))


class ProcTable(VirtualTable):
    """The process panel: a real-size node's 2,000 rows drawn only where they show
    (console/ui/virtual_table.py)."""
    BINDINGS = keys.bindings("tables") + keys.bindings("procs")


class FindingTable(PanelTable):
    BINDINGS = keys.bindings("findings")
