"""The engine's cost per poll with many nodes (console/monitor.py): a node whose diagnosis input
did not change keeps its findings for a while unless it is the one on screen; polls of many
nodes are spread over the interval; the interval grows past 256 nodes."""
from __future__ import annotations

import asyncio
import dataclasses

from console import monitor
from console.clock import FakeClock
from console.model import ActionRecord, NodeSnapshot
from console.monitor import NodeMonitor, interval_for, start_all
from console.sources.base import Source
from console.sources.sim import SimSource


class Quiet(Source):
    kind = "quiet"

    async def run(self, command: str, timeout: float = 30.0):
        raise AssertionError("nothing runs here")


class Replay(Quiet):
    """A node that answers the same snapshot every poll, a second later each time."""
    kind = "replay"

    def __init__(self, snap: NodeSnapshot, clock: FakeClock) -> None:
        super().__init__(snap.name)
        self.snap, self.clock = snap, clock

    async def poll(self) -> NodeSnapshot:
        self.clock.advance(1.0)
        return dataclasses.replace(self.snap, taken_at=self.clock.now())


async def _seed() -> NodeSnapshot:
    return await SimSource(name="n1", scenario="seed", clock=FakeClock()).poll()


async def test_an_unchanged_real_size_node_off_screen_is_diagnosed_less_often_and_a_change_at_once():
    from console.sim.node import SimNode
    clock = FakeClock()
    big = await SimSource(node=SimNode("seed", clock=clock, name="n1", size=(2000, 10000))).poll()
    assert len(big.processes) > monitor.BIG_NODE_PROCESSES
    off = NodeMonitor(Replay(big, FakeClock()))
    off.watched = False
    polls = int(monitor.REDIAGNOSE_BIG_S) + 2
    for _ in range(polls):
        snap = await off.poll_once()
        assert [f.kind for f in snap.findings] == ["reset-blocker", "holder"]
    assert off.diagnoses == 2, f"once, then once {monitor.REDIAGNOSE_BIG_S:g} s later: {off.diagnoses}"
    off.source.snap = dataclasses.replace(big, processes=tuple(p for p in big.processes if p.pid != 72169))
    await off.poll_once()
    assert off.diagnoses == 3, "a change of what diagnosis reads is diagnosed at once"


async def test_an_unchanged_node_off_screen_is_diagnosed_every_few_seconds_the_one_on_screen_every_poll():
    snap = await _seed()
    clock = FakeClock()
    off, on = NodeMonitor(Replay(snap, clock)), NodeMonitor(Replay(snap, FakeClock()))
    off.watched = False
    polls = 12
    for _ in range(polls):
        a, b = await off.poll_once(), await on.poll_once()
        assert a.findings and [f.kind for f in a.findings] == [f.kind for f in b.findings]
    assert on.diagnoses == polls
    assert off.diagnoses <= polls / monitor.REDIAGNOSE_S + 1, off.diagnoses
    # a change of what diagnosis reads is diagnosed at once
    gone = dataclasses.replace(snap, processes=tuple(p for p in snap.processes if p.pid != 72169))
    off.source.snap = gone
    before = off.diagnoses
    await off.poll_once()
    assert off.diagnoses == before + 1
    # so is an action on the node
    off.actions.append(ActionRecord(rung="sigkill", ts=clock.now(), node="n1", pids=(72170,)))
    await off.poll_once()
    assert off.diagnoses == before + 2


async def test_many_nodes_poll_spread_over_the_interval():
    started: list[float] = []
    loop = asyncio.get_running_loop()

    class Stamp(Quiet):
        kind = "stamp"

        async def poll(self) -> NodeSnapshot:
            started.append(loop.time())
            return NodeSnapshot(name=self.name, taken_at=0.0)

    monitors = [NodeMonitor(Stamp(f"n{i}"), interval=0.4) for i in range(8)]
    t0 = loop.time()
    start_all(monitors)
    try:
        while len(started) < 8:
            await asyncio.sleep(0.02)
    finally:
        await asyncio.gather(*(m.stop() for m in monitors))
    first = sorted(t - t0 for t in started[:8])
    assert first[-1] - first[0] >= 0.4 * 6 / 8, first      # not all at once: across the interval


def test_the_interval_the_console_chooses_grows_past_256_nodes():
    assert interval_for(1) == interval_for(256) == 1.0
    assert interval_for(512) == 2.0 and interval_for(1024) == 4.0


async def test_what_diagnosis_reads_alike_ignores_time_running_or_sleeping_and_the_probes_own_processes():
    from console.diagnosis.unchanged import alike
    snap = await _seed()
    later = dataclasses.replace(snap, taken_at=snap.taken_at + 1, probe_ms=99.0)
    assert alike(snap, later)
    spin = tuple(dataclasses.replace(p, state="R" if p.state == "S" else p.state) for p in snap.processes)
    assert alike(snap, dataclasses.replace(snap, processes=spin))
    dead = tuple(dataclasses.replace(p, state="Z") if p.pid == 72169 else p for p in snap.processes)
    assert not alike(snap, dataclasses.replace(snap, processes=dead))
    moved = (dataclasses.replace(snap.gpus[0], memory_used_mib=1),) + snap.gpus[1:]
    assert not alike(snap, dataclasses.replace(snap, gpus=moved))
    busy = tuple(dataclasses.replace(g, utilization_pct=99) for g in snap.gpus)
    assert alike(snap, dataclasses.replace(snap, gpus=busy))


async def test_history_digests_are_the_same_when_the_parser_hands_over_the_same_gpus():
    from console.diagnosis.history import History, digest
    snap = await _seed()
    history = History()
    polls = [dataclasses.replace(snap, taken_at=snap.taken_at + i) for i in range(3)]   # the same Gpu objects
    for p in polls:
        history.append(p)
    plain = [digest(polls[0])]
    for p in polls[1:]:
        plain.append(digest(p, plain[-1]))
    assert list(history) == plain
    assert list(history)[2].gpus is list(history)[1].gpus
