"""A node's parse cache (parse.parse_probe(..., cache=)): a section whose text did not change is
not parsed again, a process whose lines did not change is the same object, and a probe that
leaves out a sticky section (probe.STICKY) keeps its last answer. None of it may change what
a poll reads: with the cache, every snapshot equals the one parsed without it."""
from __future__ import annotations

import asyncio
import dataclasses

from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from console import probe, probe_scope
from console.clock import FakeClock
from console.sources import parse
from console.sources.sim import SimSource
from tests.fuzzing import examples
from tests.test_parse_fuzz import MARK, probe_output
from tests.test_parse_proc import record, stat_entries
from console.sources.parse_proc import parse_stat
from console.sources.proc_table import parse_uids

fuzz = examples(60, suppress_health_check=[HealthCheck.too_slow])


def _unread_lines_blanked(snap, text):
    """The snapshot with the command line and user of every process this probe did not read
    them of (its uids section names those it did) blanked: a cache keeps those from an earlier
    read of the same process, by design (proc_table.merge_idents)."""
    read = set(parse_uids(probe.split_sections(text, MARK).get("uids", (None, ""))[1]))
    procs = tuple(p if p.pid in read else dataclasses.replace(p, user=None, cmdline="") for p in snap.processes)
    return dataclasses.replace(snap, processes=procs)


@fuzz
@given(st.lists(probe_output, min_size=1, max_size=3))
def test_a_cache_never_changes_what_a_whole_probe_reads(texts):
    cache: dict = {}
    for i, text in enumerate(texts):
        sticky = [name for name in parse._KEPT if f"{MARK} begin {name}" not in text]
        whole = "".join(f"{MARK} begin {name}\n{MARK} end {name} 0\n" for name in sticky) + text
        assert _unread_lines_blanked(parse._parse_probe("n1", whole, MARK, float(i), None, cache), whole) == \
            _unread_lines_blanked(parse._parse_probe("n1", whole, MARK, float(i), None), whole)


def _outputs(scenario: str, commands: list[str]) -> list[tuple[str, str]]:
    """Probe outputs of a simulated node, a second apart, a command run between some of them."""
    clock = FakeClock()
    src = SimSource(name="n1", scenario=scenario, clock=clock)

    async def run() -> list[tuple[str, str]]:
        out = []
        for command in [""] + commands:
            if command:
                await src.run(command)
            clock.advance(1.0)
            mark = probe.new_mark()
            result = await src.node.exec(probe.build_script(mark), 10.0)
            out.append((result.stdout, mark))
        return out
    return asyncio.run(run())


def test_successive_polls_of_a_changing_node_read_the_same_with_the_cache():
    polls = _outputs("seed", ["", "kill -9 72169", "", "", "nvidia-smi -pm 0 -i 3", ""])
    cache: dict = {}
    reused = 0
    last = None
    for i, (text, mark) in enumerate(polls):
        cached = parse.parse_probe("n1", text, mark, taken_at=float(i), cache=cache)
        assert cached == parse.parse_probe("n1", text, mark, taken_at=float(i))
        if last is not None:
            reused += sum(1 for p in cached.processes if any(p is q for q in last.processes))
        last = cached
    assert reused > 0, "processes whose lines did not change are the same objects"


def test_a_probe_without_the_sticky_sections_reads_as_the_whole_probe():
    (text, mark), = _outputs("seed", [])
    sec = probe.split_sections(text, mark)
    short = "".join(f"{mark} begin {name}\n{body}{mark} end {name} {rc}\n" for name, (rc, body) in sec.items()
                    if name not in probe.STICKY)
    cache: dict = {}
    whole = parse.parse_probe("n1", text, mark, taken_at=1.0, cache=cache)
    again = parse.parse_probe("n1", short, mark, taken_at=1.0, cache=cache)
    assert again == whole and again.own_pids and again.driver_version
    # without what an earlier probe said, the parts are missing and the poll says so
    alone = parse.parse_probe("n1", short, mark, taken_at=1.0)
    assert "probe section 'meta' missing" in alone.warnings and alone.driver_version is None


@fuzz
@given(stat_entries, stat_entries, st.integers(0, 60))
def test_stat_records_read_with_the_last_polls_records_read_as_the_stream_reader_reads_them(first, second, cut):
    """Comms with newlines, parentheses and fake fields included, output cut short included."""
    def text(entries):
        return "".join(record(pid, comm, state, ppid, threads, ticks)
                       for pid, comm, state, ppid, threads, ticks in entries)
    table: dict = {}
    for body in (text(first), text(first + second[:2]), text(second), text(second)[:max(0, len(text(second)) - cut)]):
        made: set = set()
        got = parse_stat(body, table, made)
        assert got == parse_stat(body)
        assert made == {pid for pid, st_line in got.items() if table.get(pid) is not st_line}
        # a record read again unchanged is the table's StatLine; one that changed, a new one
        for pid, st_line in got.items():
            old = table.get(pid)
            assert (st_line is old) == (old is not None and old.h is not None and old.h == st_line.h)
        table = {**table, **got}


def test_a_forged_record_line_is_read_by_the_stream_reader_not_from_memory():
    victim = record(4242, "sleep", ticks=777)
    table = parse_stat(victim, {})
    forger = record(100, "a\n4242 (fake", ticks=888)          # a comm holding a newline
    got = parse_stat(forger + victim, table)
    assert (got[4242].comm, got[4242].start_ticks) == ("sleep", 777)
    assert got[100].comm == "a\n4242 (fake"


def _probe(mark: str, **bodies: str) -> str:
    return "".join(f"{mark} begin {name}\n{body}{mark} end {name} 0\n" for name, body in bodies.items())


def test_a_probe_that_reads_no_command_line_keeps_each_only_for_the_same_process():
    mark = "::gi-t::"
    meta = "1700000000.5\n100\nbtime 1699990000\nnode1\n0\npid:[4026531836]\n900\n"
    first = _probe(mark, meta=meta, pids="last 200\n100 200\n",
                   stat=record(100, "python", ticks=5) + record(200, "bash", ticks=6),
                   args="/proc/100/cmdline:python\0/proc/100/cmdline:train.py\0/proc/200/cmdline:-bash\0",
                   uids="/proc/100/status:Uid:\t1000\t1000\t1000\t1000\n/proc/200/status:Uid:\t1001\t1001\t1001\t1001\n",
                   users="alice:x:1000:1000::/home/alice:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n")
    # a second later, a light probe: 200 ended and its PID went to another process (its stat
    # record says so: another start time); 300 is new, and neither's command line was read
    later = _probe(mark, pids="last 300\n100 200 300\n", stat=record(200, "evil", ticks=99) + record(300, "new", ticks=100))
    cache: dict = {}
    parse.parse_probe("n1", first, mark, taken_at=1.0, cache=cache)
    light = probe_scope.Scope(whole=False, watched=(100,), threads=())
    snap = parse.parse_probe("n1", later, mark, taken_at=2.0, cache=cache, scope=light)
    assert (snap.proc(100).user, snap.proc(100).cmdline) == ("alice", "python train.py"), "not read again: kept"
    reused = snap.proc(200)
    assert reused.name == "evil" and reused.cmdline == "" and reused.user is None, "never the old process's line"
    assert snap.proc(300).cmdline == "" and snap.proc(300).name == "new"


def test_the_first_record_of_a_pid_wins_when_a_later_one_is_the_tables():
    """A PID printed twice (no kernel does; a hostile node may): the first record, as the stream
    reader reads it, though the second is the very record the table holds."""
    table = parse_stat(record(100, "bash", ticks=5) + record(4242, "sleep", ticks=777), {})
    text = record(4242, "other", ticks=777) + record(100, "bash", ticks=5) + record(4242, "sleep", ticks=777)
    assert parse_stat(text, table) == parse_stat(text)
    assert parse_stat(text, table)[4242].comm == "other"
