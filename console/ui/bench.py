"""What applying one NodeUpdated costs the console (Textual, headless 80x24), for bench part 4
(console/bench/ui.py turns these times into results).

The message is posted exactly as the poller posts it. Timed: from the post until
the console has caught up -- the app's handler has synced the tables, and every
DataTable has done the work that sync left for its idle moment (measuring new and
changed cells); the event loop, and so the operator's keys, wait on both. A
callback queued behind the message marks the first (``handler`` in the results),
a callback each table runs right after its next idle handler marks the second.
Between updates the screen settles, untimed.
"""
from __future__ import annotations

import asyncio
import time
from typing import Callable, Sequence

from console.model import NodeSnapshot
from console.sources.sim import SimSource


def _after_tables_settle(app, done: Callable[[], None], handled: Callable[[], None]) -> None:
    """Queue behind what is pending: ``handled`` once the app has processed its messages so far,
    then ``done`` once every DataTable has processed its own and run its idle handler."""
    from textual.widgets import DataTable
    tables = list(app.screen.query(DataTable))
    remaining = len(tables)

    def table_done() -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0:
            done()

    def in_table(table) -> None:
        table.call_next(table_done)      # flushed right after the table's idle handler

    def after_app() -> None:
        handled()
        if not tables:
            done()
        for table in tables:
            table.call_later(in_table, table)

    app.call_later(after_app)


async def apply_times(snaps: Sequence[NodeSnapshot], show_all: bool = False
                       ) -> tuple[list[float], list[float], float]:
    """(settled ms per update, handler ms per update, CPU ms of all but the first) for a fresh
    one-node console."""
    from console.session.events import NodeUpdated
    from console.ui.app import IncidentApp
    name = snaps[0].name
    app = IncidentApp([SimSource(name=name, scenario="seed")], autostart=False)
    app.redraw_interval_s = 0.0          # every update drawn at once: its own cost, no waiting
    settled: list[float] = []
    handler: list[float] = []
    cpu = 0.0
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        if show_all:
            app.action_toggle_all()
            await pilot.pause()
        for i, snap in enumerate(snaps):
            finished = asyncio.Event()
            marks: dict[str, float] = {}

            def handled() -> None:
                marks["handled"] = time.perf_counter()

            def done() -> None:
                marks["done"], marks["cpu"] = time.perf_counter(), (time.process_time() - cpu0) * 1000
                finished.set()

            cpu0 = time.process_time()
            t0 = time.perf_counter()
            await app.session.take_reading(snap)
            _after_tables_settle(app, done, handled)
            await finished.wait()
            settled.append((marks["done"] - t0) * 1000)
            handler.append((marks["handled"] - t0) * 1000)
            if i:
                cpu += marks["cpu"]
            if app.snapshots.get(name) is not snap:
                raise RuntimeError("the console did not take the update")
            await pilot.pause()                # settle the screen (untimed)
    return settled, handler, cpu
