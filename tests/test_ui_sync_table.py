"""The by-key table update at scale: only changed cells reach the table, order and cursor follow
the wanted rows, rows are as tall as measuring them would make them, and the GPU holder counts
are worked out once per snapshot."""
from __future__ import annotations

import pytest

pytest.importorskip("textual")

from rich.text import Text  # noqa: E402
from textual.app import App  # noqa: E402
from textual.widgets import DataTable  # noqa: E402

from console.model import NodeSnapshot, Proc  # noqa: E402
from console.ui import tables  # noqa: E402
from console.output.rows import ProcRow, gpu_holders  # noqa: E402


class Tables(App):
    def compose(self):
        yield DataTable(id="a", cursor_type="row")
        yield DataTable(id="b", cursor_type="row")


def proc(pid: int, ppid: int = 1, **kw) -> Proc:
    base = dict(state="S", user="u", name=f"p{pid}", cmdline=f"/usr/bin/p{pid} --id {pid}")
    return Proc(pid=pid, ppid=ppid, **{**base, **kw})


def wanted(procs, tagged=()) -> dict[str, tuple]:
    return {f"n:{p.pid}": tables.proc_cells(ProcRow(f"n:{p.pid}", "n", p, 0), f"n:{p.pid}" in tagged)
            for p in procs}


def shown(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row(r.key)] for r in table.ordered_rows]


async def test_unchanged_rows_send_nothing_and_changes_send_only_their_cells():
    app = Tables()
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.query_one("#a", DataTable)
        tables.add_columns(table, tables.PROC_COLUMNS)
        procs = [proc(pid) for pid in range(100, 1100)]
        tables.sync_table(table, wanted(procs))
        await pilot.pause()
        table.move_cursor(row=500)
        chosen = tables.selected_key(table)
        sent = []
        real_update = table.update_cell
        table.update_cell = lambda *a, **kw: (sent.append((a[0], a[1].value)), real_update(*a, **kw))

        tables.sync_table(table, wanted(procs))                        # the next poll, nothing moved
        assert sent == [] and shown(table) == [[str(c) for c in cells] for cells in wanted(procs).values()]

        procs[3] = proc(103, state="Z")                                # one process died
        tables.sync_table(table, wanted(procs, tagged={"n:104"}))       # and one was tagged
        assert sorted(sent) == [("n:103", "name"), ("n:103", "state"), ("n:104", "pid")]
        assert shown(table)[3][1] == "Z" and shown(table)[4][0] == "*104"

        sent.clear()
        reordered = procs[::-1][:900]                                   # new order, 100 gone
        tables.sync_table(table, wanted(reordered, tagged={"n:104"}))
        assert sent == [] and [r.key.value for r in table.ordered_rows] == [f"n:{p.pid}" for p in reordered]
        assert tables.selected_key(table) == chosen

        # a row replaced behind sync_table's back is read again, not trusted from memory
        table.remove_row("n:1099")
        table.add_row("x", "x", "x", "x", "x", "x", key="n:1099")
        tables.sync_table(table, wanted(reordered, tagged={"n:104"}))
        assert shown(table)[0] == [str(c) for c in wanted(reordered)["n:1099"]]


async def test_rows_are_as_tall_as_measuring_them_makes_them():
    """One-line rows are added at height 1 without being rendered to find out; a finding with
    its next step takes two lines, as before."""
    snap = NodeSnapshot(name="n", taken_at=0.0, processes=(proc(7, name="", cmdline=""),
                                                           proc(8, cmdline="[bold]x\tz")))
    app = Tables()
    async with app.run_test(size=(120, 30)) as pilot:
        mine, measured = app.query_one("#a", DataTable), app.query_one("#b", DataTable)
        rows = dict(wanted(snap.processes))
        rows["text"] = (Text("a"), "", Text(""), "x", Text("y"), "")
        rows["two"] = (Text("one\ntwo"), "", "", "", "", "")
        rows["str2"] = (Text("z"), Text("a\nb"), "", "", "", "")     # (a str cell is one literal line)
        for table in (mine, measured):
            tables.add_columns(table, tables.PROC_COLUMNS)
        tables.sync_table(mine, rows)
        for key, cells in rows.items():
            measured.add_row(*cells, key=key, height=None)
        await pilot.pause()
        heights = [(r.key.value, r.height) for r in mine.ordered_rows]
        assert heights == [(r.key.value, r.height) for r in measured.ordered_rows]
        assert dict(heights) == {"n:7": 1, "n:8": 1, "text": 1, "two": 2, "str2": 2}
        assert tables.row_height(rows["n:7"]) == 1 and tables.row_height(rows["two"]) is None


def test_gpu_holders_per_gpu_match_one_gpu_at_a_time():
    procs = (proc(10, gpu_memory_mib={"0": 500}), proc(11, device_files=("/dev/nvidia1", "/dev/nvidiactl")),
             proc(12, gpu_memory_mib={"1": 9, "GPU-x": 3}, device_files=("/dev/nvidia1",)),
             proc(13, device_files=("/dev/nvidia-uvm",)), proc(14, gpu_memory_mib={"3": None}),
             proc(15, device_files=("/dev/nvidia10",)))
    snap = NodeSnapshot(name="n", taken_at=0.0, processes=procs)
    for index in range(12):
        want = [p for p in procs if str(index) in p.gpu_memory_mib or index in p.device_gpus]
        assert gpu_holders(snap, index) == want
    assert [p.pid for p in gpu_holders(snap, 1)] == [11, 12]
    gpu_holders(snap, 1).clear()                       # a caller's list is its own
    assert len(gpu_holders(snap, 1)) == 2


def test_a_healthy_probe_time_reads_the_same_every_poll_and_a_slow_one_shows():
    from console.ui.tables import probe_cell
    assert {probe_cell(ms) for ms in (3.2, 17.9, 49.4)} == {"<50ms"}, "no cell changes at every poll"
    assert (probe_cell(None), probe_cell(123.4), probe_cell(994), probe_cell(2345)) == ("", "<250ms", "<1s", "2.3s")
    assert {probe_cell(ms) for ms in (110, 170, 240)} == {"<250ms"}, "a loaded node's wandering times: one cell"


def test_a_node_with_a_critical_finding_or_memory_held_never_reads_ok():
    import dataclasses

    from console.model import Finding, NodeSnapshot
    from console.ui import tables
    base = NodeSnapshot(name="gpu07", taken_at=0.0)
    low = Finding(kind="reset-blocker", severity="low", summary="", next_step="")
    crit = Finding(kind="zombie", severity="critical", summary="", next_step="", rung="wait")
    assert str(tables.node_cells("gpu07", dataclasses.replace(base, findings=(low,)))[1]) == "idle"
    assert str(tables.node_cells("gpu07", dataclasses.replace(base, findings=(low, crit)))[1]) == "critical"
    from console.model import Gpu
    held = Gpu(index=0, uuid="GPU-0", name="H100", bus_id="0", memory_used_mib=76109, memory_total_mib=97887,
               utilization_pct=0)
    assert str(tables.node_cells("gpu07", dataclasses.replace(base, findings=(low,), gpus=(held,)))[1]) == "holding"
