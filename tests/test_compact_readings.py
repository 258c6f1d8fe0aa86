"""A node not on screen keeps only the processes its verdict rests on (Source.detail False,
sources/watch.py ``kept``): its findings must be the ones the whole table gives, poll after poll
and step after step, on every simulated incident inside a real-size table."""
from __future__ import annotations

import pytest

from console.clock import FakeClock
from console.actions.step import step_for
from console.diagnosis import diagnose
from console.session.core import Session
from console.sim.node import SimNode
from console.sim.scenarios import scenario_names
from console.sources.sim import SimSource
from tests.sim_fixtures import kept_shell_sim, take_step

SIZE = (600, 3000)


def _node(scenario: str, detail: bool, kept: bool = False) -> SimSource:
    """``kept``: the probes go to one long-lived shell (light and whole probes, as over SSH)."""
    clock = FakeClock()
    make = kept_shell_sim if kept else SimSource
    src = make(name="n", node=SimNode(scenario, clock=clock, name="n", size=SIZE))
    src.detail = detail
    return src


def _said(findings) -> list[tuple]:
    return [(f.kind, f.severity, f.summary, f.next_step, tuple(f.pids), tuple(f.gpus)) for f in findings]


@pytest.mark.parametrize("kept", [False, True], ids=["new-shell", "kept-shell"])
@pytest.mark.parametrize("scenario", scenario_names())
async def test_findings_of_a_compact_reading_are_the_whole_tables(scenario, kept):
    full, part = _node(scenario, True, kept), _node(scenario, False, kept)
    for round_ in range(6 if kept else 4):
        a, b = await full.poll(), await part.poll()
        assert a.error is None and b.error is None, (a.error, b.error)
        assert b.table_size == len(a.processes) and a.table_size is None
        assert len(b.processes) < len(a.processes) / 4      # the crowd is not kept
        fa, fb = diagnose(a), diagnose(b)
        assert _said(fb) == _said(fa), f"poll {round_}"
        # the next step taken on both, as the console takes it
        todo = [i for i, f in enumerate(fa) if step_for(f, a) is not None]
        if todo and round_ < 3:
            await take_step(full, a, fa[todo[0]])
            await take_step(part, b, fb[todo[0]])
        for src in (full, part):
            src.clock.advance(1.0)


async def test_only_the_node_on_screen_reads_every_process():
    nodes = [_node("seed", True) for _ in range(3)]
    session = Session(nodes)
    session.compact = True
    session.view("n")              # all three are named n: the first wins the name
    assert [s.detail for s in nodes] == [True, True, True]
    for i, s in enumerate(nodes):
        s.name = f"n{i}"
    session = Session(nodes)
    session.compact = True
    session.view("n1")
    assert [s.detail for s in nodes] == [False, True, False]
    session.view("n2")
    assert [s.detail for s in nodes] == [False, False, True]
    plain = Session([_node("seed", True)])
    plain.view(None)
    assert plain.sources[0].detail          # a headless session (gate, watch) keeps every process
