"""The GPU table and the memory chart share one row, and that row keeps to the height the
layout gives it (console/ui/layout.py): at 80x24 with a dozen nodes, the chart's eight lines
used to push the processes and the findings off the screen."""
from __future__ import annotations

import pytest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402
from conftest import wait_for  # noqa: E402


async def test_at_80x24_with_many_nodes_every_panel_keeps_its_rows_and_the_chart_scrolls_with_the_gpus():
    sources = [SimSource(name=f"node{i:02d}", scenario="seed", clock=FakeClock()) for i in range(12)]
    app = IncidentApp(sources, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for m in app.monitors:
            await m.poll_once()
        await wait_for(pilot, lambda: len(app.snapshots) == 12)
        row, gpus, chart = app.query_one("#gpu-row"), app.query_one("#gpus"), app.query_one("#gpu-chart")
        procs, findings = app.query_one("#procs"), app.query_one("#findings")
        await wait_for(pilot, lambda: row.size.height == row.styles.height.value)
        assert chart.size.height <= row.size.height and gpus.size.height <= row.size.height
        # (content rows: the processes header and three processes; one finding and its next step)
        assert procs.size.height >= 4 and findings.size.height >= 2, (procs.size, findings.size)
        assert gpus.row_count == 8 and row.size.height < 9, "not every GPU fits: the table scrolls"
        gpus.focus()
        await pilot.press("down", "down", "down", "down", "down", "down")
        await wait_for(pilot, lambda: gpus.scroll_y > 0)
        await wait_for(pilot, lambda: chart.first == round(gpus.scroll_y))
        assert chart.render().plain.splitlines()[1].split()[0] == str(chart.first), "rows stay in line"
