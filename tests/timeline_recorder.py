"""Recorded timelines of every demo scenario, taken as an on-call would take them: `x` (the top
finding's step) until nothing is left to do, a hypothesis first and its suggested verdict last.

Headless through the session on a FakeClock that also stamps the timeline, so the same code
writes the same file. The recorded files under tests/fixtures/timelines/ are what the postmortem
replay test (tests/test_postmortem_replay.py) exports; they are written by this module and kept,
so a later version must still read and export what an earlier one wrote. To record them again
(only when the timeline's format changes on purpose)::

    .venv/bin/python -m tests.timeline_recorder
"""
from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from console.actions.ladder import top_step
from console.actions.plan import ActionPlan
from console.actions.step import Step, after_check, step_for
from console.clock import FakeClock
from console.incident import timeline as timeline_mod
from console.incident.export import as_markdown
from console.incident.timeline import Timeline, load
from console.model import NodeSnapshot
from console.session import Session
from console.sim.scenarios import scenario_names
from console.sources.sim import SimSource

HERE = Path(__file__).parent / "fixtures" / "timelines"
MAX_STEPS = 8          # no scenario needs more; a loop that does is a bug the recording shows


async def take_x(session: Session, source: SimSource, clock: FakeClock, *, record: bool = True,
                 max_steps: int = MAX_STEPS) -> tuple[list[tuple[Step, ActionPlan]], NodeSnapshot]:
    """`x` as an on-call presses it, until no finding proposes a step: each step read from the
    node's latest reading (15 s of the operator's time apart); a check runs (``record``: into the
    incident) and, where its answer leads to a plan, that plan runs; else the step's own plan.
    The steps taken with their plans, and the last reading."""
    taken: list[tuple[Step, ActionPlan]] = []
    snap = None
    for _ in range(max_steps):
        clock.advance(15)
        snap, = await session.poll_all()
        finding = top_step(snap.findings)
        step = step_for(finding, snap) if finding is not None else None
        if step is None:
            break
        if step.check is not None:
            result = await session.run_check(source, step.check[0], snap, **step.check[1])
            if record:
                session.incident.record_check(result)
            if step.then is None:
                continue
            plan, _ = after_check(step, (await session.poll_all())[0], result.data)
            if plan is None:
                break
        else:
            plan = step.plan
        assert plan is not None
        await session.execute(plan)
        taken.append((step, plan))
    assert snap is not None
    return taken, snap


async def record(scenario: str, path: Path) -> None:
    clock = FakeClock()
    stamp = timeline_mod.now_iso
    timeline_mod.now_iso = lambda: timeline_mod.iso_at(clock.now())   # type: ignore[assignment]
    try:
        src = SimSource(name="demo", scenario=scenario, clock=clock)
        tl = Timeline(path, by="oncall@bastion")
        s = Session([src], timeline=tl, clock=clock)
        await s.poll_all()                         # the first reading
        clock.advance(20)
        s.incident.hypothesis("demo", f"the {scenario} incident: the top finding's step frees the GPUs")
        await take_x(s, src, clock)
        clock.advance(15)
        await s.poll_all()
        s.incident.verdict("demo", s.incident.suggest_verdict()[0])
        clock.advance(5)
        await s.stop("console stopped")
        tl.close()
    finally:
        timeline_mod.now_iso = stamp   # type: ignore[assignment]


def export(path: Path) -> str:
    return as_markdown(load(path)[0], incident_id=path.stem)


async def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for name in scenario_names():
        with tempfile.TemporaryDirectory() as tmp:
            written = Path(tmp) / f"{name}.jsonl"
            await record(name, written)
            (HERE / f"{name}.jsonl").write_text(written.read_text())
        (HERE / f"{name}.md").write_text(export(HERE / f"{name}.jsonl"))
        print(name, len((HERE / f"{name}.jsonl").read_text().splitlines()), "entries")


if __name__ == "__main__":
    asyncio.run(main())
