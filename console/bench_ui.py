"""Bench, part 4: what applying one NodeUpdated costs the console (Textual, headless 80x24).

The message is posted exactly as the poller posts it. Timed: from the post until
the console has caught up -- the app's handler has synced the tables, and every
DataTable has done the work that sync left for its idle moment (measuring new and
changed cells); the event loop, and so the operator's keys, wait on both. A
callback queued behind the message marks the first (``handler`` in the results),
a callback each table runs right after its next idle handler marks the second.
Between updates the screen settles, untimed. Textual is imported here only.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Callable, Sequence

from console.bench_stats import Result, Stopwatch, percentile
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


async def _apply_times(snaps: Sequence[NodeSnapshot], show_all: bool = False
                       ) -> tuple[list[float], list[float], float]:
    """(settled ms per update, handler ms per update, CPU ms of all but the first) for a fresh
    one-node console."""
    from console.ui.app import IncidentApp, NodeUpdated
    name = snaps[0].name
    app = IncidentApp([SimSource(name=name, scenario="seed")], autostart=False)
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
                marks["done"], marks["cpu"] = time.perf_counter(), watch.cpu_ms
                finished.set()

            watch = Stopwatch()
            t0 = time.perf_counter()
            app.post_message(NodeUpdated(snap))
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


def _series(snaps: Sequence[NodeSnapshot], count: int) -> list[NodeSnapshot]:
    """``count`` successive snapshots of one node, one second apart, cycling through ``snaps``."""
    base = snaps[-1].taken_at
    return [dataclasses.replace(snaps[i % len(snaps)], taken_at=base + 1 + i) for i in range(count)]


async def measure(snaps: dict, updates: int,
                  progress: Callable[[str], None] = lambda _m: None) -> list[Result]:
    """``snaps``: {"seed": [diagnosed seed snapshots], "big": [diagnosed 2000-process snapshots
    whose values move from one to the next]}."""
    results: list[Result] = []
    big = snaps["big"][0]
    cases = [("seed", "the seed node", snaps["seed"], False),
             ("big", f"the {len(big.processes)}-process node (GPU processes shown)", snaps["big"], False),
             ("big_all", f"the {len(big.processes)}-process node, all processes shown (key a)",
              snaps["big"], True)]
    for label, what, series, show_all in cases:
        progress(f"ui: {label}")
        settled, handler, cpu = await _apply_times(_series(series, updates + 1), show_all=show_all)
        results.append(Result(f"ui.first_update.{label}", f"first NodeUpdated (empty tables filled), {what}",
                              settled[:1], extra={"handler_ms": round(handler[0], 3)}))
        results.append(Result(f"ui.update.{label}", f"one NodeUpdated until the console caught up, {what}",
                              settled[1:], cpu_ms=cpu,
                              extra={"handler_p50": round(percentile(handler[1:], 50), 3)}))
    return results
