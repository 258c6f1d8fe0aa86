"""Fleet mode, mixed into IncidentApp: a fleet source (``prometheus://HOST:PORT``) feeds the
fleet screen (console/ui/fleet_view.py); ``enter`` on a node opens its console over SSH in
this incident, the node added to the node list; ``escape`` goes back to the fleet.

The fleet is polled by console/monitor.py's FleetMonitor (every 15 s by default: the config
key ``fleet_interval`` or ``--fleet-interval``); each round arrives as a FleetUpdated message,
as the node polls arrive as NodeUpdated. A round that fails keeps the last nodes on screen,
marked stale, with the error in the header.

On the fleet screen the app's keys that act on a node's panels (w, c, /, a and the process
and GPU keys' stand-ins) are off: there is no node panel to act on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from textual.message import Message

from console.config import FLEET_INTERVAL_S
from console.model import FleetNode, FleetSnapshot
from console.monitor import FleetMonitor
from console.output.fleet_rows import FleetView, next_view, opened_text
from console.sources.base import Source
from console.ui import keys
from console.ui.fleet_view import FleetScreen

#: the app's actions that act on the node console's panels: off while the fleet screen shows
NODE_ACTIONS = frozenset({"wait_recheck", "check", "filter", "toggle_all", "elsewhere", "act", "signal_menu",
                          "tag", "next_step", "drain", "resume"})
FLEET_SCREEN = "fleet"


@dataclass(frozen=True)
class FleetSetup:
    source: object                                  # async poll() -> FleetSnapshot, async close()
    name: str                                       # the target as given: prometheus://HOST:PORT
    node_source: Callable[[str], Source]            # hostname -> that node's Source; ValueError: why not
    interval: float = FLEET_INTERVAL_S


class FleetUpdated(Message):
    """A fleet round arrived (posted by the FleetMonitor; tests post it too)."""

    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class FleetMode:
    """Mixed into IncidentApp (needs: sources, monitors, node_interval, incident, autostart,
    current_node, say, _render_nodes, _render_status, refresh_node_view, _watch_current)."""

    def init_fleet(self, fleet: FleetSetup | None) -> None:
        self.fleet = fleet
        self.fleet_view = FleetView(None, None)
        self.fleet_monitor = (FleetMonitor(fleet.source, name=fleet.name, interval=fleet.interval,
                                           on_update=self._on_fleet_snapshot) if fleet is not None else None)

    @property
    def fleet_mode(self) -> bool:
        return getattr(self, "fleet", None) is not None

    @property
    def fleet_screen(self) -> FleetScreen | None:
        if not self.fleet_mode:
            return None
        try:
            return self.get_screen(FLEET_SCREEN)
        except KeyError:           # not installed yet (before mount)
            return None

    @property
    def on_fleet_screen(self) -> bool:
        return self.fleet_mode and isinstance(self.screen, FleetScreen)

    def start_fleet(self) -> None:
        """At mount: the fleet screen on top, the first query at once."""
        if not self.fleet_mode:
            return
        self.install_screen(FleetScreen(self.fleet.name), FLEET_SCREEN)
        self.push_screen(FLEET_SCREEN)
        self.call_after_refresh(self._render_activity)
        if self.autostart:
            self.fleet_monitor.start()

    async def stop_fleet(self) -> None:
        if self.fleet_monitor is not None:
            await self.fleet_monitor.stop()

    async def _on_fleet_snapshot(self, snap: FleetSnapshot) -> None:
        self.post_message(FleetUpdated(snap))

    def on_fleet_updated(self, message: FleetUpdated) -> None:
        error, was = message.snapshot.error, self.fleet_view.error
        self.fleet_view = next_view(self.fleet_view, message.snapshot)
        if error and error != was:           # whole in the messages (m); the header may cut it
            self.say(error, "warning")
        elif was and not error:
            self.say(f"{self.fleet.name} answers again")
        screen = self.fleet_screen
        if screen is not None:
            screen.show_view(self.fleet_view)

    def show_fleet_activity(self, line) -> None:
        screen = self.fleet_screen
        if screen is not None:
            screen.show_activity(line)

    # ------------------------------------------------------------------ keys
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """False: the key is off and not in the footer (Textual: None would show it dimmed);
        under --read-only a dangerous key is off everywhere (ui/keys.py)."""
        if self.read_only and keys.is_dangerous(action, parameters):
            return False
        if action == "fleet":
            return self.fleet_mode and not self.on_fleet_screen
        if action in NODE_ACTIONS and self.on_fleet_screen:
            return False
        return True

    def action_fleet(self) -> None:
        if self.fleet_mode and not self.on_fleet_screen:
            self.push_screen(FLEET_SCREEN)

    def action_fleet_refresh(self) -> None:
        if self.fleet_monitor is not None:
            self.fleet_monitor.poll_soon()
            self.say(f"querying {self.fleet.name} now")

    def action_fleet_filter(self) -> None:
        from console.ui.prompts import TextPrompt
        screen = self.fleet_screen
        if screen is None:
            return

        def got(text: str | None) -> None:
            if text is not None:
                screen.set_filter(text)
        self.push_screen(TextPrompt("Filter the fleet by hostname (a part of it; empty clears)",
                                    value=screen.filter_text), got)

    def action_open_node(self) -> None:
        screen = self.fleet_screen
        node = screen.table.current if screen is not None else None
        if node is None:
            self.say("no node under the cursor", "warning")
            return
        self.open_fleet_node(node)

    # ------------------------------------------------------------------ opening a node
    def open_fleet_node(self, node: FleetNode) -> Source | None:
        """The node's console over SSH, in this incident: added to the node list (or, when it
        is there already, chosen), recorded in the timeline with why it was suspect."""
        try:
            source = self.fleet.node_source(node.hostname)
        except ValueError as exc:
            self.say(f"cannot open {node.hostname}: {exc}", "error")
            return None
        name = source.name
        known = next((s for s in self.sources if s.name == name), None)
        if known is None:
            monitor = self.session.add_node(source, start=False)
            if self.session.polling:
                self.engine.do(monitor.start)         # on the engine's loop
            self.incident.note(name, opened_text(node, self.fleet.name))
            self.say(opened_text(node, self.fleet.name))
        else:
            source = known
            self.say(f"{name} is in the node list already: showing it")
        self.current_node = name
        self._watch_current()
        screen = self.fleet_screen
        if screen is not None:
            screen.opened.add(node.hostname)
            screen.table.refresh()                 # its row says "(opened)"
            screen.render_detail(screen.table.current)
        if self.on_fleet_screen:
            self.pop_screen()
        self._render_nodes({name: None})
        table = self.query_one("#nodes")
        table.user_moved = True
        table.move_cursor(row=table.get_row_index(name), animate=False)
        self._render_status()
        self.refresh_node_view()
        return source
