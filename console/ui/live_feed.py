"""What the console keeps of each node over the incident and hands on: the memory trail (its
sparklines) and the live state a follower's mirror shows (`gpu-incident follow ID --live`).

Mixed into IncidentApp. The state file (console/incident/mirror.py) is written beside the
incident after polls while a follower asks for it (mirror.followed: nobody following, nothing is
written), at most once a second (every 2 s at 256 nodes), in a thread (a slow disk never holds a
key), and once more when the console stops ("running": false). A write that fails is said once
and the console keeps running.
"""
from __future__ import annotations

import asyncio

from console.incident.mirror import StateFeed, followed, state_path, want_path
from console.model import NodeSnapshot
from console.output.memory_series import MemoryTrail, MemorySeries


class LiveFeed:
    """Mixed into IncidentApp (needs: sources, monitors, timeline, current_node, notify, set_interval)."""

    FEED_INTERVAL_S = 1.0
    #: past this many nodes the state is written every ``nodes / FEED_NODES_PER_S`` seconds
    #: (256 nodes: every 2 s; turning every node into JSON each second cost ~15% of a core)
    FEED_NODES_PER_S = 128

    def start_feed(self, interval: float) -> None:
        self.trails: dict[str, MemoryTrail] = {s.name: MemoryTrail() for s in self.sources}
        self.state_feed: StateFeed | None = None
        self._feed_busy = False
        self._feed_warned = False
        if self.timeline is not None:
            every = max(self.FEED_INTERVAL_S, len(self.sources) / self.FEED_NODES_PER_S)
            self._want = want_path(self.timeline.path)
            self.state_feed = StateFeed(state_path(self.timeline.path), incident_id=self.timeline.incident_id,
                                        by=self.timeline.by, interval=interval, min_interval=every)
            self.set_interval(self.FEED_INTERVAL_S, self._flush_feed)

    def feed_snapshot(self, snap: NodeSnapshot) -> None:
        trail = self.trails.setdefault(snap.name, MemoryTrail())
        trail.add(snap)
        if self.state_feed is not None:
            self.state_feed.update(snap, self.current_node)

    def memory_series(self, node: str) -> MemorySeries:
        """The node's memory over the incident and the actions sent to it (the sparkline's data)."""
        trail = self.trails.get(node) if hasattr(self, "trails") else None
        monitor = next((m for m in self.monitors if m.name == node), None)
        actions = [a for a in (monitor.actions if monitor else ()) if a.node in (None, node)]
        return trail.series(actions) if trail is not None else MemorySeries()

    def memory_data(self) -> dict:
        """Every node's memory trail as the state document holds it (the postmortem's chart)."""
        return {n: t.as_data() for n, t in getattr(self, "trails", {}).items()}

    def _feed_document(self, running: bool):
        """What to write, taken on the loop (cheap: the trails' points); the snapshots are turned
        into JSON in the writer's thread (they never change)."""
        feed = self.state_feed
        memory = self.memory_data()
        actions = [a for m in self.monitors for a in m.actions]
        order = [s.name for s in self.sources]
        activity = self.running_work() if running else []
        return lambda: feed.document(memory, actions, running=running, order=order, activity=activity)

    async def _flush_feed(self, running: bool = True, force: bool = False) -> None:
        feed = self.state_feed
        if feed is None or self._feed_busy or not (force or (feed.due() and followed(self._want))):
            return
        self._feed_busy = True
        try:
            build = self._feed_document(running)
            await asyncio.to_thread(lambda: feed.write(build()))
        except OSError:
            if not self._feed_warned:
                self._feed_warned = True
                self.notify(f"{feed.error}: a follower's live view stops here", severity="warning")
        finally:
            self._feed_busy = False

    async def stop_feed(self) -> None:
        """The last state, marked stopped (a follower says the driving console is gone)."""
        if self.state_feed is not None:
            self._feed_busy = False
            self.state_feed.viewing = self.current_node
            await self._flush_feed(running=False, force=True)
