"""o: the process panel's order (tree, GPU memory, PID, user), the cursor on the same process."""
from __future__ import annotations

from console.clock import FakeClock
from console.sources.sim import SimSource
from console.ui.app import IncidentApp
from test_ui_app import wait_for


async def test_o_orders_the_processes_by_memory_then_pid_then_user_then_the_tree_again():
    app = IncidentApp([SimSource(name="demo", scenario="seed", clock=FakeClock())])
    async with app.run_test(size=(100, 36)) as pilot:
        table = app.query_one("#procs")
        await wait_for(pilot, lambda: "demo" in app.snapshots and table.row_count > 3)
        await pilot.press("a")                                      # every process
        await wait_for(pilot, lambda: table.row_count > 40)
        tree = table.row_keys
        snap = app.snapshots["demo"]
        selected = app.selected_process_key
        await pilot.press("o")
        await pilot.pause()
        by_mem = [int(k.split(":")[1]) for k in table.row_keys]
        mib = [snap.proc(p).gpu_memory_total_mib for p in by_mem]
        assert mib == sorted(mib, reverse=True) and mib[0] > 0, mib[:10]
        assert app.selected_process_key == selected, "the cursor stays on its process"
        assert "by memory (o)" in str(table.border_title)
        await pilot.press("o")
        await pilot.pause()
        assert [int(k.split(":")[1]) for k in table.row_keys] == sorted(by_mem)
        await pilot.press("o")
        await pilot.pause()
        users = [snap.proc(int(k.split(":")[1])).user or "~" for k in table.row_keys]
        assert users == sorted(users)
        await pilot.press("o")
        await pilot.pause()
        assert table.row_keys == tree and "(o)" not in str(table.border_title)
