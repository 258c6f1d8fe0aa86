"""What the operator sees at 80x24, pinned as SVG snapshots (tests/__snapshots__/).

Deterministic: the simulator runs on a FakeClock, polling is off and the snapshot is posted the
way the poller posts it, with the probe time blanked. Update on purpose with
`pytest tests/test_ui_snapshots.py --snapshot-update` and look at snapshot_report.html.
"""
import asyncio
import dataclasses

from console.monitor import diagnosed
from console.clock import FakeClock
from console.sources.sim import SimSource
from console.ui.app import IncidentApp, NodeUpdated


def _app_with(scenario: str) -> tuple[IncidentApp, object]:
    src = SimSource(name="demo", scenario=scenario, clock=FakeClock())
    snap = diagnosed(asyncio.run(src.poll()))
    snap = dataclasses.replace(snap, probe_ms=None)
    return IncidentApp([src], autostart=False), snap


def _first_screen(snap_compare, scenario: str) -> bool:
    app, snap = _app_with(scenario)

    async def post(pilot):
        app.post_message(NodeUpdated(snap))
        await pilot.pause()
    return snap_compare(app, terminal_size=(80, 24), run_before=post)


def test_seed_first_screen(snap_compare):
    assert _first_screen(snap_compare, "seed")


def test_hidden_holders_first_screen(snap_compare):
    assert _first_screen(snap_compare, "hidden-holders")
