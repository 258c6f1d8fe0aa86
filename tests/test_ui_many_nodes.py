"""Many nodes stuck the same way, one step (33, item 8): X takes the node's next step on every
node whose next step is the same, through ONE Confirm that lists each node's exact commands;
each node's action is then recorded and verified on its own."""
from __future__ import annotations

from conftest import wait_for

from console.actions.ladder import top_step
from console.clock import FakeClock
from console.incident import timeline
from console.sources.sim import SimSource
from console.ui.app import IncidentApp
from console.ui.confirm import ManyConfirmScreen


def _app(tmp_path, **options):
    clock = FakeClock()
    sources = [SimSource(name=n, scenario="seed", clock=clock) for n in ("gpu01", "gpu02", "gpu03")]
    sources.append(SimSource(name="gpu04", scenario="reset-required", clock=clock))   # another step: B, then R
    tl = timeline.open_incident(tmp_path, "many")
    return IncidentApp(sources, timeline=tl, interval=0.3, **options), tl


async def test_x_capital_runs_the_same_step_on_every_node_that_needs_it_through_one_confirm(tmp_path):
    app, tl = _app(tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        def alike() -> bool:      # the three seed nodes read more than once: their next step is the same
            tops = [top_step(app.snapshots[n].findings) if n in app.snapshots else None
                    for n in ("gpu01", "gpu02", "gpu03")]
            return "gpu04" in app.snapshots and all(tops) and len({(f.kind, f.rung) for f in tops}) == 1
        await wait_for(pilot, alike, tries=3000)
        nodes = app.query_one("#nodes")                 # the operator moves to gpu01 (the console keeps it)
        nodes.user_moved = True
        nodes.move_cursor(row=nodes.get_row_index("gpu01"), animate=False)
        await wait_for(pilot, lambda: app.current_node == "gpu01")
        await pilot.press("X")
        await wait_for(pilot, lambda: isinstance(app.screen, ManyConfirmScreen), tries=2000,
                       describe=lambda a: "\n".join(x.text for x in a.activity.history()))
        text = app.screen.text
        for node in ("gpu01", "gpu02", "gpu03"):
            assert f"on {node} — SIGTERM" in text, text
        assert "gpu04" not in text, "its next step is another: not in this Confirm"
        assert text.count("$ kill -s TERM ") == 3 and "y: run it on the 3 nodes" in text
        await pilot.press("y")
        await wait_for(pilot, lambda: sum(1 for e in tl.refresh() if e.kind == "observation" and e.outcome) == 3,
                       tries=3000)
        actions = [e for e in tl.refresh() if e.kind == "action"]
        assert sorted(e.node for e in actions) == ["gpu01", "gpu02", "gpu03"]      # one record per node
        assert all(e.rung == "sigterm" and e.command.startswith("kill -s TERM ") for e in actions)
        outcomes = {e.node for e in tl.refresh() if e.kind == "observation" and e.outcome}
        assert outcomes == {"gpu01", "gpu02", "gpu03"}                              # each verified on its own
    tl.close()


async def test_x_capital_with_no_other_node_alike_says_so_and_under_read_only_nothing_is_offered(tmp_path):
    app, tl = _app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: "gpu04" in app.snapshots, tries=2000)
        app.current_node = "gpu04"          # the only node whose next step is B
        await pilot.press("X")
        await wait_for(pilot, lambda: "no other node" in (app.activity.latest.text if app.activity.latest else ""))
        assert not isinstance(app.screen, ManyConfirmScreen)
    tl.close()
    app, tl = _app(tmp_path / "ro", read_only=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: "gpu01" in app.snapshots, tries=2000)
        await pilot.press("X")                  # a dangerous key: unbound under --read-only
        await pilot.pause()
        assert not isinstance(app.screen, ManyConfirmScreen)
        assert not [e for e in tl.refresh() if e.kind == "action"]
    tl.close()
