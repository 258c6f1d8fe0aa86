"""The screen's one door to the engine. The screen (console/ui) runs on its own thread and loop;
the session (the nodes, their monitors, the incident, the action pipeline) runs on the engine's
(console/session/engine.py). Everything the screen asks of the engine goes through here and runs
there: planning (every key that acts plans through ``plan``, ``step`` or ``plan_custom``, so
Confirm shows exactly what ``execute`` runs), executing, checks, the incident's record, nodes
joining. What the screen draws comes the other way, in the session's events (a node's reading
with its memory trail and the rungs applied to it: ``NodeUpdated``), so nothing the engine owns
is read or changed from the screen's thread.

Unthreaded (tests, the headless clients) every call runs straight through on the caller's loop.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping, TypeVar

from console.actions.plan import ActionPlan
from console.actions.ports import ActionSource
from console.actions.run import ActionOutcome
from console.actions.step import Step
from console.checks.registry import CheckProgress, CheckResult
from console.incident import pending
from console.model import Finding, NodeSnapshot, TimelineEntry
from console.output.memory_series import MemorySeries
from console.session.engine import Engine
from console.sources.base import Source


T = TypeVar("T")


class Facade:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session = engine.session

    # ------------------------------------------------------------------ planning and acting
    async def plan(self, node: str, rung: str, *, pids: Iterable[int] = (), gpus: Iterable[int] = (),
                   signal: str | None = None, seen: NodeSnapshot | None = None) -> ActionPlan:
        pids, gpus = tuple(pids), tuple(gpus)
        return await self.engine.call(lambda: self._session.plan(node, rung, pids=pids, gpus=gpus, signal=signal,
                                                                 seen=seen))

    async def step(self, node: str, finding: Finding, *, wait_default: int) -> Step | None:
        return await self.engine.call(lambda: self._session.step(node, finding, wait_default=wait_default))

    async def plan_custom(self, node: str, line: str, *, seen: NodeSnapshot | None = None) -> ActionPlan:
        return await self.engine.call(lambda: self._session.plan_custom(node, line, seen=seen))

    async def after_check(self, node: str, step: Step, result: CheckResult, *,
                          chosen: Iterable[int] = ()) -> tuple[ActionPlan | None, str]:
        chosen = tuple(chosen)
        return await self._there(lambda: self._session.after_check(node, step, result, chosen=chosen))

    async def execute(self, plan: ActionPlan, *, typed: str | None = None, source: ActionSource | None = None,
                      **options: Any) -> ActionOutcome:
        return await self.engine.call(lambda: self._session.execute(plan, typed=typed, source=source, **options))

    async def run_check(self, source: Source, name: str, snap: NodeSnapshot | None, *,
                        progress: Callable[[CheckProgress], None] | None = None, **params: Any) -> CheckResult:
        hop = self.engine.hop(progress) if progress is not None else None
        return await self.engine.call(lambda: self._session.run_check(source, name, snap, progress=hop, **params))

    async def connection_call(self, make: Callable[[], Any]) -> Any:
        """A call on a client whose connections live on the engine's loop but that is not the
        session's (Slurm's client: its SSH connection belongs to the loop that made it)."""
        return await self.engine.call(make)

    # ------------------------------------------------------------------ the console's life
    def start(self, *, poll: bool) -> None:
        """The session starts polling (spread over one interval) on the engine's loop."""
        self.engine.do(lambda: self._session.start(poll=poll))

    def read_whole(self, source: Source) -> None:
        """The node reads its whole process table at its next poll (soon)."""
        self.engine.do(self._session.read_whole, source)

    async def finish(self, note: str, *, console: Mapping[str, Any] | None = None) -> None:
        """Actions in flight write what they saw, the stop is recorded, the followers' last state."""
        await self.engine.call(lambda: self._session.finish(note, console=console))

    # ------------------------------------------------------------------ the incident's record
    async def hypothesis(self, node: str | None, text: str) -> tuple[TimelineEntry | None, str]:
        """The entry and its label ("H2")."""
        def write() -> tuple[TimelineEntry | None, str]:
            entry = self._session.incident.hypothesis(node, text)
            return entry, (self._session.incident.number(entry.seq) if entry else "?")
        return await self._there(write)

    async def verdict_wanted(self) -> tuple[TimelineEntry | None, str, str, str]:
        """(the open hypothesis, its label, the suggested verdict, why)."""
        def read() -> tuple[TimelineEntry | None, str, str, str]:
            log = self._session.incident
            hyp = log.open_hypothesis()
            if hyp is None:
                return None, "", "", ""
            suggested, why = log.suggest_verdict()
            return hyp, log.number(hyp.seq), suggested, why
        return await self._there(read)

    async def verdict(self, node: str | None, verdict: str) -> TimelineEntry | None:
        return await self._there(lambda: self._session.incident.verdict(node, verdict))

    async def note(self, node: str | None, text: str, **fields: Any) -> TimelineEntry | None:
        return await self._there(lambda: self._session.incident.note(node, text, **fields))

    def note_soon(self, node: str | None, text: str, **fields: Any) -> None:
        """A note written on the engine's loop, in order with what is asked of it next (the
        console's start, before its first poll), not awaited."""
        self.engine.do(lambda: self._session.incident.note(node, text, **fields))

    async def record_check(self, result: CheckResult) -> TimelineEntry | None:
        return await self._there(lambda: self._session.incident.record_check(result))

    # ------------------------------------------------------------------ what the followers see
    def confirm_opened(self, plan: ActionPlan, *, mode: str | None) -> None:
        """A Confirm opened on this console: its followers see what is about to run (the live
        state the engine writes)."""
        def tell() -> None:
            state = self._session.feed.state
            if state is not None:
                state.confirm_opened(pending.opened(plan, by=state.by, mode=mode, now=time.time()))
        self.engine.do(tell)

    def confirm_answered(self, ran: bool) -> None:
        """The Confirm closed: run (y, the typed name) or cancelled."""
        def tell() -> None:
            state = self._session.feed.state
            if state is not None:
                state.confirm_answered("run" if ran else "cancelled")
        self.engine.do(tell)

    # ------------------------------------------------------------------ nodes and what is drawn
    async def add_node(self, source: Source) -> None:
        """A node joins (opened from the fleet); it polls at once when the session polls."""
        def add() -> None:
            monitor = self._session.add_node(source, start=False)
            if self._session.polling:
                monitor.start()
        await self._there(add)

    def view(self, node: str | None) -> None:
        """The node on screen (diagnosed every poll; its memory trail rides on its readings)."""
        self.engine.do(self._session.view, node)

    async def memory_series(self, node: str) -> MemorySeries:
        """A node's memory trail now (the screen asks when it turns to a node; after that the
        trail comes with each reading)."""
        return await self._there(lambda: self._session.memory_series(node))

    async def memory_data(self) -> Mapping[str, Any]:
        return await self._there(lambda: self._session.feed.memory_data())

    async def _there(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the engine's loop (a plain call), its result back here."""
        async def run() -> T:
            return fn()
        return await self.engine.call(run)
