"""The fleet table at 80x24 as the on-call engineer sees it, pinned as SVG snapshots
(tests/__snapshots__/): the suspects first, the highlighted node in full below the table; and
the same table when the source stopped answering (stale, the error on the second line).
Deterministic: a FakeClock shown in UTC, fleet rounds posted as the FleetMonitor posts them. Update on
purpose with `pytest tests/test_ui_fleet_snapshot.py --snapshot-update` and look at the SVGs."""
import dataclasses

import pytest

from console.clock import FakeClock
from console.model import FleetSnapshot
from console.sources.sim import SimSource
from console.ui.app import IncidentApp
from console.ui.fleet_view import FleetSetup, FleetUpdated
from tests.fleet_fixtures import SOURCE, assessed, mixed_fleet, node


pytestmark = pytest.mark.usefixtures("utc")     # the clock in UTC (tests/conftest.py)


class PostedOnly:
    async def poll(self):
        raise AssertionError("not polled")

    async def close(self):
        pass


def fleet_app() -> IncidentApp:
    return IncidentApp([], autostart=False, clock=FakeClock(1_012.0),
                       fleet=FleetSetup(PostedOnly(), SOURCE, lambda h: SimSource(name=h, scenario="seed")))


def thirty_nodes() -> FleetSnapshot:
    """The mixed six and 24 more fine nodes: more than a screenful."""
    more = tuple(node(f"gpu-{i:04d}", used_mib=2048 + 512 * i, util=40 + i) for i in range(6, 30))
    six = mixed_fleet()
    return dataclasses.replace(assessed(six.nodes + more), query_ms=42.0)


def test_fleet_table_80x24(snap_compare):
    app = fleet_app()

    async def run_before(pilot):
        app.post_message(FleetUpdated(thirty_nodes()))
        await pilot.pause()
        await pilot.press("down")
        await pilot.pause()
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_fleet_table_stale_80x24(snap_compare):
    app = fleet_app()

    async def run_before(pilot):
        app.post_message(FleetUpdated(thirty_nodes()))
        await pilot.pause()
        app.post_message(FleetUpdated(FleetSnapshot(source=SOURCE, taken_at=1_011.0,
                                                    error="Prometheus at prom.example:9090 refused the connection")))
        await pilot.pause()
        await pilot.pause()
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)
