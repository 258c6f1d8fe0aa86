"""`gpu-incident watch`: headless, the console's polling with nobody at the screen. When a cause
appears on a node it opens an incident on its own, with the evidence taken before anyone acts
(console/session/evidence.py), says so on stdout, and tells someone (``--notify CMD``,
``--webhook URL``; console/session/tell.py).

A cause is what the console's diagnosis finds and a person would be woken for:

- memory held by no live process (``ghost-memory``), device holders the driver does not list
  (``hidden-holder``), a GPU process orphaned (``orphan``), the driver asking for a recovery
  action (``recovery-action``), and any other finding of high severity or worse but the normal
  ones (a running job's ``holder``, the node's ``reset-blocker`` daemons);
- a thread in D for longer than ``dstate_after`` (default 60 s: a short D is ordinary I/O);
- a GPU holding memory at 0 % utilisation for longer than ``idle_after`` (default 600 s).

A cause is keyed by node, kind and GPUs (else PIDs), and is opened once: it counts as gone only
after it was absent ``clear_after`` seconds (hysteresis: a flapping node does not open a hundred
incidents). One incident per node episode: the first cause opens it, later ones extend it, and
it closes for the watch when the node has had no cause for ``clear_after``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from console.diagnosis import who
from console.incident.log import IncidentLog
from console.incident.timeline import Timeline
from console.diagnosis import fitness
from console.model import Finding, NodeSnapshot, severity_rank
from console.session import evidence
from console.session.core import Session
from console.session.events import Event, NodeUpdated
from console.session.paste import continue_command
from console.session.cause_words import causes_text, idle_summary, worst_severity
from console.session.tell import Teller
from console.sources.base import Source
from console.textsafe import one_line

log = logging.getLogger("gpu_incident.watch")

#: finding kinds that are a cause whatever their severity
CAUSE_KINDS = ("ghost-memory", "hidden-holder", "orphan", "recovery-action")
#: finding kinds that never are (a running job, the node's daemons); d-state goes by its own timer
NOT_CAUSES = ("holder", "reset-blocker", "d-state")
DSTATE_AFTER_S = 60.0
IDLE_AFTER_S = 600.0
CLEAR_AFTER_S = 30.0


@dataclass
class Cause:
    key: tuple
    kind: str
    summary: str
    first_seen: float
    last_seen: float
    opened: bool = False
    due: bool = True        # False: tracked, its timer (D-state, idle memory) not run out yet
    told_unrecorded: bool = False   # told (with its evidence inline) while no incident could be written


@dataclass
class NodeWatch:
    name: str
    timeline: Timeline | None = None
    incident: IncidentLog | None = None
    causes: dict[tuple, Cause] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    write_errors: list[str] = field(default_factory=list)   # the incident file's failed writes (a full disk)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _key(node: str, kind: str, gpus: Iterable[int], pids: Iterable[int]) -> tuple:
    return (node, kind, tuple(sorted(gpus)) if gpus else ("pids",) + tuple(sorted(pids)))


def causes_in(snap: NodeSnapshot, *, now: float, seen: dict[tuple, Cause], dstate_after: float,
              idle_after: float) -> list[Cause]:
    """The causes in this reading (a timed one with ``due`` False until it lasted long enough).
    ``seen``: what is being tracked (its first-seen times carry the timers)."""
    out: list[Cause] = []

    def add(kind: str, summary: str, gpus: Sequence[int] = (), pids: Sequence[int] = (), after: float = 0.0,
            since: float | None = None) -> None:
        key = _key(snap.name, kind, gpus, pids)
        known = seen.get(key)
        first = known.first_seen if known is not None else now
        if since is not None and 0 <= now - since:
            first = min(first, since)          # the console's history knew it before this watch
        out.append(Cause(key, kind, summary, first, now, opened=known.opened if known else False,
                         due=not after or now - first >= after))
    if snap.error is not None:
        # a reading the transport lost (SSH down, refused) says nothing; one that reached the node
        # and found its driver hung, unloaded or mismatched carries its own high findings: causes
        for f in snap.findings:
            if severity_rank(f.severity) >= severity_rank("high"):
                add(f.kind, f.summary, f.gpus, f.pids)
        return out
    for f in snap.findings:
        if f.kind == "holder" and any(isinstance(e, dict) and e.get("liveness") == "unkillable"
                                      for e in f.evidence.get("processes", ())):
            add("unkillable", f.summary, f.gpus, f.pids)      # a SIGKILL it cannot take: a cause, job or not
        if f.kind in NOT_CAUSES:
            continue
        if f.kind in CAUSE_KINDS or severity_rank(f.severity) >= severity_rank("high"):
            add(f.kind, f.summary, f.gpus, f.pids)
    for f in snap.findings:
        if f.kind == "d-state":
            add("d-state", f"{f.summary} (in D for more than {dstate_after:g} s)", f.gpus, f.pids, dstate_after,
                f.since)
    beyond = fitness.workload_mib(snap)          # what the node's own programs hold is no cause
    for g in snap.gpus:
        used = beyond.get(g.index) or 0
        if used > who.FREED_MIB and g.utilization_pct == 0:
            add("idle-memory", idle_summary(g.index, used, idle_after), (g.index,), (), idle_after)
    return out


class Watcher:
    """Subscribes to a session; opens, extends and closes incidents as causes come and go."""

    def __init__(self, session: Session, *, open_incident: Callable[[], Timeline],
                 dstate_after: float = DSTATE_AFTER_S, idle_after: float = IDLE_AFTER_S,
                 clear_after: float = CLEAR_AFTER_S, say: Callable[[str], None] = print,
                 tell: Callable[[dict], None] | None = None, clock: Callable[[], float] = time.time,
                 warn: Callable[[str], None] = _stderr, options: Sequence[str] = ()) -> None:
        self.session = session
        #: the console options the printed "continue with" command carries (console/session/paste.py)
        self.options = tuple(options)
        self.open_incident = open_incident
        self.dstate_after = dstate_after
        self.idle_after = idle_after
        self.clear_after = clear_after
        self.say = say
        self.tell = tell
        self.clock = clock
        self.nodes = {name: NodeWatch(name) for name in session.names()}
        self.tasks: set[asyncio.Task] = set()
        self.opened = 0
        #: incidents that could not be recorded (the directory refused, read-only, out of space or
        #: inodes): said on stderr once per cause and reason, told anyway, retried at every reading
        self.record_failures = 0
        self._said_failures: set[tuple] = set()     # (cause key or node, reason) already said
        self.warn = warn
        session.subscribe(self._event)

    def _event(self, event: Event) -> None:
        if isinstance(event, NodeUpdated):
            task = asyncio.get_running_loop().create_task(self.update(event.snapshot))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def open_causes(self) -> list[Cause]:
        return [c for n in self.nodes.values() for c in n.causes.values() if c.opened]

    async def update(self, snap: NodeSnapshot) -> None:
        node = self.nodes.setdefault(snap.name, NodeWatch(snap.name))
        async with node.lock:               # one node's readings in order; evidence before the next
            try:
                await self._update(node, snap)
            except Exception:  # noqa: BLE001 - one bad reading must not stop the watch
                log.exception("watch of %s", snap.name)

    async def _update(self, node: NodeWatch, snap: NodeSnapshot) -> None:
        now = self.clock()
        current = causes_in(snap, now=now, seen=node.causes, dstate_after=self.dstate_after,
                            idle_after=self.idle_after)
        fresh = []
        for cause in current:
            known = node.causes.get(cause.key)
            if known is not None:
                known.last_seen = now
                if cause.due and not known.opened:
                    known.summary = cause.summary
                    fresh.append(known)
            else:
                node.causes[cause.key] = cause
                if cause.due:
                    fresh.append(cause)
        present = {c.key for c in current}
        for key, cause in list(node.causes.items()):
            if snap.error is not None:
                break               # an unreadable poll clears nothing: it did not see the causes
            if key not in present and not cause.opened:
                del node.causes[key]    # a reading that contradicts a timed cause restarts its timer
                continue
            if key not in present and now - cause.last_seen >= self.clear_after:
                del node.causes[key]
                if cause.opened and node.incident is not None:
                    node.incident.note(node.name, f"watch: cause gone: {cause.kind} ({cause.summary})")
                    self.say(f"gpu-incident watch: {node.name}: cause gone: {cause.kind}")
        if fresh:
            await self._open(node, snap, fresh)
        if node.timeline is not None and not any(c.opened for c in node.causes.values()):
            self._close(node)

    def _record_failed(self, node: NodeWatch, snap: NodeSnapshot, fresh: list[Cause], why: str) -> None:
        """No incident could be opened: say so on stderr (once per cause and reason), count it, and
        tell anyway, the evidence inline (once per cause); the causes stay unopened, so the next
        reading tries again."""
        self.record_failures += 1
        for cause in fresh:
            if (cause.key, why) not in self._said_failures:
                self._said_failures.add((cause.key, why))
                self.warn(f"gpu-incident watch: {one_line(node.name, 80)}: cannot record the incident for "
                          f"{cause.kind} ({one_line(why, 200)}); telling anyway, trying again at every reading")
        untold = [c for c in fresh if not c.told_unrecorded]
        if untold and self.tell is not None:
            for cause in untold:
                cause.told_unrecorded = True
            self.tell(self.inline_document(node, snap, untold, why))

    def inline_document(self, node: NodeWatch, snap: NodeSnapshot, fresh: list[Cause], why: str) -> dict[str, Any]:
        """What --notify and --webhook are given when nothing could be written: no incident, no
        file, the evidence itself."""
        return {"incident": None, "file": None, "recorded": False, "not_recorded": why, "node": node.name,
                "opened": False, "causes": [{"kind": c.kind, "summary": c.summary} for c in fresh],
                "findings": [finding_json(f) for f in snap.findings],
                "gpus": [{"index": g.index, "memory_used_mib": g.memory_used_mib,
                          "utilization_pct": g.utilization_pct} for g in snap.gpus],
                "severity": worst_severity(snap, fresh),
                "evidence": evidence.gpu_related(snap),
                "continue": shlex.join(["gpu-incident", *self.options, node.name])}

    async def _open(self, node: NodeWatch, snap: NodeSnapshot, fresh: list[Cause]) -> None:
        timeline, incident = node.timeline, node.incident
        new = timeline is None or incident is None       # (the two are set and cleared together)
        if timeline is None or incident is None:
            try:
                timeline = self.open_incident()
            except (OSError, ValueError) as exc:       # read-only, no space, unsafe (UnsafeDirectory: OSError)
                self._record_failed(node, snap, fresh, getattr(exc, "strerror", None) or str(exc))
                return
            node.timeline = timeline
            node.write_errors = []

            def failed(msg: str, node: NodeWatch = node) -> None:
                node.write_errors.append(msg)
                self.record_failures += 1
                if (node.name, msg) not in self._said_failures:
                    self._said_failures.add((node.name, msg))
                    self.warn(f"gpu-incident watch: {one_line(node.name, 80)}: {one_line(msg, 200)}")
            incident = node.incident = IncidentLog(timeline, on_error=failed)
        for cause in fresh:
            cause.opened = True
        what = causes_text(fresh)
        ident = timeline.incident_id
        if new:
            self.opened += 1
            incident.note(node.name, f"watch opened this incident: {what}")
        else:
            incident.note(node.name, f"watch: another cause: {what}")
        written = await evidence.record(incident, self.session.source(node.name), node.name, snap,
                                        hypothesis=f"{fresh[0].kind} on {node.name}: {fresh[0].summary}",
                                        seen=f"watch: {node.name}: {what}")
        trail = self.session.feed.trails.get(node.name)
        if trail is not None:         # the node's memory since the watch began (the chart's data)
            data = trail.as_data()
            entry = incident.observation(
                node.name, f"watch: {node.name}'s memory over the {len(data.get('points', ()))} polls before",
                output=json.dumps(data)[:evidence.SNAPSHOT_CHARS])
            if entry is not None:
                written.append(f"#{entry.seq} memory")
        verb = "opened" if new else "extended"
        self.say(f"gpu-incident watch: {one_line(node.name, 80)}: {verb} incident {ident}: "
                 f"{one_line(what, 300)} (evidence: {len(written)} entries; continue with "
                 f"{continue_command(ident, [node.name], self.options)})")
        if self.tell is not None:
            doc = self.document(node, snap, fresh, new)
            if node.write_errors:        # a full disk: never a page about a file without saying it is empty
                doc.update(recorded=False, not_recorded=node.write_errors[-1], evidence=evidence.gpu_related(snap))
            self.tell(doc)

    def _close(self, node: NodeWatch) -> None:
        timeline = node.timeline
        if timeline is None:
            return
        if node.incident is not None:
            node.incident.note(node.name, f"watch: {node.name} has had no cause for {self.clear_after:g} s")
        self.say(f"gpu-incident watch: {one_line(node.name, 80)}: no cause left; incident "
                 f"{timeline.incident_id} stays for the postmortem")
        timeline.close()
        node.timeline = node.incident = None

    def document(self, node: NodeWatch, snap: NodeSnapshot, fresh: list[Cause], new: bool) -> dict[str, Any]:
        """What --notify and --webhook are given (JSON), for the node's open incident."""
        tl = node.timeline
        if tl is None:
            raise ValueError(f"{node.name}: no incident open")
        return {"incident": tl.incident_id, "file": str(Path(tl.path)), "recorded": True, "node": node.name,
                "opened": new, "causes": [{"kind": c.kind, "summary": c.summary} for c in fresh],
                "findings": [finding_json(f) for f in snap.findings],
                "gpus": [{"index": g.index, "memory_used_mib": g.memory_used_mib,
                          "utilization_pct": g.utilization_pct} for g in snap.gpus],
                "severity": worst_severity(snap, fresh),
                "continue": continue_command(tl.incident_id, [node.name], self.options)}

    async def stop(self) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=evidence.EVIDENCE_TIMEOUT_S)
        for node in self.nodes.values():
            if node.timeline is not None:
                if node.incident is not None:
                    node.incident.note(node.name, "watch stopped")
                node.timeline.close()
                node.timeline = None


def finding_json(f: Finding) -> dict[str, Any]:
    return {"kind": f.kind, "severity": f.severity, "pids": list(f.pids), "gpus": list(f.gpus),
            "summary": f.summary, "next_step": f.next_step}


async def run(sources: Sequence[Source], *, open_incident: Callable[[], Timeline], interval: float = 1.0,
              directory: str | os.PathLike[str] | None = None,
              dstate_after: float = DSTATE_AFTER_S, idle_after: float = IDLE_AFTER_S,
              clear_after: float = CLEAR_AFTER_S, teller: Teller | None = None, metrics_port: int | None = None,
              say: Callable[[str], None] = print, stop: asyncio.Event | None = None,
              options: Sequence[str] = ()) -> Watcher:
    """Watch until ``stop`` is set (SIGTERM/SIGINT set it in the CLI)."""
    from console.session import metrics
    stop = stop or asyncio.Event()
    session = Session(sources, interval=interval)
    up: dict[str, bool] = {}
    session.subscribe(lambda e: up.__setitem__(e.snapshot.name, e.snapshot.error is None)
                      if isinstance(e, NodeUpdated) else None)
    watcher = Watcher(session, open_incident=open_incident, dstate_after=dstate_after, idle_after=idle_after,
                      clear_after=clear_after, say=say, tell=teller, options=options)
    server = None
    if metrics_port is not None:
        from console.incident import freetimes
        server = await metrics.serve(metrics_port, lambda: metrics.page(
            [(c.key[0], c.kind) for c in watcher.open_causes()], up, watcher.opened,
            teller.failed if teller is not None else 0, freetimes.load(directory), watcher.record_failures))
    say(f"gpu-incident watch: watching {', '.join(session.names())} every {interval:g} s "
        f"(D-state after {dstate_after:g} s, idle memory after {idle_after:g} s)")
    session.start()
    try:
        await stop.wait()
    finally:
        if server is not None:
            server.close()
        await session.finish()
        await watcher.stop()
        if teller is not None:
            await teller.close()
        await session.stop()
        say("gpu-incident watch: stopped")
    return watcher
