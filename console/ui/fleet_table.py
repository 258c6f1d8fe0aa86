"""The fleet table: thousands of nodes, one line each, drawn a screenful at a time.

A ScrollView on Textual's line API: ``render_line`` builds only the lines on screen, so a key
costs the same with 4096 nodes as with 4 (a DataTable would hold, measure and sort every row).
The rows are console/output/fleet_rows.py's; every cell goes through console/ui/text.py
(hostnames, suspicion texts come from a source and are shown literally). The cursor stays on
its node across refreshes once the operator has moved it; until then it stays on the first
row, the top suspect.
"""
from __future__ import annotations

from typing import Callable, Sequence

from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.model import FleetNode
from console.output.fleet_rows import FleetRow, fleet_row, gib_text, pct_text
from console.ui import keys
from console.ui.text import literal, printable

#: fixed columns: (header, width, right-aligned)
GPUS = ("GPUs", 4)
MEMORY = ("GiB used/total", 14)
UTIL = ("Util", 4)
XID = ("Xid", 4)
NODE_MIN, NODE_MAX = 8, 28
SUSPICION_MIN = 12
#: what the Suspicion cell of a node opened from the fleet starts with
OPENED = "(opened) "


def column_widths(width: int, longest_name: int) -> tuple[int, int]:
    """(node column, suspicion column) for a line of ``width`` cells: the node column as wide
    as the longest hostname within [NODE_MIN, NODE_MAX], the suspicion column the rest."""
    fixed = GPUS[1] + MEMORY[1] + UTIL[1] + XID[1] + 5           # five gaps of one cell
    node = max(NODE_MIN, min(NODE_MAX, longest_name, width - fixed - SUSPICION_MIN))
    return node, max(0, width - fixed - node)


class FleetTable(ScrollView, can_focus=True):
    COMPONENT_CLASSES = {"fleet-table--header", "fleet-table--cursor", "fleet-table--suspect"}
    DEFAULT_CSS = """
    FleetTable { height: 1fr; overflow-x: hidden; }
    FleetTable > .fleet-table--header { text-style: bold; background: $panel; }
    FleetTable > .fleet-table--cursor { background: $block-cursor-background; color: $block-cursor-foreground; }
    FleetTable:blur > .fleet-table--cursor { background: $block-cursor-blurred-background; }
    FleetTable > .fleet-table--suspect { color: $error; text-style: bold; }
    """
    BINDINGS = keys.bindings("fleet") + keys.bindings("tables") + [b for b in keys.bindings("table-moves") if b.id != "table-select"]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.nodes: list[FleetNode] = []
        self._rows: dict[int, FleetRow] = {}       # built as lines are drawn
        self._longest = NODE_MIN
        self.cursor = 0
        self.user_moved = False
        self.stale = False
        self.empty_text = "waiting for the first answer…"
        #: called with the node under the cursor when it changes (the fleet screen's detail lines)
        self.on_highlight: Callable[[FleetNode | None], None] | None = None
        #: Hostnames opened from the fleet (the screen's set): their rows say so
        self.opened: set[str] = set()

    # ------------------------------------------------------------------ data
    def show(self, nodes: Sequence[FleetNode], *, stale: bool = False, empty_text: str | None = None) -> None:
        """The rows, in the order given; the cursor stays on its node once the operator moved it."""
        current = self.current
        self.nodes = list(nodes)
        self._rows = {}
        self._longest = max((len(h) if h.isprintable() else len(printable(h))
                             for h in (n.hostname for n in self.nodes)), default=NODE_MIN)
        self.stale = stale
        if empty_text is not None:
            self.empty_text = empty_text
        index = 0
        if self.user_moved and current is not None:
            index = next((i for i, n in enumerate(self.nodes) if n.hostname == current.hostname),
                         min(self.cursor, len(self.nodes) - 1))
        self.virtual_size = Size(self.size.width, len(self.nodes) + 1)
        self._move(max(0, index), announce=current is None or self.current is None
                   or self.current.hostname != current.hostname or self.current is not current)
        self.refresh()

    @property
    def current(self) -> FleetNode | None:
        return self.nodes[self.cursor] if 0 <= self.cursor < len(self.nodes) else None

    def row(self, index: int) -> FleetRow:
        got = self._rows.get(index)
        if got is None:
            got = self._rows[index] = fleet_row(self.nodes[index])
        return got

    # ------------------------------------------------------------------ the cursor
    @property
    def _page(self) -> int:
        return max(1, self.size.height - 1)          # the header line stays

    def _move(self, index: int, announce: bool = True) -> None:
        index = max(0, min(index, len(self.nodes) - 1)) if self.nodes else 0
        old = self.cursor
        self.cursor = index
        top = int(self.scroll_offset.y)
        if index < top:
            self.scroll_to(y=index, animate=False, immediate=True)
        elif index >= top + self._page:
            self.scroll_to(y=index - self._page + 1, animate=False, immediate=True)
        if old != index:
            self._refresh_row(old)
            self._refresh_row(index)
        if announce and self.on_highlight is not None:
            # called, not messaged: the lines below the table change in the same frame as the
            # cursor (a message took a frame more: key->frame p50 37 ms -> 10 ms, bench)
            self.on_highlight(self.current)

    def _refresh_row(self, index: int) -> None:
        y = index - int(self.scroll_offset.y) + 1
        if 1 <= y < self.size.height:
            self.refresh_line(y)

    def _user(self, index: int) -> None:
        self.user_moved = True
        if index != self.cursor:
            self._move(index)

    def action_cursor_up(self) -> None:
        self._user(self.cursor - 1)

    def action_cursor_down(self) -> None:
        self._user(self.cursor + 1)

    def action_page_up(self) -> None:
        self._user(self.cursor - self._page)

    def action_page_down(self) -> None:
        self._user(self.cursor + self._page)

    def action_scroll_top(self) -> None:
        self._user(0)

    def action_scroll_bottom(self) -> None:
        self._user(len(self.nodes) - 1)

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_offset.y) + event.y - 1
        if event.y >= 1 and 0 <= index < len(self.nodes):
            self._user(index)

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.nodes) + 1)
        self._move(self.cursor, announce=False)

    # ------------------------------------------------------------------ drawing
    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        node_w, why_w = column_widths(width, self._longest)
        if y == 0:
            return self._strip(self._header(node_w, why_w), width, self.get_component_rich_style("fleet-table--header"))
        index = int(self.scroll_offset.y) + y - 1
        if not self.nodes:
            return self._strip(literal(self.empty_text, "dim"), width) if y == 1 else Strip.blank(width)
        if index >= len(self.nodes):
            return Strip.blank(width)
        text = self._line(self.row(index), node_w, why_w)
        style = self.get_component_rich_style("fleet-table--cursor") if index == self.cursor else None
        return self._strip(text, width, style)

    def _header(self, node_w: int, why_w: int) -> Text:
        line = Text(no_wrap=True)
        line.append(f"{'Node':<{node_w}} {GPUS[0]:>{GPUS[1]}} {MEMORY[0]:>{MEMORY[1]}} "
                    f"{UTIL[0]:>{UTIL[1]}} {XID[0]:>{XID[1]}} ")
        line.append("Suspicion" + (" (stale: last data kept)" if self.stale else ""))
        return line

    def _line(self, r: FleetRow, node_w: int, why_w: int) -> Text:
        suspect = self.get_component_rich_style("fleet-table--suspect", partial=True) if r.suspicion else None
        line = Text(no_wrap=True, style="dim" if self.stale else "")
        name = printable(r.hostname, node_w)
        line.append(f"{name:<{node_w}}", style=suspect or "")
        line.append(f" {r.gpus:>{GPUS[1]}} {gib_text(r.used_gib, r.total_gib):>{MEMORY[1]}} "
                    f"{pct_text(r.util_pct):>{UTIL[1]}} {('-' if r.last_xid is None else str(r.last_xid)):>{XID[1]}} ")
        why = " ".join(r.suspicion.split()) if r.suspicion else ""
        if r.hostname in self.opened:
            line.append(OPENED, style="bold cyan")
            why_w = max(0, why_w - len(OPENED))
        if why and why_w:
            line.append(printable(why, why_w), style=suspect or "")
        return line

    def _strip(self, text: Text, width: int, style: Style | None = None) -> Strip:
        text.truncate(width, overflow="ellipsis", pad=True)
        strip = Strip(list(text.render(self.app.console)), width)
        if style is not None:
            strip = strip.apply_style(style)
        return strip.simplify()

