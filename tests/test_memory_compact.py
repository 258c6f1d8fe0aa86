"""What the engine keeps per node stays compact (docs/performance.md, "Memory"): 256 real-size
nodes of 2,000 processes made every per-process copy count. The bench measures the bytes
(console/bench/heap.py); these tests keep the structures from growing back:

- the parse cache keeps no stat record's text (a hash of it), no {pid: Proc} map or PID index
  beside the node's process list, and no process's inputs beside its Proc;
- a process's command line is kept once (the Ident's string is the Proc's; the same command
  line on two nodes is one string), never as its argument list;
- a Proc has no __dict__ (slots), its memos still work and it stays frozen;
- the history keeps no process of a past poll (digests, streaks).
"""
from __future__ import annotations

import dataclasses

import pytest

from console.clock import FakeClock
from console.diagnosis.roles import daemon_role
from console.model import Proc
from console.monitor import NodeMonitor
from console.sim.node import SimNode
from console.sources.proc_table import Ident
from console.sources.sim import SimSource

SIZE = (300, 1500)       # a real-size table, smaller: the structures, not the bytes, are tested


def _source(name: str, clock: FakeClock) -> SimSource:
    return SimSource(node=SimNode("seed", clock=clock, name=name, size=SIZE))


async def _polled(name: str = "n1", polls: int = 3) -> tuple[SimSource, NodeMonitor]:
    clock = FakeClock()
    source = _source(name, clock)
    mon = NodeMonitor(source)
    for _ in range(polls):
        await mon.poll_once()
        clock.advance(1.0)
    return source, mon


def _walk(value, depth: int = 0):
    """``value`` and what it holds (containers and dataclass-like tables), a few levels deep."""
    yield value
    if depth > 3:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(k, depth + 1)
            yield from _walk(v, depth + 1)
    elif isinstance(value, (tuple, list, set, frozenset)) and not isinstance(value, Proc):
        for v in list(value)[:50] if len(value) > 50 else value:
            yield from _walk(v, depth + 1)


async def test_the_parse_cache_keeps_no_stat_record_text_and_no_per_process_map_beside_the_list():
    source, mon = await _polled()
    cache = source._parse_cache
    procs = mon.latest.processes
    assert len(procs) >= SIZE[0]
    # a record read again unchanged is known by its hash on the StatLine: no map of records beside the table
    assert "stat_whole" not in cache and "stat_light" not in cache
    assert all(isinstance(st.h, int) for st in cache["table"].values())
    assert "procs_index" not in cache and "procs" not in cache
    for key, value in cache.items():
        if isinstance(value, dict) and len(value) >= SIZE[0] // 2:
            sample = list(value.values())[:20]
            assert not any(isinstance(v, Proc) for v in sample), f"cache[{key!r}] maps PIDs to Procs"
            assert not any(isinstance(v, tuple) and any(isinstance(x, Proc) for x in v) for v in sample), \
                f"cache[{key!r}] keeps a Proc beside its inputs"
    long_texts = [v for v in _walk(cache) if isinstance(v, str) and len(v) > 64 * 1024]
    assert not long_texts, "the cache keeps no section text of this size"


async def test_a_command_line_is_kept_once_and_the_same_one_on_two_nodes_is_one_string():
    a, mon_a = await _polled("n1")
    b, mon_b = await _polled("n2")
    idents = a._parse_cache["idents"]
    assert {f.name for f in dataclasses.fields(Ident)} == {"start_ticks", "uid", "cmdline", "comm"}
    shared = 0
    for p in mon_a.latest.processes:
        ident = idents.get(p.pid)
        if ident is not None and ident.cmdline:
            assert p.cmdline is ident.cmdline, "the Proc's command line is the Ident's string"
            shared += 1
    assert shared > SIZE[0] // 2
    by_pid = {p.pid: p for p in mon_b.latest.processes}
    same = [(p, by_pid[p.pid]) for p in mon_a.latest.processes
            if p.pid in by_pid and p.cmdline and p.cmdline == by_pid[p.pid].cmdline]
    assert same and all(x.cmdline is y.cmdline and x.name is y.name for x, y in same)
    assert all(x.user is y.user for x, y in same if x.user is not None)


async def test_a_proc_has_slots_its_memos_work_and_it_stays_frozen():
    _source_, mon = await _polled(polls=1)
    p = next(p for p in mon.latest.processes if p.device_files)
    assert not hasattr(p, "__dict__")
    assert p.device_gpus is p.device_gpus
    role = daemon_role(p)
    assert daemon_role(p) is role
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.pid = 1          # type: ignore[misc]
    assert dataclasses.replace(p, pid=p.pid) == p
    assert "_device_gpus" not in {f.name for f in dataclasses.fields(Proc)}


async def test_the_history_keeps_no_process_of_a_past_poll():
    _source_, mon = await _polled(polls=4)
    assert len(mon.history) == 4
    assert all(d.processes == () and d.findings == () for d in mon.history)
    assert all(not isinstance(v, Proc) for d in mon.history for v in _walk(d.driver_processes))


async def test_compact_streaks_answer_as_full_snapshots_do_while_the_parser_reuses_its_procs():
    """The parser hands back the very Procs of an unchanged process, so the history advances only
    the changed ones (and keeps only a 'since' for a process with no streak open but its
    parent's): every poll's findings and streaks are those worked out from the full snapshots."""
    from console.diagnosis import diagnose
    from console.diagnosis.history import History
    from tests.test_diagnose_perf import streaks
    clock = FakeClock()
    source = _source("n1", clock)
    compact, full = History(), []
    commands = ["", "", "kill -9 72169", "", "", "kill -STOP 1", "", ""]
    reused = 0
    for command in commands:
        if command:
            await source.run(command)
        snap = await source.poll()
        if full:
            reused += sum(1 for a, b in zip(snap.processes, full[-1].processes) if a is b)
        assert diagnose(snap, compact, ()) == diagnose(snap, list(full), ())
        assert streaks(snap, compact) == streaks(snap, list(full))
        compact.append(snap)
        full.append(snap)
        clock.advance(1.0)
    assert reused > SIZE[0], "the parser handed back the same Procs (the history's quick path ran)"
    tracks = compact._tracks[snap.name]
    assert len(tracks[0]) < len(tracks[1]) // 10, "most processes keep a 'since', not a Track"


async def test_the_pid_listing_is_the_tables_keys_while_they_are_the_same():
    """Over a kept shell (light probes, "same" listings): the listing the console holds is the
    table's keys, not a set of every PID beside them, and it follows PIDs that come and go."""
    from tests.sim_fixtures import kept_shell_sim
    from console.sources.proc_read import TableKeys
    clock = FakeClock()
    source = kept_shell_sim(node=SimNode("seed", clock=clock, name="n1", size=SIZE))
    for _ in range(3):
        await source.poll()
        clock.advance(1.0)
    cache = source._parse_cache
    held = cache["listing"]
    assert isinstance(held, TableKeys) and held.table is cache["table"]
    assert set(held) == {p.pid for p in source.node.visible_procs()}
    victim = next(p for p in source.node.visible_procs() if p.args and not p.kthread and p.ppid == 1)
    source.node.stop_process(victim)                   # a task ends: a new listing
    born = source.node.add_proc(ppid=1, comm="sleep", args="sleep 600")
    snap = await source.poll()
    clock.advance(1.0)
    pids = {p.pid for p in snap.processes}
    assert victim.pid not in pids and born.pid in pids
    snap = await source.poll()
    assert cache["listing"] is held and set(held) == {p.pid for p in source.node.visible_procs()}
    assert {p.pid for p in snap.processes} == set(held)
