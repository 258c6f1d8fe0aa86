"""The process table of a node not on screen, as columns (docs/performance.md, "Memory, fourth
step").

A node not on screen shows only the processes its verdict rests on (sources/watch.py ``kept``),
yet its parser keeps every process's stat record: the next probe is compared with them (a record
read again unchanged is not parsed), and a process that comes to matter is known at once. As
2,000 StatLines in a dict that is ~270 bytes a process (the StatLine, its start time and hash as
int objects, the dict's slot and key); as columns (``Columns``: arrays of the numbers, a str of
the states, a tuple of the interned comms) it is ~60, and none of it is an object the cyclic
collector walks.

``PackedStats`` is the table as a read-only mapping PID -> StatLine over one ``Columns`` (kept,
never changed but for a record's hash), with the records read since over it (``hot``: the kept
processes, a changed record, a new PID) and the PIDs gone since (``gone``). Successive tables
share the columns; the parser packs them again once the records over them pass a share of them
(``repack``). A record that does not fit the columns (a number past 64 bits, a state that is not
one ASCII letter) stays a StatLine in ``hot``.

``read_packed`` is the stat reader for such a table: a line whose text is the one a column
record was read from (its hash) is that record, and is not made into a StatLine at all.
"""
from __future__ import annotations

import bisect
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Iterable, Iterator

from console.sources.parse_proc import StatLine, read_record

_NONE32 = -(1 << 31)           # None in an 'i' column
_NONE64 = -(1 << 63)           # None in a 'q' column
_MAX32 = (1 << 31) - 1
_MAX64 = (1 << 63) - 1
#: records over the columns (not kept) a table may hold before it is packed again: REPACK_AFTER,
#: or an eighth of the columns' where that is more
REPACK_AFTER = 64


@dataclass(frozen=True, slots=True)
class Columns:
    pids: array            # 'i', ascending
    ppid: array            # 'i'
    threads: array         # 'i' (None: _NONE32)
    pgrp: array            # 'i'
    session: array         # 'i'
    start: array           # 'q' (None: _NONE64)
    utime: array           # 'q'
    stime: array           # 'q'
    h: array               # 'q': the record's hash (parse_proc.StatLine.h); changed only to the
    #                        hash of a text that reads as the same record
    state: str             # one ASCII letter a process
    comm: tuple[str, ...]

    def row(self, i: int) -> StatLine:
        def n32(v: int) -> int | None:
            return None if v == _NONE32 else v

        def n64(v: int) -> int | None:
            return None if v == _NONE64 else v
        return StatLine(self.pids[i], self.comm[i], self.state[i], self.ppid[i], n32(self.threads[i]),
                        n64(self.start[i]), n32(self.pgrp[i]), n32(self.session[i]), n64(self.utime[i]),
                        n64(self.stime[i]), n64(self.h[i]))

    def same_at(self, i: int, st: StatLine) -> bool:
        """Whether ``st`` says what the record at ``i`` says (its hash aside)."""
        return self.row(i) == st

    def index(self, pid: int) -> int | None:
        pids = self.pids
        i = bisect.bisect_left(pids, pid)
        return i if i < len(pids) and pids[i] == pid else None


def _fits(st: StatLine) -> bool:
    def i32(v) -> bool:
        return v is None or (type(v) is int and _NONE32 < v <= _MAX32)

    def i64(v) -> bool:
        return v is None or (type(v) is int and _NONE64 < v <= _MAX64)
    return (type(st.pid) is int and 0 < st.pid <= _MAX32 and type(st.ppid) is int and _NONE32 < st.ppid <= _MAX32
            and i32(st.num_threads) and i32(st.pgrp) and i32(st.session) and i64(st.start_ticks)
            and i64(st.utime) and i64(st.stime) and i64(st.h) and type(st.comm) is str
            and len(st.state) == 1 and st.state.isascii())


def _columns(records: list[StatLine]) -> Columns | None:
    """The records as columns; None where one does not fit them (a number past its column's
    range or its None mark, a state that is not one ASCII letter): then ``_fits`` sorts them."""
    def col(code: str, field: str, none: int, nullable: bool = True) -> array:
        values = list(map(attrgetter(field), records))
        if none in values or (not nullable and None in values):
            raise ValueError(field)
        return array(code, [none if v is None else v for v in values] if nullable else values)
    try:
        states = list(map(attrgetter("state"), records))
        state = "".join(states)
        if set(map(len, states)) - {1} or not state.isascii():
            return None
        pids = col("i", "pid", _NONE32, False)
        if pids and min(pids) <= 0:
            return None
        return Columns(pids, col("i", "ppid", _NONE32, False), col("i", "num_threads", _NONE32),
                       col("i", "pgrp", _NONE32), col("i", "session", _NONE32), col("q", "start_ticks", _NONE64),
                       col("q", "utime", _NONE64), col("q", "stime", _NONE64), col("q", "h", _NONE64), state,
                       tuple(map(attrgetter("comm"), records)))
    except (OverflowError, TypeError, ValueError):
        return None


class PackedStats(Mapping[int, StatLine]):
    """PID -> StatLine over ``base`` (see the module's doc). ``hot``: records over the columns
    (a PID of the columns: its record now; another: a process the columns do not have);
    ``gone``: PIDs of the columns the table no longer has (none of them in ``hot``)."""
    __slots__ = ("base", "hot", "gone", "added", "_len")

    def __init__(self, base: Columns, hot: dict[int, StatLine], gone: frozenset[int],
                 added: tuple[int, ...] | None = None) -> None:
        self.base, self.hot, self.gone = base, hot, gone
        index = base.index
        #: the PIDs of ``hot`` the columns do not have, in the order they came
        self.added = tuple(pid for pid in hot if index(pid) is None) if added is None else added
        self._len = len(base.pids) - len(gone) + len(self.added)

    def __getitem__(self, pid: int) -> StatLine:
        st = self.hot.get(pid)
        if st is not None:
            return st
        if type(pid) is int and pid not in self.gone:
            i = self.base.index(pid)
            if i is not None:
                return self.base.row(i)
        raise KeyError(pid)

    def get(self, pid, default=None):
        try:
            return self[pid]
        except (KeyError, OverflowError):
            return default

    def __contains__(self, pid: object) -> bool:
        if pid in self.hot:
            return True
        try:
            return type(pid) is int and pid not in self.gone and self.base.index(pid) is not None
        except OverflowError:
            return False

    def __iter__(self) -> Iterator[int]:
        gone = self.gone
        if gone:
            yield from (pid for pid in self.base.pids if pid not in gone)
        else:
            yield from self.base.pids
        yield from self.added

    def __len__(self) -> int:
        return self._len

    def rows(self) -> Iterator[tuple[int, int, str]]:
        """(pid, ppid, state) of every process, in the table's order, no StatLine made."""
        base, hot, gone = self.base, self.hot, self.gone
        for pid, ppid, state in zip(base.pids, base.ppid, base.state):
            st = hot.get(pid)
            if st is not None:
                yield st.pid, st.ppid, st.state
            elif pid not in gone:
                yield pid, ppid, state
        for pid in self.added:
            st = hot[pid]
            yield st.pid, st.ppid, st.state

    def loose(self, keep: Iterable[int]) -> int:
        """Records over the columns that are not kept processes."""
        return len(self.hot) - sum(1 for pid in keep if pid in self.hot)

    # -- the tables after a probe (proc_read.read_table) --

    def updated(self, fresh: Mapping[int, StatLine]) -> PackedStats:
        """This table with ``fresh``'s records (every PID of it in the table already)."""
        return PackedStats(self.base, {**self.hot, **fresh}, self.gone, self.added)

    def merged(self, listed, fresh: Mapping[int, StatLine], whole: bool, seen: bytearray | None) -> PackedStats:
        """The table after a probe (proc_table.merge_table's rule). A light one: ``fresh`` over
        this table less the PIDs the listing (``listed``; None: not known) no longer has. A whole
        one: what it read, ``fresh`` and the column records at ``seen`` (read unchanged;
        read_packed; None: every record is in ``fresh``)."""
        base = self.base
        if whole:
            pids = base.pids
            if seen is None:
                gone = frozenset(pids) - fresh.keys()
            else:
                gone = frozenset(pids[i] for i in _zeros(seen)) - fresh.keys()
            return PackedStats(base, dict(fresh), gone)
        hot = self.hot
        gone = set(self.gone)
        if listed is not None:
            hot = {pid: st for pid, st in hot.items() if pid in listed}
            gone.update(pid for pid in base.pids if pid not in listed)
        else:
            hot = dict(hot)
        hot.update(fresh)
        gone.difference_update(fresh)
        return PackedStats(base, hot, frozenset(gone))

    def same_pids(self, other: Mapping[int, StatLine]) -> bool:
        """Whether ``other`` has the PIDs this table has."""
        if isinstance(other, PackedStats) and other.base is self.base:
            return self.gone == other.gone and set(self.added) == set(other.added)
        return len(self) == len(other) and all(pid in other for pid in self)

    def gone_since(self, before: Mapping[int, StatLine]) -> set[int]:
        """The PIDs ``before`` had that this table has not."""
        if isinstance(before, PackedStats) and before.base is self.base:
            return set(self.gone - before.gone) | {pid for pid in before.added if pid not in self}
        return {pid for pid in before if pid not in self}


def _zeros(flags: bytearray) -> Iterator[int]:
    i = flags.find(0)
    while i >= 0:
        yield i
        i = flags.find(0, i + 1)


def pack(stats: Mapping[int, StatLine], keep: Iterable[int] = ()) -> PackedStats:
    """``stats`` as columns, the kept processes' records (and any that does not fit) as
    StatLines over them."""
    keep = set(keep)
    hot: dict[int, StatLine] = {}
    records: list[StatLine] = []
    for pid in sorted(stats):
        st = stats[pid]
        if pid in keep:
            hot[pid] = st
        else:
            records.append(st)
    base: Columns | None = _columns(records)
    if base is None:                  # one that does not fit: each record looked at
        fit = [st for st in records if _fits(st)]
        hot.update((st.pid, st) for st in records if not _fits(st))
        base = _columns(fit) or _columns([])
    return PackedStats(base, hot, frozenset())


def unpack(stats: Mapping[int, StatLine]) -> dict[int, StatLine]:
    """The table as a dict again (a node put on screen)."""
    return dict(stats.items()) if isinstance(stats, PackedStats) else stats


def read_packed(text: str, before: PackedStats, made: set[int], seen: bytearray) -> dict[int, StatLine] | None:
    """parse_proc.parse_stat over a packed table: the records read that are not a column record
    read unchanged (``seen``, one flag per column record, is set for those: they are not made
    into StatLines). A line whose text changed only in what the table keeps no field of (its
    memory, its page faults) is the column record still, its hash now that text's. None where a
    line is not a whole record (parse_proc: then the stream reader decides)."""
    lines = text.split("\n")
    if lines.pop() != "":
        return None
    base, hot, gone = before.base, before.hot, before.gone
    pids, hashes, index = base.pids, base.h, base.index
    out: dict[int, StatLine] = {}
    count, at = len(pids), 0
    for line in lines:
        key = hash(line)
        if at < count and hashes[at] == key:
            # the usual line: the text the next column record was read from (its PID's first),
            # unless a record over the columns stands for that PID, or it is gone
            pid = pids[at]
            if pid not in hot and pid not in gone:
                seen[at] = 1
                at += 1
                continue
        try:
            pid = int(line[:line.find(" ")])
        except ValueError:
            pid = -1
        if pid in out:
            continue                          # the first record of a PID wins
        old = hot.get(pid)
        if old is not None:
            if old.h == key:
                out[pid] = old
                continue
            i = None
        elif pid in gone:
            i = None
        else:
            # the lines come in PID order, as the columns: the next column record first
            if at < count and pids[at] == pid:
                i = at
            else:
                i = index(pid) if 0 < pid <= _MAX32 else None
            if i is not None:
                at = i + 1
                if seen[i]:
                    continue
                if hashes[i] == key:
                    seen[i] = 1
                    continue
        try:
            st = read_record(line, key)
        except ValueError:
            made.clear()
            return None
        if st is None or st.pid in out:
            continue
        if i is not None and st.pid == pid and base.same_at(i, st):
            hashes[i] = key if _NONE64 < key <= _MAX64 else _NONE64
            seen[i] = 1
            continue
        out[st.pid] = st
        made.add(st.pid)
    return out
