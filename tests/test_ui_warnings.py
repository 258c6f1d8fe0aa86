"""A node's warnings are readable whole: the status line shows the first 60 characters and says
where the rest is; `m` (messages) lists every warning of every node, whole."""
from __future__ import annotations

from console.clock import FakeClock
from console.model import NodeSnapshot
from console.sources.sim import SimSource
from console.ui.app import IncidentApp
from conftest import screen_text, wait_for

LONG = ("probe section 'xid' cut short: dmesg printed more than the probe keeps; the last Xid lines "
        "may be missing [/bold] and this tail must be readable")


async def test_a_long_warning_is_cut_on_the_status_line_and_whole_in_messages():
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())], autostart=False)
    snap = NodeSnapshot(name="demo", taken_at=1.0, warnings=("dmesg not permitted: Xid lines unavailable", LONG))
    async with app.run_test(size=(120, 36)) as pilot:
        await app.session.take_reading(snap)
        await wait_for(pilot, lambda: "dmesg not permitted" in screen_text(app))
        assert "(m: 2 whole)" in screen_text(app)
        await pilot.press("m")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "DetailScreen")
        text = " ".join(screen_text(app).split())
        assert "demo: dmesg not permitted: Xid lines unavailable" in text
        assert "[/bold] and this tail must be readable" in text, text


async def test_q_while_a_check_runs_says_so_and_a_second_q_quits():
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        app.set_activity("test", "demo: wait-and-reread: 3 of 86 s")     # what a running check shows
        await pilot.press("q")
        await pilot.pause()
        assert app.is_running and "still running: demo: wait-and-reread" in screen_text(app)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running)
