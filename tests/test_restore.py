"""What B stopped comes back (issue 20, item 2): after B a finding says what is still off; while a
reset is wanted it waits (info), then its step is a restore through Confirm (x), verified; the
incident is not resolved until the restore ran or a note declined it."""
from __future__ import annotations

from console.actions.plan import plan_action, plan_restore
from console.clock import FakeClock
from console.diagnosis import diagnose
from console.incident import timeline
from console.incident.summary import summarize
from console.model import ActionRecord, Proc, TimelineEntry
from console.sources.sim import SimSource
from console.ui.app import IncidentApp
from test_diagnose_builders import T0, snap
from conftest import wait_for

PERSISTENCED = ActionRecord(rung="clear-blockers", ts=T0 - 60, node="demo", gpus=(3,),
                            family=((1563, 1, "nvidia-persiste"),))


def only(findings, kind):
    found = [f for f in findings if f.kind == kind]
    assert len(found) == 1, [f.kind for f in findings]
    return found[0]


def test_after_b_the_finding_names_what_is_off_and_the_restore_is_its_step():
    now = snap([], used=(0,) * 8, persistence=False, t=T0)
    f = only(diagnose(now, (), [PERSISTENCED]), "blockers-off")
    assert f.severity == "low" and f.rung == "restore" and f.gpus == (3,)
    assert f.evidence["commands"] == ["nvidia-smi -pm 1 -i 3", "systemctl start nvidia-persistenced"]
    assert "persistence mode on GPU 3" in f.summary and "nvidia-persistenced" in f.summary
    plan = plan_restore(now, f.evidence["commands"], f.gpus)
    assert plan.commands == ("nvidia-smi -pm 1 -i 3", "systemctl start nvidia-persistenced")
    assert plan.destructive and plan.title.startswith("Restore what B stopped")
    # a line that is not a restore step is refused, never run
    bad = plan_restore(now, ["nvidia-smi -pm 1 -i 3", "rm -rf /"], (3,))
    assert bad.commands == ("nvidia-smi -pm 1 -i 3",) and any("rm -rf /" in r for r in bad.refusals)
    # nothing B stopped: no finding; a restore already sent after it: none either
    assert not [x for x in diagnose(now, (), []) if x.kind == "blockers-off"]
    restored = ActionRecord(rung="restore", ts=T0 - 10, node="demo", gpus=(3,))
    assert not [x for x in diagnose(now, (), [PERSISTENCED, restored]) if x.kind == "blockers-off"]


def test_while_a_reset_is_still_wanted_the_blockers_stay_off():
    ghost = snap([], persistence=False, t=T0)          # 76 GiB held by no process: a reset is wanted
    f = only(diagnose(ghost, (), [PERSISTENCED]), "blockers-off")
    assert f.severity == "info" and f.rung is None and "until the reset" in f.next_step
    daemon_back = Proc(pid=1600, ppid=1, state="S", user="nvidia-persistenced", name="nvidia-persiste",
                       cmdline="/usr/bin/nvidia-persistenced --user nvidia-persistenced")
    back = snap([daemon_back], used=(0,) * 8, persistence=True, t=T0)
    assert not [x for x in diagnose(back, (), [PERSISTENCED]) if x.kind == "blockers-off"], "all back: nothing"
    assert plan_action(back, "restore").refusals == ("nothing B stopped is still off",)


def _entry(seq, kind, text, node="demo", before=None, after=None):
    return TimelineEntry(ts=f"2026-12-02T01:00:{seq:02d}+00:00", seq=seq, by="root@vm", kind=kind, node=node,
                         text=text, gpu_memory_before=before, gpu_memory_after=after)


def test_the_incident_is_not_resolved_until_the_restore_ran_or_was_declined():
    held, free = {"3": 61440}, {"3": 0}
    base = [_entry(1, "action", "Clear the reset blockers: nvidia-persistenced and persistence mode on GPU 3",
                   before=held, after=held),
            _entry(2, "action", "Reset GPU 3", before=held, after=free)]
    left = summarize(base)
    assert left.state == "open" and left.left_off == ("demo",) and "still off on demo" in left.resolution
    restored = summarize(base + [_entry(3, "action", "Restore what B stopped: persistence mode")])
    assert restored.state == "resolved" and not restored.left_off
    declined = summarize(base + [_entry(3, "note", "declined restore: the node is drained for RMA")])
    assert declined.state == "resolved"


async def test_reset_required_b_then_r_then_x_restores_what_b_stopped(tmp_path):
    tl = timeline.open_incident(tmp_path, "restore")
    source = SimSource(name="demo", scenario="reset-required", clock=FakeClock())
    app = IncidentApp([source], timeline=tl)

    def finding(kind):
        s = app.snapshots.get("demo")
        return next((f for f in s.findings if f.kind == kind), None) if s else None
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        for title in ("Clear the reset blockers", "Reset GPU 3", "Restore what B stopped"):
            await pilot.press("x")
            await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen", tries=1000)
            assert app.screen.plan.title.startswith(title), app.screen.plan.title
            await pilot.press("y")
            await wait_for(pilot, lambda: any(e.kind == "observation" and e.outcome and title in (e.text or "")
                                              for e in tl.refresh()) or finding("blockers-off") is not None
                           and title != "Restore what B stopped", tries=1500)
        await wait_for(pilot, lambda: finding("blockers-off") is None and all(
            g.persistence_mode for g in app.snapshots["demo"].gpus if g.index == 3), tries=1500)
        outcome = [e for e in tl.refresh() if e.kind == "observation" and e.outcome][-1]
        assert "back on" in outcome.text, outcome.text
        assert any(p.name.startswith("nvidia-persiste") for p in app.snapshots["demo"].processes)
        await pilot.press("q")
    assert summarize(timeline.load(tl.path)[0]).state == "resolved"


async def test_quitting_with_what_b_stopped_still_off_asks_first(tmp_path):
    """Issue 31 item 5: quit after B, neither restored nor declined: the first q says what is off
    and how to restore or decline it; only a second q quits, leaving it off."""
    tl = timeline.open_incident(tmp_path, "quit-after-b")
    source = SimSource(name="demo", scenario="reset-required", clock=FakeClock())
    app = IncidentApp([source], timeline=tl)

    def off():
        s = app.snapshots.get("demo")
        return s is not None and any(f.kind == "blockers-off" for f in s.findings)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("x")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen", tries=1000)
        await pilot.press("y")
        await wait_for(pilot, off, tries=1500)
        await pilot.press("q")
        await wait_for(pilot, lambda: "q again quits and leaves it off" in " ".join(s.text for s in app.activity.history()), tries=500)
        assert app.is_running and "off since B" in " ".join(s.text for s in app.activity.history())
        await pilot.press("q")
    assert [e.text for e in timeline.load(tl.path)[0]][-1].startswith("console stopped")
