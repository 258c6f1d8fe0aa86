"""A console that continues an incident (`--incident ID`) knows what the timeline says was done
(issue 31 item 5): quit after B, reopen, and what B stopped is still "off since B", and once the
reset is done the restore is offered — not forgotten with nvidia-persistenced left stopped."""
from __future__ import annotations

import time

from console.clock import FakeClock
from console.incident.timeline import Timeline, load
from console.session import Session
from console.sources.sim import SimSource


def kinds(snap):
    return {f.kind: f for f in snap.findings}


async def test_what_b_stopped_is_known_to_the_next_console_and_restored_after_the_reset(tmp_path):
    clock = FakeClock(time.time())          # the timeline stamps entries with the wall clock
    source = SimSource(name="gpu07", scenario="reset-required", clock=clock)
    path = tmp_path / "inc.jsonl"
    first = Session([source], timeline=Timeline(path, by="ops@console"), clock=clock)
    await first.poll_all()
    b = await first.execute(await first.plan("gpu07", "clear-blockers", gpus=[3]))
    assert b.status in ("settled", "unsettled"), b.text
    await first.stop("console stopped")
    first.timeline.close()
    action = next(e for e in load(path)[0] if e.kind == "action")
    assert action.rung == "clear-blockers" and action.gpus == [3]          # the entry names what it is

    clock.advance(5)                          # the console reopened a little later
    second = Session([source], timeline=Timeline(path, by="ops@console"), clock=clock)   # --incident ID
    snap, = await second.poll_all()
    off = kinds(snap).get("blockers-off")
    assert off is not None and "off since B" in off.summary, [(f.kind, f.summary) for f in snap.findings]
    reset = await second.execute(await second.plan("gpu07", "reset", gpus=[3]))
    assert reset.status in ("settled", "unsettled"), reset.text
    snap, = await second.poll_all()
    off = kinds(snap)["blockers-off"]
    assert off.rung == "restore" and "nvidia-persistenced" in off.next_step
    await second.stop("console stopped")
    second.timeline.close()
