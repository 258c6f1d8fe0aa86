"""On a split pane (100x16) nothing hides without saying: the GPU panel that shows 2 of 8 GPUs
says so on the top line, and MPS's Confirm scrolls to its last warning, which is whole."""
import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402

wait_for = conftest.wait_for


def top_line(app) -> str:
    return str(app.query_one("#status").render())


@pytest.mark.parametrize("size, mark", [((100, 16), "8 GPUs (2 in view ↓)"), ((120, 36), None)])
async def test_the_top_line_says_when_the_gpu_panel_shows_only_some_gpus(size, mark):
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots and app.query_one("#gpus").row_count == 8)
        if mark:
            await wait_for(pilot, lambda: mark in top_line(app), describe=top_line)
        else:
            await wait_for(pilot, lambda: "8 GPUs  594.6 GiB used" in top_line(app), describe=top_line)
            assert "in view" not in top_line(app)


async def test_mps_confirm_scrolls_to_its_last_warning_whole_at_100x16():
    from textual.containers import VerticalScroll

    from console.ui.confirm import ConfirmScreen
    app = IncidentApp([SimSource(name="demo", scenario="mps", clock=FakeClock())])
    async with app.run_test(size=(100, 16)) as pilot:
        await wait_for(pilot, lambda: "demo" in app.snapshots)
        await pilot.press("x")                   # asks the control daemon, then Confirm
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        body = app.screen.query_one("#confirm-body", VerticalScroll)
        await wait_for(pilot, lambda: body.max_scroll_y > 0 and "↓ pgdn end: more" in app.screen.text)
        last = "how much comes back shows only after the client has ended, as the server's memory in the driver's list"
        assert last in " ".join(app.screen.text.split())          # the sentence whole, not cut
        await pilot.press("end")
        await wait_for(pilot, lambda: body.scroll_y == body.max_scroll_y)
        await pilot.press("escape")
