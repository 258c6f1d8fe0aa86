"""o: the process panel's order (tree, GPU memory, PID, user), the cursor on the same process."""
from __future__ import annotations

from console.clock import FakeClock
from console.sources.sim import SimSource
from console.ui.app import IncidentApp
from conftest import wait_for


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
        assert "by GPU memory (o, F6)" in str(table.border_title)
        await pilot.press("o")
        await pilot.pause()
        assert [int(k.split(":")[1]) for k in table.row_keys] == sorted(by_mem)
        await pilot.press("o")
        await pilot.pause()
        users = [snap.proc(int(k.split(":")[1])).user or "~" for k in table.row_keys]
        assert users == sorted(users)
        await pilot.press("o")
        await pilot.pause()
        assert table.row_keys == tree and "(o, F6)" not in str(table.border_title)


def test_eight_workers_a_few_mib_apart_keep_their_pid_order_in_the_tree():
    """After SIGKILL the seed's eight workers are roots of their own (<defunct>, parent gone),
    74.3 GiB each a few MiB apart: the tree orders them TP0 to TP7 (PID order), not by the
    last MiB (TP1-TP6, TP0, TP7); a root holding a whole GiB more still comes first."""
    from console.model import NodeSnapshot, Proc
    from console.output.rows import proc_view
    mibs = [76105, 76109, 76109, 76109, 76109, 76109, 76109, 76065]
    workers = [Proc(pid=72230 + 64 * i, ppid=1, name="sglang::schedul", state="Z", user="root", cmdline="",
                    gpu_memory_mib={str(i): mib}) for i, mib in enumerate(mibs)]
    big = Proc(pid=90000, ppid=1, name="bigger", state="S", user="root", cmdline="bigger",
               gpu_memory_mib={"0": 80000})
    snap = NodeSnapshot(name="n", taken_at=0.0, processes=tuple(workers) + (big,))
    rows = proc_view(snap).rows
    assert [r.proc.pid for r in rows] == [90000] + [w.pid for w in workers]
