"""The Session: nodes, incident, policy and the action pipeline, with no screen.

    session = Session([source], timeline=tl)
    session.subscribe(print)                 # NodeUpdated, ActionStarted, ActionFinished, Said
    session.start()                          # polls every node, on the running event loop
    plan = await session.plan("gpu07", "sigkill", pids=[4242])   # from a fresh reading
    outcome = await session.execute(plan)    # record, send (guarded), verify, record the outcome
    await session.stop()

Confirm is the client's: a plan is shown (its exact commands) and only what the operator
confirmed is handed to ``execute``. ``execute`` is the one executor every client runs.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from console import rungs
from console.actions.plan import ActionPlan, ActionPolicy, plan_action, plan_custom
from console.actions.ports import ActionSource
from console.actions.run import ActionOutcome, ActionWatch, execute
from console.actions.step import Step, after_check, step_for
from console.checks.registry import CheckProgress, CheckResult, run_check
from console.clock import REAL_CLOCK, Clock
from console.diagnosis import text as t
from console.diagnosis.who import FREED_MIB
from console.incident import freetimes
from console.incident.applied import applied
from console.incident.log import IncidentLog
from console.incident.timeline import Timeline
from console.model import ActionRecord, Finding, NodeSnapshot, severity_rank
from console.monitor import NodeMonitor, start_all
from console.output.memory_series import MemorySeries
from console.session.events import ActionFinished, ActionStarted, Event, NodeUpdated, Said
from console.session import node_record
from console.session.feed import FEED_INTERVAL_S, LiveFeed
from console.sources.base import Source

log = logging.getLogger("gpu_incident.session")

#: how long ``stop`` waits for an action in flight to write what it saw
ACTION_STOP_S = 3.0
#: before an action, at most this many of the findings it rests on are noted in the timeline
GROUNDS_NOTED = 4
#: at most this many changes of a node's findings are recorded per session (a flapping finding
#: must not fill the incident)
MAX_FINDING_CHANGES = 40
#: a node with a finding this severe is recorded though no GPU holds memory (console/incident/summary.py)
FAULT_SEVERITY = "high"

Listener = Callable[[Event], object]


class Session:
    def __init__(self, sources: Sequence[Source], *, timeline: Timeline | None = None,
                 interval: float = 1.0, read_only: bool = False, dry_run: bool = False,
                 clock: Clock = REAL_CLOCK) -> None:
        self.timeline = timeline
        self.interval = interval
        self.clock = clock
        self.policy = ActionPolicy(read_only=read_only, dry_run=dry_run)
        self.incident = IncidentLog(timeline, on_error=lambda msg: self.say(msg, "error"))
        self.sources: list[Source] = []
        self.monitors: list[NodeMonitor] = []
        # every reading looks its node's monitor and source up: by name, not a walk of the list
        self._by_name: dict[str, NodeMonitor] = {}
        self._source_of: dict[str, Source] = {}
        self.watches: list[ActionWatch] = []      # observing after an action, until its deadline
        self.viewing: str | None = None           # the node a person looks at (diagnosed every poll)
        #: a console of many nodes: a node not on screen keeps only the processes its verdict
        #: rests on (Source.detail: its findings are the same); the node on screen, every one
        self.compact = False
        #: what a client is busy with, for the follower ("demo: wait-and-reread: 15 of 86 s")
        self.activity: Callable[[], list[str]] = lambda: []
        self._listeners: list[Listener] = []
        self._actions: set[asyncio.Task] = set()
        self._feed_task: asyncio.Task | None = None
        self._finished = False
        self._first_read: set[str] = set()        # nodes whose first reading was looked at
        self._held: set[str] = set()              # ... and held memory then (recorded)
        self._findings: dict[str, frozenset] = {}   # per node: the findings last recorded
        self._findings_written: dict[str, int] = {}  # per node: how many changes were recorded
        self.started = False
        self.polling = False                      # the monitors poll on their own
        for s in sources:
            self._add(s)
        self.feed = LiveFeed(timeline, nodes=len(self.sources), interval=interval,
                             warn=lambda msg: self.say(msg, "warning"))

    def attach(self, timeline: Timeline) -> None:
        """Record from now on into ``timeline`` (a headless caller opens the incident only when
        it has something to record)."""
        self.timeline = timeline
        self.incident.timeline = timeline

    # ------------------------------------------------------------------ events
    def subscribe(self, listener: Listener) -> None:
        """``listener(event)`` for every event, on the session's loop, in order."""
        self._listeners.append(listener)

    def publish(self, event: Event) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a client's bug must not stop the engine
                log.exception("session listener failed on %s", type(event).__name__)

    def say(self, text: str, severity: str = "information") -> None:
        self.publish(Said(text, severity))

    # ------------------------------------------------------------------ nodes
    def _add(self, source: Source) -> NodeMonitor:
        monitor = NodeMonitor(source, interval=self.interval, on_update=self.take_reading)
        if self.timeline is not None:       # continuing an incident: what it says was done here
            monitor.actions.extend(applied(self.timeline.entries, monitor.name))
        self.sources.append(source)
        self.monitors.append(monitor)
        self._by_name.setdefault(source.name, monitor)
        self._source_of.setdefault(source.name, source)
        return monitor

    def add_node(self, source: Source, *, start: bool = True) -> NodeMonitor:
        """A node joins the session (opened from the fleet); it polls at once when the session
        polls (``start=False``: the caller starts it, on the engine's loop)."""
        monitor = self._add(source)
        monitor.watched = self.viewing in (None, source.name)
        self._detail(monitor)
        if self.polling and start:
            monitor.start()
        return monitor

    @property
    def acting(self) -> bool:
        """An action is in flight (sent, or being verified)."""
        return any(not t.done() for t in self._actions)

    def source(self, name: str) -> Source | None:
        return self._source_of.get(name)

    def monitor(self, node: str | Source) -> NodeMonitor | None:
        if isinstance(node, str):
            return self._by_name.get(node)
        return next((m for m in self.monitors if m.source is node), None)

    def latest(self, name: str) -> NodeSnapshot | None:
        monitor = self.monitor(name)
        return monitor.latest if monitor is not None else None

    def view(self, name: str | None) -> None:
        """The node a person looks at is diagnosed every poll; the others may keep the findings
        of unchanged input for a while (console/monitor.py)."""
        self.viewing = name
        for m in self.monitors:
            m.watched = name is None or m.name == name
            self._detail(m)

    def _detail(self, monitor: NodeMonitor) -> None:
        """Every process of the node on screen (at its next poll, asked now), only those a verdict
        rests on of the others (``compact``)."""
        full = not self.compact or monitor.name == self.viewing
        if full and not monitor.source.detail and monitor.running:
            monitor.poll_soon()
        monitor.source.detail = full

    async def take_reading(self, snap: NodeSnapshot) -> None:
        """A node's diagnosed reading, as its monitor delivers each poll (and a client with a
        reading of its own: the tests and the bench): into the follower's feed and the incident,
        then to the clients with what they draw of it."""
        self.feed.add(snap, self.viewing)
        if snap.name not in self._first_read and snap.error is None and snap.gpus:
            self._first_read.add(snap.name)
            self.publish(self._updated(snap))      # drawn at once: the record asks the node its kernel first
            await self._record_first(snap)
            return
        if snap.name in self._held and snap.error is None and not self._finished:
            self._record_findings(snap)      # after "console stopped" nothing more is written
        self.publish(self._updated(snap))

    def _updated(self, snap: NodeSnapshot) -> NodeUpdated:
        """The reading as the screen draws it: with the rungs applied to the node and, for the
        node in view, its memory trail."""
        monitor = self.monitor(snap.name)
        done = tuple(a.rung for a in monitor.actions) if monitor is not None else ()
        return NodeUpdated(snap, done, self.memory_series(snap.name) if snap.name == self.viewing else None)

    async def _record_first(self, snap: NodeSnapshot) -> None:
        """The node's first reading, with its facts (the kernel asked once: ``uname -r``), the
        workload holding it and the console's findings (console/session/node_record.py)."""
        busy = any((g.memory_used_mib or 0) > FREED_MIB for g in snap.gpus)
        if not (busy or _faulty(snap)) or self._finished:
            return
        source = self.source(snap.name)
        kernel = await node_record.read_kernel(source) if self.timeline is not None else None
        self._findings[snap.name] = node_record.signature(node_record.recorded(snap))
        self._record_reading(snap, first=True, extra=node_record.recorded_fields(
            snap, kernel=kernel, demo=node_record.demo_source(source)))

    def _record_findings(self, snap: NodeSnapshot) -> None:
        """A change of the node's findings (a kind new or gone, a severity changed) while it held
        memory: one observation with the findings as they are now (bounded per node)."""
        found = node_record.recorded(snap)
        now = node_record.signature(found)
        before = self._findings.get(snap.name, frozenset())
        if now == before or self._findings_written.get(snap.name, 0) >= MAX_FINDING_CHANGES:
            return
        self._findings[snap.name] = now
        self._findings_written[snap.name] = self._findings_written.get(snap.name, 0) + 1
        self.incident.observation(snap.name, node_record.change_text(snap.name, found, before),
                                  findings=[node_record.finding_record(f) for f in found])

    def _record_reading(self, snap: NodeSnapshot, *, first: bool, extra: Mapping[str, Any] | None = None) -> None:
        """The memory a node holds, into the incident: its first reading that holds any (what
        was stuck, even on a node nobody acted on) and, when the console stops, its last one
        (what is still held): console/incident/summary.py judges "resolved" from them."""
        memory = {str(g.index): g.memory_used_mib for g in snap.gpus}
        busy = [g for g in snap.gpus if (g.memory_used_mib or 0) > FREED_MIB]
        if first and not busy and not _faulty(snap):
            return
        if first:
            self._held.add(snap.name)
            text = (f"first reading of {snap.name}: {t.gpus([g.index for g in busy])} "
                    f"{t.verb(len(busy), 'holds', 'hold')} {t.mib(sum(g.memory_used_mib or 0 for g in busy))}"
                    if busy else f"first reading of {snap.name}: no GPU holds memory; "
                    + ", ".join(dict.fromkeys(f.kind for f in snap.findings
                                              if severity_rank(f.severity) >= severity_rank(FAULT_SEVERITY))))
            self.incident.observation(snap.name, text, gpu_memory_before=memory, **(extra or {}))
        else:
            # what the console last found comes with it: memory still held where no finding has a
            # step is running work, not stuck memory (console/incident/summary.py)
            stuck = any(f.rung is not None for f in snap.findings)
            text = (f"{snap.name} when the console stopped: " + (
                f"{t.gpus([g.index for g in busy])} still {t.verb(len(busy), 'holds', 'hold')} "
                f"{t.mib(sum(g.memory_used_mib or 0 for g in busy))}"
                + ("" if stuck else ", in use by running work: nothing is stuck")
                if busy else "every GPU back at or under 1 GiB"))
            self.incident.observation(snap.name, text, gpu_memory_after=memory,
                                      findings=[node_record.finding_record(f) for f in node_record.recorded(snap)])

    def start(self, *, poll: bool = True) -> None:
        """Poll every node (spread over one interval) and keep the follower's state; on the running loop."""
        if self.started:
            return
        self.started = True
        self.polling = poll
        if poll:
            start_all(self.monitors)
        if self.feed.state is not None:
            self._feed_task = asyncio.get_running_loop().create_task(self._feed_loop(), name="session feed")

    async def poll_all(self) -> list[NodeSnapshot]:
        """One poll of every node now, concurrently (a headless caller's step)."""
        return list(await asyncio.gather(*(m.poll_once() for m in self.monitors)))

    async def _feed_loop(self) -> None:
        while True:
            await asyncio.sleep(FEED_INTERVAL_S)
            try:
                await self.feed.flush(self.actions(), self.names(), self.activity())
            except Exception:  # noqa: BLE001 - the follower's view must not stop the engine
                log.exception("live state")

    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    def actions(self) -> list[ActionRecord]:
        return [a for m in self.monitors for a in m.actions]

    def memory_series(self, node: str) -> MemorySeries:
        """The node's memory over the incident and the actions sent to it (the sparkline's data)."""
        monitor = self.monitor(node)
        return self.feed.series(node, monitor.actions if monitor is not None else ())

    async def finish(self, note: str | None = None, *, console: Mapping[str, Any] | None = None) -> None:
        """Cancel the actions in flight (each writes what it saw, within ACTION_STOP_S), record
        ``note`` (naming the ``console`` process that stops: console/incident/consoles.py),
        write the follower's last state. The nodes are still open (``stop`` closes them)."""
        if self._finished:
            return
        self._finished = True
        for watch in self.watches:
            watch.cancel()
        running = [t for t in self._actions if not t.done()]
        for task in running:
            task.cancel()
        ending = running + [w.task for w in self.watches if w.task is not None and not w.done]
        if ending:
            await asyncio.wait(ending, timeout=ACTION_STOP_S)
        if self._feed_task is not None:
            self._feed_task.cancel()
            self._feed_task = None
        for monitor in self.monitors:
            snap = monitor.latest
            if monitor.name in self._held and snap is not None and snap.error is None and snap.gpus:
                self._record_reading(snap, first=False)
        if note:
            self.incident.note(None, note, **({"console": dict(console)} if console else {}))
        try:
            await self.feed.last(self.actions(), self.names(), self.viewing)
        except Exception:  # noqa: BLE001
            log.exception("last live state")

    async def stop(self, note: str | None = None) -> None:
        """``finish``, then close every node (each bounded: stopping never hangs on a node)."""
        await self.finish(note)
        await asyncio.gather(*(m.stop() for m in self.monitors), return_exceptions=True)
        self.started = self.polling = False

    # ------------------------------------------------------------------ reading every process
    def read_whole(self, source: Source) -> None:
        """The node reads its whole process table at once (its probe reads only what the
        verdict depends on between whole reads: console/probe_scope.py)."""
        monitor = self.monitor(source)
        if monitor is not None:
            source.request_whole()
            monitor.poll_soon()

    async def whole_snapshot(self, source: Source) -> NodeSnapshot | None:
        """The node's reading once it has read every process (at once when it just did; else
        after its next poll, which reads them all), or None when no poll came in time."""
        monitor = self.monitor(source)
        if monitor is None or source.whole_is_fresh():
            return monitor.latest if monitor is not None else None
        before = monitor.latest
        self.read_whole(source)
        if not monitor.running:            # nobody polls it: read it here
            try:
                return await asyncio.wait_for(monitor.poll_once(), monitor.deadline)
            except Exception:  # noqa: BLE001 - a failed read: the caller plans from what it had
                return None
        deadline = time.monotonic() + monitor.deadline
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if monitor.latest is not before and source.whole_is_fresh():
                return monitor.latest
        return None

    # ------------------------------------------------------------------ the action pipeline
    async def plan(self, node: str, rung: str, *, pids: Iterable[int] = (), gpus: Iterable[int] = (),
                   signal: str | None = None, seen: NodeSnapshot | None = None) -> ActionPlan:
        """The plan for ``rung`` on ``node``, from the reading the operator sees (``seen``; else
        the latest) — for the rungs that act on every holder of a GPU, from a reading of every
        process. ValueError: no reading yet, or the rung does not apply."""
        source, snap = await self._reading_for(node, rung, seen)
        return self._stops_loops_first(plan_action(snap, rung, pids=tuple(pids), gpus=tuple(gpus), signal=signal),
                                       source, snap)

    async def plan_custom(self, node: str, line: str, *, seen: NodeSnapshot | None = None) -> ActionPlan:
        """A command line of the operator's own on ``node``, as an action. ValueError: see plan_custom."""
        if self.source(node) is None:
            raise ValueError(f"{node}: not a node of this session")
        return plan_custom(node, line, seen or self.latest(node))

    async def step(self, node: str, finding: Finding, *, wait_default: int) -> Step | None:
        """A finding's next step on ``node`` (`x`): a wait or a check, or a plan made as ``plan``
        makes one — from a reading of every process where the rung needs it, with the loop stops
        Confirm must show. ValueError: no reading yet."""
        source, snap = await self._reading_for(node, finding.rung, None)
        step = step_for(finding, snap, wait_default=wait_default)
        if step is not None and step.plan is not None:
            step = dataclasses.replace(step, plan=self._stops_loops_first(step.plan, source, snap))
        return step

    async def _reading_for(self, node: str, rung: str | None,
                           seen: NodeSnapshot | None) -> tuple[Source, NodeSnapshot]:
        """The node and the reading a rung is planned from: the one the operator sees (else the
        latest), or — for a rung that acts on every holder of a GPU — a reading of every process.
        ValueError: no reading yet."""
        source = self.source(node)
        snap = seen or self.latest(node)
        if source is None or snap is None:
            raise ValueError(f"{node}: no reading of this node yet")
        if rungs.of(rung).whole_first and not source.whole_is_fresh():
            snap = await self.whole_snapshot(source) or self.latest(node) or snap
        return source, snap

    def _stops_loops_first(self, plan: ActionPlan, source: Source, snap: NodeSnapshot) -> ActionPlan:
        """A rung the console's own nvidia-smi loops would block: Confirm says they stop first
        (``execute`` stops them and starts them again after: the same commands)."""
        stop = _loop_stop_commands(source, snap) if rungs.of(plan.rung).stops_loops else ()
        if not stop:
            return plan
        pids_text = ", ".join(str(p) for p in source.loop_pids)
        return dataclasses.replace(plan, notes=plan.notes + (
            f"first the console stops its own nvidia-smi loops (PIDs {pids_text}: they hold the device "
            f"files) and starts them again after: {'; '.join(stop)}",))

    async def stop_smi_loop(self, source: Source) -> tuple[str, ...]:
        """Stop the console's own nvidia-smi loops on ``source``'s node and start none until
        ``resume_smi_loop``; the commands run (each guarded by its start time)."""
        commands = _loop_stop_commands(source, self.latest(source.name))
        source.pause_loop()
        failed = []
        for command in commands:
            result = await source.run(command)
            if result.rc != 0:
                failed.append(f"{command}: {(result.error or result.stderr or f'exit {result.rc}').strip()[:120]}")
        if commands:
            self.incident.note(source.name, "stopped the console's own nvidia-smi loops before the action: "
                               + "; ".join(commands) + (f" (not stopped: {'; '.join(failed)})" if failed else ""))
        return commands

    def resume_smi_loop(self, source: Source) -> None:
        source.resume_loop()

    def after_check(self, node: str, step: Step, result: CheckResult, *,
                    chosen: Iterable[int] = ()) -> tuple[ActionPlan | None, str]:
        """The plan a step's check leads to (``Step.then``: the MPS clients' terminate_client),
        from the node's latest reading and what the check found; None and why when none. The
        plan's notes begin with what the check said (Confirm shows it)."""
        snap = self.latest(node)
        if snap is None:
            raise ValueError(f"{node}: no reading of this node yet")
        plan, why = after_check(step, snap, result.data, chosen=tuple(chosen))
        if plan is not None:
            plan = dataclasses.replace(plan, notes=(f"{result.name} said: {result.summary}",) + plan.notes)
        return plan, why

    async def execute(self, plan: ActionPlan, *, typed: str | None = None, source: ActionSource | None = None,
                      poll_s: float = 1.0, **options: Any) -> ActionOutcome:
        """Run a confirmed plan through the one executor (console/actions/run.py): the policy,
        the record before the effect, guarded signals, verification, the outcome entry, and
        the watch until the rung's deadline. ``source``: where it runs (default: the plan's
        node; a Slurm action passes its own)."""
        node_source = self.source(plan.node)
        source = source or node_source
        if source is None:
            raise ValueError(f"{plan.node}: not a node of this session")
        monitor = self.monitor(plan.node)
        hyp = self.incident.open_hypothesis()
        verifying = plan.verify_s if self.policy.refusal(plan) is None and not self.policy.dry_run else 0.0
        self.publish(ActionStarted(plan, verifying))
        read = monitor.poll_once if (monitor is not None and source is node_source) else None
        task = asyncio.current_task()
        if task is not None:
            self._actions.add(task)
        paused = node_source if (rungs.of(plan.rung).stops_loops and node_source is not None and verifying > 0
                                 and _loop_stop_commands(node_source, None)) else None
        if verifying > 0:
            self._note_grounds(plan)
        try:
            if paused is not None:
                await self.stop_smi_loop(paused)
            outcome = await execute(plan, source, policy=self.policy, timeline=self.timeline, monitor=monitor,
                                    read=read, typed=typed, hypothesis=hyp.seq if hyp else None,
                                    poll_s=poll_s, **options)
        finally:
            if paused is not None:
                self.resume_smi_loop(paused)
            if task is not None:
                self._actions.discard(task)
        if outcome.watch is not None:
            self.watches.append(outcome.watch)
        if outcome.status == "settled" and outcome.seconds_to_free and self.timeline is not None:
            # how long memory took to come back after this rung, kept for the next wait's length
            freetimes.record(self.timeline.path.parent, plan.node, plan.rung, outcome.seconds_to_free,
                             demo=node_record.demo_source(node_source))
        self.publish(ActionFinished(outcome))
        return outcome

    def _note_grounds(self, plan: ActionPlan) -> None:
        """Before a reset, a driver reload or a reboot: the findings it rests on (high or
        critical, on its GPUs), as notes in the form the gate and the watch write ("finding
        critical xid: …"), so the postmortem cites the Xid behind a reset without a kernel-log
        check; one already noted since the node's last action is not noted again."""
        snap = self.latest(plan.node)
        if snap is None or self.timeline is None or not rungs.of(plan.rung).rests_on_faults:
            return
        on = set(plan.gpus)
        since = [e for e in self.timeline.entries if e.node == plan.node]
        last_action = max((e.seq for e in since if e.kind == "action"), default=0)
        said = {e.text for e in since if e.kind == "note" and e.seq > last_action}
        found = [f for f in snap.findings if severity_rank(f.severity) >= severity_rank("high")
                 and (not on or set(f.gpus) & on)]
        for f in sorted(found, key=lambda f: -severity_rank(f.severity))[:GROUNDS_NOTED]:
            text = f"finding {f.severity} {f.kind}: {f.summary}"
            if text not in said:
                self.incident.note(plan.node, text)

    async def run_check(self, source: Source, name: str, snap: NodeSnapshot | None, *,
                        progress: Callable[[CheckProgress], None] | None = None, **params: Any) -> CheckResult:
        """A read-only check on a node (console/checks/registry.py), on the session's loop."""
        return await run_check(source, name, snap, progress=progress, **params)


def _faulty(snap: NodeSnapshot) -> bool:
    """A finding this severe makes the node part of the incident even while no GPU holds memory
    (a pending row remap, an Xid that wants a reset): its reading and its findings are recorded."""
    return any(severity_rank(f.severity) >= severity_rank(FAULT_SEVERITY) for f in snap.findings)


def custom_output(outcome: ActionOutcome) -> bool:
    """A command of the operator's own printed something worth showing."""
    return rungs.of(outcome.plan.rung) is rungs.CUSTOM and bool(outcome.results)


def _loop_stop_commands(source: Source, snap: NodeSnapshot | None) -> tuple[str, ...]:
    """The commands that stop the console's own nvidia-smi loops on ``source``'s node (none
    when it runs none)."""
    return tuple(source.loop_stop_commands(snap))
