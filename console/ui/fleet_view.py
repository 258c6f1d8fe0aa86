"""The fleet screen (fleet mode, a ``prometheus://`` target): a header line saying where the
data comes from and how old it is, the fleet table (console/ui/fleet_table.py), the
highlighted node in full, the console's status line and the footer.

The header: the source, the data's age ("12 s ago"), the query's time, how many nodes and
suspects; when the last round failed, a second line says why and that the table shows the
last data it had (stale). Everything a source produced goes through console/ui/text.py.
"""
from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen

from console.model import FleetNode
from console.output.fleet_rows import FleetView, age_text, fleet_order, fleet_row, gib_text, matching, \
    pct_text, suspects
from console.ui.fleet_table import FleetTable
from console.ui.footer import FittedFooter
from console.ui.text import LiteralStatic, printable


def header_text(view: FleetView, source: str, now: float, *, shown: int | None = None,
                filter_text: str = "", width: int = 80) -> Text:
    """One line (two when the last round failed): source · age · query time · counts."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(printable(source, 40), style="bold")
    snap = view.shown
    if snap is None or (not snap.nodes and snap.error):
        line.append("  waiting for data" if snap is None else "  no data", style="dim")
    else:
        line.append(f"  {age_text(now - snap.taken_at)}", style="bold red" if view.stale else "")
        if snap.query_ms is not None:
            line.append(f"  query {snap.query_ms:.0f} ms", style="dim")
        nodes = snap.nodes
        line.append(f"  {len(nodes):,} nodes")
        count = suspects(nodes)
        line.append(f"  {count:,} suspect", style="bold red" if count else "green")
    if filter_text:
        line.append(f"  filter: {printable(filter_text, 24)} ({shown or 0:,} shown)", style="bold cyan")
    error = view.error
    if error:
        line.append("\n")
        why = Text("✖ ", style="bold red")
        if view.stale:          # first: what the table shows is old
            why.append(f"stale (data of {age_text(now - view.shown.taken_at)}): ", style="bold red")
        why.append(printable(" ".join(error.split())), style="bold red")
        why.truncate(max(20, width - 2), overflow="ellipsis")
        line.append_text(why)
    return line


def detail_text(node: FleetNode | None, width: int = 80, opened: bool = False) -> Text:
    """The highlighted node: its GPUs' models and pods, then why it is suspect. ``opened``: it
    is in the node list already."""
    out = Text(no_wrap=True, overflow="ellipsis")
    if node is None:
        out.append("no node under the cursor", style="dim")
        return out
    row = fleet_row(node)
    out.append(printable(node.hostname, 40), style="bold")
    if opened:
        out.append(" (opened)", style="bold cyan")
    models: dict[str, int] = {}
    for g in node.gpus:
        models[g.model or "?"] = models.get(g.model or "?", 0) + 1
    if models:
        out.append("  " + ", ".join(f"{n}× {printable(m, 40)}" for m, n in models.items()))
    out.append(f"  {gib_text(row.used_gib, row.total_gib)} GiB  util {pct_text(row.util_pct)}")
    pods = sorted({g.pod for g in node.gpus if g.pod})
    if pods:
        out.append("  pods: " + ", ".join(printable(p, 40) for p in pods[:4]) + (" …" if len(pods) > 4 else ""))
    out.truncate(max(20, width - 2), overflow="ellipsis")
    out.append("\n")
    if node.suspicion:
        out.append("suspect: " + printable(" ".join(node.suspicion.split()), max(20, width - 11)), style="bold red")
    else:
        out.append("not suspect (enter opens its console over SSH all the same)", style="dim")
    return out


class FleetScreen(Screen):
    """Installed by the app in fleet mode; ``escape`` on the node console comes back here."""

    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    #fleet-status { height: auto; max-height: 2; background: $panel; padding: 0 1; }
    #fleet-detail { height: 3; border-top: solid $primary 30%; padding: 0 1; }
    #fleet-activity { height: 1; padding: 0 1; }
    """

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source
        self.view = FleetView(None, None)
        self.filter_text = ""
        self._header_lines = 0
        self.opened: set[str] = set()          # Hostnames opened from here (in the node list)

    def compose(self) -> ComposeResult:
        yield LiteralStatic(id="fleet-status")
        yield FleetTable(id="fleet-table")
        yield LiteralStatic(id="fleet-detail")
        yield LiteralStatic(id="fleet-activity")
        yield FittedFooter()

    def on_mount(self) -> None:
        self.table.on_highlight = self.render_detail
        self.table.opened = self.opened            # one set: a node opened shows in its row
        self.table.focus()
        self.show_view(self.view)
        self.set_interval(1.0, self.render_header)     # the data's age

    @property
    def table(self) -> FleetTable:
        return self.query_one(FleetTable)

    def now(self) -> float:
        return self.app.activity.clock.now()

    def show_view(self, view: FleetView) -> None:
        self.view = view
        if not self.is_mounted:
            return
        nodes = matching(fleet_order(view.nodes), self.filter_text)
        if view.shown is None:
            empty = f"waiting for the first answer from {printable(self.source, 40)}…"
        elif self.filter_text and view.nodes:
            empty = f"no hostname contains {printable(self.filter_text, 30)!s} (/ changes the filter)"
        elif view.error:
            empty = "no data: the source has not answered yet"
        else:
            empty = "the source returned no nodes (is dcgm-exporter scraped?)"
        self.table.show(nodes, stale=view.stale, empty_text=empty)
        self.render_header()
        self.render_detail(self.table.current)

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        self.show_view(self.view)

    def render_header(self) -> None:
        if self.is_mounted:
            text = header_text(self.view, self.source, self.now(), shown=len(self.table.nodes),
                               filter_text=self.filter_text, width=self.size.width)
            room = max(1, self.size.width - 2)           # a line longer than the screen wraps
            lines = sum(max(1, -(-cell_len(line) // room)) for line in text.plain.split("\n"))
            self.query_one("#fleet-status", LiteralStatic).update(text, layout=lines != self._header_lines)
            self._header_lines = lines

    def render_detail(self, node: FleetNode | None) -> None:
        opened = node is not None and node.hostname in self.opened
        # a fixed height: the key that moved the cursor waits on no layout of the screen
        self.query_one("#fleet-detail", LiteralStatic).update(detail_text(node, self.size.width, opened),
                                                              layout=False)


    def show_activity(self, line: Text) -> None:
        if self.is_mounted:
            self.query_one("#fleet-activity", LiteralStatic).update(line, layout=False)
