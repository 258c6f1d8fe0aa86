"""The command lines and users of a node not on screen, kept compressed (docs/performance.md,
"Memory, third step").

A node not on screen (Source.detail False) shows only the processes its verdict rests on
(sources/watch.py ``kept``); the parser still knows every process's command line and user, so
that a process that comes to matter (a new holder, a zombie, a reparented ancestor) and the
node put on screen have theirs at once, not after a read of 2,000 command lines. Those of the
processes not kept are one zlib'd marshal blob a node (~15 KB for 2,000), not 2,000 Idents and
their strings (~300 KB): ``Cold``. The parser's warm dict holds the kept ones and those read
since the blob was made; the blob is made again once more of those are not kept than
FREEZE_AFTER or a quarter of the blob's, whichever is more.

An entry speaks for its process only: (PID, start time) as the table has it now, else it is
dropped where it is thawed.
"""
from __future__ import annotations

import marshal
import sys
import zlib
from array import array
from dataclasses import dataclass
from typing import Mapping

from console.sources.parse_proc import StatLine
from console.sources.proc_table import Ident, shared_uid

#: not-kept Idents the warm dict may hold before they go into the blob: FREEZE_AFTER, or a
#: quarter of the blob's where that is more (a node where processes come and go fast makes the
#: blob again every so many new processes, not every poll: its cost stays in proportion to them)
FREEZE_AFTER = 64
_LEVEL = 1          # zlib: 6x smaller already; a higher level costs 3x the time for 15% less


@dataclass(frozen=True, slots=True)
class Cold:
    pids: array           # the PIDs in the blob ('i': a PID is at most 2**22), for the parser's "unread"
    blob: bytes           # zlib(marshal([(pid, start, uid, cmdline, comm), ...]))


def freeze(idents: Mapping[int, Ident]) -> Cold | None:
    rows = [(pid, i.start_ticks, i.uid, i.cmdline, i.comm) for pid, i in idents.items()]
    if not rows:
        return None
    return Cold(array("i", [r[0] for r in rows]), zlib.compress(marshal.dumps(rows), _LEVEL))


def thaw(cold: Cold | None, table: Mapping[int, StatLine], only=None) -> dict[int, Ident]:
    """The blob's Idents whose process the table still has (same PID and start time), keyed by
    the table's own PID objects; ``only``: just those PIDs."""
    if cold is None:
        return {}
    out: dict[int, Ident] = {}
    for pid, start, uid, cmdline, comm in marshal.loads(zlib.decompress(cold.blob)):
        if only is not None and pid not in only:
            continue
        st = table.get(pid)
        if st is None or st.start_ticks != start:
            continue
        out[st.pid] = Ident(st.start_ticks, shared_uid(uid), sys.intern(cmdline), sys.intern(comm))
    return out


def cold_pids(cache: dict) -> frozenset[int]:
    cold = cache.get("idents_cold")
    return frozenset(cold.pids) if cold is not None else frozenset()


def warm_up(cache: dict) -> None:
    """The node is on screen: every Ident back in the parser's dict (before the probe's table
    is read), and its last steady Table forgotten (it held only the kept ones)."""
    cold = cache.pop("idents_cold", None)
    if cold is None:
        return
    table = cache.get("table", {})
    idents = thaw(cold, table)
    renamed = cache.setdefault("renamed", set())
    for pid, ident in idents.items():          # renamed while cold (proc_read.py's rule)
        st = table[pid]
        if ident.comm != st.comm and st.ppid != 2 and pid != 2:
            renamed.add(pid)
    idents.update(cache.get("idents", {}))
    cache["idents"] = idents
    cache.pop("last_read", None)
    cache.pop("idents_settled", None)


def settle(cache: dict, table, keep: frozenset[int]) -> None:
    """A node not on screen, after its table was read: every kept process's Ident in the warm
    dict (thawed from the blob where it was there), and the not-kept ones into the blob once
    more of them than the limit (FREEZE_AFTER, a quarter of the blob's) are warm. ``table``: read_table's Table (its ``idents`` is the cache's)."""
    warm: dict[int, Ident] = cache.get("idents", {})
    last = cache.get("idents_settled")
    if last is not None and last[0] is warm and last[1] is keep:
        return                                  # the same dict and kept set as the last poll settled
    cold: Cold | None = cache.get("idents_cold")
    stats = table.stats
    missing = {pid for pid in keep if pid not in warm} if cold is not None else set()
    loose = len(warm) - sum(1 for pid in keep if pid in warm)
    limit = max(FREEZE_AFTER, len(cold.pids) // 4) if cold is not None else FREEZE_AFTER
    if not missing and loose <= limit:
        cache["idents_settled"] = (warm, keep)
        return
    new = {pid: i for pid, i in warm.items() if pid in keep}
    if loose > limit:                           # the blob made again: read once, kept ones taken out
        rest = thaw(cold, stats)
        rest.update((pid, i) for pid, i in warm.items() if pid not in keep)
        for pid in keep:
            ident = rest.pop(pid, None)
            if ident is not None and pid in missing:
                new[pid] = ident
        cache["idents_cold"] = freeze(rest)
    elif missing:
        new.update(thaw(cold, stats, missing))
    cache["idents"] = table.idents = new
    steady = cache.get("last_read")
    if steady is not None:
        steady[1].idents = new
    cache["idents_settled"] = (new, keep)
