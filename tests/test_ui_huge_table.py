"""A 100,000-process node (a real kernel here allows ~32k PIDs, so the snapshot is built from
model objects): the all-processes view holds a bounded window of rows, GPU holders first, the
console keeps answering keys, the cursor stays on its process, and `/` finds any process."""
from __future__ import annotations

import dataclasses

import pytest

import conftest

pytest.importorskip("textual")

from console.clock import FakeClock  # noqa: E402
from console.model import NodeSnapshot, Proc  # noqa: E402
from console.output.rows import PROC_ROW_LIMIT  # noqa: E402
from console.sources.sim import SimSource  # noqa: E402
from console.ui import tables  # noqa: E402
from console.ui.app import HelpScreen, IncidentApp  # noqa: E402

NODE = "huge"
PROCESSES = 100_000
BOUND = PROC_ROW_LIMIT + 1               # process rows, plus the one that counts the rest
RANKS = range(99_001, 99_009)            # the GPU job, PIDs past every ordinary process
LAUNCHER = 99_000


def huge_snapshot(processes: int = PROCESSES, taken_at: float = 1.0, extra: tuple[Proc, ...] = ()
                  ) -> NodeSnapshot:
    procs = [Proc(pid=1, ppid=0, state="S", user="root", name="systemd", cmdline="/sbin/init")]
    shells = [Proc(pid=pid, ppid=1, state="S", user=f"u{pid}", name="bash", cmdline="-bash")
              for pid in range(2, 102)]
    procs += shells
    procs.append(Proc(pid=LAUNCHER, ppid=1, state="S", user="ml", name="torchrun",
                      cmdline="torchrun --nproc-per-node 8 train.py"))
    procs += [Proc(pid=pid, ppid=LAUNCHER, state="R", user="ml", name="python3",
                   cmdline=f"python3 train.py --local-rank={i}", gpu_memory_mib={str(i): 70_000 + i},
                   device_files=(f"/dev/nvidia{i}",)) for i, pid in enumerate(RANKS)]
    pid = 102
    while len(procs) < processes - len(extra):
        if pid == LAUNCHER:
            pid = RANKS[-1] + 1
        zombie = pid % 97 == 0           # ~1000 zombies under every shell: GPU-related too
        procs.append(Proc(pid=pid, ppid=2 + pid % 100, state="Z" if zombie else "S", user="user",
                          name="worker", cmdline="" if zombie else f"/usr/bin/worker --job {pid}"))
        pid += 1
    procs += extra
    return NodeSnapshot(name=NODE, taken_at=taken_at, processes=tuple(procs))


def procs_table(app):
    return app.query_one("#procs")


def keys_shown(app) -> list[str]:
    return procs_table(app).row_keys


wait_for = conftest.wait_for


def console() -> IncidentApp:
    return IncidentApp([SimSource(name=NODE, scenario="seed", clock=FakeClock())], autostart=False)


@pytest.mark.heavy      # several seconds: the second pass of .ci/run
async def test_all_processes_of_a_100000_process_node_are_a_bounded_window_and_keys_answer():
    app = console()
    snap = huge_snapshot()
    assert len(snap.processes) == PROCESSES
    async with app.run_test(size=(80, 24)) as pilot:
        await app.session.take_reading(snap)
        await wait_for(pilot, lambda: procs_table(app).row_count > 0)
        await pilot.press("a")
        await wait_for(pilot, lambda: app.show_all and tables.MORE_KEY in procs_table(app).row_keys)
        table = procs_table(app)
        assert table.row_count <= BOUND
        shown = keys_shown(app)
        # GPU holders and their tree first, though their PIDs come after 99,000 others and
        # a thousand zombies
        assert shown[:2] == [f"{NODE}:1", f"{NODE}:{LAUNCHER}"]
        assert shown[2:10] == [f"{NODE}:{pid}" for pid in RANKS]
        # the last row counts the rest and says how to reach them
        assert shown[-1] == tables.MORE_KEY
        more = str(table.get_row(tables.MORE_KEY)[-1])
        assert f"{PROCESSES - (len(shown) - 1):,} more" in more and "/ filters" in more
        assert f"{PROCESSES:,}" in str(table.border_title)
        # the poller goes on: every update stays within the bound, and `?` is answered
        for i in range(3):
            await app.session.take_reading(huge_snapshot(taken_at=2.0 + i))
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))
        assert app.snapshots[NODE].taken_at == 4.0
        assert procs_table(app).row_count <= BOUND
        # `/` searches all 100,000, shown or not
        await pilot.press("slash")
        await pilot.pause()
        await pilot.press(*"--job 77777", "enter")     # (77777 = 97 * 801 + 80: not a zombie)
        await wait_for(pilot, lambda: keys_shown(app) == [f"{NODE}:77777"])
        # enter on the row that counts the rest asks for a filter, too
        await pilot.press("slash")
        await pilot.pause()
        await pilot.press("ctrl+u", "enter")
        await wait_for(pilot, lambda: tables.MORE_KEY in procs_table(app).row_keys)
        table = procs_table(app)
        table.move_cursor(row=table.get_row_index(tables.MORE_KEY), animate=False)
        await pilot.pause()
        assert app.selected_process_key is None          # nothing to signal on that row
        await pilot.press("enter")
        await wait_for(pilot, lambda: "Filter" in str(app.screen.query("Static").first().render()))
        await pilot.press("escape")


async def test_the_selected_process_stays_selected_when_a_huge_table_moves():
    app = console()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.session.take_reading(huge_snapshot())
        await wait_for(pilot, lambda: procs_table(app).row_count > 0)
        await pilot.press("a")
        await wait_for(pilot, lambda: tables.MORE_KEY in procs_table(app).row_keys)
        table = procs_table(app)
        table.move_cursor(row=PROC_ROW_LIMIT - 1, animate=False)   # the last process row
        await pilot.pause()
        chosen = app.selected_process_key
        assert chosen is not None and chosen.startswith(f"{NODE}:")
        # five new GPU holders appear: they come first, which would push the chosen one out
        newcomers = tuple(Proc(pid=200_000 + i, ppid=1, state="S", user="ml", name="probe",
                               cmdline="python3 probe_cuda.py", device_files=("/dev/nvidia0",))
                          for i in range(5))
        await app.session.take_reading(huge_snapshot(taken_at=2.0, extra=newcomers))
        await wait_for(pilot, lambda: f"{NODE}:200000" in procs_table(app).row_keys)
        assert app.selected_process_key == chosen
        assert procs_table(app).row_count <= BOUND
        # an update that changes nothing keeps the cursor where it is, too
        table.move_cursor(row=42, animate=False)
        await pilot.pause()
        chosen = app.selected_process_key
        await app.session.take_reading(dataclasses.replace(app.snapshots[NODE], taken_at=3.0))
        await wait_for(pilot, lambda: app.snapshots[NODE].taken_at == 3.0)
        await pilot.pause()
        assert app.selected_process_key == chosen
