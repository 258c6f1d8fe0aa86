"""One probe's process sections read into the table kept from probe to probe (proc_table.py).

What a light probe did not read of a process is what an earlier probe read of the same
process (PID and start time): its device files, PID namespace and cgroup where the probe did
not walk its fds. What it read is authoritative: a watched process whose fd walk found no
device file holds none now; a process whose threads were read and showed none in D has none.
"""
from __future__ import annotations

from collections.abc import Mapping, Set as AbstractSet
from dataclasses import dataclass, field, replace

from console.model import ThreadInfo
from console.probe_scope import Scope
from console.sources.cold_idents import cold_pids
from console.sources.cgroup import Cgroup, parse_cgroup_records
from console.sources.packed_stats import REPACK_AFTER, PackedStats, pack, read_packed, unpack
from console.sources.parse_proc import (StatLine, parse_dstate, parse_exe, parse_fds, parse_pending, parse_pidns,
                                        parse_stat)
from console.sources.proc_table import (Ident, Listing, merge_idents, merge_table, parse_args, parse_listing,
                                        parse_uids, parse_users)

#: (start ticks, device files, PID namespace, cgroup) of a process
Extra = tuple[int | None, tuple[str, ...], str | None, Cgroup | None]
NO_EXTRA: Extra = (None, (), None, None)
#: user names kept per node (a node has few users; a hostile one cannot grow this past it)
MAX_USERS = 4096


@dataclass
class Table:
    #: PID -> stat record: a dict, or for a node not on screen columns (packed_stats.py)
    stats: Mapping[int, StatLine] = field(default_factory=dict)
    idents: dict[int, Ident] = field(default_factory=dict)
    users: dict[int, str] = field(default_factory=dict)
    extras: dict[int, Extra] = field(default_factory=dict)
    dthreads: dict[int, list[ThreadInfo]] = field(default_factory=dict)
    #: what this probe read of the GPU holders and of the processes with a thread in D (the exe
    #: and pend sections): their executables, and whether a SIGKILL is pending; a process not
    #: read by this probe has no entry (unknown: nothing an earlier probe said is kept)
    exes: dict[int, str] = field(default_factory=dict)
    pending: dict[int, bool] = field(default_factory=dict)
    #: the PIDs whose process may differ from the last probe's (None: any)
    touched: set[int] | None = None


def _shape(st: StatLine | None) -> tuple | None:
    """What of a stat record the watched set depends on."""
    if st is None:
        return None
    return st.ppid, st.state in ("Z", "D"), (st.num_threads or 1) > 1


def _section(sec: dict, name: str) -> tuple[bool, str]:
    rc, body = sec.get(name, (None, ""))
    return rc is not None, body


def _cached(cache: dict, key: str, parse, text: str):
    hit = cache.get(key)
    if hit is not None and hit[0] == text:
        return hit[1]
    out = parse(text)
    cache[key] = (text, out)
    return out


class TableKeys(AbstractSet[int]):
    """The node's PID listing where it is the process table's keys (as on a node where no task
    was born between the listing and the records): those keys, not a set of 2,000 PIDs beside
    them (docs/performance.md, "Memory, third step"). One object a node while that holds, moved
    to each new table, so a listing the node says is the same ("same", or the same text) is this
    very object, as a held frozenset was."""
    __slots__ = ("table",)

    def __init__(self, table: dict[int, StatLine]) -> None:
        self.table = table

    def __contains__(self, pid: object) -> bool:
        return pid in self.table

    def __iter__(self):
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def __sub__(self, other):
        return set(self.table).difference(other)

    def __eq__(self, other: object) -> bool:
        return self.table.keys() == (other.table.keys() if isinstance(other, TableKeys) else other)

    __hash__ = None          # type: ignore[assignment]

    @classmethod
    def _from_iterable(cls, it):
        return frozenset(it)


def _held(listing: Listing, cache: dict, table: dict[int, StatLine], keys_are_listing: bool):
    """The listing's PIDs to keep for the next probe: the table's keys where they are the
    listing (TableKeys); else a listing new this poll as the table's own int objects where the
    table has them, one object per PID and not one more in the listing (docs/performance.md,
    "Memory, second step"). The parse memo of its text then hands out the same object."""
    pids = listing.pids
    if not pids:
        return pids
    held = cache.get("listing")
    if keys_are_listing:
        out = held if isinstance(held, TableKeys) else TableKeys(table)
        out.table = table
    elif isinstance(pids, TableKeys):
        out = frozenset(pids.table)           # the listing held: the last table's keys, as a set now
    elif pids is held:
        return pids
    elif isinstance(table, PackedStats):      # (columns: no int object of the table's to share)
        out = pids
    else:
        get = table.get
        # (a set first: the frozenset copied from it is sized for its PIDs, not grown one at a time)
        out = frozenset({st.pid if (st := get(pid)) is not None else pid for pid in pids})
    memo = cache.get("listing_text")
    if memo is not None and memo[1].pids is pids and out is not pids:
        cache["listing_text"] = (memo[0], replace(memo[1], pids=out))
    return out


def _light_extras(before: dict[int, Extra], table: dict[int, StatLine], same_keys: bool, scope: Scope,
                  fds: dict, pidns: dict, cgroups: dict, look: set[int]) -> dict[int, Extra]:
    """The device files, namespace and cgroup of each process after a light probe: what it read
    of the processes it walked (``look``), what an earlier probe read of the others (the same
    process)."""
    extras = dict(before)
    if not same_keys:
        for pid in [pid for pid in extras if pid not in table]:
            del extras[pid]
    for pid in look:
        st = table.get(pid)
        if st is None:
            continue
        old = before.get(pid)
        same = old is not None and old[0] == st.start_ticks
        files = fds.get(pid)
        if files is None and (pid in scope.fds or not same):
            files = ()
        elif files is None:
            files = old[1]
        # a light walk keeps what an earlier probe read of a process it did not walk
        ns = pidns.get(pid) or (old[2] if same and files else None)
        cg = cgroups.get(pid) or (old[3] if same else None)
        if files or ns or cg:
            extras[pid] = (st.start_ticks, files, ns, cg)
        else:
            extras.pop(pid, None)
    return extras


def _same_pids(table: Mapping[int, StatLine], pids) -> bool:
    """Whether the table's PIDs are ``pids`` (a listing, or another table): over columns, without
    a look at each PID where both share them."""
    if isinstance(pids, TableKeys):
        pids = pids.table
    if isinstance(table, PackedStats):
        return table.same_pids(pids)
    if isinstance(pids, PackedStats):
        return pids.same_pids(table)
    return table.keys() == (pids.keys() if isinstance(pids, Mapping) else pids)


def read_table(sec: dict, cache: dict, scope: Scope) -> Table:
    """The process table after this probe's sections ``sec`` (probe.split_sections), merged with
    what ``cache`` kept of the last ones; ``cache`` keeps this one. The work is in proportion
    to what the probe read, but for a few set operations over the table."""
    whole_ok, listing_text = _section(sec, "pids")
    before_table: dict[int, StatLine] = cache.get("table", {})
    listing = _cached(cache, "listing_text", lambda t: parse_listing(t, whole_ok), listing_text) \
        if whole_ok else parse_listing(listing_text, False)
    if listing.same and scope.ack is not None and scope.ack == cache.get("listing_gen"):
        # the node has the listing the console holds: the one of that generation
        listing = Listing(cache.get("listing"), listing.last_pid, listing.wrapped, scope.ack)
    elif listing.same:
        listing = Listing(None, listing.last_pid, listing.wrapped)
    whole = scope.whole or listing.wrapped or not before_table
    stat_ok, stat_text = _section(sec, "stat")
    made: set[int] = set()
    packed = isinstance(before_table, PackedStats)
    seen: bytearray | None = None            # a packed table's column records read unchanged
    if packed:
        seen = bytearray(len(before_table.base.pids))
        fresh = read_packed(stat_text, before_table, made, seen)
        if fresh is None:
            seen, fresh = None, parse_stat(stat_text, None, made)
    else:
        fresh = parse_stat(stat_text, before_table, made)
    # a record whose text changed only in what the table keeps no field of (its memory, its page
    # faults) is the record the table holds: its process did not change. Its CPU time (utime and
    # stime) is kept: a busy worker's record changes with every probe that reads it. Only the
    # records made anew are looked at (the others are the table's own StatLines)
    changed: set[int] = set()
    for pid in made:
        st, old_st = fresh[pid], before_table.get(pid)
        if old_st is not None and old_st == st:
            fresh[pid] = old_st
        else:
            changed.add(pid)
    args = _cached(cache, "args", parse_args, _section(sec, "args")[1])
    uids = _cached(cache, "uids", parse_uids, _section(sec, "uids")[1])
    dthreads = _cached(cache, "dstate", parse_dstate, _section(sec, "dstate")[1])
    fds_ok, fds_text = _section(sec, "fds")
    fds = _cached(cache, "fds", parse_fds, fds_text)
    pidns = _cached(cache, "pidns", parse_pidns, _section(sec, "pidns")[1])
    cgroups = _cached(cache, "cgroup", parse_cgroup_records, _section(sec, "cgroup")[1])
    exes = _cached(cache, "exe", parse_exe, _section(sec, "exe")[1])
    pending = _cached(cache, "pend", parse_pending, _section(sec, "pend")[1])
    inputs = (args, uids, dthreads, fds, pidns, cgroups, exes, pending)
    last = cache.get("last_read")
    if (last is not None and not whole and not changed and "users" not in sec
            and listing.pids is not None and listing.pids is cache.get("listing")
            and all(a is b for a, b in zip(inputs, last[0]))):
        # a steady light probe: the same listing, no record changed, every other section's
        # text as the last poll's: the table is the last one (no set operation over 2,000
        # entries, 256 times a second at a fan-out of real-size nodes)
        return last[1]
    # the same listing as the table's (its keys are that listing's) and every record read is of a
    # process it holds: a few records changed (busy workers go R and S every poll), no PID came
    # or went: nothing over the whole table but one dict copy
    same_keys = (not whole and listing.pids is not None and listing.pids is cache.get("listing")
                 and cache.get("keys_are_listing", False) and all(pid in before_table for pid in fresh))
    if same_keys and packed:
        table = before_table.updated(fresh)
        gone: set[int] = set()
    elif same_keys:
        table = dict(before_table)
        table.update(fresh)
        gone = set()
    elif packed:
        listed = listing.pids
        if isinstance(listed, TableKeys) and listed.table is before_table:
            listed = None                     # the listing is the table's own PIDs: none gone
        table = before_table.merged(listed, fresh, whole and stat_ok, seen)
        gone = table.gone_since(before_table)
    else:
        table = merge_table(before_table, listing, fresh, whole and stat_ok)
        gone = before_table.keys() - table.keys()
    old_idents = cache.get("idents", {})
    if same_keys and not uids and all((i := old_idents.get(pid)) is None or i.start_ticks == table[pid].start_ticks
                                      for pid in changed):
        idents = old_idents            # what merge_idents would keep: every one
    else:
        idents = merge_idents(old_idents, table, args, uids, changed)
    users = cache.get("users", {})
    if "users" in sec:
        users = dict(users)
        for uid, name in parse_users(sec["users"][1]).items():
            if len(users) < MAX_USERS:
                users[uid] = name
    walk_all = whole and fds_ok
    before: dict[int, Extra] = cache.get("extras", {})
    if walk_all:
        # a whole walk read every process's fds, and the namespace and cgroup of every holder:
        # what it found is all there is (a process in none of the three has no entry); not a
        # look at each of the table's 2,000 processes
        extras: dict[int, Extra] = {}
        for pid in fds.keys() | pidns.keys() | cgroups.keys():
            st = table.get(pid)
            if st is None:
                continue
            files, ns, cg = fds.get(pid) or (), pidns.get(pid) or None, cgroups.get(pid) or None
            if files or ns or cg:
                new = (st.start_ticks, files, ns, cg)
                old = before.get(pid)
                extras[pid] = old if old == new else new
    else:
        look = set(scope.fds) | fds.keys() | pidns.keys() | cgroups.keys() | changed
        extras = _light_extras(before, table, same_keys, scope, fds, pidns, cgroups, look)
    # what the watched set is made of changed (sources/watch.py works it out again only then):
    # PIDs came or went, a parent, a zombie or D state, a thread count, device files, threads in D
    last_dthreads = cache.get("dthreads", {})
    shape = ((not same_keys and not _same_pids(table, before_table)) or extras != before
             or dthreads is not last_dthreads
             or any(_shape(before_table.get(pid)) != _shape(table[pid]) for pid in changed))
    if shape or "shape" not in cache:
        cache["shape"] = cache.get("shape", 0) + 1
    touched: set[int] | None = None
    if users is cache.get("users") and not walk_all:
        touched = changed | gone | set(uids) | set(look) | dthreads.keys() | last_dthreads.keys()
        if last is not None:       # the holders' and D processes' evidence, this probe's and the last's
            last_table = last[1]
            if exes is not last_table.exes:
                touched |= exes.keys() | last_table.exes.keys()
            if pending is not last_table.pending:
                touched |= pending.keys() | last_table.pending.keys()
    cache["table"], cache["idents"], cache["users"], cache["extras"] = table, idents, users, extras
    if not same_keys:
        cache["keys_are_listing"] = listing.pids is not None and _same_pids(table, listing.pids)
    cache["listing"] = _held(listing, cache, table, cache["keys_are_listing"])
    cache["wrapped"], cache["dthreads"] = listing.wrapped, dthreads
    cache["listing_gen"] = listing.gen if listing.pids is not None else None
    # processes whose comm changed since their command line was read (kernel workers rename
    # themselves with every work item: not those)
    renamed = cache.setdefault("renamed", set())
    if not same_keys:
        # (in place: ``&=`` with a keys view makes a new set, and the cache would keep the old one)
        renamed.difference_update([pid for pid in renamed if pid not in table])
    renamed.update(pid for pid in changed if (i := idents.get(pid)) is not None and i.comm != table[pid].comm
                   and table[pid].ppid != 2 and pid != 2)
    renamed.difference_update(uids)
    # what the next probe should read of processes the console knows too little of
    if not (same_keys and idents is old_idents and "unread" in cache):
        # (those of a node not on screen kept compressed were read: cold_idents.py)
        cache["unread"] = ((listing.pids - idents.keys() - cold_pids(cache)) if listing.pids is not None
                           else set())
    unnamed = cache.setdefault("unnamed", set())
    unnamed.update(uid for uid in uids.values() if uid not in users)
    unnamed.difference_update(users)
    out = Table(stats=table, idents=idents, users=users, extras=extras, dthreads=dthreads, exes=exes,
                pending=pending, touched=touched)
    cache["last_read"] = (inputs, Table(stats=table, idents=idents, users=users, extras=extras, dthreads=dthreads,
                                        exes=exes, pending=pending, touched=set()))
    return out


def pack_table(cache: dict, table: Table, keep: frozenset[int]) -> None:
    """A node not on screen, after its table was read (parse.py): its stat records as columns
    (packed_stats.py), the kept processes' as StatLines over them; packed again once more records
    over the columns are not kept, or more PIDs of them gone, than REPACK_AFTER or an eighth of
    the columns', or more than a few kept processes are in the columns."""
    stats = table.stats
    if isinstance(stats, PackedStats):
        hot = stats.hot
        loose = stats.loose(keep) + len(stats.gone)
        cold_kept = sum(1 for pid in keep if pid not in hot)
        if loose <= max(REPACK_AFTER, len(stats.base.pids) // 8) and cold_kept <= _COLD_KEPT:
            return
    _repoint(cache, table, stats, pack(stats, keep))


def unpack_table(cache: dict) -> None:
    """The node is on screen: its table a dict again (before the probe's table is read)."""
    stats = cache.get("table")
    if isinstance(stats, PackedStats):
        last = cache.get("last_read")
        _repoint(cache, last[1] if last is not None else None, stats, unpack(stats))


#: kept processes whose record is read from the columns at each use before the table is packed again
_COLD_KEPT = 16


def _repoint(cache: dict, table: Table | None, old, new) -> None:
    """``new`` in place of the stats ``old`` wherever the cache holds them."""
    cache["table"] = new
    for t in (table, (cache.get("last_read") or (None, None))[1], cache.get("procs_table")):
        if t is not None and t.stats is old:
            t.stats = new
    held = cache.get("listing")
    if isinstance(held, TableKeys) and held.table is old:
        held.table = new
