"""The console: GPU table, process tree and findings, live. Textual lives only under ui/."""
from __future__ import annotations

import time
from typing import Sequence

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.theme import Theme
from textual.widgets import DataTable, Footer, Static

from ..engine import NodeMonitor
from ..model import NodeSnapshot, severity_rank
from ..sources.base import Source
from ..theming import DEFAULT_THEME, load_themes
from ..timeline import Timeline
from .rows import ProcRow, fmt_mib, gpu_holders, proc_rows
from .text import literal, printable

SEVERITY_STYLE = {"critical": "bold white on red", "high": "bold red", "low": "yellow", "info": "dim"}
STATE_STYLE = {"Z": "bold magenta", "D": "bold red", "R": "green"}


class NodeUpdated(Message):
    def __init__(self, snapshot: NodeSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, bindings: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self._rows = bindings

    def compose(self) -> ComposeResult:
        lines = ["[b]Keys[/b]", ""]
        body = Text()
        body.append("Keys\n\n", style="bold")
        for key, what in self._rows:
            body.append(f"  {key:<10}", style="bold")
            body.append(f"{what}\n")
        body.append("\nescape closes this screen", style="dim")
        del lines
        yield Static(body, id="help-body")


class IncidentApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "gpu-incident"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark", "help", "Help", id="help"),
        Binding("a", "toggle_all", "All procs", id="toggle-all"),
        Binding("tab", "focus_next", "Switch panel", show=False, id="next-panel"),
    ]

    def __init__(self, sources: Sequence[Source], *, timeline: Timeline | None = None,
                 interval: float = 1.0, read_only: bool = False, dry_run: bool = False,
                 theme_name: str | None = None, autostart: bool = True,
                 keymap: dict[str, str] | None = None) -> None:
        super().__init__()
        if keymap:
            known = {b.id for b in self.BINDINGS if isinstance(b, Binding) and b.id}
            unknown = sorted(set(keymap) - known)
            if unknown:
                raise ValueError(f"config [keys]: unknown action id(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(known))}")
            self.set_keymap(keymap)
        self.sources = list(sources)
        self.timeline = timeline
        self.read_only = read_only
        self.dry_run = dry_run
        self.autostart = autostart
        self.monitors = [NodeMonitor(s, interval=interval, on_update=self._on_snapshot) for s in self.sources]
        self.snapshots: dict[str, NodeSnapshot] = {}
        self.show_all = False
        self._selected_initially = False
        themes, self.theme_warnings = load_themes()
        for name, spec in themes.items():
            colors = {k: v for k, v in spec.items() if k != "dark"}
            self.register_theme(Theme(name=name, dark=spec["dark"], **colors))
        wanted = theme_name or DEFAULT_THEME
        if wanted not in self.available_themes:
            raise ValueError(f"unknown theme {wanted!r}; known: {', '.join(sorted(self.available_themes))}")
        self.theme = wanted

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static(id="status")
        with Vertical(id="main"):
            yield DataTable(id="gpus", cursor_type="row", zebra_stripes=False)
            yield DataTable(id="procs", cursor_type="row")
            yield Static(id="findings")
        yield Footer()

    def on_mount(self) -> None:
        gpus = self.query_one("#gpus", DataTable)
        gpus.add_column("Node", key="node")
        gpus.add_column("GPU", key="gpu")
        gpus.add_column("Memory used/total", key="mem")
        gpus.add_column("Util", key="util")
        gpus.add_column("Holders", key="holders")
        gpus.add_column("Name", key="name")
        procs = self.query_one("#procs", DataTable)
        procs.add_column("PID", key="pid")
        procs.add_column("S", key="state")
        procs.add_column("D", key="d")
        procs.add_column("GPU MiB", key="mib")
        procs.add_column("User", key="user")
        procs.add_column("Process", key="name")
        procs.focus()
        self.sub_title = self._mode_text()
        self._render_status()
        if self.timeline is not None:
            self.timeline.append("note", "console started watching " + ", ".join(s.name for s in self.sources))
        if self.autostart:
            for m in self.monitors:
                m.start()

    def _mode_text(self) -> str:
        if self.read_only:
            return "READ-ONLY: destructive actions refused"
        if self.dry_run:
            return "DRY-RUN: commands recorded, not run"
        return ""

    async def on_unmount(self) -> None:
        for m in self.monitors:
            await m.stop()

    # ------------------------------------------------------------------ data in
    async def _on_snapshot(self, snap: NodeSnapshot) -> None:
        self.post_message(NodeUpdated(snap))

    @on(NodeUpdated)
    def _node_updated(self, message: NodeUpdated) -> None:
        self.snapshots[message.snapshot.name] = message.snapshot
        self.refresh_tables()

    def ordered_snapshots(self) -> list[NodeSnapshot]:
        return [self.snapshots[s.name] for s in self.sources if s.name in self.snapshots]

    def refresh_tables(self) -> None:
        snaps = self.ordered_snapshots()
        self._render_status()
        self._render_gpus(snaps)
        self._render_procs(snaps)
        self._render_findings(snaps)

    def _render_status(self) -> None:
        parts = Text()
        for src in self.sources:
            snap = self.snapshots.get(src.name)
            if parts:
                parts.append("  ")
            parts.append(printable(src.name, 24), style="bold")
            if snap is None:
                parts.append(" connecting…", style="dim")
            elif snap.error:
                parts.append(" ✖ " + printable(snap.error, 70), style="bold red")
            else:
                used = sum(g.memory_used_mib or 0 for g in snap.gpus)
                parts.append(f" {len(snap.gpus)} GPU {used // 1024} GiB used", style="")
                if snap.probe_ms is not None:
                    parts.append(f" {snap.probe_ms:.0f}ms", style="dim")
                if snap.warnings:
                    parts.append(f" ⚠{len(snap.warnings)}", style="yellow")
        mode = self._mode_text()
        if mode:
            parts.append("  " + mode, style="bold yellow")
        self.query_one("#status", Static).update(parts)

    def _render_gpus(self, snaps: Sequence[NodeSnapshot]) -> None:
        table = self.query_one("#gpus", DataTable)
        wanted: dict[str, tuple] = {}
        for snap in snaps:
            for g in snap.gpus:
                holders = gpu_holders(snap, g.index)
                used, total = g.memory_used_mib, g.memory_total_mib
                pct = (used or 0) / total if total else 0
                style = "bold red" if pct > 0.5 and not holders else ("yellow" if pct > 0.5 else "")
                mig = " MIG" if g.mig_mode else ""
                wanted[f"{snap.name}:{g.index}"] = (
                    literal(snap.name, limit=16), str(g.index),
                    Text(f"{fmt_mib(used)} / {fmt_mib(total)}", style=style),
                    "N/A" if g.utilization_pct is None else f"{g.utilization_pct}%",
                    str(len(holders)), literal(g.name + mig, limit=48))
            for bus in snap.lost_gpus:
                wanted[f"{snap.name}:lost:{bus}"] = (literal(snap.name, limit=16), "?",
                                                     Text("GPU is lost", style="bold red"), "", "",
                                                     literal(bus))
        self._sync(table, wanted)

    def _render_procs(self, snaps: Sequence[NodeSnapshot]) -> None:
        table = self.query_one("#procs", DataTable)
        rows = proc_rows(snaps, show_all=self.show_all)
        multi = len(self.sources) > 1
        wanted: dict[str, tuple] = {}
        for r in rows:
            wanted[r.key] = self._proc_cells(r, multi)
        self._sync(table, wanted)
        if not self._selected_initially and rows:
            top = max(rows, key=lambda r: r.proc.gpu_memory_total_mib)
            if top.proc.gpu_memory_total_mib > 0 or top.proc.holds_devices:
                table.move_cursor(row=table.get_row_index(top.key))
                self._selected_initially = True

    def _proc_cells(self, r: ProcRow, multi: bool) -> tuple:
        p = r.proc
        mib = p.gpu_memory_total_mib
        gpus = ",".join(sorted(p.gpu_memory_mib, key=lambda k: (len(k), k)))
        mem = f"{mib}" if mib else ("dev" if p.holds_devices else "")
        if gpus and mib:
            mem = f"{mib} g{gpus}" if len(p.gpu_memory_mib) <= 2 else f"{mib} ×{len(p.gpu_memory_mib)}"
        name = ("  " * r.depth) + (p.cmdline or f"[{p.name}]")
        if p.state == "Z":
            name = ("  " * r.depth) + f"{p.name} <defunct>"
        label = (f"{r.node}:" if multi else "") + str(p.pid)
        return (literal(label), Text(p.state, style=STATE_STYLE.get(p.state, "")),
                Text(str(p.threads_in_d) if p.threads_in_d else "", style="bold red"),
                mem, literal(p.user or "?", limit=10), literal(name, limit=200))

    def _render_findings(self, snaps: Sequence[NodeSnapshot]) -> None:
        """Most severe first: one line of summary and one of next step each, never wrapped."""
        width = max(20, self.size.width - 2)
        lines: list[Text] = []
        findings = sorted(((s.name, f) for s in snaps for f in s.findings),
                          key=lambda t: -severity_rank(t[1].severity))
        for node, f in findings[:8]:
            head = Text(f"{f.severity.upper():<8} ", style=SEVERITY_STYLE.get(f.severity, ""))
            prefix = f"{node}: " if len(self.sources) > 1 else ""
            head.append(printable(prefix + f.summary, width - 9))
            lines.append(head)
            if f.next_step:
                lines.append(Text("       → " + printable(f.next_step, width - 9), style="italic"))
        if not findings:
            lines.append(Text(" no findings" if snaps else " waiting for the first poll…", style="dim"))
        self.query_one("#findings", Static).update(Text("\n").join(lines))

    @staticmethod
    def _sync(table: DataTable, wanted: dict[str, tuple]) -> None:
        """Update rows by key (never clear: the cursor must stay on the same process).

        The first cell of every row is a fresh object, so the sort key can find
        each row's wanted position by that object's identity.
        """
        selected = None
        if table.row_count and 0 <= table.cursor_row < table.row_count:
            selected = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        existing = {rk.value for rk in table.rows}
        for key in existing - wanted.keys():
            table.remove_row(key)
        columns = [c.key for c in table.ordered_columns]
        position: dict[int, int] = {}
        for i, (key, cells) in enumerate(wanted.items()):
            if key in existing:
                current = table.get_row(key)
                for col, old, value in zip(columns, current, cells):
                    if old != value:
                        table.update_cell(key, col, value)
                position[id(table.get_row(key)[0])] = i
            else:
                table.add_row(*cells, key=key)
                position[id(cells[0])] = i
        if [r.key.value for r in table.ordered_rows] != list(wanted):
            table.sort(key=lambda cells: position.get(id(cells[0]), 1 << 30))
        if selected is not None and selected in wanted:
            table.move_cursor(row=table.get_row_index(selected), animate=False)

    # ------------------------------------------------------------------ actions
    def action_help(self) -> None:
        rows = [("↑ ↓", "move"), ("tab", "switch panel"), ("a", "show all processes / GPU-related only"),
                ("?", "this help screen"), ("q", "quit")]
        self.push_screen(HelpScreen(rows))

    def action_toggle_all(self) -> None:
        self.show_all = not self.show_all
        self.refresh_tables()

    async def action_quit(self) -> None:
        if self.timeline is not None:
            self.timeline.append("note", "console stopped")
        self.exit(0)

    @property
    def selected_process_key(self) -> str | None:
        table = self.query_one("#procs", DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value

    def now(self) -> float:
        return time.time()
