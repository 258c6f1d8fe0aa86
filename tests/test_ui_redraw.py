"""Many nodes, one screen: updates are drawn together a few times a second, a table most of
whose rows go is refilled with the cursor on the same row, and columns only widen."""
from __future__ import annotations

import dataclasses
import re

import pytest

import conftest

pytest.importorskip("textual")

from textual.app import App  # noqa: E402
from textual.widgets import DataTable  # noqa: E402

from console.clock import FakeClock  # noqa: E402
from console.monitor import diagnosed  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui import app as app_module, tables  # noqa: E402
from console.ui.app import IncidentApp  # noqa: E402
from tests.test_ui_sync_table import proc, shown, wanted  # noqa: E402


wait_for = conftest.wait_for


async def simulated_nodes(count: int, scenario: str):
    """(names, sources, one diagnosed snapshot of the first) for ``count`` simulated nodes."""
    names = [f"node{i:03d}" for i in range(count)]
    sources = [SimSource(name=n, scenario=scenario, clock=FakeClock()) for n in names]
    return names, sources, diagnosed(await sources[0].poll())


async def test_a_burst_of_node_updates_is_drawn_in_a_few_redraws_each_showing_its_last_state(monkeypatch):
    names, sources, snap = await simulated_nodes(40, "seed")
    app = IncidentApp(sources, autostart=False)
    redraws = []
    real = IncidentApp._redraw_updated

    def counted(self):
        redraws.append(len(self._updated))
        return real(self)
    monkeypatch.setattr(IncidentApp, "_redraw_updated", counted)
    async with app.run_test(size=(120, 36)) as pilot:
        for round_ in range(3):                         # three polls of every node, back to back
            for n in names:
                await app.session.take_reading(dataclasses.replace(snap, name=n, probe_ms=(60.0, 300.0, 700.0)[round_]))
        nodes = app.query_one("#nodes")
        await wait_for(pilot, lambda: all(str(nodes.get_cell(n, "probe")) == "<1s" for n in names))
        assert len(redraws) <= 6, f"{len(redraws)} redraws for 120 updates"
        assert app.snapshots[names[-1]].probe_ms == 700.0


async def test_the_viewed_nodes_panels_follow_its_updates_between_redraws():
    src = SimSource(name="solo", scenario="seed", clock=FakeClock())
    snap = diagnosed(await src.poll())
    app = IncidentApp([src], autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        gpus = app.query_one("#gpus", DataTable)
        for used in (1000, 2000, 3000):                # faster than the redraw interval
            g0 = dataclasses.replace(snap.gpus[0], memory_used_mib=used)
            await app.session.take_reading(dataclasses.replace(snap, gpus=(g0,) + snap.gpus[1:]))
        await wait_for(pilot, lambda: gpus.row_count and "3000MiB" in str(gpus.get_row_at(0)[1]))
        assert app.redraw_interval_s == app_module.REDRAW_INTERVAL_S > 0


class Table(App):
    def compose(self):
        yield DataTable(id="t", cursor_type="row")


async def test_a_table_most_of_whose_rows_go_keeps_the_cursor_on_its_row():
    app = Table()
    async with app.run_test() as pilot:
        table = app.query_one("#t", DataTable)
        tables.add_columns(table, tables.PROC_COLUMNS)
        many = [proc(pid) for pid in range(100, 160)]
        tables.sync_table(table, wanted(many))
        table.move_cursor(row=table.get_row_index("n:150"))
        await pilot.pause()
        few = [proc(pid) for pid in (101, 150, 170)]
        tables.sync_table(table, wanted(few))
        await pilot.pause()
        assert [r[0] for r in shown(table)] == ["101", "150", "170"]
        assert tables.selected_key(table) == "n:150"
        tables.sync_table(table, wanted([proc(pid) for pid in range(300, 340)]))   # the row went too
        assert table.row_count == 40 and tables.selected_key(table) is not None


async def test_columns_widen_for_wider_values_and_keep_their_width_for_narrower_ones():
    app = Table()
    async with app.run_test() as pilot:
        table = app.query_one("#t", DataTable)
        tables.add_columns(table, tables.PROC_COLUMNS)
        tables.sync_table(table, wanted([proc(1, name="x", cmdline="short")]))
        await pilot.pause()
        width = table.columns["name"].content_width
        tables.sync_table(table, wanted([proc(1, name="x", cmdline="a much longer command line here")]))
        await pilot.pause()
        wide = table.columns["name"].content_width
        assert wide > width
        tables.sync_table(table, wanted([proc(1, name="x", cmdline="short")]))
        await pilot.pause()
        assert table.columns["name"].content_width == wide


async def test_a_node_whose_poll_stopped_returning_says_how_long_ago_its_last_reading_came():
    """Not an error answer: no answer at all (the engine stuck on it). Its row and the status
    line say so with the age; the next reading clears it."""
    names = ["gpu01", "gpu02"]
    sources = [SimSource(name=n, scenario="graceful", clock=FakeClock()) for n in names]
    snap = diagnosed(await sources[0].poll())
    app = IncidentApp(sources, autostart=False)
    async with app.run_test(size=(100, 30)) as pilot:
        app.stale_after_s = 30.0
        for n in names:
            await app.session.take_reading(dataclasses.replace(snap, name=n))
        nodes = app.query_one("#nodes")
        await wait_for(pilot, lambda: all(n in app.snapshots for n in names))
        app._mark_stale()
        assert not str(nodes.get_cell("gpu01", "state")).startswith("stale")
        import time
        app._arrived["gpu01"] = time.monotonic() - 45
        app._mark_stale()
        await pilot.pause()
        # the age as read when drawn: 45 s, or a little more on a busy machine
        assert re.fullmatch(r"stale 4[5-9]s", str(nodes.get_cell("gpu01", "state")))
        app.current_node = "gpu01"
        app._render_status()
        assert re.search(r"⚠ last reading 4[5-9] s ago", str(app.query_one("#status").render()))
        await app.session.take_reading(dataclasses.replace(snap, name="gpu01"))     # it answers again
        await wait_for(pilot, lambda: not str(nodes.get_cell("gpu01", "state")).startswith("stale"))


async def test_a_redraw_of_256_nodes_makes_only_the_rows_in_view_and_the_rest_when_scrolled_to(monkeypatch):
    """The node table draws only what shows (panels.NodeTable): a redraw of 256 updated nodes
    makes the rows in view, not 256 (each row's finding cell adds up a finding's GPU memory:
    at 256 real-size nodes the redraw took 80-160 ms and a key waited behind it); End shows the
    last node all the same."""
    names, sources, snap = await simulated_nodes(256, "graceful")
    app = IncidentApp(sources, autostart=False)
    made = []
    real = tables.node_cells

    def counted(name, snap, stale_s=None, *, finding=True):
        if finding:
            made.append(name)
        return real(name, snap, stale_s, finding=finding)
    monkeypatch.setattr(tables, "node_cells", counted)
    async with app.run_test(size=(120, 36)) as pilot:
        for n in names:
            await app.session.take_reading(dataclasses.replace(snap, name=n))
        await wait_for(pilot, lambda: all(n in app.snapshots for n in names))
        await pilot.pause()
        made.clear()
        for n in names:                                  # every node polled again
            await app.session.take_reading(dataclasses.replace(snap, name=n, probe_ms=300.0))
        nodes = app.query_one("#nodes")
        await wait_for(pilot, lambda: all(app.snapshots[n].probe_ms == 300.0 for n in names))
        await pilot.pause()
        assert 0 < len(set(made)) <= 36, f"{len(set(made))} rows made for a screen of 36 lines"
        assert "node255" not in set(made)
        nodes.focus()
        await pilot.press("end")
        await wait_for(pilot, lambda: "node255" in made)
        assert nodes.selected_key == "node255" and app.current_node == "node255"
        assert str(nodes.get_cell("node255", "probe")) == "<500ms"
