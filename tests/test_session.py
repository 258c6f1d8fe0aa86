"""The session without a screen: a whole incident driven headless (poll -> finding -> plan ->
confirm -> execute -> verify -> timeline), the events a client sees, and stopping mid-action.

Simulated nodes on a FakeClock (the driver's teardown passes in microseconds)."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from console.clock import FakeClock
from console.incident.timeline import Timeline, load
from console.session import ActionFinished, ActionStarted, NodeUpdated, Said, Session
from console.sources.sim import SimSource


def entries(path):
    return load(path)[0]


def seed_session(tmp_path, scenario="seed", **options):
    clock = FakeClock()
    source = SimSource(name="gpu07", scenario=scenario, clock=clock)
    tl = Timeline(tmp_path / "incident.jsonl", by="ops@console")
    session = Session([source], timeline=tl, clock=clock, **options)
    events = []
    session.subscribe(events.append)
    return session, source, tl, events


async def test_a_whole_incident_headless_from_the_first_poll_to_the_verified_outcome(tmp_path):
    session, source, tl, events = seed_session(tmp_path, "graceful")
    snap, = await session.poll_all()
    finding = next(f for f in snap.findings if f.kind == "holder")
    # t on the job (a first reading does not know yet whether it computes: x proposes a wait)
    plan = await session.plan("gpu07", "sigterm", pids=finding.pids)
    assert plan.commands == ("kill -s TERM 65102 65163 65227",)      # what a client shows in Confirm
    outcome = await session.execute(plan)                            # ...and runs once confirmed
    assert outcome.status == "settled" and outcome.freed_mib > 138 * 1024
    after = session.latest("gpu07")
    assert not any(f.kind == "holder" for f in after.findings), "the holders are gone"
    written = [e for e in entries(tl.path) if not e.text.startswith("findings on ")]   # the findings' changes aside
    kinds = [e.kind for e in written]
    assert kinds == ["observation", "action", "observation"]      # the first reading, the action, its outcome
    first, action, seen = written
    assert first.text == "first reading of gpu07: GPUs 0-1 hold 138.7 GiB"
    assert action.command == plan.commands[0] and [t["pid"] for t in action.targets] == [65102, 65163, 65227]
    assert seen.outcome and seen.action == action.seq and seen.freed_mib == outcome.freed_mib
    from console.incident import freetimes
    kept, = freetimes.load(tl.path.parent, demo=True)  # how long it took, for the next wait's length
    assert (kept["node"], kept["after"], kept["seconds"]) == ("gpu07", "sigterm", outcome.seconds_to_free)
    assert kept["demo"] is True and freetimes.load(tl.path.parent) == [], "a simulated node's time sizes no real wait"
    order = [type(e) for e in events]
    assert order[0] is NodeUpdated and ActionStarted in order and order[-1] is ActionFinished
    assert order.index(ActionStarted) < order.index(ActionFinished)
    assert events[-1].outcome is outcome
    await session.stop("done")
    assert [e.text for e in entries(tl.path)][-2:] == [
        "gpu07 when the console stopped: every GPU back at or under 1 GiB", "done"]
    tl.close()


async def test_read_only_refuses_records_and_leaves_the_node_as_it_was(tmp_path):
    session, source, tl, events = seed_session(tmp_path, read_only=True)
    snap, = await session.poll_all()
    plan = await session.plan("gpu07", "sigkill", pids=[72169])
    outcome = await session.execute(plan)
    assert outcome.status == "refused" and "read-only" in outcome.refused
    assert source.node.procs[72169].alive
    started = next(e for e in events if isinstance(e, ActionStarted))
    assert started.verifying_s == 0              # nothing to verify: a client says "refused", not "verifying"
    assert [e.kind for e in entries(tl.path)] == ["observation", "action"]
    assert "refused" in entries(tl.path)[1].text
    await session.stop()
    tl.close()


async def test_planning_before_any_reading_says_so(tmp_path):
    session, *_ = seed_session(tmp_path)
    try:
        await session.plan("gpu07", "sigterm", pids=[72169])
    except ValueError as exc:
        assert "no reading of this node yet" in str(exc)
    else:
        raise AssertionError("planned without a reading")
    await session.stop()


async def test_a_listener_that_raises_never_stops_the_engine(tmp_path):
    session, source, tl, events = seed_session(tmp_path)

    def broken(event):
        raise RuntimeError("a client's bug")
    session.subscribe(broken)
    await session.poll_all()
    await session.poll_all()
    assert sum(isinstance(e, NodeUpdated) for e in events) == 2
    await session.stop()
    tl.close()


async def test_stopping_mid_action_writes_what_was_seen_and_the_note_after_it(tmp_path):
    clock = FakeClock()
    source = SimSource(name="gpu07", scenario="seed", clock=clock)
    tl = Timeline(tmp_path / "incident.jsonl", by="ops@console")
    session = Session([source], timeline=tl, clock=clock)
    await session.poll_all()
    gate = asyncio.Event()
    real_poll = session.monitors[0].poll_once

    async def slow_read():
        await gate.wait()                   # the re-read after the signal never comes
        return await real_poll()
    plan = await session.plan("gpu07", "sigterm", pids=[72169])
    task = asyncio.create_task(_execute_with(session, plan, slow_read))
    for _ in range(200):
        if [e.kind for e in entries(tl.path)] == ["observation", "action"]:
            break
        await asyncio.sleep(0.01)
    await session.stop("console stopped")
    assert task.done()
    kinds = [(e.kind, e.text) for e in entries(tl.path)]
    assert [k for k, _ in kinds] == ["observation", "action", "observation", "observation", "note"], kinds
    assert kinds[3][1].startswith("gpu07 when the console stopped: GPUs 0-7 still hold")
    assert kinds[-1][1] == "console stopped"
    tl.close()


async def _execute_with(session, plan, read):
    monitor = session.monitors[0]
    monitor.poll_once = read                # what the executor re-reads the node with
    try:
        return await session.execute(plan)
    except asyncio.CancelledError:
        return None


async def test_a_node_added_while_polling_polls_on_its_own(tmp_path):
    clock = FakeClock()
    first = SimSource(name="gpu01", scenario="graceful", clock=clock)
    session = Session([first], interval=0.05, clock=clock)
    seen = set()
    session.subscribe(lambda e: seen.add(e.snapshot.name) if isinstance(e, NodeUpdated) else None)
    session.start()
    session.add_node(SimSource(name="gpu02", scenario="seed", clock=clock))
    for _ in range(400):
        if seen == {"gpu01", "gpu02"}:
            break
        await asyncio.sleep(0.01)
    assert seen == {"gpu01", "gpu02"}
    await session.stop()


async def test_a_full_disk_is_said_to_the_client_not_raised(tmp_path, monkeypatch):
    import os
    session, source, tl, events = seed_session(tmp_path)

    def full(fd, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    assert session.incident.note("gpu07", "written to a full disk") is None
    monkeypatch.undo()
    said = [e for e in events if isinstance(e, Said)]
    assert [(e.severity, e.text) for e in said] == [
        ("error", "timeline write failed (No space left on device): note not recorded")]
    await session.stop()
    tl.close()


DRIVER = """
import asyncio, json, sys
from console.clock import FakeClock
from console.incident.timeline import Timeline
from console.session import Session
from console.sources.sim import SimSource

async def main(path):
    clock = FakeClock()
    session = Session([SimSource(name="gpu07", scenario="graceful", clock=clock)],
                      timeline=Timeline(path, by="ops@headless"), clock=clock)
    snap, = await session.poll_all()
    finding = next(f for f in snap.findings if f.kind == "holder")
    outcome = await session.execute(await session.plan("gpu07", "sigterm", pids=finding.pids))
    await session.stop("headless run done")
    print(json.dumps({"status": outcome.status, "freed": outcome.freed_mib,
                      "textual": sorted(m for m in sys.modules if m.split(".")[0] == "textual")}))
asyncio.run(main(sys.argv[1]))
"""


def test_the_session_runs_an_incident_with_no_textual_imported(tmp_path):
    out = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "inc.jsonl")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["textual"] == [] and result["status"] == "settled" and result["freed"] > 138 * 1024
    assert [e.kind for e in entries(tmp_path / "inc.jsonl") if not e.text.startswith("findings on ")] == [
        "observation", "action", "observation", "observation", "note"]


async def test_an_incident_is_resolved_only_when_every_node_gave_its_memory_back(tmp_path):
    """Two stuck nodes, one freed: the incident stays open and says what is still held, where;
    once the other is freed too, it is resolved."""
    from console.incident.export import as_markdown
    from console.incident.summary import summarize
    clock = FakeClock()
    a, b = (SimSource(name=n, scenario="graceful", clock=clock) for n in ("gpu02", "gpu04"))
    tl = Timeline(tmp_path / "two.jsonl", by="ops@console")
    session = Session([a, b], timeline=tl, clock=clock)
    await session.poll_all()
    freed = await session.execute(await session.plan("gpu02", "sigterm", pids=[65102]))
    assert freed.status == "settled"
    await session.stop("console stopped")
    s = summarize(entries(tl.path))
    assert s.state == "open" and [h.node for h in s.still_held] == ["gpu04"]
    assert "138.7 GiB on GPUs 0-1 on gpu04" in s.resolution and s.resolution.startswith("not resolved: still held")
    assert "| **Still held** | 138.7 GiB on GPUs 0-1 on gpu04 |" in as_markdown(entries(tl.path), incident_id="two")
    tl.close()

    tl = Timeline(tmp_path / "two.jsonl", by="ops@console")      # the same incident, continued
    session = Session([b], timeline=tl, clock=clock)
    await session.poll_all()
    await session.execute(await session.plan("gpu04", "sigterm", pids=[65102]))
    await session.stop("console stopped")
    s = summarize(entries(tl.path))
    assert s.state == "resolved" and s.still_held == ()
    tl.close()
