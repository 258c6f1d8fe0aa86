"""`gpu-incident follow ID --live`: the second person's read-only mirror of a running console.

Beside the incident's entries (the follow view's list, console/ui/timeline_view.py) it shows
the same nodes' panels as the driving console — node table, GPU table with the memory
sparkline, process tree, findings — drawn by the console's own row builders
(console/ui/tables.py, console/output/rows.py) from the live state the driving console writes
beside the incident (console/incident/mirror.py). It never probes a node and holds nothing that
could act on one: no source, no action layer, no timeline opened for writing; its only keys
move, look (enter: the same details, without "x") and quit. The node in view follows the
driving console's until the follower picks another in the node table.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable

from console.incident.mirror import STALE_AFTER_S, LiveState, ask_for_state, read_states, want_path
from console.incident.summary import parse_ts
from console.incident.safefiles import UnsafeFile
from console.model import NodeSnapshot
from console.output.memory_series import marks_of, series_from_data
from console.output.rows import RowMemory, proc_view
from console.ui import keys, mirror_pair, tables
from console.ui.footer import QuietFooter
from console.ui.memory_chart import MemoryChart
from console.ui.panels import FindingsPanel, FitsGpus, fit_main_panels
from console.ui.status_line import StatusLine
from console.ui.text import LiteralStatic, LiteralTable, printable, set_title
from console.ui.timeline_view import FollowApp, local_hhmm
from console.ui.virtual_table import VirtualTable

WIDE = 150          # at least this many columns: panels and entries side by side
#: the keys that act in the driving console (console/ui/keys.py ids): the mirror names who drives
DRIVERS_KEYS = ("sigterm", "sigkill", "signal", "tag", "kill-holders", "reset", "clear-blockers", "next-step",
                "wait", "check", "verdict", "drain", "resume")
#: what a follower may add to the incident: words, recorded under the follower's own name (the
#: timeline takes several writers: console/incident/timeline.py), never an action on a node
FOLLOWERS_KEYS = ("hypothesis", "note")


class LiveFollowApp(FollowApp):
    """Read-only: the entries of the incident file and the panels of its live state."""

    TITLE = "gpu-incident follow --live"
    CSS_PATH = ["app.tcss", "timeline_view.tcss", "mirror_view.tcss"]
    BINDINGS = [
        *keys.bindings("follow"),
        *keys.bindings("follow-live"),
        # the driving console's acting keys: pressed here they say whose they are, never nothing
        *(Binding(k.key, f"drivers_key('{k.id}')", k.footer, show=False) for k in keys.KEYS
          if k.id in DRIVERS_KEYS),
        *(Binding(k.key, f"add('{k.id}')", k.footer) for k in keys.KEYS if k.id in FOLLOWERS_KEYS),
    ]

    def __init__(self, path: str, state_file: str, *, poll_interval: float | None = None,
                 theme_name: str | None = None, clock=time.time, by: str | None = None) -> None:
        kwargs = {} if poll_interval is None else {"poll_interval": poll_interval}
        super().__init__(path, theme_name=theme_name, **kwargs)
        self.state_file = state_file
        self.want_file = want_path(path)        # touched at every read: the driver writes while we follow
        self.state: LiveState | None = None
        self.state_problem = ""
        self.state_gone = False                   # its console's process on this host is gone
        self._asking_since: float | None = None   # when this follower first asked for the state
        self.chosen_node: str | None = None       # the follower's own pick (None: follow the driver's)
        self._state_busy = False
        self._clock = clock
        self._rewrap_pending = False              # a draw before the first layout asked for another
        self._row_memory = RowMemory()            # the process rows of the last state, reused
        #: who the follower's own words are recorded as (``--as NAME``; None: the user, as the
        #: timeline names one: console/incident/timeline.py operator_id)
        self.by = by
        self._closed_seen: float | None = None    # when the last Confirm seen closed (0: none; None: no state yet)
        self._subject = ""

    def compose(self) -> ComposeResult:
        yield LiteralStatic(id="tv-header")
        yield LiteralStatic(id="tv-notice")
        yield LiteralStatic(id="live-confirm")      # the driver's open Confirm (mirror_pair.confirm_text)
        with Horizontal(id="live-split"):
            with Vertical(id="main"):
                yield StatusLine(id="live-status")
                yield LiteralTable(id="nodes", cursor_type="row")
                with Horizontal(id="gpu-row"):
                    yield FitsGpus(id="gpus", cursor_type="row")
                    yield MemoryChart(id="gpu-chart")
                yield VirtualTable(id="procs")      # the driver's columns, SM% where it shows it
                yield FindingsPanel(id="findings", cursor_type="row", show_header=False)
            with Vertical(id="live-entries"):
                yield LiteralTable(id="tv-list", cursor_type="row", zebra_stripes=False)
                with VerticalScroll(id="tv-detail"):
                    yield LiteralStatic(id="tv-detail-body")
        yield QuietFooter()

    # ------------------------------------------------------------------ layout
    @property
    def wide(self) -> bool:
        return self.size.width >= WIDE

    def _what_width(self) -> int:
        from console.ui.timeline_render import COLUMNS
        fixed = sum(w + 2 for _, _, w in COLUMNS) + 2 + 1
        laid_out = self.query("#tv-list")
        room = laid_out.first().outer_size.width + 2 if laid_out else 0     # the list's own width, once laid out
        if room <= 2:
            room = self.size.width * 2 // 5 if self.wide else self.size.width
        return max(12, room - fixed)

    def _rewrap(self) -> None:
        """The findings are wrapped at their panel's width, so never drawn before it is laid out:
        a finding drawn at a guess, then rewrapped, kept the guess's wrap on screen (Textual's
        cell cache keeps what was drawn)."""
        self.render_state()                         # once: a panel still 0 wide waits for a resize
        self._rewrap_pending = False

    def on_mount(self) -> None:
        tables.add_columns(self.query_one("#nodes", DataTable), tables.NODE_COLUMNS)
        tables.add_proc_columns(self.query_one("#procs", VirtualTable))
        self.query_one("#findings", DataTable).add_column("Finding", key="finding")
        self.query_one("#nodes").display = False
        self._layout()
        # (FollowApp's on_mount runs too, after this one: Textual calls each class's handler)
        self.call_after_refresh(self.query_one("#gpus", DataTable).focus)
        self.set_interval(self.poll_interval, self.poll_state)
        self.call_later(self.poll_state)

    @property
    def me(self) -> str:
        """Who the follower's words are recorded as."""
        from console.incident.timeline import operator_id
        return self.by or operator_id()

    def reader(self) -> str:
        return f", you: {printable(self.me, 40)}"

    def subject(self) -> str:
        """"incident p1 · demo": the incident and the node in view (the driver's, or the one picked)."""
        node = self.viewing()
        more = len(self.state.nodes) - 1 if self.state is not None else 0
        where = f" · {printable(node, 40)}" + (f" (+{more} nodes)" if more > 0 else "") if node else ""
        return super().subject() + where

    def action_help(self) -> None:
        """?: the follower's keys (moving, looking, its own words, quitting), from the key table."""
        from console.ui.app import HelpScreen
        self.push_screen(HelpScreen(mirror_pair.help_rows(FOLLOWERS_KEYS)))

    def on_resize(self, event: events.Resize) -> None:
        # the event's size: the App's own handler, which sets ``self.size``, runs after this one
        # (at 80 -> 160 columns the entries stayed under the panels, their "what" 18 wide)
        self._layout(event.size.width)
        if self.state is not None:
            self.call_after_refresh(self.render_state)      # findings rewrapped to the new width

    def _layout(self, width: int | None = None) -> None:
        wide = (width if width is not None else self.size.width) >= WIDE
        self.query_one("#live-split").set_class(not wide, "-narrow")

    # ------------------------------------------------------------------ the live state
    def _ask_and_read(self) -> tuple[LiveState, str, bool]:
        """Ask the driving console for its state (mirror.ask_for_state), then read it, and look
        whether the console that wrote it is still there (LiveState.gone)."""
        try:
            ask_for_state(self.want_file)
            problem = ""
        except OSError as exc:
            problem = (f"cannot ask the driving console for live state ({exc.strerror or exc}): "
                       "what shows may be old")
        state = read_states(self.state_file)     # every driving console's, merged
        return state, problem, state.gone()

    async def poll_state(self) -> None:
        """Read the state file (in a thread) and show it."""
        if self._state_busy:
            return
        self._state_busy = True
        if self._asking_since is None:
            self._asking_since = self._clock()
        try:
            gone = False
            try:
                state, problem, gone = await asyncio.to_thread(self._ask_and_read)
            except FileNotFoundError:
                state, problem = None, ("no live state yet: the driving console writes it beside the incident "
                                        "within seconds of a follower asking (is it running, with this incident?)")
            except (UnsafeFile, ValueError, OSError) as exc:
                state, problem = None, f"live state unreadable: {exc}"
            if state is not None:
                self.state = state
                self.state_gone = gone
            self.state_problem = problem
            self.render_state()
        finally:
            self._state_busy = False

    def viewing(self) -> str | None:
        state = self.state
        if state is None:
            return None
        names = [n.name for n in state.nodes]
        if self.chosen_node in names:
            return self.chosen_node
        return state.viewing if state.viewing in names else (names[0] if names else None)

    def action_add(self, kind: str) -> None:
        """h / n: a hypothesis or a note of the follower's, into the incident under their name
        (the driver's console and the postmortem show who said it)."""
        from console.ui.prompts import TextPrompt
        title = "State a hypothesis" if kind == "hypothesis" else "Note"

        def got(text: str | None) -> None:
            if text and text.strip():
                self._write(kind, text.strip())
        self.push_screen(TextPrompt(f"{title} (recorded in the incident as {printable(self.me, 40)})"), got)

    def _write(self, kind: str, text: str) -> None:
        self.run_worker(self._append(kind, text, self.viewing()), group="follower-notes")

    async def _append(self, kind: str, text: str, node: str | None) -> None:
        """The entry on disk (opened, locked, fsynced) in a thread, as the follower's reads are:
        a slow disk or the driver's lock never holds the screen."""
        from console.incident.timeline import Timeline

        def write():
            tl = Timeline(Path(self.path), by=self.by)
            try:
                return tl.append(kind, text, node=node)
            finally:
                tl.close()
        try:
            entry = await asyncio.to_thread(write)
        except (OSError, UnsafeFile) as exc:
            self.notify(f"{kind} not recorded: {exc}", severity="error", timeout=8)
            return
        self.notify(f"{kind} recorded as #{entry.seq} by {printable(entry.by, 40)}")
        await self.poll_now()

    def action_drivers_key(self, key_id: str) -> None:
        """A key that acts in the driving console: read-only here, and who drives."""
        key = next((k for k in keys.KEYS if k.id == key_id), None)
        what = key.footer if key is not None else key_id
        who = printable(self.state.by, 40) if self.state is not None else "the console that writes this incident"
        self.notify(f"read-only: {what} is the driver's key here — {who} drives this incident; "
                    "ask them, or open your own console on the node", severity="warning", timeout=6)

    def _show_status(self, status: Text) -> None:
        """The line cut and padded to its width: the same width each poll needs no new layout
        (StatusLine), and the age in it changes every second."""
        line = self.query_one("#live-status", StatusLine)
        status.truncate(max(1, line.size.width or self.size.width), overflow="ellipsis", pad=True)
        line.show(status)

    def render_state(self) -> None:
        if not self.is_running or not self.query("#live-status"):
            return          # a read that lands while the view closes
        state = self.state
        status = Text(no_wrap=True, overflow="ellipsis")
        if state is None:
            gone = self._gone_without_state()
            status.append(printable(gone or self.state_problem or "waiting for the live state…"), style="bold yellow")
            self._show_status(status)
            return
        age = state.age(self._clock())
        status.append(f"live: {printable(state.by, 40)}'s console", style="bold")
        if state.running and self.state_gone:          # the news first: a pane may be 80 wide
            pid = (state.console or {}).get("pid")
            status.append(f" gone since {self._gone_since(state)}", style="bold yellow")
            status.append(f" — PID {pid} died without saying it stopped: what it saw last", style="yellow")
        elif not state.running:
            when = dt.datetime.fromtimestamp(state.written_at).strftime("%H:%M:%S")
            status.append(f" — stopped at {when}: what it saw last", style="bold yellow")
        elif state.stale(self._clock()) and not state.checkable() and self._asked_long_enough():
            # a console on another host (or a state written before it was named): its age says it
            status.append(f" gone since {self._gone_since(state)}?", style="bold yellow")
            status.append(f" — no update for {age:.0f} s", style="yellow")
        elif state.stale(self._clock()):
            status.append(f" — no update for {age:.0f} s (is it still running?)", style="bold yellow")
        else:
            status.append(f" — {max(0.0, age):.0f} s ago", style="dim")
        for text in state.activity:
            status.append("  ⏳ " + printable(text, 90), style="bold cyan")
        closed = state.confirm_closed
        if closed is not None and state.confirm is None and self._clock() - closed.at < mirror_pair.CLOSED_SHOWN_S:
            status.append("  " + mirror_pair.closed_words(closed), style="bold magenta")
        if self.state_problem:
            status.append("  ⚠ " + printable(self.state_problem, 80), style="yellow")
        status.append("  read-only", style="dim")
        self._show_status(status)
        self._show_confirm(state)
        if self.subject() != self._subject:
            self._subject = self.subject()
            self._render_header()
        nodes = self.query_one("#nodes", DataTable)
        nodes.display = len(state.nodes) > 1
        if nodes.display:
            tables.sync_table(nodes, {n.name: tables.node_cells(n.name, n) for n in state.nodes})
        name = self.viewing()
        snap = state.node(name)
        self._render_node(snap, state.hidden.get(name or "", 0))
        fit_main_panels(self, nodes.display)

    def _show_confirm(self, state: LiveState) -> None:
        """The driver's open Confirm above the panels (read-only), and once it closes, how it
        ended (the status line says it for a minute; a message says it once)."""
        panel = self.query_one("#live-confirm", LiteralStatic)
        pending = state.confirm if state.running and not self.state_gone else None
        if pending is not None:
            panel.update(mirror_pair.confirm_text(pending, self.size.width - 2))
        if panel.display != (pending is not None):
            panel.display = pending is not None
        closed = state.confirm_closed
        at = closed.at if closed is not None else 0.0
        if at != self._closed_seen:
            first = self._closed_seen is None
            self._closed_seen = at
            if closed is not None and not first:    # seen closing while following, not found at start
                self.notify(mirror_pair.closed_words(closed), timeout=8)

    def _asked_long_enough(self) -> bool:
        """This follower has asked for the state longer than a console takes to answer."""
        return self._asking_since is not None and self._clock() - self._asking_since > STALE_AFTER_S

    def _gone_since(self, state: LiveState) -> str:
        """HH:MM of the last sign of life of the console that wrote ``state``: its last write of
        the state or its last entry, whichever came later."""
        when = state.written_at
        pid = (state.console or {}).get("pid")
        for c in self.consoles:
            seen = parse_ts(c.last_seen)
            if c.pid == pid and seen is not None:
                when = max(when, seen.timestamp())
        return dt.datetime.fromtimestamp(when).strftime("%H:%M")

    def _gone_without_state(self) -> str:
        """No live state was ever written: the entries may still say the console is gone."""
        self.check_consoles()
        if self.console_gone_since is None:
            return ""
        gone = ", ".join(f"PID {c.pid} on {c.host}" for c in self.consoles if c.pid is not None)
        return (f"console gone since {local_hhmm(self.console_gone_since)}"
                + (f" — {gone} died without saying it stopped" if gone else "") + "; no live state was written")

    def _render_node(self, snap: NodeSnapshot | None, hidden: int) -> None:
        # health and names fitted to the width, as the driver's GPU panel
        if tables.fit_gpu_chart(self.query_one("#gpu-row"), self.query_one("#gpu-chart"), snap):
            gpus = self.query_one("#gpus", DataTable)      # again at its new width, with what it shows then
            self.call_after_refresh(lambda: tables.sync_gpu_table(gpus, tables.last_gpu_snapshot(gpus)))
        tables.sync_gpu_table(self.query_one("#gpus", DataTable), snap)
        chart = self.query_one("#gpu-chart", MemoryChart)
        if snap is not None and self.state is not None:
            actions = [a for a in self.state.actions if a.node in (None, snap.name)]
            chart.show(series_from_data(self.state.memory.get(snap.name, {}), marks_of(actions)))
        procs = self.query_one("#procs", VirtualTable)
        view = proc_view(snap, memory=self._row_memory) if snap is not None else None
        rows = list(view.rows) if view is not None else []
        listed: list[tuple[str, object]] = [(r.key, r) for r in rows]
        if view is not None and view.hidden:
            listed.append((tables.MORE_KEY, view.hidden))
        procs.set_rows(listed, lambda row: tables.more_cells(row) if isinstance(row, int) else tables.proc_cells(row),
                       tables.proc_widths(rows, set()))
        shown = view.matched if view is not None else 0
        more = f", {hidden:,} others not mirrored" if hidden else ""
        set_title(procs, f"processes: {shown} GPU-related{more} (read-only)")
        findings = self.query_one("#findings", FindingsPanel)
        if findings.size.width:
            findings.show(snap, max(20, findings.size.width - 4))     # a scroll bar may take two
        elif not self._rewrap_pending:              # not laid out yet: drawn once it is
            self._rewrap_pending = True
            self.call_after_refresh(self._rewrap)
        set_title(findings, mirror_pair.findings_title(findings, len(snap.findings) if snap is not None else 0))

    def on_findings_panel_resized(self, _event: FindingsPanel.Resized) -> None:
        """The findings panel got its height: the findings fill its lines again."""
        if self.state is not None:
            self.render_state()

    # ------------------------------------------------------------------ looking (never acting)
    @on(DataTable.RowHighlighted, "#nodes")
    def _node_picked(self, event: DataTable.RowHighlighted) -> None:
        name = event.row_key.value if event.row_key is not None else None
        if name and self.state is not None and name != self.viewing() and self.focused is event.data_table:
            self.chosen_node = name
            self.render_state()

    @on(VirtualTable.RowSelected, "#procs")
    def _proc_detail(self, event: VirtualTable.RowSelected) -> None:
        self._detail_of("procs", event.key)

    @on(DataTable.RowSelected)
    def _detail(self, event: DataTable.RowSelected) -> None:
        from console.ui.details import DetailScreen
        from console.ui.timeline_render import detail
        table = event.data_table.id
        if table == "tv-list":            # an entry, whole (the side panel is off on a narrow screen)
            index = event.cursor_row
            if 0 <= index < len(self.entries):
                self.push_screen(DetailScreen(detail(self.entries, index, len(self.entries), "so far")))
            return
        self._detail_of(table, event.row_key.value if event.row_key is not None else None)

    def _detail_of(self, table: str | None, key: str | None) -> None:
        """Enter: the same details the console shows (details.row_detail) — never its "x" (no
        next step is taken here)."""
        from console.ui.details import DetailScreen, row_detail
        snap = self.state.node(self.viewing()) if self.state is not None else None
        if snap is None or key is None:
            return
        body, _finding = row_detail(table, key, snap)
        if body is not None:
            self.push_screen(DetailScreen(body, can_apply=False))


def run_live_follow(path: str, state_file: str, theme: str | None = None, by: str | None = None) -> int:
    """`gpu-incident follow ID --live` (``by``: ``--as NAME``'s). FileNotFoundError / ValueError
    (one line) before any UI starts."""
    from console.incident.tail import check_readable
    check_readable(path)
    app = LiveFollowApp(str(path), str(state_file), theme_name=theme, by=by)
    app.run()
    return app.return_code or 0
