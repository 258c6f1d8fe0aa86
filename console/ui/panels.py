"""The main screen's tables, each with the keys that act on it (console/ui/keys.py scopes):
t/k/space/F9 belong to the process panel, F/R/B to the GPU panel, x to the findings; Home/End
go to the first/last row in every table."""
from __future__ import annotations

from typing import AbstractSet, Callable, Iterable, Mapping, Sequence

from textual import events
from textual.message import Message

from console.diagnosis.history import memo
from console.model import NodeSnapshot
from console.output.rows import RowMemory, hidden_holders, order_words, proc_view, sorted_rows
from console.ui import keys, layout, tables
from console.ui.node_filter import node_filter_title, node_matches
from console.ui.text import LiteralTable, printable, set_subtitle, set_title
from console.ui.virtual_table import VirtualTable


class PanelTable(LiteralTable):
    BINDINGS = keys.bindings("tables")


class NodeTable(VirtualTable):
    """The node table: only the rows on screen are drawn (console/ui/virtual_table.py), so a
    redraw of 256 nodes costs what the twenty in view do. Until the operator moves its cursor,
    the console keeps it on the node in the most trouble (the first row); after that it stays on
    the node chosen."""
    BINDINGS = keys.bindings("tables")

    user_moved = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._node_widths: dict[str, dict[str, int]] = {}   # each node's row's widths (tables.node_widths)

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

    def on_click(self, event: events.Click) -> None:
        """(VirtualTable's own click handler runs after this one: Textual calls each class's.)"""
        self._moved()

    def show_nodes(self, names: Sequence[str], snapshots: Mapping[str, NodeSnapshot | None],
                   stale_s: Callable[[str], float | None], updated: Iterable[str], text_filter: str = "") -> None:
        """Nodes in trouble first (tables.node_order); the cursor stays on its node, or, until
        the operator moves it, on the first row: the node in the most trouble. ``updated``: the
        names whose snapshots changed since the last redraw (their columns' widths are worked
        out again); only the rows in view are made. ``text_filter`` (/ on this table): only the
        nodes it matches (tables.node_matches), and the table's title says what it hides."""
        widths = self._node_widths
        for name in updated:
            widths[name] = tables.node_widths(name, snapshots.get(name), stale_s(name))
        shown = [n for n in names if node_matches(n, snapshots.get(n), text_filter)]
        set_subtitle(self, node_filter_title(names, shown, snapshots, text_filter), "bold cyan")
        order = sorted(shown, key=lambda n: tables.node_order(n, snapshots.get(n)))
        wide = {key: max((w[key] for w in widths.values() if key in w), default=0)
                for _label, key in tables.NODE_COLUMNS[:-1]}
        self.set_rows([(n, n) for n in order], lambda n: tables.node_cells(n, snapshots.get(n), stale_s(n)), wide)
        if not self.user_moved and self.row_count and self.cursor_row != 0:
            self.move_cursor(row=0, animate=False)


class FitsGpus(LiteralTable):
    """A GPU table whose columns are fitted to its width (tables.sync_gpu_table): when its
    scroll bar comes or goes (the layout gave it fewer rows than GPUs) the width for the health
    and the names changed, and they are fitted again — not cut at the bar."""

    def _fit_again(self) -> None:
        if tables.last_gpu_snapshot(self) is not None:
            self.call_after_refresh(lambda: tables.sync_gpu_table(self, tables.last_gpu_snapshot(self)))

    def watch_show_vertical_scrollbar(self, shown: bool) -> None:
        self._fit_again()

    def on_resize(self, event: events.Resize) -> None:
        """(the memory chart beside it gave way, the terminal changed)"""
        self._fit_again()


class GpuTable(FitsGpus, PanelTable):
    BINDINGS = keys.bindings("gpus")

    def watch_scroll_y(self, old: float, new: float) -> None:
        """The memory chart beside it scrolls with it (its rows line up with the table's)."""
        super().watch_scroll_y(old, new)
        for chart in self.app.query("#gpu-chart"):
            chart.scroll_to_row(round(new))


class ProcTable(VirtualTable):
    """The process panel: a real-size node's 2,000 rows drawn only where they show
    (console/ui/virtual_table.py). ``row_memory``: its rows of the last poll, reused where the
    process did not change (console/output/rows.py)."""
    BINDINGS = keys.bindings("tables") + keys.bindings("procs")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.row_memory = RowMemory()
        self._selected_initially: set[str] = set()     # nodes whose top holder got the cursor once

    @property
    def selected_process(self) -> str | None:
        """The process row under the cursor (None on the row that counts the hidden ones)."""
        key = self.selected_key
        return None if key == tables.MORE_KEY else key

    def show_procs(self, snap: NodeSnapshot | None, node: str, *, show_all: bool, text_filter: str, order: str,
                   tagged: AbstractSet[str]) -> None:
        """At most rows.PROC_ROW_LIMIT rows (console/output/rows.py) and a last one counting the
        rest; only the rows in view are drawn (console/ui/virtual_table.py): a 2,000-process
        view costs a frame what 30 rows do. The selected process stays; a node's top holder gets
        the cursor the first time it has one."""
        selected = self.selected_process
        keep = int(selected.rsplit(":", 1)[1]) if selected and selected.startswith(f"{node}:") else None
        view = (proc_view(snap, show_all=show_all, text_filter=text_filter, keep=keep, memory=self.row_memory)
                if snap is not None else None)
        rows = sorted_rows(view.rows, order) if view is not None else ()
        listed: list[tuple[str, object]] = [(r.key, r) for r in rows]
        if view is not None and view.hidden:
            listed.append((tables.MORE_KEY, view.hidden))

        def make(row) -> tuple:
            return tables.more_cells(row) if isinstance(row, int) else tables.proc_cells(row, row.key in tagged)
        widths = (memo(snap, f"proc-widths:{show_all}:{text_filter}:{order}:{keep}:{bool(tagged)}",
                       lambda _s: tables.proc_widths(rows, tagged)) if snap is not None else {})
        self.set_rows(listed, make, widths)
        total = view.total if view is not None else 0
        hint = ("a: GPU-related only" if show_all else "a: all") + (f", {order_words(order)} (o, F6)"
                                                                   if order != "tree" else "")
        # a filter that hides GPU holders says so first: the panel may look as if nothing held the GPUs
        hides = hidden_holders(snap, text_filter) if snap is not None else 0
        said = (f"filter “{printable(text_filter, 20)}” hides {hides} GPU holder{'s' if hides != 1 else ''} "
                "(esc clears) · ") if hides else ""
        if view is not None and view.hidden:
            what = f"all {total:,}" if show_all else f"{view.matched:,} GPU-related"
            set_title(self, f"processes: {said}{len(rows)} of {what} shown (/ filters, {hint})")
        else:
            what = "all" if show_all else "GPU-related"
            set_title(self, f"processes: {said}{view.matched if view else 0} {what} of {total} "
                            f"({hint}, enter: details)")
        if snap is not None and snap.name not in self._selected_initially and rows:
            top = max(rows, key=lambda r: (r.proc.gpu_memory_total_mib, r.proc.holds_devices))
            if top.proc.gpu_memory_total_mib > 0 or top.proc.holds_devices:
                self.move_cursor(row=self.get_row_index(top.key), animate=False)
                self._selected_initially.add(snap.name)


class FindingsPanel(LiteralTable):
    """The findings, a line of summary and one of next step each, and where the panel has lines
    to spare the findings cut short shown whole (``show``). The driving console's (FindingTable,
    with x) and the follower's (read-only)."""
    #: the lines its rows take cut to a line of summary and one of next step: its share of the
    #: screen (fit_main_panels), whatever they take wrapped into lines it has to spare
    base_lines: int | None = None

    class Resized(Message):
        """The panel's height changed: the findings fill the lines it has."""

    def on_resize(self) -> None:
        self.post_message(self.Resized())

    def show(self, snap: NodeSnapshot | None, width: int) -> None:
        """The findings at ``width`` (tables.finding_rows), into the lines the panel has now."""
        self.base_lines = tables.finding_lines(snap, width)
        tables.sync_table(self, tables.finding_rows(snap, width, self.size.height))


class FindingTable(FindingsPanel):
    BINDINGS = keys.bindings("tables") + keys.bindings("findings")

    class Scrolled(Message):
        """The findings moved in the panel: its title says again which way the others are."""

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if self.styles.height is not None:
            self.post_message(self.Scrolled())


def fit_main_panels(root, with_nodes: bool) -> bool:
    """Share ``root``'s #main rows between its panels (console/ui/layout.py): the findings first
    (up to half), the node table, the GPUs, then the processes (at least 5 lines: a GPU's holders
    are on screen at 80x24; on a smaller terminal the node table gives up rows first, down to
    one row); what is left goes to the findings. The driving console and the
    follower's mirror lay out the same panels this way. False when there is no room yet."""
    room = root.query_one("#main").size.height
    for status in root.query("#live-status"):
        room -= status.outer_size.height
    panels = []
    if with_nodes:
        # on a split pane (100x16) the node table gives up rows before the processes do: the
        # node on screen stays in view (] and [ step through the others) and its holders show
        panels.append(layout.Panel("nodes", tables.content_lines(root.query_one("#nodes")) + 1, least=5, share=0.5,
                                   floor=3))
    findings = root.query_one("#findings", FindingsPanel)
    need = findings.base_lines if findings.base_lines is not None else tables.content_lines(findings)
    panels += [layout.Panel("findings", need + 1, least=3, share=0.5),
               layout.Panel("gpus", tables.content_lines(root.query_one("#gpus")), least=3, share=0.5),
               layout.Panel("procs", tables.content_lines(root.query_one("#procs")) + 1, least=5)]
    if room <= 0:
        return False
    for name, height in layout.fit(room, panels, rest="findings").items():
        # the GPU table and the memory chart share one row: the row gets the height, and neither
        # may grow past it (the chart's lines would push the panels below off the screen; the
        # table scrolls, the chart follows: GpuTable)
        widget = root.query_one("#gpu-row" if name == "gpus" else f"#{name}")
        if widget.styles.height is None or widget.styles.height.value != height:
            widget.styles.height = height
            if name == "gpus":
                for child in widget.children:
                    child.styles.max_height = height
    return True
