"""The node's process table kept from probe to probe: the pids, args, uids and users sections
(probe_scope.py) and the merge that lets a light probe read only what may have changed.

Pure: every function takes text (or what an earlier call returned) and returns values; none
raises on any input. What the console shows of a process comes from the last read of it:

- a PID in this probe's listing whose stat record this probe read shows that record;
- a PID in the listing that it did not read keeps the record read before (same process: a PID
  continuously listed is never another process, unless the kernel's PID counter went down,
  ``wrapped``, and then every PID was read again as new);
- a PID gone from the listing is gone; one that comes back is new, and read at once.

A command line and a user belong to one process: (PID, start time). A record with another
start time for the PID is another process, and its command line is unknown until read.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from console.probe_scope import ARG_MAX_BYTES, COUNTED
from console.sources.parse_proc import StatLine

#: the longest command line the console keeps: a row and the details pane, never megabytes of it
CMDLINE_MAX = 4096
_CONTROL = {c: "?" for c in range(32)} | {9: " ", 10: " ", 127: "?"}


@dataclass(frozen=True)
class Listing:
    pids: frozenset[int] | None = None     # None: the section did not come whole (or "same")
    last_pid: int | None = None
    wrapped: bool = False
    gen: int | None = None                 # the listing's generation ("gen N")
    same: bool = False                     # "same": the listing of the generation the console sent


_PIDS_LINE = re.compile(r"[0-9]{1,10}(?: [0-9]{1,10})*")


def parse_listing(text: str, complete: bool = True) -> Listing:
    """The pids section after its scope: ["wrapped"], "last N", then the PID names on a line."""
    last: int | None = None
    wrapped = same = False
    gen: int | None = None
    pids: set[int] = set()
    for line in text.split("\n"):
        word = line.strip()
        if word == "wrapped":
            wrapped = True
        elif word == "same":
            same = True
        elif word == COUNTED:              # the node's listing came from the kernel's counts: the same text
            pass
        elif word.startswith("gen "):
            value = word[4:].strip()
            gen = int(value) if value.isascii() and value.isdecimal() and len(value) <= 18 else None
        elif word.startswith("last"):
            value = word[4:].strip()
            last = int(value) if value.isascii() and value.isdecimal() and len(value) <= 10 else None
        elif _PIDS_LINE.fullmatch(word):
            pids.update(map(int, word.split(" ")))
        elif word:
            pids.update(int(w) for w in word.split() if w.isascii() and w.isdecimal() and len(w) <= 10)
    if same:
        return Listing(None, last, wrapped, None, complete)
    return Listing(frozenset(pids) if complete else None, last, wrapped, gen if complete else None)


def _pid_of(path: str, leaf: str) -> int | None:
    """PID of "/proc/PID/LEAF"; None for anything else."""
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "" and parts[1] == "proc" and parts[3] == leaf \
            and parts[2].isascii() and parts[2].isdecimal() and len(parts[2]) <= 10:
        return int(parts[2])
    return None


def parse_args(text: str) -> dict[int, list[str]]:
    """grep -zH records "/proc/PID/cmdline:ARG" (NUL-terminated) -> {pid: [arg, ...]}. grep names
    the file before the first ':' (a path holds none); an argument holds no NUL, so a record
    cannot speak for another PID."""
    out: dict[int, list[str]] = {}
    for record in text.split("\0"):
        path, sep, arg = record.partition(":")
        pid = _pid_of(path, "cmdline") if sep else None
        if pid is not None:
            out.setdefault(pid, []).append(arg[:ARG_MAX_BYTES])
    return out


def parse_uids(text: str) -> dict[int, int]:
    """grep -H lines "/proc/PID/status:Uid:\\tREAL\\tEFFECTIVE\\t…" -> {pid: effective uid}."""
    out: dict[int, int] = {}
    for line in text.split("\n"):
        path, sep, rest = line.partition(":")
        pid = _pid_of(path, "status") if sep else None
        words = rest.split()
        if pid is None or len(words) < 3 or words[0] != "Uid:":
            continue
        euid = words[2]
        if euid.isascii() and euid.isdecimal() and len(euid) <= 10 and pid not in out:
            out[pid] = int(euid)
    return out


def parse_users(text: str) -> dict[int, str]:
    """getent passwd lines "name:x:uid:…" -> {uid: name}."""
    out: dict[int, str] = {}
    for line in text.split("\n"):
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] and fields[2].isascii() and fields[2].isdecimal() and len(fields[2]) <= 10:
            out.setdefault(int(fields[2]), sys.intern(fields[0][:32]))
    return out


def command_line(args: list[str]) -> str:
    """Arguments as ps shows them: joined by spaces, a tab or newline a space, other control
    characters '?', cut to CMDLINE_MAX."""
    return " ".join(args).translate(_CONTROL)[:CMDLINE_MAX]


@dataclass(frozen=True, slots=True)
class Ident:
    """What one process (PID, start time) said of itself when it was read: its command line is
    kept as shown (``command_line`` of its arguments, interned: the same command line on many
    processes and nodes is one string), not as the arguments it came as."""
    start_ticks: int | None
    uid: int | None
    cmdline: str
    comm: str                 # its comm then: a changed comm has the command line read again


def merge_table(table: dict[int, StatLine], listing: Listing, fresh: dict[int, StatLine],
                whole: bool) -> dict[int, StatLine]:
    """The table after this probe: ``fresh`` (the records it read) over the last ``table``, less
    the PIDs its listing no longer shows. A whole probe read every record: its ``fresh`` is the
    table (a PID it read that the listing missed was born in between, and is kept)."""
    if whole or not table:
        return dict(fresh)
    out = dict(table)
    if listing.pids is not None:
        for pid in out.keys() - listing.pids:
            del out[pid]
    out.update(fresh)
    return out


def merge_idents(idents: dict[int, Ident], table: dict[int, StatLine], args: dict[int, list[str]],
                 uids: dict[int, int], changed=None) -> dict[int, Ident]:
    """What is known of each process's command line and user. A PID this probe read (the uids
    section names every process whose status it could read: one with no argument has an empty
    command line) is what it read; any other keeps what was read of it while its start time is
    the same. ``changed``: the PIDs whose record may differ from the one ``idents`` saw (None:
    any); the others are looked at only to drop the gone."""
    if changed is None:
        out: dict[int, Ident] = {}
        for pid, st in table.items():
            known = idents.get(pid)
            if known is not None and known.start_ticks == st.start_ticks:
                out[pid] = known
    else:
        out = dict(idents)
        for pid in [pid for pid in out if pid not in table]:
            del out[pid]
        for pid in changed:
            known = out.get(pid)
            st = table.get(pid)
            if known is not None and (st is None or known.start_ticks != st.start_ticks):
                del out[pid]
    for pid, uid in uids.items():
        st = table.get(pid)
        if st is not None:
            uid = shared_uid(uid)
            # keyed by the table's own int object for the PID, not one more per process
            out[st.pid] = Ident(st.start_ticks, uid, sys.intern(command_line(args.get(pid, []))), st.comm)
    return out


def shared_uid(uid: int | None) -> int | None:
    """One int object per user, not one per process."""
    return _UIDS.setdefault(uid, uid) if len(_UIDS) < _UIDS_MAX else _UIDS.get(uid, uid)


#: the user ids seen, each one int object for every process of that user (bounded: a node
#: cannot grow it past _UIDS_MAX)
_UIDS: dict[int | None, int | None] = {}
_UIDS_MAX = 4096
