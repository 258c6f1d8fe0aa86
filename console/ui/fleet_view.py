"""The fleet screen (fleet mode, a ``prometheus://`` target): a header line saying where the
data comes from and how old it is, the fleet table (console/ui/fleet_table.py), the
highlighted node in full, the console's status line and the footer.

The screen owns the fleet: its FleetMonitor (console/monitor.py; every 15 s by default: the
config key ``fleet_interval`` or ``--fleet-interval``) and the view of its last rounds. Each
round arrives as a FleetUpdated message (posted to the App, which hands it here: tests post it
too); a round that fails keeps the last nodes on screen, marked stale, with the error in the
header. Its keys (enter, /, r: console/ui/keys.py scope "fleet") are its own actions; ``enter``
posts ``FleetScreen.OpenNode``, and the App opens that node's console over SSH in this
incident (``escape`` there comes back here).

The header: the source, the data's age ("12 s ago"), the query's time, how many nodes and
suspects; when the last round failed, a second line says why and that the table shows the
last data it had (stale). Everything a source produced goes through console/ui/text.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.message import Message
from textual.screen import Screen

from console.config import FLEET_INTERVAL_S
from console.model import FleetNode, FleetSnapshot
from console.monitor import FleetMonitor
from console.output.fleet_rows import FleetView, age_text, fleet_order, fleet_row, gib_text, matching, \
    next_view, pct_text, suspects
from console.sources.base import Source
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


@dataclass(frozen=True)
class FleetSetup:
    source: object                                  # async poll() -> FleetSnapshot, async close()
    name: str                                       # the target as given: prometheus://HOST:PORT
    node_source: Callable[[str], Source]            # hostname -> that node's Source; ValueError: why not
    interval: float = FLEET_INTERVAL_S


class FleetUpdated(Message):
    """A fleet round arrived (posted by the FleetMonitor to the App; tests post it too)."""

    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class FleetScreen(Screen):
    """Installed by the app in fleet mode; ``escape`` on the node console comes back here."""

    class OpenNode(Message):
        """enter on a node: the App opens its console (over SSH, in this incident)."""

        def __init__(self, node: FleetNode) -> None:
            super().__init__()
            self.node = node

    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    #fleet-status { height: auto; max-height: 2; background: $panel; padding: 0 1; }
    #fleet-detail { height: 3; border-top: solid $primary 30%; padding: 0 1; }
    #fleet-activity { height: 1; padding: 0 1; }
    """

    def __init__(self, setup: FleetSetup) -> None:
        super().__init__()
        self.source = setup.name
        self.monitor = FleetMonitor(setup.source, name=setup.name, interval=setup.interval,
                                    on_update=self._arrived)
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

    async def _arrived(self, snap: FleetSnapshot) -> None:
        self.app.post_message(FleetUpdated(snap))

    def take(self, snap: FleetSnapshot) -> None:
        """A round: the view moves on (a failed round keeps the last nodes, stale); an error,
        or its end, is said in the status line (whole in m: the header may cut it)."""
        error, was = snap.error, self.view.error
        self.show_view(next_view(self.view, snap))
        if error and error != was:
            self.notify(error, severity="warning")
        elif was and not error:
            self.notify(f"{self.source} answers again")

    # ---- keys (console/ui/keys.py scope "fleet", bound on the table)
    def action_open_node(self) -> None:
        node = self.table.current
        if node is None:
            self.notify("no node under the cursor", severity="warning")
            return
        self.post_message(self.OpenNode(node))

    def action_fleet_refresh(self) -> None:
        self.monitor.poll_soon()
        self.notify(f"querying {self.source} now")

    def action_fleet_filter(self) -> None:
        from console.ui.prompts import TextPrompt

        def got(text: str | None) -> None:
            if text is not None:
                self.set_filter(text)
        self.app.push_screen(TextPrompt("Filter the fleet by hostname (a part of it; empty clears)",
                                        value=self.filter_text), got)

    def mark_opened(self, hostname: str) -> None:
        """Its row says "(opened)" and so does the line below the table."""
        self.opened.add(hostname)
        if self.is_mounted:
            self.table.refresh()
            self.render_detail(self.table.current)

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
