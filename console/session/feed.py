"""What the session keeps of each node over the incident and hands on: the memory trail (the
sparklines, the postmortem's chart) and the live state a follower's mirror shows
(`gpu-incident follow ID --live`).

The state file (console/incident/mirror.py) is written beside the incident while a follower asks
for it (mirror.followed: nobody following, nothing is written), at most once a second (every 2 s
at 256 nodes), in a thread (a slow disk never holds the engine or a key), and once more when the
session stops ("running": false). A write that fails is said once and the session keeps running.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Callable, Sequence

from console.incident.mirror import StateFeed, followed, state_path, want_path
from console.incident.readings import readings
from console.incident.timeline import Timeline
from console.model import ActionRecord, NodeSnapshot, TimelineEntry
from console.output.memory_series import MemorySeries, MemoryTrail

FEED_INTERVAL_S = 1.0
#: past this many nodes the state is written every ``nodes / FEED_NODES_PER_S`` seconds
#: (256 nodes: every 2 s; turning every node into JSON each second cost ~15% of a core)
FEED_NODES_PER_S = 128


class LiveFeed:
    def __init__(self, timeline: Timeline | None, *, nodes: int, interval: float,
                 warn: Callable[[str], None]) -> None:
        self.trails: dict[str, MemoryTrail] = {}
        self.state: StateFeed | None = None
        self._warn = warn
        self._busy = False
        self._warned = False
        self._want: Path | None = None
        if timeline is not None:
            self.seed(timeline.entries)
            every = max(FEED_INTERVAL_S, nodes / FEED_NODES_PER_S)
            self._want = want_path(timeline.path)
            # one state file per driving console: two on one incident never overwrite each other's
            self.state = StateFeed(state_path(timeline.path, driver=str(os.getpid())), incident_id=timeline.incident_id,
                                   by=timeline.by, interval=interval, min_interval=every)

    def seed(self, entries: Sequence[TimelineEntry]) -> None:
        """Continuing an incident (``--incident ID``): every memory reading its timeline holds
        (first readings, actions' before and after, a wait's reads: console/incident/readings.py)
        starts each node's trail, so the chart shows the incident so far, not an empty line."""
        for r in readings(entries):
            if not isinstance(r.node, str):
                continue
            read = {int(k): v for k, v in r.memory.items()
                    if str(k).isdecimal() and (v is None or (isinstance(v, int) and not isinstance(v, bool)))}
            trail = self.trails.get(r.node)
            if trail is None:
                trail = self.trails[r.node] = MemoryTrail()
            trail.add_reading(r.t, read)

    def add(self, snap: NodeSnapshot, viewing: str | None) -> None:
        """Every poll: the node's memory trail, and the follower's state (cheap: kept, not written)."""
        trail = self.trails.get(snap.name)
        if trail is None:
            trail = self.trails[snap.name] = MemoryTrail()
        trail.add(snap)
        if self.state is not None:
            self.state.update(snap, viewing)

    def series(self, node: str, actions: Sequence[ActionRecord]) -> MemorySeries:
        trail = self.trails.get(node)
        return trail.series([a for a in actions if a.node in (None, node)]) if trail is not None else MemorySeries()

    def memory_data(self) -> dict:
        """Every node's memory trail as the state document holds it (the postmortem's chart)."""
        return {n: t.as_data() for n, t in self.trails.items()}

    async def flush(self, actions: list[ActionRecord], order: list[str], activity: list[str], *,
                    running: bool = True, force: bool = False) -> None:
        feed, want = self.state, self._want
        if feed is None or want is None or self._busy or not (force or (feed.due() and followed(want))):
            return
        self._busy = True
        try:
            memory = self.memory_data()      # taken on the loop (cheap: the trails' points); the
            # snapshots are turned into JSON in the writer's thread (they never change)
            await asyncio.to_thread(lambda: feed.write(feed.document(memory, actions, running=running,
                                                                     order=order, activity=activity)))
        except OSError:
            if not self._warned:
                self._warned = True
                self._warn(f"{feed.error}: a follower's live view stops here")
        finally:
            self._busy = False

    async def last(self, actions: list[ActionRecord], order: list[str], viewing: str | None) -> None:
        """The last state, marked stopped (a follower says the driving console is gone)."""
        if self.state is not None:
            self._busy = False
            self.state.viewing = viewing
            await self.flush(actions, order, [], running=False, force=True)
