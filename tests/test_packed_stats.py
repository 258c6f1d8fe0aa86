"""A node not on screen keeps its process table as columns (console/sources/packed_stats.py,
docs/performance.md "Memory, fourth step"). What the console knows of its processes must be
what it knows of an on-screen node's: the same probes read into a dict table and into a packed
one give the same records, the same command lines, the same device files and the same PIDs to
read next, poll after poll, while processes are born, die, change, reuse a PID, change only in
what the table keeps no field of (memory), carry numbers past 64 bits or a newline in their comm.
"""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from console.probe_scope import Scope
from console.sources.packed_stats import PackedStats, pack, unpack
from console.sources.parse_proc import StatLine
from console.sources.proc_read import pack_table, read_table, unpack_table
from console.sources.watch import kept


def _line(pid: int, p: dict) -> str:
    return (f"{pid} ({p['comm']}) {p['state']} {p['ppid']} {pid} {p['session']} 0 -1 4194560 {p['minflt']} 0 0 0 "
            f"{p['utime']} {p['stime']} 0 0 20 0 {p['threads']} 0 {p['start']} {p['rss'] * 4096} {p['rss']} "
            f"18446744073709551615 1 1 0 0 0 0 0\n")


class Node:
    """A process table that changes between probes as a busy node's does."""

    def __init__(self, rnd: random.Random, size: int) -> None:
        self.rnd, self.next_pid, self.clock = rnd, 300, 1000
        self.procs: dict[int, dict] = {}
        self.dead: list[int] = []
        for _ in range(size):
            self._birth()

    def _birth(self, pid: int | None = None) -> None:
        rnd = self.rnd
        if pid is None:
            self.next_pid += rnd.randint(1, 5)
            pid = self.next_pid
        parents = [p for p in self.procs if p < pid] or [1]
        self.clock += 1
        self.procs[pid] = dict(comm=rnd.choice(["python", "bash", "sshd", "kworker/0:1", "a (b) c", "x)"]),
                               state=rnd.choice("SSSRDZ"), ppid=rnd.choice(parents), session=rnd.choice([1, pid]),
                               minflt=0, utime=rnd.randint(0, 500), stime=rnd.randint(0, 500),
                               threads=rnd.randint(1, 40), start=self.clock, rss=rnd.randint(1, 10**6))

    def step(self) -> None:
        rnd = self.rnd
        for pid in list(self.procs):
            p, r = self.procs[pid], rnd.random()
            if r < 0.03:
                del self.procs[pid]
                self.dead.append(pid)
            elif r < 0.10:
                p["utime"] += rnd.randint(1, 100)             # a busy one: a kept field
                p["state"] = rnd.choice("SRD")
            elif r < 0.20:
                p["rss"] += rnd.randint(1, 1000)              # only memory: the same record
                p["minflt"] += 1
            elif r < 0.21:
                p["utime"] = 2 ** 70                          # no 64-bit number: stays a StatLine
        for _ in range(rnd.randint(0, 4)):
            self._birth()
        if self.procs and rnd.random() < 0.2:                 # a PID used again by a new process
            self._birth(rnd.choice(list(self.procs)))
        if self.dead and rnd.random() < 0.3:                  # a PID that died, used again
            self._birth(self.dead.pop(rnd.randrange(len(self.dead))))
        if rnd.random() < 0.05:                               # a comm with a newline: the stream reader
            self.procs[rnd.choice(list(self.procs))]["comm"] = "evil\n1 (x"

    def sections(self, whole: bool, read: set[int]) -> dict:
        pids = sorted(self.procs)
        listing = "last %d\n%s\n" % (self.next_pid, " ".join(map(str, pids)))
        shown = pids if whole else [pid for pid in pids if pid in read]
        stat = "".join(_line(pid, self.procs[pid]) for pid in shown)
        if shown and self.rnd.random() < 0.1:                 # a PID twice: the first record wins
            pid = self.rnd.choice(shown)
            stat += _line(pid, dict(self.procs[pid], state="T", utime=1))
        return {"pids": (0, listing), "stat": (0, stat), "fds": (0, "")}


def _same(a, b) -> None:
    assert dict(a.stats.items()) == dict(b.stats.items())
    assert len(a.stats) == len(b.stats) and set(a.stats) == set(b.stats)
    assert a.idents == b.idents and a.extras == b.extras


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32), size=st.sampled_from([5, 60, 300]))
def test_a_packed_table_reads_every_probe_as_a_dict_table_does(seed, size):
    rnd = random.Random(seed)
    node = Node(rnd, size)
    plain: dict = {}
    packed: dict = {}
    before: set[int] = set()
    for poll in range(14):
        whole = poll == 0 or rnd.random() < 0.25
        watched = set(rnd.sample(sorted(node.procs), min(len(node.procs), 8)))
        read = watched | (set(node.procs) - before)           # the watched, and every new PID
        sec = node.sections(whole, read)
        scope = Scope(whole=whole, watched=tuple(watched))
        a = read_table(sec, plain, scope)
        b = read_table(sec, packed, scope)
        _same(a, b)
        assert plain["unread"] == packed["unread"]
        assert plain["renamed"] == packed["renamed"]
        # what the watched set is made of changed in the same polls; the listing is the table's
        assert plain["shape"] == packed["shape"] and plain["keys_are_listing"] == packed["keys_are_listing"]
        keep = frozenset(rnd.sample(sorted(a.stats), min(len(a.stats), rnd.choice([0, 3, 30]))))
        pack_table(packed, b, keep)
        _same(a, b)
        assert isinstance(packed["table"], PackedStats) and packed["last_read"][1].stats is packed["table"]
        assert kept(a.stats, [], {}, {}) == kept(b.stats, [], {}, {})
        before = set(node.procs)
        node.step()
    unpack_table(packed)
    assert type(packed["table"]) is dict and packed["table"] == plain["table"]


def test_a_record_that_changed_only_in_memory_is_not_made_again():
    """A whole probe of a node whose processes only grew (their rss): no StatLine is made, the
    column records stay, and the next probe of that text is recognised by its hash."""
    rnd = random.Random(7)
    node = Node(rnd, 200)
    for p in node.procs.values():
        p["utime"] = 5                                      # fits: every record in the columns
    cache: dict = {}
    table = read_table(node.sections(True, set()), cache, Scope(whole=True))
    pack_table(cache, table, frozenset())
    assert not cache["table"].hot
    for p in node.procs.values():
        p["rss"] += 1
    again = read_table(node.sections(True, set()), cache, Scope(whole=True))
    assert isinstance(again.stats, PackedStats) and again.stats.base is cache["table"].base
    assert not again.stats.hot and not again.stats.gone
    assert dict(again.stats.items()) == dict(table.stats.items())


def test_a_hostile_record_stays_a_statline_over_the_columns():
    big = StatLine(pid=10, comm="x", state="S", ppid=1, num_threads=1, start_ticks=2 ** 80)
    odd = StatLine(pid=11, comm="y", state="", ppid=1, num_threads=None, start_ticks=None)
    fine = StatLine(pid=12, comm="z", state="R", ppid=10, num_threads=3, start_ticks=99, utime=None)
    two = StatLine(pid=13, comm="w", state="Rx", ppid=1, num_threads=1, start_ticks=5)
    marked = StatLine(pid=14, comm="v", state="S", ppid=1, num_threads=-(1 << 31), start_ticks=5)
    table = pack({10: big, 11: odd, 12: fine, 13: two, 14: marked})
    assert table.hot == {10: big, 11: odd, 13: two, 14: marked}
    assert table[12] == fine and table[10] is big and table.get(15) is None and 2 ** 70 not in table
    assert list(table) == [12, 10, 11, 13, 14] and len(table) == 5
    assert unpack(table) == {10: big, 11: odd, 12: fine, 13: two, 14: marked}
    assert pack({12: fine}).hot == {} and pack({12: fine})[12] == fine


def test_a_process_that_renames_itself_while_others_exit_gets_its_command_line_read_again():
    """A worker renames itself (its comm) in the poll where another process exits: the console
    asks for its command line again (cache "renamed", shell.py), on screen or not."""
    for packed in (False, True):
        node = Node(random.Random(3), 0)
        for pid, comm in ((301, "python"), (302, "bash"), (303, "sleep")):
            node._birth(pid)
            node.procs[pid].update(comm=comm, utime=1, state="S")
        cache: dict = {}
        sec = node.sections(True, set())
        sec["uids"] = (0, "".join(f"/proc/{pid}/status:Uid:\t0\t0\t0\t0\n" for pid in node.procs))
        sec["args"] = (0, "".join(f"/proc/{pid}/cmdline:{p['comm']}\0" for pid, p in node.procs.items()))
        table = read_table(sec, cache, Scope(whole=True))
        if packed:
            pack_table(cache, table, frozenset())
        del node.procs[303]
        node.procs[301]["comm"] = "pt_worker_3"
        read_table(node.sections(False, {301}), cache, Scope(whole=False, watched=(301,)))
        assert cache["renamed"] == {301}, packed


_GARBAGE = st.text(alphabet=st.sampled_from("0123456789 ()-\nSRZDab\x00\u00e9"), max_size=80)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2 ** 32), junk=st.lists(st.tuples(st.integers(0, 40), _GARBAGE), max_size=6),
       whole=st.booleans())
def test_garbage_in_a_stat_section_reads_the_same_over_columns(seed, junk, whole):
    """A hostile or cut-short stat section (any text between the records) never raises and
    gives the packed table what it gives the dict table."""
    node = Node(random.Random(seed), 40)
    plain: dict = {}
    packed: dict = {}
    first = node.sections(True, set())
    read_table(first, plain, Scope(whole=True))
    pack_table(packed, read_table(first, packed, Scope(whole=True)), frozenset())
    node.step()
    sec = node.sections(whole, set(node.procs))
    lines = sec["stat"][1].split("\n")
    for at, text in junk:
        lines.insert(min(at, len(lines)), text)
    sec["stat"] = (0, "\n".join(lines))
    scope = Scope(whole=whole)
    _same(read_table(sec, plain, scope), read_table(sec, packed, scope))


def test_states_that_are_not_one_letter_each_never_shift_the_others():
    """Two odd states whose lengths add up to two letters ("" and "Rx") stay StatLines: the
    states column is one letter a process, or the records after them would read another's."""
    none = StatLine(pid=20, comm="a", state="", ppid=1, num_threads=1, start_ticks=1)
    two = StatLine(pid=21, comm="b", state="Rx", ppid=1, num_threads=1, start_ticks=2)
    after = StatLine(pid=22, comm="c", state="D", ppid=1, num_threads=1, start_ticks=3)
    table = pack({20: none, 21: two, 22: after})
    assert table[22].state == "D" and table[20] is none and table[21] is two
