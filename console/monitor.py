"""Polling engine: one monitor per node, each on its own rhythm. Free of Textual.

A monitor polls its source, runs diagnosis against the node's recent history
and hands the diagnosed snapshot to a callback. A slow or dead node only
delays itself: every poll is bounded, and nodes never wait for each other.
The history is a diagnosis.history.History: the last HISTORY polls as small digests
plus per-process streaks, so a node's memory does not grow with its process table.

Diagnosis skips unchanged input: a poll that diagnosis reads as the last diagnosed one
(diagnosis.unchanged.alike), no action taken since, keeps that poll's findings, for at most
REDIAGNOSE_S; a ``watched`` node (the one on screen) is diagnosed every poll.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Awaitable, Callable, Sequence

from console.clock import timeout_ignoring_stalls
from console.diagnosis.fleet import assess
from console.diagnosis.history import HISTORY_POLLS, History
from console.diagnosis.unchanged import alike
from console.config import FLEET_INTERVAL_S
from console.model import ActionRecord, FleetSnapshot, NodeSnapshot
from console.sources.base import Source
from console.turns import offload, pause

log = logging.getLogger("gpu_incident.engine")
HISTORY = HISTORY_POLLS   # polls kept per node (5 min at 1 s), as digests
POLL_SLACK_S = 5.0   # on top of the source's own deadline, for connects
STOP_TIMEOUT_S = 5.0
#: a node whose diagnosis input has not changed is diagnosed again at least this often
#: (findings that depend on time: how long a zombie has lasted, a streak crossing a threshold)
REDIAGNOSE_S = 5.0
#: ... and a node of more than BIG_NODE_PROCESSES processes every REDIAGNOSE_BIG_S (diagnosis of
#: 2,000 processes is ~1.6 ms: 256 such nodes every 5 s would be 51 diagnoses a second); the node
#: on screen is diagnosed every poll all the same
REDIAGNOSE_BIG_S = 15.0
BIG_NODE_PROCESSES = 1000
#: a snapshot with up to this many processes is diagnosed on the event loop (a millisecond or
#: two, less than a thread hand-off and the GIL contention it brings); bigger ones in a
#: worker thread (half a second on a 100,000-process node)
INLINE_DIAGNOSIS_PROCESSES = 200
#: a fleet round of up to this many nodes is assessed on the event loop, bigger ones in a thread
INLINE_FLEET_NODES = 256
#: the most polls a second the console starts on its own: up to this many nodes are polled
#: every second, more nodes every ``nodes / POLLS_PER_SECOND`` seconds (1,024 nodes: every 4 s),
#: unless --interval says otherwise (console/bench measures 256 nodes at 1 s in half a core)
POLLS_PER_SECOND = 256


def interval_for(nodes: int) -> float:
    """The poll interval the console chooses for ``nodes`` nodes (no --interval given)."""
    return max(1.0, nodes / POLLS_PER_SECOND)


def diagnosed(snap: NodeSnapshot, history: Sequence[NodeSnapshot] = (),
              actions: Sequence[ActionRecord] = ()) -> NodeSnapshot:
    """The snapshot with its findings filled in (diagnosis never takes a node down)."""
    from console.diagnosis import diagnose
    try:
        findings = diagnose(snap, history, actions, between=pause)
    except Exception as exc:  # noqa: BLE001
        log.exception("diagnosis failed on %s", snap.name)
        return dataclasses.replace(snap, warnings=snap.warnings + (f"diagnosis failed: {exc!r}",))
    return dataclasses.replace(snap, findings=tuple(findings))


async def bounded_poll(source: Source, deadline: float) -> NodeSnapshot:
    """source.poll() with an outer deadline: a source that overruns becomes a timed-out node.

    The deadline is charged with the poll's own time, not with loop lag
    (clock.timeout_ignoring_stalls): when the console's loop stalls (a 100,000-row render, a
    slow callback) past the deadline while a fast poll is in flight, the poll's answer is used,
    never a false "timed out"."""
    started = time.monotonic()
    try:
        async with timeout_ignoring_stalls(deadline):
            snap = await source.poll()
    except TimeoutError:
        snap = NodeSnapshot(name=source.name, taken_at=source.clock.now(),
                            error=f"probe timed out after {deadline:.0f} s")
    except Exception as exc:  # noqa: BLE001 - a source bug must not take the console down
        log.exception("poll failed on %s", source.name)
        snap = NodeSnapshot(name=source.name, taken_at=source.clock.now(),
                            error=f"poll failed: {type(exc).__name__}: {exc}")
    log.debug("poll %s took %.1f ms error=%s", source.name, (time.monotonic() - started) * 1000,
              snap.error)
    return snap


class Periodic:
    """What NodeMonitor and FleetMonitor share: ``poll_once`` every ``interval``, the wait cut
    short by ``poll_soon``; a consumer's bug is logged and the polling goes on; ``stop`` is
    bounded (a source that swallows the cancellation must not keep the console open)."""

    KIND = "poll"          # the task's name: "poll NODE", "fleet SOURCE"
    name: str
    interval: float
    source: object
    _task: asyncio.Task[None] | None
    _wake: asyncio.Event

    on_update: Callable | None
    latest: object

    async def poll_once(self) -> object:
        raise NotImplementedError

    async def _publish(self, snap):
        """Keep ``snap`` as the latest and hand it to ``on_update`` (awaited when it is a coroutine)."""
        self.latest = snap
        if self.on_update is not None:
            result = self.on_update(snap)
            if asyncio.iscoroutine(result):
                await result
        return snap

    @property
    def running(self) -> bool:
        """Polling on its own (started, not stopped)."""
        return self._task is not None and not self._task.done()

    def poll_soon(self) -> None:
        """Cut the current wait short (after an action, to show its effect at once)."""
        self._wake.set()

    async def _loop(self, phase: float = 0.0) -> None:
        if phase > 0:
            try:
                await asyncio.wait_for(self._wake.wait(), phase)
            except asyncio.TimeoutError:
                pass
        while True:
            started = time.monotonic()
            self._wake.clear()        # a poll_soon() during this poll still cuts the next wait
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bug in a consumer must not stop the polling
                log.exception("%s loop of %s", self.KIND, self.name)
            delay = max(0.0, self.interval - (time.monotonic() - started))
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass

    def start(self, phase: float = 0.0) -> None:
        """Poll every ``interval`` from now on, the first time after ``phase`` seconds."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(phase), name=f"{self.KIND} {self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=STOP_TIMEOUT_S)
            if not done:
                log.warning("%s task of %s did not stop within %s s", self.KIND, self.name, STOP_TIMEOUT_S)
            self._task = None
        try:
            await asyncio.wait_for(self.source.close(), 5)
        except Exception:  # noqa: BLE001
            log.exception("closing %s", self.name)


class NodeMonitor(Periodic):
    source: Source

    def __init__(self, source: Source, *, interval: float = 1.0,
                 on_update: Callable[[NodeSnapshot], Awaitable[None] | None] | None = None) -> None:
        self.source = source
        self.interval = interval
        self.on_update = on_update
        self.history = History(HISTORY)
        self.actions: list[ActionRecord] = []
        self.latest: NodeSnapshot | None = None
        self._task = None
        self._wake = asyncio.Event()
        #: diagnosed every poll (the node on screen); else unchanged input is diagnosed only
        #: every REDIAGNOSE_S
        self.watched = True
        self._diagnosed: tuple[NodeSnapshot, int] | None = None   # (the last diagnosed poll, actions then)
        self.diagnoses = 0                  # diagnoses run (the rest reused their findings)

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def deadline(self) -> float:
        return self.source.probe_timeout + POLL_SLACK_S

    async def poll_once(self) -> NodeSnapshot:
        pause()                   # a key held: the engine waits here, not mid-step (console/turns.py)
        snap = await bounded_poll(self.source, self.deadline)
        pause()
        snap = await self._diagnose(snap)
        pause()
        try:
            self.history.append(snap)
        except Exception:  # noqa: BLE001 - a history bug must not stop the polling
            log.exception("history of %s", self.name)
            self.history.clear()
        return await self._publish(snap)

    async def _diagnose(self, snap: NodeSnapshot) -> NodeSnapshot:
        last = self._diagnosed
        again = REDIAGNOSE_BIG_S if len(snap.processes) > BIG_NODE_PROCESSES else REDIAGNOSE_S
        if (not self.watched and last is not None and last[1] == len(self.actions)
                and 0 <= snap.taken_at - last[0].taken_at < again and alike(snap, last[0])):
            return dataclasses.replace(snap, findings=last[0].findings)
        if len(snap.processes) <= INLINE_DIAGNOSIS_PROCESSES or not offload():
            snap = diagnosed(snap, self.history, tuple(self.actions))
        else:
            # off the event loop: on a 100,000-process node diagnosis takes half a second, which
            # the console's keys would otherwise wait on every poll (the history is only
            # appended to below, on the loop, once diagnosis is done with it)
            snap = await asyncio.to_thread(diagnosed, snap, self.history, tuple(self.actions))
        self.diagnoses += 1
        self._diagnosed = (snap, len(self.actions))
        return snap

def start_all(monitors: Sequence[NodeMonitor]) -> None:
    """Start every monitor, their first polls spread over one interval: many nodes then poll
    evenly through each second instead of all at once (the engine's work, and the screen's
    updates, come in an even stream rather than a burst that keys wait behind)."""
    n = len(monitors)
    if monitors:
        log.info("%d node(s), poll interval %g s", n, monitors[0].interval)   # bench reads this line
    for i, m in enumerate(monitors):
        m.start(phase=m.interval * i / n if n > 1 else 0.0)


async def snapshot_all(sources: Sequence[Source]) -> list[NodeSnapshot]:
    """One diagnosed poll of every source, concurrently, in the order given."""
    monitors = [NodeMonitor(s) for s in sources]
    try:
        return list(await asyncio.gather(*(m.poll_once() for m in monitors)))
    finally:
        await asyncio.gather(*(m.stop() for m in monitors), return_exceptions=True)


class FleetMonitor(Periodic):
    """One fleet source (``prometheus://…``) polled every ``interval`` (15 s by default), each
    round bounded like a node's poll and assessed (console/diagnosis/fleet.py: suspicion, rank,
    suspects first): a source that hangs or fails gives a FleetSnapshot whose ``error`` says
    why, never a stuck console. ``source``: anything with ``async poll() ->
    FleetSnapshot`` and ``async close()`` (console/sources/prometheus/)."""

    KIND = "fleet"

    def __init__(self, source, *, name: str, interval: float = FLEET_INTERVAL_S,
                 on_update: Callable[[FleetSnapshot], Awaitable[None] | None] | None = None,
                 timeout: float | None = None) -> None:
        self.source = source
        self.name = name
        self.interval = interval
        self.on_update = on_update
        #: a round's deadline: ``timeout``, else the source's own timeout and slack for connecting
        self.deadline = timeout if timeout is not None else getattr(source, "timeout_s", 10.0) + POLL_SLACK_S
        self.latest: FleetSnapshot | None = None
        self._task = None
        self._wake = asyncio.Event()

    async def poll_once(self) -> FleetSnapshot:
        started = time.monotonic()
        try:
            async with timeout_ignoring_stalls(self.deadline):
                snap = await self.source.poll()
            # each node's suspicion and rank, suspects first; thousands of nodes (40 ms for
            # 4096 x 8 GPUs) off the event loop, where keys would wait on it
            snap = assess(snap) if len(snap.nodes) <= INLINE_FLEET_NODES else await asyncio.to_thread(assess, snap)
        except TimeoutError:
            snap = FleetSnapshot(source=self.name, taken_at=time.time(),
                                 error=f"no answer within {self.deadline:g} s (timed out)")
        except Exception as exc:  # noqa: BLE001 - a source bug must not take the console down
            log.exception("fleet poll failed on %s", self.name)
            snap = FleetSnapshot(source=self.name, taken_at=time.time(),
                                 error=f"query failed: {type(exc).__name__}: {exc}")
        log.debug("fleet poll %s took %.1f ms nodes=%d error=%s", self.name,
                  (time.monotonic() - started) * 1000, len(snap.nodes), snap.error)
        return await self._publish(snap)
