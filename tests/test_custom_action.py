"""A command of the operator's own is an action, not a check: Confirm shows the exact line,
--read-only refuses it (on screen and in the timeline), --dry-run records it without running
it, and otherwise the action layer runs it and records an `action` entry.

Once it was the check picker's "custom" check: `kill -9 72294` killed a worker under
--read-only, with no Confirm, recorded as a `check`. Driven as a user would (Textual pilot)
against the simulated seed node; what the node ran is its shell history.
"""
import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.incident import timeline  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402

WORKER = 72294                      # sglang::scheduler_TP1 on the seed node
KILL = f"kill -9 {WORKER}"


wait_for = conftest.wait_for


def ran(src: SimSource, line: str) -> bool:
    """The simulated node's shell ran this line (its history is every script it was given)."""
    return any(line in script for _, script in src.node.history)


def toasts(app) -> str:
    """What the console said on screen: its status line's messages (console/ui/activity.py)."""
    return "\n".join(said.text for said in app.activity.history())


async def worker_state(src: SimSource) -> str | None:
    """The worker's state in the next snapshot (None: gone)."""
    proc = (await src.poll()).proc(WORKER)
    return None if proc is None else proc.state


async def open_custom(pilot, line: str, *, palette: bool = False) -> None:
    """`c`, the picker's last entry (or the palette's "Check: custom"), the line, enter."""
    from textual.widgets import Input, OptionList
    app = pilot.app
    if palette:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Check: custom")
        await wait_for(pilot, lambda: any("Check: custom" in str(lst.get_option_at_index(i).prompt)
                                          for lst in app.screen.query(OptionList)
                                          for i in range(lst.option_count)))
        await pilot.press("enter")
    else:
        await pilot.press("c")
        await wait_for(pilot, lambda: app.screen.query(OptionList))
        options = app.screen.query_one(OptionList)
        assert options.get_option_at_index(options.option_count - 1).id == "custom"   # still the last entry
        await pilot.press("end", "enter")
    await wait_for(pilot, lambda: app.screen.query(Input))
    app.screen.query_one(Input).value = line
    await pilot.press("enter")


async def confirm_shows(pilot, line: str) -> str:
    from console.ui.confirm import ConfirmScreen
    app = pilot.app
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    shown = app.screen.text
    assert "Confirm" in shown and f"$ {line}" in shown and "demo" in shown
    return shown


@pytest.mark.parametrize("palette", [False, True], ids=["picker", "palette"])
async def test_read_only_refuses_a_command_of_ones_own_and_records_the_refusal(incident_dir, palette):
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="seed", clock=FakeClock())
    app = IncidentApp([src], timeline=tl, read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        before = await worker_state(src)
        await open_custom(pilot, KILL, palette=palette)
        assert "READ-ONLY" in await confirm_shows(pilot, KILL)
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.kind == "action" for e in tl.entries))
        entry = [e for e in tl.entries if e.kind == "action"][-1]
        assert entry.command == KILL and entry.rc is None and "read-only" in entry.text
        assert not any(e.kind == "check" for e in tl.entries)
        await wait_for(pilot, lambda: "refused: read-only" in toasts(app))           # on screen
        assert not ran(src, KILL)
        assert before == "S" and await worker_state(src) == before                   # the worker lives on
        await pilot.press("q")


async def test_dry_run_records_a_command_of_ones_own_without_running_it(incident_dir):
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="seed", clock=FakeClock())
    app = IncidentApp([src], timeline=tl, dry_run=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await open_custom(pilot, KILL)
        assert "DRY-RUN" in await confirm_shows(pilot, KILL)
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.kind == "action" for e in tl.entries))
        entry = [e for e in tl.entries if e.kind == "action"][-1]
        assert entry.command == KILL and entry.rc is None and entry.text.startswith("[dry-run]")
        assert not ran(src, KILL) and await worker_state(src) == "S"
        await pilot.press("q")


async def test_a_command_of_ones_own_runs_only_after_y_and_is_recorded_as_an_action(incident_dir):
    from console.ui.confirm import ConfirmScreen
    from console.ui.details import DetailScreen
    tl = timeline.open_incident(incident_dir)
    src = SimSource(name="demo", scenario="seed", clock=FakeClock())
    app = IncidentApp([src], timeline=tl)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        # n cancels: nothing runs, nothing is recorded
        await open_custom(pilot, KILL)
        await confirm_shows(pilot, KILL)
        await pilot.press("n")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert not ran(src, KILL) and await worker_state(src) == "S"
        assert not any(e.kind in ("action", "check") for e in tl.entries)
        # y runs it through the action layer
        await open_custom(pilot, KILL)
        await confirm_shows(pilot, KILL)
        await pilot.press("y")
        await wait_for(pilot, lambda: any(e.kind == "observation" and e.outcome for e in tl.entries))
        entry = [e for e in tl.entries if e.kind == "action"][-1]
        outcome = next(e for e in tl.entries if e.kind == "observation" and e.outcome and e.action == entry.seq)
        assert entry.command == KILL and entry.rc is None and outcome.rc == 0   # recorded before it ran
        assert entry.gpu_memory_before and entry.gpu_memory_before["1"] == 76113
        assert not any(e.kind == "check" for e in tl.entries)
        assert ran(src, KILL) and await worker_state(src) in ("Z", None)   # killed: a zombie in teardown
        await wait_for(pilot, lambda: isinstance(app.screen, DetailScreen))   # what it printed
        assert f"$ {KILL}" in app.screen.text
        await pilot.press("escape")
        await pilot.press("q")


# ---------------------------------------------------------------- the action layer itself

async def test_plan_custom_is_a_destructive_action_the_policy_governs():
    from console.actions.plan import ActionPolicy, plan_custom
    from console.actions.run import execute
    src = SimSource(name="demo", scenario="seed", clock=FakeClock())
    snap = await src.poll()
    plan = plan_custom("demo", f"  {KILL}  ", snap)
    assert plan.rung == "custom" and plan.commands == (KILL,) and plan.destructive
    assert plan.memory_before["0"] == 76109 and plan.gpus == tuple(range(8))
    assert ActionPolicy(read_only=True).refusal(plan) is not None
    refused = await execute(plan, src, policy=ActionPolicy(read_only=True))
    dry = await execute(plan, src, policy=ActionPolicy(dry_run=True))
    assert (refused.status, dry.status) == ("refused", "dry-run") and not ran(src, KILL)
    done = await execute(plan, src)
    assert done.rc == 0 and done.watch is None and ran(src, KILL)
    for bad in ("", "   ", "echo \x00", "x" * 5000):
        with pytest.raises(ValueError, match="custom"):
            plan_custom("demo", bad, snap)


def test_custom_is_no_longer_a_check():
    from console.checks.registry import CHECKS, render, run_check  # noqa: F401
    assert "custom" not in CHECKS
    with pytest.raises(ValueError, match="unknown check"):
        render("custom", command=KILL)


async def test_a_command_typed_for_a_node_no_longer_in_view_runs_nowhere():
    """The prompt was open while the operator moved to another node: nothing runs on either,
    no Confirm, and the console says why."""
    from textual.widgets import Input
    from console.ui.confirm import ConfirmScreen
    clock = FakeClock()
    first, second = SimSource(name="gpu01", scenario="seed", clock=clock), SimSource(name="gpu02", scenario="seed",
                                                                                      clock=clock)
    app = IncidentApp([first, second], autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        for monitor in app.monitors:
            await monitor.poll_once()
        await wait_for(pilot, lambda: {"gpu01", "gpu02"} <= set(app.snapshots))
        app.current_node = "gpu01"
        app.escalation.custom_command()
        await wait_for(pilot, lambda: app.screen.query(Input))
        app.current_node = "gpu02"                      # the node table's cursor moved meanwhile
        app.screen.query_one(Input).value = KILL
        await pilot.press("enter")
        await wait_for(pilot, lambda: "gpu01 is no longer the node in view: nothing runs" in toasts(app))
        assert not isinstance(app.screen, ConfirmScreen)
        assert not ran(first, KILL) and not ran(second, KILL)
