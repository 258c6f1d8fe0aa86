"""A node not on screen keeps the command lines of the processes it does not show compressed
(sources/cold_idents.py): what the operator sees of a process that comes to matter, and of every
process of a node put on screen, is what the node said of it, at once, not after a re-read."""
from __future__ import annotations

from console.clock import FakeClock
from console.sim.node import SimNode
from console.sources import cold_idents
from console.sources.sim import SimSource
from tests.sim_fixtures import kept_shell_sim

SIZE = (600, 3000)


def _node(detail: bool) -> SimSource:
    clock = FakeClock()
    src = kept_shell_sim(name="n", node=SimNode("seed", clock=clock, name="n", size=SIZE))
    src.detail = detail
    return src


def _said(snap) -> dict[int, tuple]:
    return {p.pid: (p.cmdline, p.user) for p in snap.processes}


def _truth(src: SimSource, pid: int) -> str:
    return src.node.proc(pid).args


async def _poll(src: SimSource, n: int = 1):
    snap = None
    for _ in range(n):
        snap = await src.poll()
        src.clock.advance(1.0)
    return snap


async def test_a_node_off_screen_keeps_few_command_lines_whole_and_the_rest_compressed():
    src = _node(False)
    snap = await _poll(src, 3)
    cache = src._parse_cache
    warm = cache["idents"]
    cold = cache["idents_cold"]
    assert snap.table_size and snap.table_size >= 600
    assert len(warm) <= len(snap.processes) + max(cold_idents.FREEZE_AFTER, len(cold.pids) // 4)
    assert len(cold.pids) + len(warm) >= snap.table_size
    assert len(cold.blob) < 40 * len(cold.pids)          # ~300 B a process uncompressed
    for pid, (cmdline, _user) in _said(snap).items():    # what is shown is what the node said
        assert cmdline == _truth(src, pid)
    # the command lines not asked for again: nothing is unread
    assert not cache["unread"]


async def test_a_process_that_comes_to_matter_shows_its_command_line_in_the_same_poll():
    src = _node(False)
    snap = await _poll(src, 3)
    shown = {p.pid for p in snap.processes}
    crowd = [p for p in src.node.visible_procs() if p.pid not in shown and p.args and not p.kthread]
    holder, stuck = crowd[len(crowd) // 2], crowd[len(crowd) // 3]
    assert holder.pid in cold_idents.cold_pids(src._parse_cache)
    holder.fds.append("/dev/nvidia0")          # opens the device: a hidden holder
    stuck.state = "D"                          # goes into D
    src.request_whole()
    snap = await _poll(src)
    got = {p.pid: p for p in snap.processes}
    assert holder.pid in got and stuck.pid in got
    assert got[holder.pid].cmdline == holder.args and got[holder.pid].user == holder.user
    assert got[stuck.pid].cmdline == stuck.args


async def test_a_node_put_on_screen_shows_every_command_line_at_its_next_poll():
    part, full = _node(False), _node(True)
    await _poll(part, 3)
    await _poll(full, 3)
    part.detail = True
    a, b = await _poll(full), await _poll(part)
    assert b.table_size is None and len(b.processes) == len(a.processes)
    assert _said(b) == _said(a)
    assert "idents_cold" not in part._parse_cache
    part.detail = False                        # and off screen again: compressed again
    await _poll(part, 2)
    assert "idents_cold" in part._parse_cache


def test_new_processes_go_into_the_blob_in_batches_not_every_poll():
    """A node where processes come and go makes the blob again every quarter of its size of new
    ones (its cost in proportion to them), not at every poll."""
    from console.sources.parse_proc import StatLine
    from console.sources.proc_read import Table
    from console.sources.proc_table import Ident

    def table_of(pids):
        stats = {pid: StatLine(pid, "w", "S", 1, 1, 1000 + pid) for pid in pids}
        idents = {pid: Ident(1000 + pid, 0, f"worker --rank {pid}", "w") for pid in pids}
        return Table(stats=stats, idents=idents)
    keep = frozenset({1})
    pids = list(range(1, 2001))
    cache: dict = {}
    t = table_of(pids)
    cache["idents"] = t.idents
    cold_idents.settle(cache, t, keep)
    blob = cache["idents_cold"]
    assert len(blob.pids) == 1999 and set(cache["idents"]) == {1}
    born = list(range(3000, 3300))                    # 300 new processes: under a quarter of 1,999
    t = table_of(pids + born)
    cache["idents"] = {**cache["idents"], **{pid: t.idents[pid] for pid in born}}
    cold_idents.settle(cache, t, keep)
    assert cache["idents_cold"] is blob and len(cache["idents"]) == 301
    born += list(range(4000, 4300))                   # 600: over a quarter: into the blob
    t = table_of(pids + born)
    cache["idents"] = {**cache["idents"], **{pid: t.idents[pid] for pid in born[300:]}}
    cold_idents.settle(cache, t, keep)
    assert cache["idents_cold"] is not blob and len(cache["idents_cold"].pids) == 2599
    assert cold_idents.thaw(cache["idents_cold"], t.stats, {4299})[4299].cmdline == "worker --rank 4299"
