"""A console of many nodes keeps every process only for the node on screen (Session.compact): the
others' readings hold what their verdicts rest on and the count of all; turning to a node reads it
whole at its next poll, and its process panel counts every process from the first frame."""
from __future__ import annotations

from conftest import wait_for

from console.clock import FakeClock
from console.incident import timeline
from console.sim.node import SimNode
from console.sources.sim import SimSource
from console.ui.app import IncidentApp

SIZE = (400, 1200)


async def test_only_the_node_on_screen_holds_every_process_and_turning_to_another_reads_it_whole(tmp_path):
    clock = FakeClock()
    sources = [SimSource(name=n, node=SimNode("seed", clock=clock, name=n, size=SIZE)) for n in ("gpu01", "gpu02")]
    tl = timeline.open_incident(tmp_path, "compact")
    app = IncidentApp(sources, timeline=tl, interval=0.3)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: {"gpu01", "gpu02"} <= set(app.snapshots), tries=2000)
        app.current_node = "gpu01"
        await wait_for(pilot, lambda: app.snapshots["gpu01"].table_size is None
                       and app.snapshots["gpu02"].table_size is not None, tries=2000)
        other = app.snapshots["gpu02"]
        assert other.table_size >= SIZE[0] and len(other.processes) < 50       # the seed's own, not the crowd
        assert other.findings, "its findings come all the same"
        app.current_node = "gpu02"
        await wait_for(pilot, lambda: app.snapshots["gpu02"].table_size is None, tries=2000)
        assert len(app.snapshots["gpu02"].processes) >= SIZE[0]
        await wait_for(pilot, lambda: app.snapshots["gpu01"].table_size is not None, tries=2000)
        title = str(app.query_one("#procs").border_title)
        assert f"of {len(app.snapshots['gpu02'].processes)}" in title, title
    tl.close()
