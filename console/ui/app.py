"""The console: nodes, GPU table, process tree and findings, live. Textual lives only under ui/."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import textwrap
import threading
import time
from typing import Sequence

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import var
from textual.screen import ModalScreen
from textual.widgets import DataTable

from console.clock import REAL_CLOCK, Clock
from console.model import FleetNode, NodeSnapshot
from console.session import Session
from console.session import events as session_events
from console.session.core import ACTION_STOP_S
from console.session.engine import Engine, Mailbox
from console.session.facade import Facade
from console.sources.base import Source
from console.turns import KEYS_FIRST
from console.incident import consoles
from console.incident.timeline import Timeline
from console.ui import activity, gc_pacing, keys, tables
from console.ui.check_runs import CheckRuns
from console.ui.escalation import Escalation
from console.ui.fleet_view import FleetScreen, FleetSetup, FleetUpdated
from console.ui.footer import FittedFooter
from console.ui.panels import FindingsPanel, FindingTable, GpuTable, NodeTable, ProcTable, fit_main_panels
from console.ui.memory_chart import MemoryChart
from console.ui.pair_driver import PairDriver
from console.ui.palette import IncidentCommands
from console.ui.reasoning import Reasoning
from console.ui.slurm_line import SlurmLine
from console.ui.status_line import StatusFacts, StatusLine, status_text, with_mode_and_incident
from console.ui.theme_install import install_themes
from console.output.fleet_rows import opened_text
from console.output.memory_series import MemorySeries
from console.output.remedy import remedy_first
from console.ui.text import LiteralNotify, LiteralStatic, literal, printable, set_title
from console.ui.view_keys import ViewKeys


#: node updates are drawn at most this often: with many nodes, the polls that answered since the
#: last redraw are drawn together (a 256-node console gets 256 updates a second); the node on
#: screen is drawn as soon as it answers
REDRAW_INTERVAL_S = 0.5


class HelpScreen(ModalScreen[None]):
    BINDINGS = keys.bindings("help")

    def __init__(self, rows: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self._rows = rows

    def compose(self) -> ComposeResult:
        body = Text()
        body.append("Keys\n\n", style="bold")
        width = max(30, min(78, self.app.size.width) - 8) - 12     # box: border, paddings, scroll bar; keys
        for key, what in self._rows:
            if not key:                 # a heading: where the keys below it act
                body.append(f"\n{printable(what)}\n", style="bold underline")
                continue
            body.append(f"  {printable(key, 10):<10}", style="bold")
            lines = textwrap.wrap(printable(what), width, break_on_hyphens=False) or [""]
            body.append(lines[0] + "\n" + "".join(" " * 12 + line + "\n" for line in lines[1:]))
        body.append("\n↑ ↓ pgup pgdn home end scroll, escape closes this screen", style="dim")
        with VerticalScroll(id="help-box"):     # taller than 24 lines: it scrolls, nothing cut
            yield LiteralStatic(body, id="help-body")

    def on_mount(self) -> None:
        self.query_one("#help-box").focus()


#: how often the console looks for nodes whose poll stopped returning
STALE_CHECK_S = 2.0
#: a redraw that comes due while a key holds the engine is tried again this much later
HELD_REDRAW_S = 0.02


#: the fleet screen's name (installed in fleet mode)
FLEET_SCREEN = "fleet"

#: q while a check runs or an action is verified says so; a second q within this long quits
QUIT_AGAIN_S = 5.0

#: the lines the activity line may take (app.tcss #activity max-height): more says "m: whole"
ACTIVITY_LINES = 3

#: SIGHUP (a dropped SSH session, a closed terminal, `tmux kill-server`) and SIGTERM (`kill`,
#: `systemctl stop`) stop the console as q does: the actions in flight write what they saw
#: (within the session's ACTION_STOP_S), "console stopped (SIGTERM)" is recorded, the
#: follower's last state written, and Textual leaves the terminal as it found it
STOP_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
#: on a signal: the record has this long past the action stop bound ...
RECORD_SLACK_S = 2.0
#: ... then Textual this long to restore the terminal and exit. A terminal that hung up takes
#: no more writes (Textual's writer thread dies on EIO, and the screen's loop then blocks on
#: its queue): past this, or at once when the terminal is gone, the process ends itself
LEAVE_S = 10.0

log = logging.getLogger("gpu_incident.ui")


class IncidentApp(LiteralNotify, App[int]):
    #: the view's state; each watcher draws what it changes (``var``: nothing else is repainted;
    #: a ``reactive`` on the App would also repaint the whole screen at every change)
    current_node: var[str] = var("", init=False)     # the node in view
    proc_filter: var[str] = var("", init=False)      # the process panel's filter (/)
    node_filter: var[str] = var("", init=False)      # the node table's filter (/ there)
    show_all: var[bool] = var(False, init=False)     # every process, not GPU-related only (a)
    proc_sort: var[str] = var("tree", init=False)    # the process panel's order (o: rows.SORTS)

    CSS_PATH = "app.tcss"
    TITLE = "gpu-incident"
    COMMANDS = App.COMMANDS | {IncidentCommands}
    # console/ui/keys.py: footer, Help and palette from one table; the panels' own keys are
    # bound on the panels (console/ui/panels.py), their stand-ins here say where they act
    BINDINGS = keys.bindings() + keys.elsewhere_bindings()

    def __init__(self, sources: Sequence[Source], *, timeline: Timeline | None = None,
                 interval: float = 1.0, read_only: bool = False, dry_run: bool = False,
                 theme_name: str | None = None, autostart: bool = True,
                 keymap: dict[str, str] | None = None, clock: Clock = REAL_CLOCK, slurm=None,
                 fleet: FleetSetup | None = None, engine_thread: bool = False,
                 stop_signals: bool = False, new_incident: str | None = None) -> None:
        super().__init__()
        #: ``--incident ID`` named no incident that existed: what is said of it (console/session/startup.py)
        self.new_incident = new_incident
        #: SIGHUP and SIGTERM stop the console as q does (the CLI's console; a test that sends them)
        self.stop_signals = stop_signals
        #: the signal that stopped the console ("SIGTERM"), None while it runs or after q
        self.stopped_by: str | None = None
        self._stopping = False                  # q or a signal is winding the console down
        self._signals_loop: asyncio.AbstractEventLoop | None = None
        self._signals_before: dict[int, object] = {}
        self._recorded = threading.Event()      # a signal's stop: the record is written
        self._left = threading.Event()          # run() returned: Textual restored the terminal
        self._tty = _tty_fd()                   # the terminal, while it still is one
        #: this process, as the incident's start and stop notes name it (console/incident/consoles.py)
        self.console_id = consoles.identity()
        self.slurm = slurm                # console/sources/slurm.py SlurmClient, or None (ui/slurm_line.py)
        self.keymap = dict(keymap or {})
        if keymap:
            known = keys.ids()
            unknown = sorted(set(keymap) - known)
            if unknown:
                raise ValueError(f"config [keys]: unknown action id(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(sorted(known))}")
            self.set_keymap(keymap)
        # the engine: nodes, incident, policy, the action pipeline (console/session/); the App draws it
        self.session = Session(sources, timeline=timeline, interval=interval, read_only=read_only,
                               dry_run=dry_run, clock=clock)
        self.session.activity = self.running_work
        self.session.compact = True          # the nodes not on screen keep what their verdicts rest on
        # engine_thread: the session on a thread and loop of its own (console/session/engine.py),
        # its events handed to this loop in batches; else on this loop (tests)
        self.engine = Engine(self.session, threaded=engine_thread)
        #: the screen's one door to the engine: everything it asks of the session goes through it
        self.facade = Facade(self.engine)
        self._series: dict[str, MemorySeries] = {}    # per node: the trail its last reading brought
        self._done: dict[str, tuple[str, ...]] = {}   # per node: the rungs applied to it
        self.read_only = read_only
        self.dry_run = dry_run
        self.autostart = autostart
        self.node_interval = interval
        # a prometheus:// target: the fleet screen, on top from the start; it owns the fleet's
        # monitor and view (ui/fleet_view.py)
        self.fleet = fleet
        self.fleet_screen = FleetScreen(fleet) if fleet is not None else None
        self.snapshots: dict[str, NodeSnapshot] = {}
        self.current_node = self.sources[0].name if self.sources else ""
        self._quit_asked_at = float("-inf")     # q with work running: when it was said
        self._gpus_in_view: int | None = None     # the GPU rows the panel shows (fit_panels)
        self.tagged: set[str] = set()
        self.activity = activity.Activity(clock)
        self.work = activity.Work()                 # checks running, results waiting for a window
        # what the keys start: checks (w, c), the ladder (t k F9 F R B x, one's own command), the
        # incident's reasoning (h v n e); each reads this view and drives the session
        self.checks = CheckRuns(self)
        self.escalation = Escalation(self)
        self.reasoning = Reasoning(self)
        self.pair = PairDriver(self)        # the others' words, the follower's hint (ui/pair_driver.py)
        self.view_keys = ViewKeys(self)             # / esc o F5 F6, and other tools' keys
        self.redraw_interval_s = REDRAW_INTERVAL_S
        self._updated: dict[str, NodeSnapshot] = {}    # snapshots that came since the last redraw
        self._redraw_timer = None
        self._last_redraw = float("-inf")
        self._arrived: dict[str, float] = {}       # when each node's last reading came (monotonic)
        self._stale: set[str] = set()              # nodes drawn as stale
        #: no reading for this long and the node is drawn stale, with its age (on_mount: three
        #: intervals, and never less than a poll's deadline and its slack)
        self.stale_after_s: float | None = None
        self.theme_warnings = install_themes(self, theme_name)

    # the session's, as the panels and keys read them
    @property
    def sources(self) -> list[Source]:
        return self.session.sources

    @property
    def monitors(self):
        return self.session.monitors

    @property
    def timeline(self):
        return self.session.timeline

    @property
    def incident(self):
        return self.session.incident

    @property
    def policy(self):
        return self.session.policy

    @property
    def multi_node(self) -> bool:
        """The node table is there: several nodes, or fleet mode (nodes opened from the fleet join it)."""
        return len(self.sources) > 1 or self.fleet_mode

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield SlurmLine(self.slurm, id="slurm")   # shown where Slurm knows the node (ui/slurm_line.py)
        with Vertical(id="main"):
            if self.multi_node:
                yield NodeTable(id="nodes")
            with Horizontal(id="gpu-row"):
                yield GpuTable(id="gpus", cursor_type="row")
                yield MemoryChart(id="gpu-chart")      # memory over the incident, actions marked
            yield ProcTable(id="procs")
            yield FindingTable(id="findings", cursor_type="row", show_header=False)
        activity_line = LiteralStatic(id="activity")
        activity_line.styles.max_height = ACTIVITY_LINES      # one line; a longer sentence wraps
        yield activity_line
        if self._mode_text():
            yield LiteralStatic(literal(self._mode_text(), "bold"), id="mode")
        yield FittedFooter()

    def on_mount(self) -> None:
        if self.stop_signals:
            self._catch_stop_signals()
        self.engine.start()
        self.session.subscribe(Mailbox(asyncio.get_running_loop(), self._session_event, self._urgent).put
                               if self.engine.running else self._session_event)
        if self.multi_node:
            tables.add_columns(self.query_one("#nodes", NodeTable), tables.NODE_COLUMNS)
            self._render_nodes([s.name for s in self.sources])
        tables.add_proc_columns(self.query_one("#procs", ProcTable))
        self.query_one("#findings", DataTable).add_column("Finding", key="finding")
        # several nodes: the node table first (the worst node comes to its top); one: its processes
        self.query_one("#nodes" if self.multi_node else "#procs").focus()
        self._render_status()
        self._render_activity()
        if self.new_incident is not None:
            self.say(self.new_incident, "warning")
        for w in self.theme_warnings:
            self.notify(w, severity="warning")
        if self.timeline is not None:
            for w in self.timeline.warnings:
                self.notify(w, severity="warning")
            self.pair.start()               # "continuing ID: …", then the others' words as they land
            watched = [s.name for s in self.sources] + ([self.fleet.name] if self.fleet_mode else [])
            self.facade.note_soon(None, consoles.CONSOLE_STARTED + ", ".join(watched), console=self.console_id)
        self.refresh_node_view()
        self._diagnose_current()
        gc_pacing.start(self)               # keys never wait on a full garbage collection
        self.screen_change_signal.subscribe(self, self._screen_changed)    # results that waited (present)
        if self.stale_after_s is None:
            deadline = max((m.deadline for m in self.monitors), default=10.0)
            self.stale_after_s = max(3 * self.node_interval, deadline + 2)
        self.set_interval(STALE_CHECK_S, self._mark_stale, name="stale nodes")
        self.facade.start(poll=self.autostart)   # polls spread over the interval
        if self.fleet_screen is not None:     # fleet mode: the fleet screen on top, its first query at once
            self.install_screen(self.fleet_screen, FLEET_SCREEN)
            self.push_screen(FLEET_SCREEN)
            self.call_after_refresh(self._render_activity)
            if self.autostart:
                self.fleet_screen.monitor.start()

    def _mode_text(self) -> str:
        if self.read_only:
            return "READ-ONLY: destructive actions refused"
        if self.dry_run:
            return "DRY-RUN: commands recorded, not run"
        return ""

    async def on_unmount(self) -> None:
        # every node at once, each bounded (NodeMonitor.stop): quitting never hangs on a node
        self._release_stop_signals()
        fleet = self.fleet_screen.monitor.stop() if self.fleet_screen is not None else asyncio.sleep(0)
        await asyncio.gather(self.engine.close(), fleet, return_exceptions=True)
        gc_pacing.stop()

    async def on_event(self, event: events.Event) -> None:
        """A key or a click holds the engine until the frame that answers it is drawn
        (console/turns.py): the operator's key goes before the next node's parse.

        Textual's ``App.on_event`` takes every input event the driver reads, first as it comes
        (the hold starts here), then, for a key or a click, once more as it bubbles back up from
        the widget it went to, once the bindings and handlers it met have run (the release: after
        the next frame). A key a priority binding answered at once does not go down (released
        after the next frame too); one a widget kept to itself, or a press with no click, never
        comes back: turns.HOLD_MAX_S releases it."""
        if not isinstance(event, (events.Key, events.MouseDown, events.Click)):
            await super().on_event(event)
            return
        came_back = event.is_forwarded
        if not came_back:
            KEYS_FIRST.hold()
        await super().on_event(event)
        answered = came_back or (isinstance(event, events.Key) and not event.is_forwarded)
        if answered and not isinstance(event, events.MouseDown) and KEYS_FIRST.holding:
            if not self.call_after_refresh(KEYS_FIRST.release):
                KEYS_FIRST.release()

    # ------------------------------------------------------------------ data in
    def _urgent(self, event: session_events.Event) -> bool:
        """Wake the screen for this at once (the engine's thread asks): all but another node's poll."""
        return not isinstance(event, session_events.NodeUpdated) or event.snapshot.name == self.current_node

    def _session_event(self, event: session_events.Event) -> None:
        """What the session publishes. Taken in straight away, not posted as a message: 256
        nodes' polls queued in the app's messages ahead of a key held the key back."""
        if isinstance(event, session_events.NodeUpdated):
            name = event.snapshot.name
            self._done[name] = event.done
            if event.series is not None:
                self._series[name] = event.series
            self.node_updated(event.snapshot)
        elif isinstance(event, session_events.Said):
            self.notify(event.text, severity=event.severity)
        elif isinstance(event, session_events.ActionStarted):
            if event.verifying_s > 0:
                plan = event.plan
                doing = f"verifying for up to {event.verifying_s:.0f} s…" if event.verifying_s >= 1 else "running…"
                self.notify(f"{plan.node}: {plan.title} — {doing}", timeout=5)
        elif isinstance(event, session_events.ActionFinished):
            outcome = event.outcome
            severity = "information" if outcome.status in ("settled", "dry-run") else "warning"
            self.notify(f"{outcome.plan.node}: {printable(outcome.text)}", severity=severity, timeout=10)
            if outcome.timeline_error:
                self.notify(f"timeline: {outcome.timeline_error}", severity="error")

    def node_updated(self, snap: NodeSnapshot) -> None:
        """Draw the snapshot now, or with the others at the next redraw when the last one was
        less than ``redraw_interval_s`` ago (the node on screen: now). ``snapshots`` holds what
        is drawn: what the keys act on is what the operator sees."""
        self._updated[snap.name] = snap
        self._arrived[snap.name] = time.monotonic()
        self._stale.discard(snap.name)
        if snap.name == self.current_node:     # what the operator looks at: now (with the rest)
            if self._redraw_timer is not None:
                self._redraw_timer.stop()
            self._redraw_updated()
            return
        if self._redraw_timer is not None:
            return
        wait = self._last_redraw + self.redraw_interval_s - time.monotonic()
        if wait <= 0:
            self._redraw_updated()
        else:
            self._redraw_timer = self.set_timer(wait, self._redraw_updated)

    def _redraw_updated(self) -> None:
        """Draw what the node updates since the last redraw changed: the status line, their
        rows of the node table, and the panels when the viewed node is among them."""
        self._redraw_timer = None
        if KEYS_FIRST.holding:       # a key is being answered: its frame first (console/turns.py)
            self._redraw_timer = self.set_timer(HELD_REDRAW_S, self._redraw_updated)
            return
        self._last_redraw = time.monotonic()
        updated, self._updated = self._updated, {}
        self.snapshots.update(updated)
        if not self.screen_stack or not self.query("#status"):
            return     # a poll that lands while the console shuts down
        self._render_status()
        if self.multi_node:
            self._render_nodes(updated)
        if self.current_node in updated:
            self.refresh_node_view()
        elif self.multi_node:
            self.fit_panels()

    def stale_s(self, name: str) -> float | None:
        """How long since the node's last reading, when past ``stale_after_s`` (else None)."""
        at = self._arrived.get(name)
        if at is None or self.stale_after_s is None:
            return None
        age = time.monotonic() - at
        return age if age > self.stale_after_s else None

    def _mark_stale(self) -> None:
        """A node whose poll stopped returning (not one that answers with an error) says how
        long ago its last reading came, in its row and, when in view, on the status line."""
        if not self.screen_stack or not self.query("#status"):
            return
        ages = {n: age for n in self._arrived if (age := self.stale_s(n)) is not None}
        if not ages and not self._stale:
            return
        changed = ages.keys() | self._stale
        self._stale = set(ages)
        if self.multi_node and self.query("#nodes"):
            self._render_nodes(changed)
        self._render_status()

    def _render_nodes(self, updated) -> None:
        """The node table (NodeTable.show_nodes); ``updated``: the nodes whose readings changed."""
        self.query_one("#nodes", NodeTable).show_nodes([s.name for s in self.sources], self.snapshots,
                                                       self.stale_s, updated, self.node_filter)

    @on(NodeTable.RowHighlighted, "#nodes")
    def _node_chosen(self, event: NodeTable.RowHighlighted) -> None:
        if event.key:
            self.current_node = event.key

    def watch_current_node(self) -> None:
        """Another node in view: it is diagnosed every poll, "viewing NODE" and its panels and
        Slurm line follow at once."""
        if self._panels_up:
            self._diagnose_current()
            self._render_status()
            self.refresh_node_view()
            self.slurm_line.refresh_reading()

    def watch_proc_filter(self) -> None:
        self.refresh_bindings()          # esc: Clear filter in the footer while one is set
        if self._panels_up:
            self._render_status()
            self.refresh_procs()

    def watch_node_filter(self) -> None:
        self.refresh_bindings()
        if self._panels_up and self.multi_node:
            self._render_nodes(())
            self.fit_panels()

    def watch_show_all(self, show_all: bool) -> None:
        if show_all:
            self.read_whole_table()
        if self._panels_up:
            self.refresh_procs()

    def watch_proc_sort(self) -> None:
        if self._panels_up:
            self.refresh_procs()

    @property
    def _panels_up(self) -> bool:
        """The node console's panels are there to draw on (mounted, in front: not the fleet
        screen, not while the console winds down)."""
        return bool(self.is_running and self.screen_stack and self.query("#status"))

    def _diagnose_current(self) -> None:
        """The node on screen is diagnosed every poll (the others may keep the findings of
        unchanged input for a while: console/monitor.py), and its trail rides on its readings."""
        self.facade.view(self.current_node)
        if self.current_node is not None and self.current_node not in self._series:
            self.run_worker(self._fetch_series(self.current_node), group="series", exclusive=True)

    def memory_series(self, node: str) -> MemorySeries:
        """A node's memory trail as its last reading brought it (the engine makes it)."""
        return self._series.get(node) or MemorySeries()

    def done_rungs(self, node: str) -> tuple[str, ...]:
        """The rungs applied to a node, oldest first, as its last reading brought them."""
        return self._done.get(node, ())

    async def _fetch_series(self, node: str) -> None:
        """Turned to a node: its trail now, not at its next reading."""
        self._series[node] = await self.facade.memory_series(node)
        if node == self.current_node and self._panels_up:
            self.query_one("#gpu-chart", MemoryChart).show(self._series[node])

    async def _flush_feed(self, running: bool = True, force: bool = False) -> None:
        """Write the follower's state now (tests; the session writes it every second)."""
        s = self.session
        await s.feed.flush(s.actions(), s.names(), self.running_work() if running else [],
                           running=running, force=force)

    def refresh_node_view(self) -> None:
        snap = self.snapshots.get(self.current_node)
        self._render_gpus(snap)
        self.query_one("#gpu-chart", MemoryChart).show(self.memory_series(self.current_node))
        self._render_procs(snap)
        self._render_findings(snap)
        self.slurm_line.redraw()
        self.fit_panels()

    def _render_findings(self, snap: NodeSnapshot | None) -> None:
        """The findings, into the lines their panel has (panels.FindingsPanel.show)."""
        self.query_one("#findings", FindingTable).show(snap, max(20, self.size.width - 4))   # a scroll bar may take two

    def on_findings_panel_resized(self, _event: FindingsPanel.Resized) -> None:
        """The panel got its height (panels.fit_main_panels): the findings fill it again."""
        if self._panels_up:
            self._render_findings(self.snapshots.get(self.current_node))

    def refresh_procs(self) -> None:
        """Only the process panel (a, o, a filter: nothing else on screen changes), and the
        panels' rows if its row count moved: ~8 ms less Python on a key at 2,000 processes."""
        self._render_procs(self.snapshots.get(self.current_node))
        self.fit_panels()

    def on_resize(self) -> None:
        self.call_after_refresh(self._resized)

    def _resized(self) -> None:
        self._render_status()
        if self.screen_stack and self.query("#findings"):
            self.refresh_node_view()

    # ------------------------------------------------------------------ fleet mode
    @property
    def fleet_mode(self) -> bool:
        return self.fleet is not None

    @property
    def on_fleet_screen(self) -> bool:
        return self.fleet_screen is not None and self.screen is self.fleet_screen

    def on_fleet_updated(self, message: FleetUpdated) -> None:
        if self.fleet_screen is not None:
            self.fleet_screen.take(message.snapshot)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """False: the key is off and not in the footer (Textual: None would show it dimmed);
        under --read-only a dangerous key is off everywhere (ui/keys.py); on the fleet screen
        the keys of the node console's panels are off (there is no panel to act on)."""
        if self.read_only and keys.is_dangerous(action, parameters):
            return False
        if action == "fleet":       # esc: with a filter set it clears that first (clear_filter)
            return self.fleet_mode and not self.on_fleet_screen and not (self.proc_filter or self.node_filter)
        if action == "clear_filter":
            return bool(self.proc_filter or self.node_filter) and not self.on_fleet_screen
        if action in keys.NODE_ACTIONS and self.on_fleet_screen:
            return False
        return True

    def action_fleet(self) -> None:
        if self.fleet_mode and not self.on_fleet_screen:
            self.push_screen(FLEET_SCREEN)

    async def on_fleet_screen_open_node(self, message: FleetScreen.OpenNode) -> None:
        await self.open_fleet_node(message.node)

    async def open_fleet_node(self, node: FleetNode) -> Source | None:
        """The node's console over SSH, in this incident: added to the node list (or, when it
        is there already, chosen), recorded in the timeline with why it was suspect (the node
        joins the session on the engine's loop, through its door)."""
        assert self.fleet is not None and self.fleet_screen is not None
        try:
            source = self.fleet.node_source(node.hostname)
        except ValueError as exc:
            self.say(f"cannot open {node.hostname}: {exc}", "error")
            return None
        name = source.name
        known = next((s for s in self.sources if s.name == name), None)
        if known is None:
            await self.facade.add_node(source)
            await self.facade.note(name, opened_text(node, self.fleet.name))
            self.say(opened_text(node, self.fleet.name))
        else:
            source = known
            self.say(f"{name} is in the node list already: showing it")
        self.fleet_screen.mark_opened(node.hostname)
        if self.on_fleet_screen:
            self.pop_screen()
        self._render_nodes({name: None})
        self.current_node = name                  # its panels (watch_current_node)
        table = self.query_one("#nodes", NodeTable)
        table.user_moved = True
        table.move_cursor(row=table.get_row_index(name), animate=False)
        return source

    # ------------------------------------------------------------------ room on the screen
    @property
    def slurm_line(self) -> SlurmLine:
        return self.query_one("#slurm", SlurmLine)

    def on_slurm_line_shown(self, _event: SlurmLine.Shown) -> None:
        self.call_after_refresh(self.fit_panels)

    def action_drain(self) -> None:
        """D: the finding under the cursor names the reason when the findings have the focus."""
        finding = None
        if self.query("#findings") and self.focused is self.query_one("#findings"):
            finding = self.selected_finding
        self.slurm_line.drain(finding)

    def action_resume(self) -> None:
        self.slurm_line.resume()

    def fit_panels(self) -> None:
        """Share the rows between the panels by what they hold (panels.fit_main_panels);
        recomputed on every update and resize."""
        fitted = fit_main_panels(self, self.multi_node)
        findings = self.query_one("#findings", DataTable)
        self._title_findings(fitted and findings.styles.height is not None)
        gpus, row = self.query_one("#gpus", DataTable), self.query_one("#gpu-row")
        in_view = tables.rows_in_view(gpus, int(row.styles.height.value)) \
            if fitted and row.styles.height is not None else None
        if in_view != self._gpus_in_view:       # the status line says when the GPU panel hides some
            self._gpus_in_view = in_view
            self._render_status()

    def on_finding_table_scrolled(self, _event: FindingTable.Scrolled) -> None:
        self._title_findings(True)

    def _title_findings(self, fitted: bool) -> None:
        findings = self.query_one("#findings", DataTable)
        snap = self.snapshots.get(self.current_node)
        count = len(snap.findings) if snap is not None else 0
        title = f"findings: {count}"
        if fitted and count:
            shown = tables.rows_in_view(findings, int(findings.styles.height.value) - 1)
            if shown < findings.row_count:
                # which way the others are: below until scrolled down, above once at the end
                # (a table not laid out yet has no scroll range: the rest is below)
                below = findings.scroll_y < findings.max_scroll_y or findings.max_scroll_y == 0
                more = ("↑" if findings.scroll_y > 0 else "") + ("↓" if below else "")
                title += f", {shown} in view" + (f" ({more})" if more else "")
        set_title(findings, title + " · enter: details and commands · x: next step")

    def _render_status(self) -> None:
        """The status line at the top (ui/status_line.py): checks running and results waiting
        (ui/activity.py) after what the node says, then the mode and the incident's ID."""
        line = status_text(StatusFacts(
            nodes=[s.name for s in self.sources], snapshots=self.snapshots, viewing=self.current_node,
            multi_node=self.multi_node, stale_s=self.stale_s(self.current_node), proc_filter=self.proc_filter,
            tagged=len(self.tagged), gpus_in_view=self._gpus_in_view))
        self.work.status(line)
        line = with_mode_and_incident(line, self._mode_text(), self.incident_id, self.size.width,
                                      person=self.pair.named(), new=self.new_incident is not None)
        self.query_one("#status", StatusLine).show(line)

    @property
    def incident_id(self) -> str | None:
        return self.timeline.incident_id if self.timeline is not None else None

    # ------------------------------------------------------------------ the status line
    def _idle_text(self) -> str:
        return self.pair.idle_text()

    def _render_activity(self) -> None:
        said = activity.line(self.activity.latest, self._idle_text(), running=self.running_work())
        said = activity.fit(said, max(20, self.size.width - 2), ACTIVITY_LINES)
        if self.query("#activity"):
            self.query_one("#activity", LiteralStatic).update(said)
            self.call_after_refresh(self.fit_panels)     # a second line takes a row from the panels
        if self.fleet_screen is not None:
            self.fleet_screen.show_activity(said)

    def say(self, text: object, severity: str = "information") -> None:
        """One line in the status line above the footer (most recent first; m shows them all)."""
        self.activity.add(text, severity)
        self._render_activity()

    def notify(self, message, *, title="", severity="information", timeout=None, markup=False) -> None:
        """Progress, outcomes and hints go to the status line; only errors also pop up (top
        right, over the GPU names, never over the findings), briefly."""
        self.say(message, severity)
        if severity == "error":
            super().notify(message, title=title, severity=severity, timeout=min(timeout or 8, 8), markup=False)

    def action_step_node(self, by: int) -> None:
        """] / [: the next or previous node, from any panel (no Tab to the node table first)."""
        if not self.multi_node or not self.query("#nodes"):
            self.say("one node: there is no other to go to")
            return
        nodes = self.query_one("#nodes", NodeTable)
        if not nodes.row_count:
            return
        nodes.user_moved = True
        nodes.move_cursor(row=(nodes.cursor_row + by) % nodes.row_count, animate=False)

    def action_help_quit(self) -> None:
        """ctrl+c: Textual's own hint is markup, which this console shows literally: say it in words."""
        self.say("ctrl+c does not quit here: press q (or ctrl+q) to quit", "warning")

    def action_messages(self) -> None:
        from console.ui.details import DetailScreen
        where = [self._idle_text()] + ([f"recorded in {self.timeline.path}"] if self.timeline is not None else [])
        # what the nodes warn of, whole (the status line has room for the first 60 characters)
        where += [f"⚠ {name}: {w}" for name, snap in self.snapshots.items() if snap is not None for w in snap.warnings]
        # and every node's error, what to do about it first (console/output/remedy.py)
        where += [f"✖ {name}: {remedy_first(snap.error)}" for name, snap in self.snapshots.items()
                  if snap is not None and snap.error]
        self.push_screen(DetailScreen(activity.history_text(self.activity.history(), where)))

    def action_elsewhere(self, key_id: str) -> None:
        """A process or GPU key pressed where that panel has no focus: say where it acts."""
        self.say(keys.where(key_id, self.keymap), "warning")

    def _render_gpus(self, snap: NodeSnapshot | None) -> None:
        if tables.fit_gpu_chart(self.query_one("#gpu-row"), self.query_one("#gpu-chart"), snap):
            self.call_after_refresh(self._refit_gpus)      # at the table's new width
        tables.sync_gpu_table(self.query_one("#gpus", DataTable), snap)

    def _refit_gpus(self) -> None:
        """The GPU panel again once the chart beside it gave way: the node in view *then* (a call
        holding the snapshot it was made for drew that node again after another came into view,
        and the two refits undid each other on every frame: the panel flickered between the
        nodes and the screen never idled)."""
        self._render_gpus(self.snapshots.get(self.current_node))

    def _render_procs(self, snap: NodeSnapshot | None) -> None:
        """The process panel (ProcTable.show_procs) as the view's state says."""
        self.query_one("#procs", ProcTable).show_procs(snap, self.current_node, show_all=self.show_all,
                                                       text_filter=self.proc_filter, order=self.proc_sort,
                                                       tagged=self.tagged)

    @on(ProcTable.RowSelected)
    def _show_proc_detail(self, event: ProcTable.RowSelected) -> None:
        self._show_detail_of("procs", event.key)

    @on(DataTable.RowSelected)
    def _show_detail(self, event: DataTable.RowSelected) -> None:
        self._show_detail_of(event.data_table.id, event.row_key.value if event.row_key is not None else None)

    def _show_detail_of(self, table: str | None, key: str | None) -> None:
        """Enter on a finding, process or GPU: everything about it, nothing cut (details.row_detail);
        on a finding whose step is a rung its window offers x."""
        from console.ui.details import DetailScreen, row_detail
        snap = self.snapshots.get(self.current_node)
        if snap is None or key is None:
            return
        if table == "procs" and key == tables.MORE_KEY:
            self.action_filter()         # the hidden processes are found by filtering
            return
        body, finding = row_detail(table, key, snap)
        if body is None:
            return
        if finding is None:
            self.push_screen(DetailScreen(body))
            return

        def chosen(answer: str | None) -> None:
            if answer == "apply":
                self.escalation.apply_finding(finding)
        self.push_screen(DetailScreen(body, can_apply=finding.rung is not None), chosen)

    @property
    def selected_finding(self):
        snap = self.snapshots.get(self.current_node)
        key = tables.selected_key(self.query_one("#findings", DataTable))
        if snap is None or key is None:
            return None
        return next((f for f in snap.findings if tables.finding_key(f) == key), None)

    def action_next_step(self) -> None:
        """x: the highlighted finding's next step on the findings panel; anywhere else the node's
        (the first finding that proposes one: the findings are ordered by what to do next)."""
        findings = self.query("#findings")
        on_findings = bool(findings) and self.focused is findings.first()
        if on_findings:
            finding = self.selected_finding
        else:
            from console.actions.ladder import no_step_words, top_step
            snap = self.snapshots.get(self.current_node)
            finding = top_step(snap.findings) if snap is not None else None
            if finding is None:
                self.say(no_step_words(snap) if snap is not None else "no reading of this node yet",
                         "warning" if snap is None else "information")
                return
            self.say(f"x: the next step of {self.current_node}: {finding.kind} → {finding.next_step}")
        if finding is None:
            self.say("no finding under the cursor", "warning")
        elif finding.rung is None:
            self.say(f"nothing to run for this finding: {finding.next_step}")
        else:
            self.escalation.apply_finding(finding)

    def action_next_step_all(self) -> None:
        """X: the node's next step on every node whose next step is the same (ui/escalation.py)."""
        from console.actions.ladder import top_step
        snap = self.snapshots.get(self.current_node)
        finding = top_step(snap.findings) if snap is not None else None
        if finding is None:
            self.say("X: this node has no next step to take elsewhere too", "warning")
            return
        self.escalation.apply_everywhere(finding)

    # ------------------------------------------------------------------ what the keys act on
    def current(self) -> tuple[Source | None, NodeSnapshot | None]:
        """The node in view: its source and the snapshot drawn."""
        src = next((s for s in self.sources if s.name == self.current_node), None)
        return src, self.snapshots.get(self.current_node)

    def selected_pids(self) -> list[int]:
        """Tagged processes of the current node, else the one under the cursor."""
        keys_ = [k for k in self.tagged if k.rsplit(":", 1)[0] == self.current_node]
        if not keys_ and self.selected_process_key:
            keys_ = [self.selected_process_key]
        return sorted(int(k.rsplit(":", 1)[1]) for k in keys_)

    @property
    def selected_gpu(self) -> int | None:
        key = tables.selected_key(self.query_one("#gpus", DataTable))
        if key is None or ":lost:" in key:
            return None
        return int(key.rsplit(":", 1)[1])

    # ------------------------------------------------------------------ work in progress, results
    def set_activity(self, key: str, text: str | None, short: str | None = None) -> None:
        """Work in progress (None: done): whole in the line above the footer, ``short`` (what
        and how far, never cut mid-number) in the status line at the top."""
        self.work.set(key, text, short)
        if self._panels_up:
            self._render_status()
            self._render_activity()

    def running_work(self) -> list[str]:
        """What is running now, one line each (the live state hands it to a follower too)."""
        return self.work.lines()

    def present(self, headline: str, show) -> None:
        """Show a result window now — unless a prompt (or any other window) is open: then it waits
        in the status line and opens when the operator is back on the main screen."""
        waiting = self.work.waiting
        if len(self.screen_stack) <= 1 and not waiting:
            show()
            return
        waiting.append((headline, show))
        # the status line at the top may be cut at 80 columns: the activity line says it whole
        self.notify(f"✔ {headline} — shown when this window closes")
        self._render_status()

    def _screen_changed(self, _screen) -> None:
        waiting = self.work.waiting
        if waiting and len(self.screen_stack) <= 1:
            _, show = waiting.pop(0)
            self._render_status()
            self.call_later(show)

    # ------------------------------------------------------------------ keys whose work is elsewhere
    def action_wait_recheck(self) -> None:
        self.checks.wait_recheck()

    def action_check(self) -> None:
        self.checks.pick()

    def action_custom_command(self) -> None:
        self.escalation.custom_command()

    async def action_act(self, rung: str) -> None:
        await self.escalation.act(rung)

    def action_signal_menu(self) -> None:
        self.escalation.signal_menu()

    def action_hypothesis(self) -> None:
        self.reasoning.hypothesis()

    def action_verdict(self) -> None:
        self.reasoning.verdict()

    def action_note(self) -> None:
        self.reasoning.note()

    def action_export(self) -> None:
        self.reasoning.export()

    # ------------------------------------------------------------------ the process panel's view
    @property
    def on_node_table(self) -> bool:
        return self.view_keys.on_node_table

    def action_filter(self) -> None:
        self.view_keys.filter()

    def action_clear_filter(self) -> None:
        self.view_keys.clear_filter()

    def action_tag(self) -> None:
        key = self.selected_process_key
        if key is None:
            return
        self.tagged.symmetric_difference_update({key})
        self.refresh_procs()
        self.query_one("#procs", ProcTable).action_cursor_down()
        pid = key.rsplit(":", 1)[1]
        mine = sum(1 for k in self.tagged if k.rsplit(":", 1)[0] == self.current_node)
        now = self.selected_process_key
        moved = f"; the cursor moved down to PID {now.rsplit(':', 1)[1]}" if now and now != key else ""
        self.say(f"{'tagged' if key in self.tagged else 'untagged'} PID {pid} ({mine} tagged: t, k and "
                 f"F9 act on them){moved}")

    # ------------------------------------------------------------------ actions
    def action_help(self) -> None:
        self.push_screen(HelpScreen(keys.help_rows(self.keymap, fleet=self.fleet_mode, read_only=self.read_only)))

    def action_toggle_all(self) -> None:
        self.show_all = not self.show_all          # watch_show_all: every process read, drawn

    def action_sort(self) -> None:
        self.view_keys.sort()

    def action_tree(self) -> None:
        self.view_keys.tree()

    def action_order_menu(self) -> None:
        self.view_keys.order_menu()

    def on_key(self, event: events.Key) -> None:
        self.view_keys.habit(event.key)        # j, \, F2 …: which key does that job here

    def read_whole_table(self, source: Source | None = None) -> None:
        """The node in view (or ``source``) reads its whole process table at once."""
        source = source if source is not None else self.current()[0]
        if source is not None:
            self.facade.read_whole(source)

    async def action_quit(self) -> None:
        # work in progress: say so first, quit at a second q (within QUIT_AGAIN_S)
        busy = self.running_work() + (["an action is being verified"] if self.session.acting else [])
        off = [f"{name}: {f.summary}" for name, snap in self.snapshots.items() if snap is not None
               for f in snap.findings if f.kind == "blockers-off"]
        if (busy or off) and time.monotonic() - self._quit_asked_at > QUIT_AGAIN_S:
            self._quit_asked_at = time.monotonic()
            if busy:
                self.say(f"still running: {printable('; '.join(busy), 120)} — q again to quit (what it saw so "
                         "far is recorded)", "warning")
            else:       # what B stopped is neither restored nor declined: the node would run without it
                self.say(f"{printable('; '.join(off), 160)} — restore it before you go (x, once no reset is "
                         "wanted), or n to note why it stays off; q again quits and leaves it off", "warning")
            return
        # actions in flight write what they saw; the follower's last state; then the screen goes
        self._stopping = True
        self.facade.view(self.current_node)
        await self.facade.finish(consoles.CONSOLE_STOPPED, console=self.console_id)
        self.exit(0)

    # ------------------------------------------------------------------ SIGHUP, SIGTERM: as q
    def _catch_stop_signals(self) -> None:
        """SIGHUP and SIGTERM handled on this (the App's) loop: Textual handles neither, and
        their default ends the process where it stands (no outcome for the action in flight, no
        "console stopped", the terminal left in the alternate screen)."""
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            try:
                before = signal.getsignal(signum)
                loop.add_signal_handler(signum, self._stop_signalled, signum)
            except (ValueError, RuntimeError, NotImplementedError):    # not the main thread
                continue
            self._signals_before[signum] = before
        self._signals_loop = loop

    def _release_stop_signals(self) -> None:
        loop, self._signals_loop = self._signals_loop, None
        if loop is None:
            return
        for signum, before in self._signals_before.items():
            try:
                loop.remove_signal_handler(signum)
                if before is not None:
                    signal.signal(signum, before)        # as they were before the console
            except (ValueError, RuntimeError, OSError, TypeError):
                pass
        self._signals_before.clear()

    def _stop_signalled(self, signum: int) -> None:
        """Stop as q does (a second q is not asked for: nobody may be there to press it)."""
        if self._stopping:
            return
        self._stopping = True
        name = signal.Signals(signum).name
        self.stopped_by = name
        note = f"{consoles.CONSOLE_STOPPED} ({name})"
        self.facade.view(self.current_node)
        # the record starts now on the engine's loop (it does not wait for this loop, which a
        # terminal that hung up may block), and a last resort ends the process if Textual cannot
        finishing = self._finish_now(note)
        finishing.add_done_callback(lambda _f: self._recorded.set())
        if not self.is_headless:            # a terminal to leave (never a test's headless App)
            threading.Thread(target=self._last_resort, name="stop-signal", daemon=True).start()
        asyncio.get_running_loop().create_task(self._exit_when_recorded(finishing, name))

    def _finish_now(self, note: str):
        finish = lambda: self.session.finish(note, console=self.console_id)    # noqa: E731
        loop = self.engine.loop if self.engine.running else None
        if loop is not None:
            return asyncio.run_coroutine_threadsafe(finish(), loop)
        return asyncio.get_running_loop().create_task(finish())

    async def _exit_when_recorded(self, finishing, name: str) -> None:
        try:
            waiting = asyncio.wrap_future(finishing) if not isinstance(finishing, asyncio.Future) else finishing
            await asyncio.wait_for(asyncio.shield(waiting), ACTION_STOP_S + RECORD_SLACK_S)
        except Exception:  # noqa: BLE001 - stopping goes on whatever the record met
            log.exception("stopping on %s", name)
        self.exit(0)

    def run(self, *args, **kwargs):
        try:
            return super().run(*args, **kwargs)
        finally:
            self._left.set()

    def _last_resort(self) -> None:
        """The stop signal's watchdog (a thread): once the record is written, Textual has
        LEAVE_S to restore the terminal and exit — none when the terminal hung up (there is
        nothing to restore, and its writes fail) — else the process ends here."""
        self._recorded.wait(ACTION_STOP_S + RECORD_SLACK_S)
        if _terminal_alive(self._tty) and self._left.wait(LEAVE_S):
            return
        if self._left.is_set():
            return
        log.warning("stopped by %s: the terminal is gone or Textual did not exit; ending the process",
                    self.stopped_by)
        os._exit(0)

    @property
    def selected_process_key(self) -> str | None:
        """The process row under the cursor (None on the row that counts the hidden ones)."""
        return self.query_one("#procs", ProcTable).selected_process


def _tty_fd() -> int | None:
    """The terminal the console runs in (Textual reads its keys from stdin), or None."""
    try:
        fd = sys.__stdin__.fileno() if sys.__stdin__ is not None else -1
    except (OSError, ValueError):
        return None
    return fd if fd >= 0 and os.isatty(fd) else None


def _terminal_alive(fd: int | None) -> bool:
    """Does the terminal still answer? One that hung up fails with EIO; with none, True."""
    if fd is None:
        return True
    import termios
    try:
        termios.tcgetattr(fd)
    except termios.error:
        return False
    return True
